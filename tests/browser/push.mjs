// A waiting page comes in on its stream's `turn`, before its polling timer fires: Debian's
// chromium, headless, through playwright-core, against a running vestibule. tests/it/browser.rs
// starts vestibule and its origin, admits visitor A itself, then runs this with one JSON
// argument: {"base": "http://127.0.0.1:PORT", "path": "/push/__echo", "revoke": "/push/__revoke",
// "cookie_a": "wr_push=<A's cookie>", "ip_a": "10.1.0.1", "refresh_secs": 20} (the room's
// `refresh`).
//
// Visitor B (this browser) gets the waiting page and its stream; once B's token is due (the
// stream has checked in for B and found no slot) this ends A's session with a plain fetch of the
// origin's revoke path as A, and measures when B's page shows the origin's echo. Prints one JSON
// object of findings and exits 0; the Rust test asserts on them. Every wait here is bounded.
import { launch } from "./launch.mjs";

const { base, path, revoke, cookie_a, ip_a, refresh_secs } = JSON.parse(process.argv[2]);
const browser = await launch();
const context = await browser.newContext();
const page = await context.newPage();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const started = Date.now();
const since = (at) => (at == null ? null : at - started);

// The document requests and the streams B's page makes, and what its streams said (the page's
// EventSource is wrapped to report its events, in the order they came, before the page's own
// listeners see them).
const navigations = [];
const streams = [];
const events = [];
page.on("request", (r) => {
  if (r.isNavigationRequest() && r.resourceType() === "document") {
    navigations.push({ url: r.url(), at: Date.now() });
  }
  if (r.resourceType() === "eventsource") {
    streams.push({ url: r.url(), at: Date.now(), status: null });
  }
});
page.on("response", (r) => {
  if (r.request().resourceType() === "eventsource") {
    const s = streams.find((s) => s.url === r.url() && s.status === null);
    if (s) {
      s.status = r.status();
      s.opened_at = Date.now();
    }
  }
});
await page.exposeFunction("__pushSeen", (name) => events.push({ name, at: Date.now() }));
await page.addInitScript(() => {
  const Real = window.EventSource;
  if (!Real) return;
  window.EventSource = function (url, options) {
    const es = new Real(url, options);
    es.addEventListener("open", () => window.__pushSeen("open"));
    es.addEventListener("estimate", () => window.__pushSeen("estimate"));
    es.addEventListener("turn", () => window.__pushSeen("turn"));
    es.addEventListener("error", () => window.__pushSeen("error"));
    return es;
  };
  window.EventSource.prototype = Real.prototype;
});

async function hasText(text) {
  try {
    return (await page.content()).includes(text);
  } catch {
    return false; // navigating: the content is not there yet
  }
}

// B arrives: the waiting page, and its stream open (200).
const streamOpen = page
  .waitForResponse((r) => r.request().resourceType() === "eventsource", { timeout: 10000 })
  .then((r) => r.status())
  .catch(() => null);
const first = await page.goto(base + path, { timeout: 10000 });
const loaded_at = Date.now();
const first_status = first ? first.status() : null;
const waiting_page = (await page.locator("#count").count()) === 1;
const count_at_load = waiting_page ? Number(await page.textContent("#count")) : null;
const stream_status = await streamOpen;
const cookie = (await context.cookies()).find((c) => c.name === "wr_push");
const value = cookie ? decodeURIComponent(cookie.value) : "";
const field = (name) => {
  const m = value.match(new RegExp(`(?:^|&)${name}=(\\d+)`));
  return m ? Number(m[1]) : null;
};
const exp = field("exp");
const ref = field("ref");

const findings = {
  first_status,
  waiting_page,
  count_at_load,
  stream_status,
  token_exp: exp,
  token_ref: ref,
  due_after_load_ms: exp == null ? null : exp * 1000 - loaded_at,
};

// Until B's token is due plus 2 s: the stream has checked in for B by then, and found no slot.
// Bounded: a token due further than 30 s away is not what this test set up.
const due_ms = exp == null ? loaded_at : exp * 1000;
await sleep(Math.min(30000, Math.max(0, due_ms + 2000 - Date.now())));
findings.waiting_before_revoke = !(await hasText('"headers"')) && (await hasText('id="count"'));
findings.navigations_before_revoke = navigations.length;

// A's session ends: the origin says so on A's request.
const revoke_at = Date.now();
let revoke_status = null;
try {
  const r = await fetch(base + revoke, {
    headers: { Cookie: cookie_a, "X-Forwarded-For": ip_a, Accept: "application/json" },
    signal: AbortSignal.timeout(10000),
  });
  revoke_status = r.status;
  await r.text();
} catch (e) {
  revoke_status = String(e);
}
const revoked_at = Date.now();

// B comes in by themselves: the origin's echo on B's page.
let inside_at = null;
const end = Date.now() + 15000;
while (Date.now() < end) {
  if (await hasText('"headers"')) {
    inside_at = Date.now();
    break;
  }
  await sleep(50);
}
const turn = events.find((e) => e.name === "turn");

Object.assign(findings, {
  revoke_status,
  revoke_took_ms: revoked_at - revoke_at,
  inside: inside_at !== null,
  revoke_to_inside_ms: inside_at === null ? null : inside_at - revoke_at,
  revoke_to_turn_ms: turn ? turn.at - revoke_at : null,
  // The earliest a polling page could have reloaded next: it reloads when its token is due,
  // and its next token is due 0.8 × refresh later at the soonest.
  inside_before_next_poll_ms:
    inside_at === null || exp == null ? null : exp * 1000 + 0.8 * refresh_secs * 1000 - inside_at,
  navigations: navigations.length,
  navigation_times_ms: navigations.map((n) => since(n.at)),
  streams: streams.map((s) => ({ status: s.status, at_ms: since(s.at), opened_ms: since(s.opened_at) })),
  events: events.map((e) => ({ name: e.name, at_ms: since(e.at) })),
  loaded_ms: since(loaded_at),
  revoke_ms: since(revoke_at),
  inside_ms: since(inside_at),
  final_url: page.url(),
});

await browser.close();
console.log(JSON.stringify(findings));
