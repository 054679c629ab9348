//! A visitor in a real browser: Debian's chromium, headless, driven by playwright-core
//! (`tests/browser/pages.mjs`) against the real proxy and origin. It waits and is let in with
//! no click, makes exactly one request per refresh with JavaScript off and holds one stream
//! instead with it on, hears a polite live region, sees a moving progressbar, can pause, keeps
//! its place while a room is closed, and gets through after a 429 by itself. Another visitor
//! (`tests/browser/push.mjs`) comes in on its stream's `turn`, before its polling timer.
//!
//! Needs `chromium`, `node` and `npm ci` in `tests/browser` (`.ci/run` does all three). Without
//! them the test says so loudly and skips. `VESTIBULE_SHOTS=dir` also saves screenshots of
//! every page (light and dark, desktop and mobile); the README's come from there.

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn chromium() -> Option<String> {
    let candidates = [
        std::env::var("CHROMIUM").unwrap_or_default(),
        "/usr/bin/chromium".into(),
        "/usr/bin/chromium-browser".into(),
    ];
    candidates
        .into_iter()
        .find(|c| !c.is_empty() && Path::new(c).exists())
}

fn driver_ready(dir: &Path) -> Result<String, String> {
    let chromium = chromium().ok_or("no chromium (apt-get install chromium)")?;
    let node = Command::new("node").arg("--version").output();
    if !node.map(|o| o.status.success()).unwrap_or(false) {
        return Err("no node (apt-get install nodejs)".into());
    }
    if !dir.join("node_modules/playwright-core").exists() {
        return Err(format!(
            "no playwright-core (cd {} && npm ci)",
            dir.display()
        ));
    }
    Ok(chromium)
}

/// Runs the driver `script` of `dir` with `arg` against `v`, and returns its findings (printed,
/// with how long the browser took).
fn drive(
    dir: &Path,
    script: &str,
    chromium: &str,
    arg: &serde_json::Value,
    v: &Vestibule,
) -> serde_json::Value {
    let started = Instant::now();
    let out = Command::new("node")
        .arg(dir.join(script))
        .arg(arg.to_string())
        .env("CHROMIUM", chromium)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser driver failed ({:?}):\n{stderr}\n{stdout}\nvestibule:\n{}",
        out.status,
        v.log_text()
    );
    let found: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("driver output is not JSON ({e}):\n{stdout}\n{stderr}"));
    eprintln!(
        "browser findings of {script} after {:?}:\n{}",
        started.elapsed(),
        serde_json::to_string_pretty(&found).unwrap()
    );
    found
}

const ROOMS: &str = r#"
[[room]]
name = "lottery"
title = "The Big Sale"
paths = ["/lottery"]
cookie_name = "wr_lottery"
pages = "pages"
allow_percentage = 99
wait_period = "3s"

[[room]]
name = "hold"
title = "Concert tickets"
paths = ["/hold"]
cookie_name = "wr_hold"
pages = "pages"
admission = "fifo"
new_users_per_minute = 10
queue_all = true
refresh = "5s"

[[room]]
name = "closed"
paths = ["/closed"]
cookie_name = "wr_closed"
pages = "pages"
allow_percentage = 0 # closed
closed_refresh = "5s"
wait_period = "3s"

[[room]]
name = "shut"
title = "Vaccine sign-up"
paths = ["/shut"]
cookie_name = "wr_shut"
pages = "pages"
allow_percentage = 0
closed_refresh = "1m"

[[room]]
name = "soldout"
title = "Festival passes"
paths = ["/soldout"]
cookie_name = "wr_soldout"
pages = "pages"
sold_out = true
closed_refresh = "1m"

[[room]]
name = "full"
title = "Limited edition"
paths = ["/full"]
cookie_name = "wr_full"
pages = "pages"
admission = "fifo"
new_users_per_minute = 10
queue_all = true
max_waiting_users = 1
refresh = "1m"

[[rate_limit]]
name = "limited"
paths = ["/limited"]
window = "1s"
limit = 1
penalty = "3s"
"#;

/// How long after the proxy starts the `launch` event opens its line.
const LAUNCH_IN_SECS: u64 = 15;

