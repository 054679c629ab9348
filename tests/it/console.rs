//! The operator console and the admin listener's operators, over HTTP against the real server:
//! probes without a token, named operators and viewers, the console's login, session, CSRF and
//! origin checks and its throttle, the live feed, the audit log, and operators added and removed
//! by a reload. (`browser::console_*` drives the same console in a real browser.)

use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use sha2::Digest;

use crate::common::*;

pub const ALICE: &str = "alice-operator-token-0001";
pub const VERA: &str = "vera-viewer-token-000001";
pub const BOB: &str = "bob-operator-token-000001";

pub fn sha(token: &str) -> String {
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fifo room `sale` behind an admin listener with alice (operator) and vera (viewer).
pub fn console_setup(origin: std::net::SocketAddr) -> Setup {
    let mut setup = Setup::new(origin).extra(TRUST_LOCAL).extra(
        "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
         new_users_per_minute = 1\ntotal_active_users = 1\n",
    );
    setup.admin = Some(format!(
        "listen = \"{}\"\naudit_file = \"state/audit.jsonl\"\n\
         operators = [\n  {{ name = \"alice\", token_sha256 = \"{}\", role = \"operator\" }},\n  \
         {{ name = \"vera\", token_sha256 = \"{}\", role = \"viewer\" }},\n]",
        free_addr(),
        sha(ALICE),
        sha(VERA)
    ));
    setup
}

/// Starts [`console_setup`], reading `/status` and `/metrics` as alice.
pub fn start_console(origin: std::net::SocketAddr) -> Vestibule {
    let mut v = console_setup(origin).start();
    v.admin_token = Some(ALICE.to_owned());
    v
}

fn no_redirects() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Signs in with `token`: (status, the session cookie's `name=value` if one was set).
pub fn login(v: &Vestibule, token: &str) -> (u16, Option<String>, String) {
    let resp = no_redirects()
        .post(format!("http://{}/console/login", v.admin))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Origin", format!("http://{}", v.admin))
        .body(format!("token={token}"))
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|c| c.to_str().ok())
        .find(|c| c.starts_with("vestibule_console=") && !c.starts_with("vestibule_console=;"))
        .map(str::to_owned);
    (status, cookie, resp.text().unwrap_or_default())
}

fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_owned()
}

/// The console page for a session cookie, and its CSRF token.
fn console_page(v: &Vestibule, cookie: &str) -> (u16, String, Option<String>) {
    let resp = no_redirects()
        .get(format!("http://{}/console", v.admin))
        .header("Cookie", cookie)
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let page = resp.text().unwrap();
    let csrf = page
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(str::to_owned)
        .filter(|c| !c.is_empty());
    (status, page, csrf)
}

/// A request by session: (status, body).
fn by_session(
    v: &Vestibule,
    method: &str,
    path: &str,
    cookie: &str,
    csrf: Option<&str>,
    origin: Option<&str>,
) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = no_redirects()
        .request(method, format!("http://{}{path}", v.admin))
        .header("Cookie", cookie);
    if let Some(c) = csrf {
        req = req.header("X-CSRF-Token", c);
    }
    if let Some(o) = origin {
        req = req.header("Origin", o);
    }
    let resp = req.send().unwrap();
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

fn by_bearer(v: &Vestibule, method: &str, path: &str, token: &str) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let resp = client()
        .request(method, format!("http://{}{path}", v.admin))
        .bearer_auth(token)
        .send()
        .unwrap();
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

