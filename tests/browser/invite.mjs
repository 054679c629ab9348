// A visitor meets an invite-only room in a real browser: Debian's chromium, headless,
// through playwright-core, with JavaScript off (the page's form needs none). Run with one JSON
// argument: {"base": "http://127.0.0.1:PORT", "path": "/presale/__echo", "code": "<code>"}.
// Types a wrong code, then the right one, into the page's form, and comes back later without it.
// Prints one JSON object of findings and exits 0; the caller asserts on them. Every wait here is
// bounded.
import { launch } from "./launch.mjs";

const args = JSON.parse(process.argv[2]);
const browser = await launch();
const context = await browser.newContext({ javaScriptEnabled: false });
const page = await context.newPage();
const findings = { visits: [] };

async function look(response) {
  const body = await page.content();
  return {
    status: response ? response.status() : null,
    url: page.url(),
    form: (await page.locator('input[name="vestibule_invite"]').count()) === 1,
    refused: (await page.locator('[role="alert"]').count()) === 1,
    origin: body.includes("\"headers\""),
    origin_query: body.includes("\"headers\"")
      ? JSON.parse(await page.locator("body").innerText()).query
      : null,
  };
}

async function submit(code) {
  await page.fill('input[name="vestibule_invite"]', code);
  const [response] = await Promise.all([
    page.waitForNavigation({ timeout: 10000 }),
    page.click('button[type="submit"]'),
  ]);
  return look(response);
}

findings.visits.push(await look(await page.goto(args.base + args.path, { timeout: 10000 })));
findings.visits.push(await submit("not-an-invitation"));
findings.visits.push(await submit(args.code));
findings.visits.push(await look(await page.goto(args.base + args.path, { timeout: 10000 })));
findings.cookies = (await context.cookies()).map((c) => c.name);
await browser.close();
console.log(JSON.stringify(findings));