/// [`ROOMS`] and two rooms with events: `launch`, whose pre-queue is open and which starts
/// [`LAUNCH_IN_SECS`] from now, and `presale`, whose start is an hour away (for screenshots).
/// Returns the rooms and the launch's start (Unix seconds).
fn rooms() -> (String, u64) {
    use vestibule::config::event::rfc3339;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let launch = now + LAUNCH_IN_SECS;
    let event = |name: &str, title: &str, path: &str, start: u64| {
        format!(
            "[[room]]\nname = \"{name}\"\ntitle = \"{title}\"\npaths = [\"{path}\"]\n\
             cookie_name = \"wr_{name}\"\npages = \"pages\"\nadmission = \"fifo\"\n\
             new_users_per_minute = 100\nrefresh = \"5s\"\n\
             [[room.event]]\nname = \"{name}\"\nprequeue_start = \"{}\"\nstart = \"{}\"\n\
             end = \"{}\"\nshuffle_at_start = true\n",
            rfc3339(now - 60),
            rfc3339(start),
            rfc3339(start + 3600)
        )
    };
    (
        format!(
            "{ROOMS}\n{}\n{}",
            event("launch", "Sneaker drop", "/launch", launch),
            event("presale", "Stadium tour presale", "/presale", now + 3600)
        ),
        launch,
    )
}

fn gaps(v: &serde_json::Value) -> Vec<f64> {
    v["gaps"]
        .as_array()
        .expect("gaps")
        .iter()
        .map(|g| g.as_f64().expect("a number"))
        .collect()
}

#[test]
fn a_visitor_in_a_real_browser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = match driver_ready(&dir) {
        Ok(c) => c,
        Err(why) => {
            crate::common::missing_tool(
                "a_visitor_in_a_real_browser (headless chromium driven from node; the pages work in a real browser)",
                why,
            );
            return;
        }
    };
    let origin = Origin::start();
    let (rooms, launch) = rooms();
    let v = Setup::new(origin.addr).extra(&rooms).start();
    let shots = std::env::var("VESTIBULE_SHOTS").ok();
    let arg = serde_json::json!({
        "base": format!("http://{}", v.proxy),
        "config": v.config_path(),
        "shots": shots,
        "launch_at_ms": launch * 1000,
    });
    let found = drive(&dir, "pages.mjs", &chromium, &arg, &v);

    // 0. On the pre-queue page: a countdown, then in line at the start and let in, no click.
    let p = &found["prequeued"];
    assert_eq!(p["prequeue_page"], true, "{p}");
    let counts = p["countdown"].as_array().unwrap();
    assert!(counts[0] != counts[1], "the countdown moves: {p}");
    assert_eq!(p["inside"], true, "let in after the start, by itself: {p}");
    let navs = p["navigation_times_ms"].as_array().unwrap();
    assert!(
        navs.len() >= 2 && navs.len() <= 4,
        "no polling while pre-queued: {p}"
    );
    let back = navs[1].as_u64().unwrap();
    assert!(
        back + 300 >= launch * 1000 && back <= launch * 1000 + 6_500,
        "came back at the start (within one refresh): {p}"
    );

    // 1. Waits, then is let in by itself; an image of the page never joins the queue.
    let w = &found["waited_then_in"];
    assert_eq!(w["first_was_waiting"], true, "{w}");
    assert_eq!(w["inside"], true, "let in with no click: {w}");
    for g in gaps(w) {
        assert!(g >= 2.5, "no reload sooner than the wait period: {w}");
    }
    let subresources = w["subresources"].as_array().expect("subresources");
    assert!(!subresources.is_empty(), "the image was requested: {w}");
    for f in subresources {
        assert_eq!(f["status"], 503, "{f}");
        assert!(f["setCookie"].is_null(), "an image gets no cookie: {f}");
    }

    // 2. Without JavaScript, one request per check-in (5 s jittered to 4-6 s), never doubled.
    // With it, the page opens one stream, which checks in for it: no reload in those 16 s.
    let h = &found["held_js_off"];
    let navs = h["navigations"].as_u64().unwrap();
    assert!(
        (3..=5).contains(&navs),
        "one request per 4-6 s in 16 s: {h}"
    );
    for g in gaps(h) {
        assert!(
            (3.5..=6.8).contains(&g),
            "held_js_off: a refresh {g} s after the last: {h}"
        );
    }
    assert_eq!(h["streams"], 0, "no script, no stream: {h}");
    let h = &found["held_js_on"];
    assert_eq!(
        h["navigations"], 1,
        "the stream checks in, the page does not: {h}"
    );
    assert_eq!(h["streams"], 1, "one stream, held open: {h}");
    assert_eq!(h["stream_statuses"], serde_json::json!([200]), "{h}");
    for key in ["held_js_on", "held_js_off"] {
        let h = &found[key];
        assert!(
            h["title"].as_str().unwrap().contains("Concert tickets"),
            "{h}"
        );
    }

    // 3. Accessibility.
    let a = &found["a11y"];
    assert_eq!(a["progress_role"], "progressbar", "{a}");
    let values = a["progress_values"].as_array().unwrap();
    assert_ne!(values[0], values[1], "the progressbar moves: {a}");
    assert_eq!(a["live_region"]["live"], "polite", "{a}");
    assert_eq!(a["pause_pressed"], "true", "{a}");
    assert!(
        a["streams_refused"].as_u64().unwrap() >= 1,
        "the page polls (its stream refused), so there is a refresh to pause: {a}"
    );
    assert_eq!(a["navigations_while_paused"], 0, "paused means paused: {a}");

    // 4. A closed room that reopens lets its visitors in by themselves.
    let c = &found["closed_reopens"];
    assert_eq!(c["closed"], true, "{c}");
    assert_eq!(c["inside"], true, "let in after reopening: {c}");

    // 6. A browser that speaks Arabic gets the page in Arabic, right to left.
    let rtl = &found["rtl"];
    assert_eq!(rtl["lang"], "ar", "{rtl}");
    assert_eq!(rtl["dir"], "rtl", "{rtl}");
    assert_eq!(
        rtl["direction"], "rtl",
        "the browser lays it out right to left: {rtl}"
    );
    assert_eq!(rtl["heading"], "ما زلت في قائمة الانتظار", "{rtl}");

    // 5. A 429 page tries again by itself.
    let r = &found["ratelimited_retries"];
    assert_eq!(r["limited"], true, "{r}");
    assert_eq!(r["inside"], true, "{r}");

    if shots.is_some() {
        assert_eq!(found["screenshots"].as_array().unwrap().len(), 32);
    }
}

