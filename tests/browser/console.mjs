// The operator console (docs/src/operations/console.md) in a real browser (Debian's chromium, headless, through
// playwright-core) against a running vestibule's admin listener. The Rust test starts vestibule,
// then runs this with one JSON argument:
//   {"admin": "http://127.0.0.1:PORT", "operator_token": "...", "viewer_token": "...",
//    "room": "sale", "add_visitors_cmd": null or a shell command, "shots": "/dir" or null}
// When it wants visitors in the room it prints {"ready_for_visitors": true} on stderr (and runs
// add_visitors_cmd when one is given). It prints one JSON object of findings on stdout; a step that
// cannot be done (an element that never comes, a timeout) stops the run with exit status 1 and
// findings.failed naming the step. Every wait is bounded; the whole run stays under 60 s.
import { launch } from "./launch.mjs";
import { exec } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const { admin, operator_token, viewer_token, room, add_visitors_cmd, shots } = JSON.parse(process.argv[2]);
const started = Date.now();
const findings = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const card = `[data-room=${JSON.stringify(room)}]`;
const browser = await launch();

// Stops the whole run if it has not ended by itself: the findings so far, and a failure.
const watchdog = setTimeout(() => finish("watchdog: over 58 s"), 58000);

async function finish(failed) {
  clearTimeout(watchdog);
  if (failed) findings.failed = failed;
  findings.elapsed_ms = Date.now() - started;
  console.log(JSON.stringify(findings));
  try {
    await browser.close();
  } catch {
    // already closing
  }
  process.exit(failed ? 1 : 0);
}

async function step(name, body) {
  try {
    await body();
  } catch (e) {
    await finish(`${name}: ${String(e && e.message ? e.message : e).split("\n")[0]}`);
  }
}

async function newPage(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: "en-US", ...options });
  const page = await context.newPage();
  page.setDefaultTimeout(10000);
  return { context, page };
}

// Opens /console and submits the login form with this token.
async function login(page, token) {
  await page.goto(`${admin}/console`);
  await page.fill('form[action="/console/login"] input[name="token"]', token);
  await page.click('form[action="/console/login"] button[type="submit"]');
}

// Confirms the dialog that a click on the room's button opened, and returns the toast then shown.
async function act(page, action) {
  const seq = await page.getAttribute("#toast", "data-seq");
  const button = page.locator(`${card} [data-action="${action}"]`);
  await button.waitFor({ state: "visible" });
  await button.click();
  await page.waitForSelector("#confirm[open]");
  const dialog = await page.textContent("#confirm-text");
  await page.click("#confirm-ok");
  await page.waitForFunction((s) => {
    const t = document.getElementById("toast");
    return t && t.dataset.seq !== s;
  }, seq);
  const toast = await page.$eval("#toast", (t) => ({ text: t.textContent, kind: t.dataset.kind, role: t.getAttribute("role") }));
  return { dialog, toast };
}

// The room's entry of /status, as fetched by the page (its cookie, same origin).
async function roomStatus(page) {
  return page.evaluate(async (name) => {
    const r = await fetch("/status", { credentials: "same-origin", cache: "no-store" });
    const s = await r.json();
    const rooms = s.rooms;
    const one = Array.isArray(rooms) ? rooms.find((x) => x.name === name) : rooms && rooms[name];
    return { status: r.status, paused: one ? one.paused : null };
  }, room);
}

const operator = await newPage();
const op = operator.page;

// 1. The login form; a wrong token is refused and sets no cookie.
await step("login_form", async () => {
  await op.goto(`${admin}/console`);
  const form = await op.$eval('form[action="/console/login"]', (f) => ({
    method: f.getAttribute("method"),
    password: !!f.querySelector('input[name="token"][type="password"][autocomplete="current-password"]'),
    label: (f.querySelector("label") || {}).textContent || null,
    button: (f.querySelector('button[type="submit"]') || {}).textContent || null,
  }));
  const title = await op.title();
  await login(op, "wrong-token-wrong-token-wrong");
  await op.waitForSelector('[role="alert"]');
  findings.login_form = {
    form,
    title,
    wrong_token_alert: (await op.textContent('[role="alert"]')).trim(),
    cookies_after_wrong_login: (await operator.context.cookies()).map((c) => c.name),
    form_still_shown: !!(await op.$('form[action="/console/login"]')),
  };
});

// 2. The operator's token signs in: the room's card appears, with its figures.
await step("login_operator", async () => {
  await login(op, operator_token);
  await op.waitForSelector(`${card} [data-field="waiting"]`);
  const cookies = await operator.context.cookies();
  findings.login_operator = {
    card: true,
    cookies: cookies.map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, secure: c.secure })),
    csrf_meta: (await op.getAttribute('meta[name="csrf-token"]', "content") || "").length > 0,
    actions: await op.$$eval(`${card} [data-action]`, (bs) => bs.map((b) => b.dataset.action)),
    state: (await op.textContent(`${card} [data-field="state"]`)).trim(),
    live: await op.getAttribute("#live", "data-state"),
  };
  // The figures are updated in place: a focused button keeps its focus across updates.
  await op.focus(`${card} [data-action="pause"]`);
  await sleep(2500);
  findings.login_operator.focus_kept = await op.evaluate(() => (document.activeElement && document.activeElement.dataset.action) === "pause");
});

