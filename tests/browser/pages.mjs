// A visitor in a real browser (Debian's chromium, headless, through playwright-core) against a
// running vestibule. tests/it/browser.rs starts vestibule and its origin, then runs this with one
// JSON argument: {"base": "http://127.0.0.1:PORT", "config": "/path/vestibule.toml",
// "shots": "/dir/for/screenshots" or null}. Prints one JSON object of findings and exits 0;
// the Rust test asserts on them. Every wait here is bounded.
import { launch } from "./launch.mjs";
import fs from "node:fs";
import path from "node:path";

const { base, config, shots, launch_at_ms } = JSON.parse(process.argv[2]);
const browser = await launch();
const findings = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A fresh visitor: its own cookies, the document requests it makes (with their times), the
// streams its page opens (EventSource requests), and what its other requests (favicon...) got.
async function visitor(options = {}) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const navigations = [];
  const streams = [];
  const others = [];
  page.on("request", (r) => {
    if (r.isNavigationRequest() && r.resourceType() === "document") {
      navigations.push({ url: r.url(), at: Date.now() });
    }
    if (r.resourceType() === "eventsource") {
      streams.push({ url: r.url(), at: Date.now() });
    }
  });
  page.on("response", async (r) => {
    if (r.request().resourceType() !== "document") {
      others.push({ url: r.url(), status: r.status(), setCookie: (await r.allHeaders())["set-cookie"] || null });
    }
  });
  return { context, page, navigations, streams, others };
}

const gaps = (navs) => navs.slice(1).map((n, i) => (n.at - navs[i].at) / 1000);

async function waitForText(page, text, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      if ((await page.content()).includes(text)) return true;
    } catch {
      // navigating: the content is not there yet
    }
    await sleep(250);
  }
  return false;
}

// 0. A visitor on an event's pre-queue page watches the countdown and is let in after the
// start by themselves: the page comes back at the start, with no click and no polling before.
{
  const v = await visitor();
  await v.page.goto(`${base}/launch/__echo`);
  const html = await v.page.content();
  const prequeue_page = html.includes("Sneaker drop opens soon") && html.includes('id="starts"');
  const first = await v.page.textContent("#count");
  await sleep(2100);
  const second = await v.page.textContent("#count");
  const inside = await waitForText(v.page, '"headers"', Math.max(0, launch_at_ms - Date.now()) + 15000);
  findings.prequeued = {
    prequeue_page,
    countdown: [first, second],
    inside,
    navigation_times_ms: v.navigations.map((n) => n.at),
  };
  await v.context.close();
}

// 1. A visitor waits, then is let in, with no click (JavaScript on).
{
  const v = await visitor();
  await v.page.goto(`${base}/lottery/__echo`);
  const firstPage = await v.page.content();
  // An image of the waiting page (as a favicon or logo would be): held, never queued.
  await v.page.evaluate(() => new Promise((done) => {
    const img = new Image();
    img.onload = img.onerror = done;
    img.src = "/lottery/logo.png";
  }));
  const inside = await waitForText(v.page, '"headers"', 25000);
  findings.waited_then_in = {
    first_was_waiting: firstPage.includes("You are in the queue"),
    inside,
    navigations: v.navigations.length,
    gaps: gaps(v.navigations),
    subresources: v.others.filter((o) => o.url.endsWith("/logo.png")),
  };
  await v.context.close();
}

// 2. On a room holding everyone: without JavaScript, exactly one request per refresh; with it,
// the page's one stream checks in for it and the page makes no request of its own.
for (const js of [true, false]) {
  const v = await visitor({ javaScriptEnabled: js });
  await v.page.goto(`${base}/hold/`);
  await sleep(16000);
  findings[js ? "held_js_on" : "held_js_off"] = {
    navigations: v.navigations.length,
    gaps: gaps(v.navigations),
    streams: v.streams.length,
    stream_statuses: v.others.filter((o) => v.streams.some((s) => s.url === o.url)).map((o) => o.status),
    title: await v.page.title(),
  };
  await v.context.close();
}