/// A visitor in a proof-of-work room: with JavaScript on it gets its place with no
/// click while the page stays responsive; with JavaScript off it is told what is needed.
#[test]
fn a_visitor_solves_a_challenge_in_a_real_browser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = match driver_ready(&dir) {
        Ok(c) => c,
        Err(why) => {
            crate::common::missing_tool(
                "a_visitor_solves_a_challenge_in_a_real_browser (headless chromium driven from node; the challenge page works in a real browser)",
                why,
            );
            return;
        }
    };
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(
            "[[room]]\nname = \"pow\"\ntitle = \"Sneaker drop\"\npaths = [\"/pow\"]\ncookie_name = \"wr_pow\"\n\
             pages = \"pages\"\nallow_percentage = 100\nchallenge = \"pow\"\nchallenge_difficulty = 14\n\
             [[room]]\nname = \"hard\"\npaths = [\"/hard\"]\ncookie_name = \"wr_hard\"\npages = \"pages\"\n\
             allow_percentage = 100\nchallenge = \"pow\"\nchallenge_difficulty = 28\n",
        )
        .start();
    let arg = serde_json::json!({
        "mode": "test",
        "base": format!("http://{}", v.proxy),
        "path": "/pow/__echo",
        "hard": "/hard/__echo",
    });
    let found = drive(&dir, "challenge.mjs", &chromium, &arg, &v);

    // JavaScript on: solved, sent back, let in, with no click; the solution cookie is gone.
    let on = &found["js_on"];
    assert_eq!(on["solved"], true, "{on}");
    assert_eq!(on["solution_cookie_sent"], true, "{on}");
    assert_eq!(on["origin_page"], true, "let in by itself: {on}");
    assert_eq!(on["navigations"], 2, "the page, then the origin's: {on}");
    let cookies: Vec<&str> = on["cookies_after"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(cookies.contains(&"wr_pow"), "a place: {on}");
    assert!(
        !cookies.contains(&"wr_pow_pow"),
        "the solution is removed: {on}"
    );
    if let Some(first) = on["first"].as_object() {
        assert_eq!(first["role"], "progressbar", "{on}");
        assert_eq!(first["workShown"], true, "{on}");
    }

    // While it works the page answers its timers and shows progress.
    let r = &found["responsive"];
    let worst = r["worst_gap_ms"].as_f64().expect("measured");
    assert!(worst < 250.0, "the page stalled for {worst} ms: {r}");
    let progress = r["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "the progress moves: {r}");
    assert_eq!(r["navigations"], 1, "still working: {r}");
    assert_eq!(r["workers"], 1, "the work runs in a Web Worker: {r}");

    // JavaScript off: the page says what it needs and does not reload.
    let off = &found["js_off"];
    assert!(
        off["text"]
            .as_str()
            .unwrap()
            .contains("This page needs JavaScript"),
        "{off}"
    );
    assert_eq!(off["navigations"], 1, "{off}");
    assert_eq!(off["solution_cookie_sent"], false, "{off}");
}

/// The rooms the browser visits, without a browser: each answers with its own page and title
/// (this also runs where chromium is missing).
#[test]
fn the_rooms_the_browser_visits_answer() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).extra(&rooms().0).start();
    let accept = "text/html";
    for (path, status, text) in [
        ("/lottery/", 200, "The Big Sale"),
        ("/hold/", 200, "Concert tickets"),
        ("/closed/", 200, "closed right now"),
        ("/shut/", 200, "Vaccine sign-up"),
        ("/soldout/", 200, "Festival passes is sold out"),
        ("/presale/", 200, "Stadium tour presale opens soon"),
    ] {
        let resp = client()
            .get(v.url(path))
            .header("Accept", accept)
            .send()
            .unwrap();
        assert_eq!(resp.status(), status, "{path}");
        let html = resp.text().unwrap();
        assert!(html.contains(text), "{path}: {html}");
    }
}