// 3. The waiting figure moves by itself when visitors arrive (the stream, no reload).
await step("live_waiting", async () => {
  const field = `${card} [data-field="waiting"]`;
  const before = (await op.textContent(field)).trim();
  process.stderr.write(JSON.stringify({ ready_for_visitors: true }) + "\n");
  if (add_visitors_cmd) exec(add_visitors_cmd, { timeout: 20000 }, () => {});
  const navigations = [];
  op.on("framenavigated", (f) => {
    if (f === op.mainFrame()) navigations.push(f.url());
  });
  let after = before;
  const end = Date.now() + 20000;
  while (Date.now() < end) {
    after = (await op.textContent(field)).trim();
    if (after !== before) break;
    await sleep(200);
  }
  findings.live_waiting = { before, after, changed: after !== before, reloads: navigations.length };
});

// 4. Pause through the button and its confirmation; /status and /audit show it.
await step("pause", async () => {
  const { dialog, toast } = await act(op, "pause");
  const status = await roomStatus(op);
  const audit = await op.evaluate(async () => {
    const r = await fetch("/audit?limit=5", { credentials: "same-origin", cache: "no-store" });
    const a = await r.json();
    return { status: r.status, newest: Array.isArray(a) && a.length ? { action: a[0].action, operator: a[0].operator, room: a[0].room } : null };
  });
  findings.pause = {
    dialog,
    toast,
    paused: status.paused,
    audit_newest_is_pause: !!audit.newest && audit.newest.action === "pause",
    audit_operator: audit.newest ? audit.newest.operator : null,
    audit_room: audit.newest ? audit.newest.room : null,
    audit_status: audit.status,
  };
});

// 5. The session without its CSRF header is refused and changes nothing.
await step("csrf_missing", async () => {
  const status = await op.evaluate(async (name) => {
    const r = await fetch(`/rooms/${encodeURIComponent(name)}/resume`, { method: "POST", credentials: "same-origin" });
    return r.status;
  }, room);
  findings.csrf_missing = { status, still_paused: (await roomStatus(op)).paused };
});

// 6. Resume through the button: the card shows it once the stream says so.
await step("resume", async () => {
  const { toast } = await act(op, "resume");
  await op.locator(`${card} [data-action="pause"]`).waitFor({ state: "visible" });
  findings.resume = { toast, paused: (await roomStatus(op)).paused, state: (await op.textContent(`${card} [data-field="state"]`)).trim() };
});

// 7. Log out; a viewer sees no action and is refused one even with the page's CSRF token.
await step("viewer", async () => {
  await op.click('#logout button[type="submit"]');
  await op.waitForSelector('form[action="/console/login"]');
  // The old session no longer reaches the stream (a refusal, or a redirect to the login page).
  const stream_after_logout = await op.evaluate(async () => {
    const r = await fetch("/console/stream", { credentials: "same-origin", redirect: "manual" });
    const out = { status: r.status, type: r.headers.get("content-type") };
    try {
      r.body && r.body.cancel();
    } catch {
      // nothing to cancel
    }
    return out;
  });
  findings.logout = {
    login_form_shown: true,
    stream_after: stream_after_logout,
    stream_refused: !(stream_after_logout.status === 200 && String(stream_after_logout.type).startsWith("text/event-stream")),
  };
  await operator.context.close();

  const viewer = await newPage();
  const vp = viewer.page;
  await login(vp, viewer_token);
  await vp.waitForSelector(`${card} [data-field="waiting"]`);
  const refused = await vp.evaluate(async (name) => {
    const csrf = document.querySelector('meta[name="csrf-token"]').content;
    const r = await fetch(`/rooms/${encodeURIComponent(name)}/pause`, { method: "POST", headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" });
    return r.status;
  }, room);
  findings.viewer = {
    actions: await vp.$$eval("[data-action]", (e) => e.length),
    dialog: !!(await vp.$("dialog")),
    readonly_badge: !!(await vp.$(".badge.readonly")),
    pause_status: refused,
    paused_after: (await roomStatus(vp)).paused,
  };
  await viewer.context.close();
});

// 8. A phone: nothing scrolls sideways. 9. Screenshots, light and dark.
await step("phone", async () => {
  const phone = await newPage({ viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await login(phone.page, operator_token);
  await phone.page.waitForSelector(`${card} [data-field="waiting"]`);
  await sleep(300);
  const widths = () => phone.page.evaluate(() => ({ scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth }));
  const light = await widths();
  await phone.page.emulateMedia({ colorScheme: "dark" });
  const dark = await widths();
  findings.phone = { ...light, no_horizontal_scroll: light.scrollWidth <= light.innerWidth && dark.scrollWidth <= dark.innerWidth };
  if (shots) {
    fs.mkdirSync(shots, { recursive: true });
    const desk = await newPage();
    await login(desk.page, operator_token);
    await desk.page.waitForSelector(`${card} [data-field="waiting"]`);
    await sleep(500);
    const taken = [];
    for (const scheme of ["light", "dark"]) {
      const suffix = scheme === "dark" ? "-dark" : "";
      await desk.page.emulateMedia({ colorScheme: scheme });
      await phone.page.emulateMedia({ colorScheme: scheme });
      const d = path.join(shots, `console-desktop${suffix}.png`);
      await desk.page.screenshot({ path: d });
      const p = path.join(shots, `console-phone${suffix}.png`);
      await phone.page.screenshot({ path: p, fullPage: true });
      taken.push(d, p);
    }
    findings.screenshots = taken;
    await desk.context.close();
  }
  await phone.context.close();
});

await finish(null);
