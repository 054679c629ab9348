// A visitor meets a proof-of-work room in a real browser: Debian's chromium, headless,
// through playwright-core. Run with one JSON argument:
//   {"mode": "test", "base": "http://127.0.0.1:PORT", "path": "/pow/", "hard": "/hard/"}
//     solves with JavaScript on and comes back by itself; on a challenge too hard to finish
//     here (`hard`), measures how responsive the page stays while it works; then checks the
//     page with JavaScript off;
//   {"mode": "measure", "base": ..., "rooms": [[12, "/pow12/"], ...], "runs": 5}
//     times solves at each difficulty, with the page's own SHA-256 and with WebCrypto
//     (`#webcrypto`), for benches/challenge.sh.
// Prints one JSON object of findings and exits 0; the caller asserts on them. Every wait here is
// bounded.
import { launch } from "./launch.mjs";

const args = JSON.parse(process.argv[2]);
const browser = await launch();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const findings = {};

// Opens `url` in a fresh visitor and resolves when the browser sends the solution back: the
// milliseconds from the challenge page's first byte to that request, and the visitor.
async function solveOnce(base, path, options = {}) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const navigations = [];
  let pageAt = 0;
  let solvedAt = 0;
  page.on("response", (r) => {
    if (r.request().isNavigationRequest() && !pageAt) pageAt = Date.now();
  });
  page.on("request", async (r) => {
    if (!r.isNavigationRequest()) return;
    const cookie = (await r.allHeaders()).cookie || "";
    navigations.push({ at: Date.now(), cookie });
    if (cookie.includes("_pow=") && !solvedAt) solvedAt = Date.now();
  });
  await page.goto(base + path, { waitUntil: "domcontentloaded", timeout: 20000 });
  return { context, page, navigations, solved: () => (solvedAt ? solvedAt - pageAt : null) };
}

async function until(check, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await sleep(50);
  }
  return false;
}

if (args.mode === "test") {
  // 1. JavaScript on: the page solves by itself and comes back with no click.
  {
    const v = await solveOnce(args.base, args.path);
    const first = await v.page.evaluate(() => ({
      heading: document.querySelector("h1").textContent,
      workShown: !document.getElementById("work").hidden,
      role: document.getElementById("bar").getAttribute("role"),
    })).catch(() => null);
    const back = await until(() => v.solved() !== null, 60000);
    await until(async () => {
      try { return (await v.page.content()).includes("headers"); } catch { return false; }
    }, 10000);
    const cookies = await v.context.cookies();
    findings.js_on = {
      first,
      solved: back,
      solve_ms: v.solved(),
      navigations: v.navigations.length,
      solution_cookie_sent: v.navigations.some((n) => n.cookie.includes("_pow=")),
      origin_page: (await v.page.content()).includes("headers"),
      cookies_after: cookies.map((c) => c.name),
    };
    await v.context.close();
  }
  // 1b. While it works (a challenge of minutes), the page answers: the longest gap between
  // 10 ms timers, over 100 of them, and the progress it shows. A page that hashed on its own
  // thread would stall for the whole solve.
  {
    const v = await solveOnce(args.base, args.hard);
    await sleep(300);
    findings.responsive = await v.page.evaluate(() => new Promise((resolve) => {
      let last = performance.now(), worst = 0, ticks = 0;
      const values = new Set();
      const id = setInterval(() => {
        const now = performance.now();
        worst = Math.max(worst, now - last);
        last = now;
        ticks++;
        values.add(document.getElementById("bar").getAttribute("aria-valuenow"));
        if (ticks >= 100) { clearInterval(id); resolve({ worst_gap_ms: worst, progress: [...values], state: document.getElementById("state").textContent }); }
      }, 10);
    }));
    findings.responsive.navigations = v.navigations.length;
    findings.responsive.workers = v.page.workers().length;
    await v.context.close();
  }
  // 2. JavaScript off: the page says what is needed, and does not reload.
  {
    const v = await solveOnce(args.base, args.path, { javaScriptEnabled: false });
    await sleep(3000);
    const text = await v.page.evaluate(() => document.body.innerText).catch(() => "");
    findings.js_off = {
      text,
      navigations: v.navigations.length,
      solution_cookie_sent: v.navigations.some((n) => n.cookie.includes("_pow=")),
    };
    await v.context.close();
  }
} else {
  // Solve times by difficulty: the page's own SHA-256, and WebCrypto (127.0.0.1 is a secure
  // context).
  findings.measured = [];
  for (const [difficulty, path] of args.rooms) {
    for (const [solver, hash] of [["javascript", ""], ["webcrypto", "#webcrypto"]]) {
      const times = [];
      for (let i = 0; i < args.runs; i++) {
        const v = await solveOnce(args.base, path + hash);
        const ok = await until(() => v.solved() !== null, args.limit_ms || 120000);
        times.push(ok ? v.solved() : null);
        await v.context.close();
      }
      findings.measured.push({ difficulty, solver, times });
    }
  }
}
await browser.close();
console.log(JSON.stringify(findings));