/// An invite-only room in a real browser with JavaScript off: the page's form takes a code, a
/// wrong one is refused on the page, the right one lets the visitor in, and the place holds
/// without the code afterwards.
#[test]
fn a_visitor_types_an_invitation_into_the_page() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = match driver_ready(&dir) {
        Ok(c) => c,
        Err(why) => {
            crate::common::missing_tool(
                "a_visitor_types_an_invitation_into_the_page (headless chromium driven from node; the invite page works in a real browser)",
                why,
            );
            return;
        }
    };
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(
            "[[room]]\nname = \"presale\"\ntitle = \"Fan club presale\"\npaths = [\"/presale\"]\n\
             cookie_name = \"wr_presale\"\npages = \"pages\"\nallow_percentage = 100\naccess = \"invite\"\n",
        )
        .start();
    let code = v.invite_codes("presale", &[]).remove(0);
    let arg = serde_json::json!({
        "base": format!("http://{}", v.proxy),
        "path": "/presale/__echo",
        "code": code,
    });
    let found = drive(&dir, "invite.mjs", &chromium, &arg, &v);
    let visits = found["visits"].as_array().unwrap();
    let (first, wrong, right, later) = (&visits[0], &visits[1], &visits[2], &visits[3]);
    assert_eq!(
        (first["status"].as_u64(), first["form"].as_bool()),
        (Some(403), Some(true)),
        "{found}"
    );
    assert_eq!(first["refused"], false, "{found}");
    assert_eq!(
        (wrong["status"].as_u64(), wrong["refused"].as_bool()),
        (Some(403), Some(true)),
        "{found}"
    );
    assert_eq!(right["status"], 200, "{found}");
    assert_eq!(right["origin"], true, "let in: {found}");
    assert_eq!(
        right["origin_query"], "",
        "the code never reached the origin: {found}"
    );
    assert!(
        !right["url"].as_str().unwrap().contains("vestibule_invite"),
        "the code left the address bar: {found}"
    );
    assert_eq!(
        (later["status"].as_u64(), later["origin"].as_bool()),
        (Some(200), Some(true)),
        "the place holds: {found}"
    );
    assert!(
        found["cookies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "wr_presale"),
        "{found}"
    );
}