fn status_of(v: &Vestibule) -> serde_json::Value {
    let (code, body) = by_bearer(v, "GET", "/status", ALICE);
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn paused(v: &Vestibule) -> bool {
    status_of(v)["rooms"][0]["paused"].as_bool().unwrap()
}

fn audit(v: &Vestibule, query: &str) -> Vec<serde_json::Value> {
    let (code, body) = by_bearer(v, "GET", &format!("/audit{query}"), VERA);
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn probes_need_no_token_and_everything_else_does() {
    let origin = Origin::start();
    let v = start_console(origin.addr);
    let get = |p: &str| {
        client()
            .get(format!("http://{}{p}", v.admin))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(get("/healthz"), 200);
    assert_eq!(get("/readyz"), 200);
    for p in [
        "/status",
        "/metrics",
        "/status.html",
        "/audit",
        "/console/stream",
        "/",
    ] {
        assert_eq!(get(p), 401, "{p}");
    }
    // The login page, and its assets, need none: that is where a token is given.
    assert_eq!(get("/console"), 200);
    assert_eq!(get("/console/console.js"), 200);
    assert_eq!(get("/console/console.css"), 200);
    // A wrong bearer token is no operator, even on a probe's neighbour.
    assert_eq!(
        by_bearer(&v, "GET", "/status", "not-a-token-of-anyone").0,
        401
    );
    // /status names the operators and their roles, never a token or its hash.
    let s = status_of(&v);
    assert_eq!(s["admin"]["token_required"], true);
    assert_eq!(s["admin"]["operators"][1]["name"], "vera");
    assert_eq!(s["admin"]["operators"][1]["role"], "viewer");
    let text = s.to_string();
    for secret in [ALICE, VERA, &sha(ALICE), &sha(VERA)] {
        assert!(!text.contains(secret), "{text}");
    }
}

#[test]
fn viewers_see_and_operators_act_each_by_name_in_the_audit_log() {
    let origin = Origin::start();
    let v = start_console(origin.addr);
    // A viewer reads everything and changes nothing.
    assert_eq!(by_bearer(&v, "GET", "/status", VERA).0, 200);
    assert_eq!(by_bearer(&v, "GET", "/metrics", VERA).0, 200);
    let (code, body) = by_bearer(&v, "POST", "/rooms/sale/pause", VERA);
    assert_eq!(code, 403, "{body}");
    assert!(!paused(&v));
    // An operator acts; the record names them, where from, and what changed.
    let (code, body) = by_bearer(&v, "POST", "/rooms/sale/pause", ALICE);
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["operator"], "alice");
    assert_eq!(answer["audited"], true);
    assert!(paused(&v));
    let (code, _) = by_bearer(&v, "PUT", "/rooms/sale/message", ALICE);
    assert_eq!(code, 400, "an empty notice is refused, and not recorded");
    let records = audit(&v, "");
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(r["operator"], "alice");
    assert_eq!(r["source"], "127.0.0.1");
    assert_eq!(r["via"], "api");
    assert_eq!(r["room"], "sale");
    assert_eq!(r["action"], "pause");
    assert!(r["before"].get("paused").is_none(), "{r}");
    assert_eq!(r["after"]["paused"]["by"], "alice");
    assert!(r["time"].as_str().unwrap().ends_with('Z'));
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_admin_actions_total{action=\"pause\",operator=\"alice\",room=\"sale\"}"
        ),
        1.0
    );
    assert_eq!(
        metric_value(&m, "vestibule_admin_refused_total{reason=\"role\"}"),
        1.0
    );
    // More records: newest first, by room, limited; a bad limit is 400.
    by_bearer(&v, "POST", "/rooms/sale/resume", ALICE);
    by_bearer(&v, "POST", "/rooms/sale/admit?count=3", ALICE);
    let records = audit(&v, "?room=sale&limit=2");
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["action"], "admit");
    assert_eq!(records[0]["args"]["count"], 3);
    assert_eq!(records[1]["action"], "resume");
    assert!(audit(&v, "?room=other").is_empty());
    for bad in ["?limit=0", "?limit=1001", "?limit=x"] {
        assert_eq!(
            by_bearer(&v, "GET", &format!("/audit{bad}"), VERA).0,
            400,
            "{bad}"
        );
    }
    // The file itself: one JSON line per action, no token in it.
    let file = std::fs::read_to_string(v.path("state/audit.jsonl")).unwrap();
    assert_eq!(file.lines().count(), 3);
    for secret in [ALICE, VERA, &sha(ALICE)] {
        assert!(!file.contains(secret));
    }
    // Rotated by renaming: the next record starts a fresh file.
    std::fs::rename(v.path("state/audit.jsonl"), v.path("state/audit.jsonl.1")).unwrap();
    by_bearer(&v, "POST", "/rooms/sale/pause", ALICE);
    let fresh = std::fs::read_to_string(v.path("state/audit.jsonl")).unwrap();
    assert_eq!(fresh.lines().count(), 1, "{fresh}");
    assert!(!v.log_text().contains(ALICE));
}