// 3. Accessibility: a polite live region that stays quiet (at most once a minute), a
// progressbar whose value moves, and a pause that stops the refresh. The page's stream is
// refused here (503, as past max_streams), so the page polls on its countdown and the pause
// has a refresh to stop: with a stream open, the page would not reload in those 9 s anyway.
{
  const v = await visitor();
  await v.page.route("**/rooms/*/stream", (route) =>
    route.fulfill({ status: 503, headers: { "retry-after": "5" }, body: "" }));
  await v.page.goto(`${base}/hold/`);
  await sleep(1200);
  const first = await v.page.getAttribute("#progress", "aria-valuenow");
  await sleep(1100);
  const second = await v.page.getAttribute("#progress", "aria-valuenow");
  const live = await v.page.$eval("#announce", (e) => ({ text: e.textContent, live: e.getAttribute("aria-live"), role: e.getAttribute("role") }));
  const role = await v.page.getAttribute("#progress", "role");
  await v.page.click("#pause");
  const pressed = await v.page.getAttribute("#pause", "aria-pressed");
  const before = v.navigations.length;
  await sleep(9000);
  findings.a11y = {
    progress_role: role,
    progress_values: [first, second],
    live_region: live,
    pause_pressed: pressed,
    navigations_while_paused: v.navigations.length - before,
    streams_refused: v.others.filter((o) => v.streams.some((s) => s.url === o.url) && o.status === 503).length,
  };
  await v.context.close();
}

// 4. A closed room reopens: the visitor keeps their place and is let in by themselves.
{
  const v = await visitor();
  await v.page.goto(`${base}/closed/__echo`);
  const closed = (await v.page.content()).includes("closed right now");
  const text = fs.readFileSync(config, "utf8");
  fs.writeFileSync(config, text.replace("allow_percentage = 0 # closed", "allow_percentage = 100 # reopened"));
  const inside = await waitForText(v.page, '"headers"', 20000);
  findings.closed_reopens = { closed, inside, navigations: v.navigations.length, gaps: gaps(v.navigations) };
  await v.context.close();
}

// 5. The 429 page tries again by itself when its countdown ends.
{
  const v = await visitor();
  await v.page.goto(`${base}/limited/__echo`);
  await v.page.goto(`${base}/limited/__echo`);
  const limited = (await v.page.content()).includes("Too many requests");
  const inside = await waitForText(v.page, '"headers"', 15000);
  findings.ratelimited_retries = { limited, inside, navigations: v.navigations.length };
  await v.context.close();
}

// 6. A visitor whose browser speaks Arabic: the page in Arabic, laid out right to left.
{
  const v = await visitor({ locale: "ar-EG" });
  await v.page.goto(`${base}/hold/`);
  await v.page.goto(`${base}/hold/`);
  findings.rtl = await v.page.evaluate(() => ({
    lang: document.documentElement.lang,
    dir: document.documentElement.dir,
    direction: getComputedStyle(document.body).direction,
    heading: document.querySelector("h1").textContent,
  }));
  await v.context.close();
}

// 7. Screenshots of each page, light and dark, mobile and desktop.
if (shots) {
  // Someone already waits in the room whose line holds one: the next visitors find it full.
  const filler = await visitor();
  await filler.page.goto(`${base}/full/`);
  fs.mkdirSync(shots, { recursive: true });
  const sizes = {
    desktop: { viewport: { width: 1280, height: 800 } },
    mobile: { viewport: { width: 390, height: 844 }, isMobile: true, deviceScaleFactor: 2, hasTouch: true },
  };
  const pages = [
    ["startwaiting", "/hold/", 1],
    ["keepwaiting", "/hold/", 2],
    ["deny", "/shut/", 1],
    ["ratelimited", "/limited/x", 3],
    ["soldout", "/soldout/", 1],
    ["queuefull", "/full/", 1],
    ["keepwaiting-ar", "/hold/", 2, "ar"],
    // With JavaScript: the countdown and the start in the visitor's own words.
    ["prequeue", "/presale/", 1, "en-US", true],
  ];
  const taken = [];
  for (const [name, url, loads, locale, script] of pages) {
    for (const [size, opts] of Object.entries(sizes)) {
      for (const scheme of ["light", "dark"]) {
        const v = await visitor({ ...opts, colorScheme: scheme, javaScriptEnabled: !!script, locale: locale || "en-US", timezoneId: "Europe/Paris" });
        for (let i = 0; i < loads; i++) {
          await v.page.goto(`${base}${url}`);
        }
        if (script) await sleep(1200);
        const file = path.join(shots, `${name}-${size}-${scheme}.png`);
        await v.page.screenshot({ path: file });
        taken.push(file);
        await v.context.close();
      }
    }
  }
  findings.screenshots = taken;
  await filler.context.close();
}

await browser.close();
console.log(JSON.stringify(findings));