/// The operator console in a real browser (`tests/browser/console.mjs`): it signs in, watches
/// the waiting count move while visitors arrive, pauses through the button and sees it in
/// `/status` and the audit log, is refused without the CSRF header, and as a viewer sees no
/// button and is refused by the server; a phone-sized window does not scroll sideways.
#[test]
fn an_operator_runs_the_console_in_a_real_browser() {
    use crate::console::{start_console, ALICE, VERA};
    use std::io::BufRead;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = match driver_ready(&dir) {
        Ok(c) => c,
        Err(why) => {
            crate::common::missing_tool(
                "an_operator_runs_the_console_in_a_real_browser (headless chromium driven from node)",
                why,
            );
            return;
        }
    };
    let origin = Origin::start();
    let v = start_console(origin.addr);
    // One visitor holds the room's one place before the console opens.
    User::new(1).get(&v, "/");
    let arg = serde_json::json!({
        "admin": format!("http://{}", v.admin),
        "operator_token": ALICE,
        "viewer_token": VERA,
        "room": "sale",
        "add_visitors_cmd": null,
        "shots": std::env::var("VESTIBULE_SHOTS").ok(),
    });
    let started = Instant::now();
    let mut child = Command::new("node")
        .arg(dir.join("console.mjs"))
        .arg(arg.to_string())
        .env("CHROMIUM", &chromium)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node runs");
    // The driver asks for visitors on stderr once it watches the waiting count.
    let stderr = child.stderr.take().expect("stderr");
    let proxy = v.proxy;
    let watcher = std::thread::spawn(move || {
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("ready_for_visitors") {
                for i in 2..5 {
                    let _ = client()
                        .get(format!("http://{proxy}/"))
                        .header("X-Forwarded-For", format!("10.9.0.{i}"))
                        .send();
                }
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    let out = child.wait_with_output().expect("the driver ends");
    let stderr = watcher.join().unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let found: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "driver output is not JSON ({e}):\n{stdout}\n{stderr}\n{}",
            v.log_text()
        )
    });
    eprintln!(
        "console findings after {:?}:\n{}",
        started.elapsed(),
        serde_json::to_string_pretty(&found).unwrap()
    );
    assert!(
        out.status.success() && found.get("failed").is_none(),
        "the console driver failed: {found}\n{stderr}\n{}",
        v.log_text()
    );

    let f = &found["login_form"];
    assert_eq!(f["form"]["password"], true, "{f}");
    assert!(
        f["wrong_token_alert"]
            .as_str()
            .unwrap()
            .contains("Sign-in refused"),
        "{f}"
    );
    assert_eq!(f["cookies_after_wrong_login"], serde_json::json!([]), "{f}");
    let f = &found["login_operator"];
    assert_eq!(f["cookies"][0]["name"], "vestibule_console", "{f}");
    assert_eq!(f["cookies"][0]["httpOnly"], true, "{f}");
    assert_eq!(f["cookies"][0]["sameSite"], "Strict", "{f}");
    assert_eq!(f["csrf_meta"], true, "{f}");
    assert_eq!(f["focus_kept"], true, "{f}");
    let f = &found["live_waiting"];
    assert_eq!(f["changed"], true, "the waiting count moved: {f}");
    assert_eq!(f["reloads"], 0, "without reloading the page: {f}");
    let f = &found["pause"];
    assert_eq!(f["paused"], true, "{f}");
    assert_eq!(f["audit_newest_is_pause"], true, "{f}");
    assert_eq!(f["audit_operator"], "alice", "{f}");
    let f = &found["csrf_missing"];
    assert_eq!(f["status"], 403, "{f}");
    assert_eq!(f["still_paused"], true, "{f}");
    assert_eq!(found["resume"]["paused"], false, "{}", found["resume"]);
    assert_eq!(
        found["logout"]["stream_refused"], true,
        "{}",
        found["logout"]
    );
    let f = &found["viewer"];
    assert_eq!(f["actions"], 0, "{f}");
    assert_eq!(f["pause_status"], 403, "{f}");
    assert_eq!(f["paused_after"], false, "{f}");
    assert_eq!(
        found["phone"]["no_horizontal_scroll"], true,
        "{}",
        found["phone"]
    );
    // The server's side of it: alice's two actions are the audit log, and /status agrees.
    let (code, body) = v.admin_get("/audit");
    assert_eq!(code, 200);
    let records: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let actions: Vec<_> = records
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["resume", "pause"], "{body}");
    assert!(records
        .iter()
        .all(|r| r["via"] == "console" && r["operator"] == "alice"));
    assert_eq!(v.status()["rooms"][0]["paused"], false);
}