#[test]
fn the_console_signs_in_checks_csrf_and_origin_and_signs_out() {
    let origin = Origin::start();
    let v = start_console(origin.addr);
    let own = format!("http://{}", v.admin);

    // Wrong token: the login page again, one message, no cookie.
    let (code, cookie, page) = login(&v, "wrong-token-of-nobody-at-all");
    assert_eq!(code, 401);
    assert!(cookie.is_none());
    assert!(page.contains("Sign-in refused"), "{page}");
    let (_, _, page_empty) = login(&v, "");
    assert_eq!(
        page_empty.replace("401", ""),
        page.replace("401", ""),
        "every failure reads the same"
    );

    // A login from another site is refused before the token is looked at.
    let resp = no_redirects()
        .post(format!("{own}/console/login"))
        .header("Origin", "http://evil.example")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={ALICE}"))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);

    // The right token: 303 to the console, a strict session cookie.
    let (code, cookie, _) = login(&v, ALICE);
    assert_eq!(code, 303);
    let set = cookie.expect("a session cookie");
    for attr in ["HttpOnly", "SameSite=Strict", "Max-Age=43200", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(
        !set.contains("Secure"),
        "not Secure without cookie_secure: {set}"
    );
    let cookie = cookie_pair(&set);
    let (code, page, csrf) = console_page(&v, &cookie);
    assert_eq!(code, 200);
    let csrf = csrf.expect("the page carries a CSRF token");
    assert!(page.contains("alice"));
    assert!(!page.contains(ALICE), "the token is not in the page");
    // The console's headers keep other origins out.
    let resp = no_redirects()
        .get(format!("{own}/console"))
        .header("Cookie", &cookie)
        .send()
        .unwrap();
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));

    // By session, reading needs no CSRF token; acting does.
    assert_eq!(by_session(&v, "GET", "/status", &cookie, None, None).0, 200);
    let (code, _) = by_session(&v, "POST", "/rooms/sale/pause", &cookie, None, None);
    assert_eq!(code, 403);
    let (code, _) = by_session(&v, "POST", "/rooms/sale/pause", &cookie, Some("0000"), None);
    assert_eq!(code, 403);
    let (code, _) = by_session(
        &v,
        "POST",
        "/rooms/sale/pause",
        &cookie,
        Some(&csrf),
        Some("http://evil.example"),
    );
    assert_eq!(code, 403);
    assert!(!paused(&v), "nothing refused changed anything");
    assert!(audit(&v, "").is_empty());
    let (code, body) = by_session(
        &v,
        "POST",
        "/rooms/sale/pause",
        &cookie,
        Some(&csrf),
        Some(&own),
    );
    assert_eq!(code, 200, "{body}");
    assert!(paused(&v));
    let records = audit(&v, "");
    assert_eq!(records[0]["via"], "console");
    assert_eq!(records[0]["operator"], "alice");
    let m = v.metrics();
    assert_eq!(
        metric_value(&m, "vestibule_admin_refused_total{reason=\"csrf\"}"),
        2.0
    );
    assert_eq!(
        metric_value(&m, "vestibule_admin_refused_total{reason=\"origin\"}"),
        2.0
    );

    // A forged cookie is the login page, and no access.
    let (code, page, csrf_forged) = console_page(&v, "vestibule_console=forged");
    assert_eq!(code, 200);
    assert!(page.contains("name=\"token\"") && csrf_forged.is_none());
    assert_eq!(
        by_session(&v, "GET", "/status", "vestibule_console=forged", None, None).0,
        401
    );

    // A viewer's session: the page has no actions, and the server refuses them.
    let (_, viewer, _) = login(&v, VERA);
    let viewer = cookie_pair(&viewer.unwrap());
    let (_, page, viewer_csrf) = console_page(&v, &viewer);
    assert!(!page.contains("data-action"), "{page}");
    let (code, _) = by_session(
        &v,
        "POST",
        "/rooms/sale/resume",
        &viewer,
        viewer_csrf.as_deref(),
        Some(&own),
    );
    assert_eq!(code, 403);
    assert!(paused(&v));

    // Logout ends the session: the cookie is cleared and no longer works.
    let (code, _) = by_session(
        &v,
        "POST",
        "/console/logout",
        &cookie,
        Some(&csrf),
        Some(&own),
    );
    assert_eq!(code, 303);
    let (_, page, none) = console_page(&v, &cookie);
    assert!(page.contains("name=\"token\"") && none.is_none());
    assert_eq!(by_session(&v, "GET", "/status", &cookie, None, None).0, 401);
}

