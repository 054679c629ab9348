//! Proof-of-work before a place in line, end to end: the real server, the demo
//! origin, and solutions found by the reference solver.

use crate::common::*;
use vestibule::challenge;

const ROOMS: &str = "[[room]]
name = \"sale\"
paths = [\"/sale\"]
pages = \"pages\"
admission = \"fifo\"
new_users_per_minute = 1000
total_active_users = 1
challenge = \"pow\"
challenge_difficulty = 12

[[room]]
name = \"trap\"
paths = [\"/trap\"]
cookie_name = \"trap_room\"
pages = \"pages\"
allow_percentage = 100
challenge = \"pow\"
challenge_difficulty = 10
on_challenge_failure = \"infinite_queue\"";

fn start() -> (Origin, Vestibule) {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(ROOMS)
        .start();
    (origin, v)
}

/// A JSON request from `ip` with these extra headers.
fn ask(
    v: &Vestibule,
    ip: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<String>, serde_json::Value) {
    let mut req = client()
        .get(v.url(path))
        .header("X-Forwarded-For", ip)
        .header("Accept", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().expect("the proxy answers");
    let status = resp.status().as_u16();
    let cookies = set_cookies(&resp).iter().map(|s| s.to_string()).collect();
    let body = resp.json().expect("JSON");
    (status, cookies, body)
}

/// The challenge of a JSON answer, solved.
fn solve(body: &serde_json::Value) -> String {
    assert_eq!(body["decision"], "challenge", "{body}");
    let c = &body["challenge"];
    assert_eq!(c["algorithm"], "sha256", "{body}");
    let difficulty = c["difficulty"].as_u64().expect("difficulty") as u8;
    let value = c["value"].as_str().expect("value");
    challenge::solve(value, difficulty, 1 << 28).expect("solvable")
}

fn challenges(v: &Vestibule, room: &str, result: &str) -> f64 {
    v.metric(&format!(
        "vestibule_room_challenges_total{{result=\"{result}\",room=\"{room}\"}}"
    ))
}

#[test]
fn a_new_arrival_solves_before_it_gets_a_place_and_only_for_itself() {
    let (_origin, v) = start();

    // A new arrival gets a challenge and no token.
    let (status, cookies, body) = ask(&v, "10.2.0.1", "/sale/__echo", &[]);
    assert_eq!(status, 200, "{body}");
    assert!(cookies.is_empty(), "no token before the work: {cookies:?}");
    assert_eq!(body["challenge"]["difficulty"], 12, "{body}");
    let expires_in = body["challenge"]["expires_in"].as_u64().unwrap();
    assert!(
        (300..310).contains(&expires_in),
        "challenge_ttl, rounded up: {body}"
    );
    assert_eq!(challenges(&v, "sale", "issued"), 1.0);
    let alice = solve(&body);

    // Another identity replaying it is refused, with a fresh challenge.
    let (_, cookies, body) = ask(
        &v,
        "10.2.0.2",
        "/sale/__echo",
        &[("Vestibule-Solution", &alice)],
    );
    assert_eq!(body["decision"], "challenge", "{body}");
    assert!(cookies.is_empty(), "{cookies:?}");
    assert_eq!(challenges(&v, "sale", "failed"), 1.0);
    let bob = solve(&body);

    // Solved: a new arrival, let in at once (one free place), and the header never reaches
    // the origin.
    let (_, cookies, body) = ask(
        &v,
        "10.2.0.1",
        "/sale/__echo",
        &[("Vestibule-Solution", &alice)],
    );
    assert_eq!(decision_in(&body), "allow", "{body}");
    let headers = echo_headers(&body.to_string());
    assert!(
        header_values(&headers, "vestibule-solution").is_empty(),
        "{headers:?}"
    );
    let token = cookies
        .iter()
        .find_map(|c| c.strip_prefix("waiting_room="))
        .and_then(|c| c.split(';').next())
        .expect("the room's token")
        .to_owned();
    assert_eq!(challenges(&v, "sale", "solved"), 1.0);

    // With its token it is never asked again; a stray solution cookie is removed from what
    // the origin sees, other cookies pass.
    let cookie = format!("theme=dark; waiting_room={token}; waiting_room_pow=junk");
    let (_, _, body) = ask(&v, "10.2.0.1", "/sale/__echo", &[("Cookie", &cookie)]);
    assert_eq!(decision_in(&body), "allow", "{body}");
    let sent = header_values(&echo_headers(&body.to_string()), "cookie").join("; ");
    assert_eq!(sent, "theme=dark", "{body}");

    // The second solver comes back with the solution cookie: the room is full, so it gets a
    // place in line (a wait token), and the solution cookie is removed.
    let cookie = format!("waiting_room_pow={bob}");
    let (_, cookies, body) = ask(&v, "10.2.0.2", "/sale/__echo", &[("Cookie", &cookie)]);
    assert_eq!(body["decision"], "anon", "{body}");
    assert!(
        cookies.iter().any(|c| c.starts_with("waiting_room=")),
        "{cookies:?}"
    );
    assert!(
        cookies
            .iter()
            .any(|c| c.starts_with("waiting_room_pow=;") && c.contains("Max-Age=0")),
        "{cookies:?}"
    );
    assert_eq!(challenges(&v, "sale", "solved"), 2.0);
    assert_eq!(
        v.metric(
            "vestibule_room_decisions_total{decision=\"challenge\",mode=\"enforce\",room=\"sale\"}"
        ),
        2.0
    );

    // A solution for another room is refused.
    let (_, _, body) = ask(
        &v,
        "10.2.0.2",
        "/trap/__echo",
        &[("Vestibule-Solution", &bob)],
    );
    assert_eq!(body["decision"], "wait", "a misbound solution: {body}");
}

#[test]
fn the_challenge_page_carries_its_own_value_and_explains_itself() {
    let (_origin, v) = start();
    let page = |ip: &str, lang: &str| {
        let resp = client()
            .get(v.url("/sale/"))
            .header("X-Forwarded-For", ip)
            .header("Accept", "text/html")
            .header("Accept-Language", lang)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
        assert!(set_cookies(&resp).is_empty());
        resp.text().unwrap()
    };
    let a = page("10.3.0.1", "en");
    let b = page("10.3.0.2", "en");
    assert!(!a.contains(pages_mark()), "the value is spliced in");
    let value = |html: &str| {
        let start = html.find("var value=\"").expect("the value") + 11;
        html[start..start + html[start..].find('"').unwrap()].to_owned()
    };
    assert!(value(&a).starts_with("p1~key1~"), "{}", value(&a));
    assert_ne!(value(&a), value(&b), "each visitor gets its own");
    assert!(a.contains("bits=12"), "the room's difficulty");
    assert!(a.contains("name=\"waiting_room_pow\""));
    assert!(
        a.contains("This page needs JavaScript"),
        "the noscript text"
    );
    let ja = page("10.3.0.3", "ja");
    assert!(ja.contains("JavaScript が必要です"), "{ja}");
    // The value in the page is a real challenge: solved, it is accepted.
    let solution = challenge::solve(&value(&a), 12, 1 << 28).unwrap();
    let (_, _, body) = ask(
        &v,
        "10.3.0.1",
        "/sale/__echo",
        &[("Vestibule-Solution", &solution)],
    );
    assert_eq!(decision_in(&body), "allow", "{body}");
}

fn pages_mark() -> &'static str {
    vestibule::pages::CHALLENGE_MARK
}

#[test]
fn bad_solutions_get_a_clear_answer_and_infinite_queue_holds_them() {
    let (_origin, v) = start();
    let (_, _, first) = ask(&v, "10.4.0.1", "/sale/__echo", &[]);
    let good = solve(&first);
    let (value, _) = good.rsplit_once(':').unwrap();
    let huge = "7".repeat(6000);
    let bad = [
        huge.as_str(),
        "p1~key1~~~~:1",
        ":::::",
        "p1~nokey~99999999999~12~0000000000000000~00000000000000000000000000000000:1",
        &format!("{value}:notanumber"),
        &format!("{}:1", &value[..value.len() - 2]),
    ];
    for solution in bad {
        let (status, cookies, body) = ask(
            &v,
            "10.4.0.1",
            "/sale/__echo",
            &[("Vestibule-Solution", solution)],
        );
        assert_eq!(status, 200, "{solution}: {body}");
        assert_eq!(body["decision"], "challenge", "retry: {body}");
        assert!(cookies.is_empty(), "{cookies:?}");
    }
    // Non-ASCII bytes in the solution cookie.
    let resp = raw_exchange(
        v.proxy,
        b"GET /sale/__echo HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\nX-Forwarded-For: 10.4.0.1\r\nCookie: waiting_room_pow=\xc3\xa9\xff:1\r\nConnection: close\r\n\r\n",
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("\"decision\":\"challenge\""), "{resp}");
    assert_eq!(challenges(&v, "sale", "failed"), 7.0);

    // In an infinite-queue room a failed solution gets a waiting page that never moves.
    let (_, _, body) = ask(&v, "10.4.0.2", "/trap/__echo", &[]);
    let good = solve(&body);
    let (value, _) = good.rsplit_once(':').unwrap();
    let wrong = (0..)
        .map(|n| format!("{value}:{n}"))
        .find(|s| challenge::check_work(s.as_bytes()) < 10)
        .unwrap();
    for _ in 0..3 {
        let (_, cookies, body) = ask(
            &v,
            "10.4.0.2",
            "/trap/__echo",
            &[("Vestibule-Solution", &wrong)],
        );
        assert_eq!(body["decision"], "wait", "{body}");
        assert!(body.get("challenge").is_none(), "{body}");
        assert!(cookies.is_empty(), "no token, no progress: {cookies:?}");
    }
    assert_eq!(challenges(&v, "trap", "failed"), 3.0);
    assert_eq!(challenges(&v, "trap", "issued"), 1.0);
    // The right answer gets in (100 %).
    let (_, cookies, body) = ask(
        &v,
        "10.4.0.2",
        "/trap/__echo",
        &[("Vestibule-Solution", &good)],
    );
    assert_eq!(decision_in(&body), "allow", "{body}");
    assert!(
        cookies.iter().any(|c| c.starts_with("trap_room=")),
        "{cookies:?}"
    );
}

/// The reference solver for app clients (`examples/pow_solve.rs`) gets a place.
#[test]
fn the_reference_solver_in_examples_gets_a_place() {
    let exe = std::env::current_exe().expect("test binary");
    let profile = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let solver = profile.join("examples/pow_solve");
    if !solver.exists() {
        // `cargo test` builds the examples; a lone `cargo test --test it challenge::` does not.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--example", "pow_solve"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "the example builds");
    }
    let (_origin, v) = start();
    let out = std::process::Command::new(&solver)
        .arg(v.url("/sale/__echo"))
        .args(["--header", "X-Forwarded-For: 10.5.0.1"])
        .output()
        .expect("the solver runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(found["challenged"], true, "{found}");
    assert_eq!(found["difficulty"], 12, "{found}");
    assert_eq!(found["decision"], "allow", "{found}");
    assert!(found["hashes"].as_u64().unwrap() >= 1, "{found}");
    assert!(
        found["cookies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().starts_with("waiting_room=")),
        "{found}"
    );
    assert_eq!(challenges(&v, "sale", "solved"), 1.0);
}

/// `challenge_difficulty` changes on reload: new challenges ask the new work; solutions of
/// challenges issued before still count for the work they were issued with. `/status` shows it.
#[test]
fn a_reload_changes_the_difficulty_of_new_challenges() {
    let (_origin, v) = start();
    let (_, _, before) = ask(&v, "10.6.0.1", "/sale/__echo", &[]);
    let old = solve(&before);
    let status = v.status();
    assert_eq!(
        status["rooms"][0]["challenge"]["difficulty"], 12,
        "{status}"
    );
    assert_eq!(status["rooms"][0]["challenge"]["on_failure"], "retry");
    v.wait_generation_above(
        v.edit_config("challenge_difficulty = 12", "challenge_difficulty = 13"),
    );
    assert_eq!(v.status()["rooms"][0]["challenge"]["difficulty"], 13);
    let (_, _, after) = ask(&v, "10.6.0.2", "/sale/__echo", &[]);
    assert_eq!(after["challenge"]["difficulty"], 13, "{after}");
    let (_, _, body) = ask(
        &v,
        "10.6.0.1",
        "/sale/__echo",
        &[("Vestibule-Solution", &old)],
    );
    assert_eq!(decision_in(&body), "allow", "{body}");
    let log = v.log_text();
    assert!(
        log.lines().any(|l| l.contains("challenge")
            && l.contains("difficulty 12")
            && l.contains("difficulty 13")),
        "the reload names the change:\n{log}"
    );
}

/// A short `challenge_ttl` is not stretched: its expiry is rounded to a tenth of it, so a 10 s
/// challenge says `expires_in: 10` whenever it is issued (rounded to 10 s, it said up to 19).
#[test]
fn a_short_challenge_ttl_is_kept() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"quick\"\npages = \"pages\"\nallow_percentage = 100\nchallenge = \"pow\"\nchallenge_difficulty = 8\nchallenge_ttl = \"10s\"")
        .start();
    for i in 0..5 {
        let (_, _, body) = ask(&v, &format!("10.3.0.{i}"), "/__echo", &[]);
        assert_eq!(body["challenge"]["expires_in"], 10, "{body}");
        if i < 4 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
}