/// A waiting page comes in on its stream's `turn`, before its polling timer fired
/// (`tests/browser/push.mjs`). Visitor A holds a fifo room's one place; visitor B waits in a
/// real browser with its stream open. Once B's token is due (the stream has checked in for B and
/// found no slot), A's session ends through the origin's revoke, and B's page comes in by
/// itself: within a few seconds, by one reload (no polling reload before it), on one stream,
/// and long before a polling page's next request could have been made.
#[test]
fn a_waiting_page_comes_in_on_its_turn_push() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let chromium = match driver_ready(&dir) {
        Ok(c) => c,
        Err(why) => {
            crate::common::missing_tool(
                "a_waiting_page_comes_in_on_its_turn_push (headless chromium driven from node; the stream lets a page in)",
                why,
            );
            return;
        }
    };
    const REFRESH_SECS: f64 = 20.0;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(
            "[[room]]\nname = \"push\"\ntitle = \"Sneaker drop\"\npaths = [\"/push\"]\n\
             cookie_name = \"wr_push\"\npages = \"pages\"\nadmission = \"fifo\"\n\
             total_active_users = 1\nnew_users_per_minute = 100\nrefresh = \"20s\"\n\
             session_duration = \"10m\"\n",
        )
        .start();
    // A takes the room's one place.
    let mut a = User::at("10.1.0.1").with_cookie_name("wr_push");
    let body: serde_json::Value = a.get(&v, "/push/__echo").json().expect("JSON");
    assert_eq!(decision_in(&body), "allow", "A is let in: {body}");
    let cookie_a = a.cookie.clone().expect("A holds a room cookie");
    let arg = serde_json::json!({
        "base": format!("http://{}", v.proxy),
        "path": "/push/__echo",
        "revoke": "/push/__revoke",
        "cookie_a": format!("wr_push={cookie_a}"),
        "ip_a": a.ip,
        "refresh_secs": REFRESH_SECS,
    });
    let found = drive(&dir, "push.mjs", &chromium, &arg, &v);
    let f = &found;

    // B waits, with its stream open, and was still waiting when its token came due.
    assert_eq!(f["first_status"], 200, "{f}");
    assert_eq!(f["waiting_page"], true, "B waits: {f}");
    assert_eq!(f["stream_status"], 200, "B's stream is open: {f}");
    let refresh = f["token_ref"].as_f64().expect("B's token has ref=");
    assert!(
        (0.8 * REFRESH_SECS..=1.2 * REFRESH_SECS).contains(&refresh),
        "a jittered 20 s: {f}"
    );
    assert_eq!(
        f["waiting_before_revoke"], true,
        "no place for B while A holds it: {f}"
    );
    assert_eq!(f["navigations_before_revoke"], 1, "{f}");
    // Its countdown (what a polling page reloads on) ran out before the revoke, and the page
    // stayed: it marks time while its stream is open.
    let countdown_end =
        f["loaded_ms"].as_f64().unwrap() + 1000.0 * f["count_at_load"].as_f64().unwrap();
    assert!(
        f["revoke_ms"].as_f64().unwrap() >= countdown_end,
        "the countdown ended before the revoke: {f}"
    );

    // A's session ends; B comes in by the stream's turn, within a few seconds.
    assert_eq!(f["revoke_status"], 200, "{f}");
    assert_eq!(f["inside"], true, "B is let in by itself: {f}");
    let took = f["revoke_to_inside_ms"].as_f64().unwrap();
    assert!(took < 3_000.0, "in {took} ms from the revoke: {f}");
    let events: Vec<&str> = f["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(events.contains(&"turn"), "the stream said turn: {f}");
    assert_eq!(
        f["navigations"], 2,
        "the first load and the reload on turn, no polling reload: {f}"
    );
    let streams = f["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 1, "one stream: {f}");
    let ahead = f["inside_before_next_poll_ms"].as_f64().unwrap();
    assert!(
        ahead > 0.0,
        "in before a polling page's next request could be made (due + 0.8 × refresh): {f}"
    );
}