#[test]
fn five_failed_logins_a_minute_shut_out_even_the_right_token() {
    let origin = Origin::start();
    let v = start_console(origin.addr);
    // Stay clear of a minute's end, which would reset the count mid-test.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if into_minute > 50 {
        std::thread::sleep(Duration::from_secs(61 - into_minute));
    }
    for _ in 0..5 {
        assert_eq!(login(&v, "wrong-token-of-nobody-at-all").0, 401);
    }
    let (code, cookie, page) = login(&v, ALICE);
    assert_eq!(code, 429);
    assert!(cookie.is_none());
    assert!(page.contains("Sign-in refused"));
    // The bearer API shares the throttle: guessing there is no cheaper, and alice's right
    // token waits out the minute from this address too.
    assert_eq!(by_bearer(&v, "GET", "/status", ALICE).0, 429);
    let metrics = reqwest::blocking::Client::new()
        .get(format!("http://{}/metrics", v.admin))
        .bearer_auth(ALICE)
        .send()
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(metrics, 429);
    // Wrong bearer tokens count as much as wrong logins.
    let w = start_console(origin.addr);
    for _ in 0..5 {
        assert_eq!(
            by_bearer(&w, "GET", "/status", "a-wrong-guess-0000000000").0,
            401
        );
    }
    let (code, _, _) = login(&w, ALICE);
    assert_eq!(code, 429);
}

/// Reads server-sent events from `/console/stream`, sent with the header line `auth` (`Cookie:
/// …` or `Authorization: Bearer …`), until `enough` says so or `within` is up.
pub fn read_stream(
    admin: std::net::SocketAddr,
    auth: &str,
    within: Duration,
    mut enough: impl FnMut(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    write!(
        s,
        "GET /console/stream HTTP/1.1\r\nHost: {admin}\r\n{auth}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.contains(" 200 "), "{status}");
    let started = Instant::now();
    let mut events = Vec::new();
    let mut line = String::new();
    while started.elapsed() < within {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(data).unwrap();
            let done = enough(&v);
            events.push(v);
            if done {
                break;
            }
        }
    }
    events
}

#[test]
fn the_feed_pushes_the_rooms_every_second_and_ends_with_the_session() {
    let origin = Origin::start();
    let v = start_console(origin.addr);
    let (_, cookie, _) = login(&v, ALICE);
    let cookie = cookie_pair(&cookie.unwrap());
    let cookie_line = format!("Cookie: {cookie}");
    // Two visitors: one let in, one waiting.
    for i in 0..2 {
        User::new(i).get(&v, "/");
    }
    let started = Instant::now();
    let events = read_stream(v.admin, &cookie_line, Duration::from_secs(10), |e| {
        e["rooms"][0]["waiting_users"].as_u64() == Some(1)
    });
    let last = events.last().expect("an event");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(last["operator"]["name"], "alice");
    let room = &last["rooms"][0];
    assert_eq!(room["name"], "sale");
    assert_eq!(room["active_users"], 1);
    assert_eq!(room["waiting_users"], 1);
    let history = room["history"]["admitted_per_minute"].as_array().unwrap();
    assert_eq!(history.len(), 30);
    assert!(
        eventually(Duration::from_secs(4), || {
            let e = read_stream(v.admin, &cookie_line, Duration::from_secs(3), |_| true);
            e[0]["rooms"][0]["history"]["admitted_per_minute"][29] == 1
        }),
        "the minute now counts the one admission"
    );
    // Two events a couple of seconds apart: at least every 2 s.
    let t = Instant::now();
    let two = read_stream(v.admin, &cookie_line, Duration::from_secs(6), {
        let mut n = 0;
        move |_| {
            n += 1;
            n == 2
        }
    });
    assert_eq!(two.len(), 2);
    assert!(
        t.elapsed() < Duration::from_millis(3500),
        "{:?}",
        t.elapsed()
    );

    // Without a session, no feed; a bearer token's holder gets one.
    let resp = client()
        .get(format!("http://{}/console/stream", v.admin))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);

    // Signed out elsewhere: the open feed says so and ends.
    let mut s = std::net::TcpStream::connect(v.admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /console/stream HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\n\r\n",
        v.admin
    )
    .unwrap();
    let mut first = [0u8; 64];
    let _ = s.read(&mut first).unwrap();
    let (_, _, csrf) = console_page(&v, &cookie);
    let csrf = csrf.expect("a CSRF token");
    let (code, _) = by_session(&v, "POST", "/console/logout", &cookie, Some(&csrf), None);
    assert_eq!(code, 303);
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        String::from_utf8_lossy(&rest).contains("event: signed_out"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
}

#[test]
fn operators_come_and_go_with_a_reload_and_a_removed_one_loses_their_session() {
    let origin = Origin::start();
    let v = start_console(origin.addr);
    assert_eq!(by_bearer(&v, "GET", "/status", BOB).0, 401);
    let generation = v.edit_config(
        "operators = [\n",
        &format!(
            "operators = [\n  {{ name = \"bob\", token_sha256 = \"{}\", role = \"operator\" }},\n",
            sha(BOB)
        ),
    );
    v.wait_generation_above(generation);
    assert_eq!(by_bearer(&v, "GET", "/status", BOB).0, 200);
    let (_, cookie, _) = login(&v, BOB);
    let cookie = cookie_pair(&cookie.unwrap());
    assert_eq!(by_session(&v, "GET", "/status", &cookie, None, None).0, 200);

    // A broken edit changes nothing: bob keeps working and the error names the key.
    let generation = v.edit_config("role = \"operator\" }", "role = \"owner\" }");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(v.generation(), generation);
    let s = status_of(&v);
    let error = s["last_reload_error"]["message"].as_str().unwrap_or("");
    assert!(error.contains("admin.operators[0].role"), "{s}");
    assert_eq!(by_bearer(&v, "GET", "/status", BOB).0, 200);

    // Removed: bob's token, session and open feed stop working.
    let admin = v.admin;
    let feed = std::thread::spawn(move || {
        let started = Instant::now();
        let events = read_stream(
            admin,
            &format!("Authorization: Bearer {BOB}"),
            Duration::from_secs(20),
            |e| e.as_object().is_some_and(|o| o.is_empty()),
        );
        (events, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.contains("name = \"bob\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(v.config_path(), without).unwrap();
    v.wait_generation_above(generation);
    assert_eq!(by_bearer(&v, "GET", "/status", BOB).0, 401);
    assert_eq!(by_session(&v, "GET", "/status", &cookie, None, None).0, 401);
    assert_eq!(by_bearer(&v, "GET", "/status", ALICE).0, 200);
    let (events, took) = feed.join().unwrap();
    assert!(events.len() >= 2, "{events:?}");
    assert!(
        events.last().unwrap().as_object().unwrap().is_empty(),
        "the feed ends with signed_out: {events:?}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn a_bad_operator_entry_names_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("v.toml");
    std::fs::write(
        &config,
        "[admin]\noperators = [{ name = \"a b\", token_sha256 = \"00\" }, \
         { name = \"c\", token_sha256 = \"xyz\", role = \"boss\" }]\n\
         [upstream]\npeers = [\"127.0.0.1:1\"]\n",
    )
    .unwrap();
    let (code, out, err) = run_cli(&["--config", config.to_str().unwrap(), "--check"]);
    assert_ne!(code, 0);
    let all = format!("{out}{err}");
    for key in ["admin.operators[0].name", "admin.operators[1].token_sha256"] {
        assert!(all.contains(key), "{key}: {all}");
    }
    assert!(all.contains("v.toml"), "{all}");
}

#[test]
fn without_operators_the_console_is_a_read_only_view() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\n")
        .start();
    let (code, page, csrf) = console_page(&v, "");
    assert_eq!(code, 200);
    assert!(
        page.contains("local") && !page.contains("data-action"),
        "{page}"
    );
    assert!(csrf.is_none());
    let events = read_stream(v.admin, "X-None: 1", Duration::from_secs(5), |_| true);
    assert_eq!(events[0]["rooms"][0]["name"], "sale");
    assert_eq!(events[0]["operator"]["role"], "viewer");
    // And no action, as before.
    let resp = client()
        .post(format!("http://{}/rooms/sale/pause", v.admin))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    // A page on a rebound DNS name cannot read the open listener through a browser.
    let resp = client()
        .get(format!("http://{}/status", v.admin))
        .header("Host", "rebound.example")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let resp = client()
        .get(format!("http://{}/healthz", v.admin))
        .header("Host", "rebound.example")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "probes answer any Host");
    let resp = client()
        .get(format!("http://{}/status", v.admin))
        .header("Host", "localhost")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}
