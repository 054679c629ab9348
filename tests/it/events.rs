//! Scheduled events on the real server: the pre-queue, the start, and what comes
//! after it, on the wall clock.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::*;
use vestibule::config::event::rfc3339;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A fifo room whose event's pre-queue is open and which starts in `lead` seconds.
fn event_room(lead: u64, extra: &str) -> (String, u64) {
    let now = unix_now();
    let start = now + lead;
    (
        format!(
            "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
             new_users_per_minute = 1000\nrefresh = \"5s\"\nrejoin_grace = \"1m\"\n\
             [[room.event]]\nname = \"launch\"\nprequeue_start = \"{}\"\nstart = \"{}\"\n\
             end = \"{}\"\nshuffle_at_start = true\ntitle = \"The launch\"\n{extra}\n\
             [[room]]\nname = \"plain\"\npaths = [\"/plain\"]\ncookie_name = \"wr_plain\"\n\
             pages = \"pages\"\nallow_percentage = 0\n",
            rfc3339(now - 60),
            rfc3339(start),
            rfc3339(start + 3600),
        ),
        start,
    )
}

/// Asks as a browser does: again when the page says, until let in or `deadline`. Returns the
/// decisions seen and when (Unix seconds) the visitor got in.
fn follow(v: &Vestibule, u: &mut User, deadline: Instant) -> (Vec<String>, Option<u64>) {
    let mut seen = Vec::new();
    for _ in 0..60 {
        let (decision, body) = u.decision(v);
        seen.push(decision.clone());
        if decision == "allow" {
            return (seen, Some(unix_now()));
        }
        let wait = Duration::from_millis(body["refresh_seconds"].as_u64().unwrap() * 1000 + 150);
        if Instant::now() + wait > deadline {
            break;
        }
        std::thread::sleep(wait);
    }
    (seen, None)
}

/// Each of `users` asks again whenever their page says, from `first_ms` after the Unix second
/// `start`, until `count` of them are let in or `within` of the start has passed. Returns who
/// got in, in the order they did.
fn follow_from(
    v: &Vestibule,
    users: &mut [User],
    start: u64,
    (first_ms, count): (u64, usize),
    within: Duration,
) -> Vec<usize> {
    let start_at = Instant::now()
        + Duration::from_secs_f64(
            start as f64
                - SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64(),
        );
    let mut next = vec![start_at + Duration::from_millis(first_ms); users.len()];
    let mut admitted: Vec<usize> = Vec::new();
    let deadline = start_at + within;
    while admitted.len() < count && Instant::now() < deadline {
        let now = Instant::now();
        for (i, u) in users.iter_mut().enumerate() {
            if admitted.contains(&i) || next[i] > now {
                continue;
            }
            let (decision, body) = u.decision(v);
            match decision.as_str() {
                "allow" => admitted.push(i),
                "wait" | "anon" | "prequeue" => {
                    let secs = body["refresh_seconds"].as_u64().unwrap();
                    next[i] = now + Duration::from_secs(secs);
                }
                other => panic!("{other}: {body}"),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    admitted
}

#[test]
fn pre_queued_visitors_are_let_in_at_the_start_ahead_of_later_arrivals() {
    let origin = Origin::start();
    let (rooms, start) = event_room(8, "");
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&rooms)
        .start();
    // In the pre-queue: a token due at the start, the event in the JSON, nobody let in.
    let mut early: Vec<User> = (0..3).map(User::new).collect();
    for u in &mut early {
        let (decision, body) = u.decision(&v);
        assert_eq!(decision, "prequeue", "{body}");
        assert_eq!(body["in_waiting_room"], true);
        assert_eq!(body["event"]["name"], "launch");
        assert_eq!(body["event"]["state"], "prequeue");
        assert_eq!(body["event"]["starts_at"], rfc3339(start));
        assert_eq!(body["event"]["ends_at"], rfc3339(start + 3600));
        let refresh = body["refresh_seconds"].as_u64().unwrap();
        let wait_to_start = start.saturating_sub(unix_now());
        assert!(
            refresh >= wait_to_start && refresh <= wait_to_start + 6,
            "checks again at the start (within a refresh): {body}"
        );
        assert!(u.cookie.is_some());
    }
    // Asking again changes nothing and sets no new cookie.
    let before = early[0].cookie.clone();
    assert_eq!(early[0].decision(&v).0, "prequeue");
    assert_eq!(early[0].cookie, before);
    // A room without events says so.
    let mut other = User::new(50).with_cookie_name("wr_plain");
    let body: serde_json::Value = other.get(&v, "/plain").json().unwrap();
    assert!(body["event"].is_null(), "{body}");
    // The page a browser gets: the countdown to the start, in the visitor's language.
    let resp = client()
        .get(v.url("/"))
        .header("X-Forwarded-For", "10.1.9.9")
        .header("Accept", "text/html")
        .header("Accept-Language", "de-DE,de;q=0.9")
        .send()
        .unwrap();
    assert_eq!(resp.headers()["content-language"], "de");
    let html = resp.text().unwrap();
    assert!(
        html.contains(&format!("datetime=\"{}\"", rfc3339(start))),
        "{html}"
    );
    assert!(html.contains("The launch öffnet bald"), "{html}");
    assert!(html.contains("zufällig gezogenen Reihenfolge"), "{html}");
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_event_state{event=\"launch\",room=\"sale\",state=\"prequeue\"}"
        ),
        1.0,
        "{m}"
    );
    let status = v.status();
    let room = &status["rooms"][0];
    assert_eq!(room["event"]["state"], "prequeue", "{room}");
    assert_eq!(room["effective_allow_percentage"], 0.0, "{room}");

    // The start. Every pre-queued visitor comes back when their page says and is counted in
    // line; they get in at their next check-in once every one of them can have checked in (a
    // refresh and a browser's slack after the start). A visitor who arrives just after the
    // start finds free slots and an empty line, but waits: the pre-queue goes first.
    while unix_now() < start {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut late = User::new(40);
    let (first, body) = late.decision(&v);
    assert_eq!(first, "anon", "{body}");
    assert_eq!(body["event"]["state"], "running");
    let deadline = Instant::now() + Duration::from_secs(30);
    for u in &mut early {
        let (seen, admitted) = follow(&v, u, deadline);
        assert!(
            admitted.is_some_and(|t| t <= start + 16),
            "let in at the first check-in once the pre-queue is counted: {seen:?}"
        );
    }
    // The later arrival gets in after them.
    let (seen, admitted) = follow(&v, &mut late, deadline);
    assert!(admitted.is_some(), "{seen:?}");
    assert!(seen.iter().all(|d| d == "wait" || d == "allow"), "{seen:?}");
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_event_state{event=\"launch\",room=\"sale\",state=\"running\"}"
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_decisions_total{decision=\"prequeue\",mode=\"enforce\",room=\"sale\"}"
        ),
        5.0,
        "{m}"
    );
}

/// A short pre-queue (opened a minute before the start) whose 40 visitors, who arrived 0.15 s
/// apart, all ask again at the same moment in arrival order once every token is due (5.5 s
/// after the start: dues are within the 5 s refresh), then exactly when told, those told the
/// same moment again in arrival order. The event lets in 20 a minute: the first 20 let in must
/// be the draw's, not the first to arrive.
///
/// Their mean arrival rank (0-based, of 40): in arrival order 9.5; for a fair draw 19.5 with
/// a standard deviation of √((40² − 1) / 12 × (40 − 20) / (40 − 1) / 20) = 1.85. The draw
/// changes with the start (the wall clock), so the test asserts a mean above 12.1, four
/// standard deviations under the fair mean: a fair draw fails it about once in 30,000 runs.
#[test]
fn a_short_prequeue_asking_at_once_is_let_in_in_the_drawn_order_not_arrival_order() {
    let origin = Origin::start();
    let start = unix_now() + 12;
    let room = format!(
        "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
         new_users_per_minute = 1000\nrefresh = \"5s\"\nrejoin_grace = \"1m\"\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"{}\"\nstart = \"{}\"\n\
         end = \"{}\"\nshuffle_at_start = true\nnew_users_per_minute = 20\n",
        rfc3339(start - 60),
        rfc3339(start),
        rfc3339(start + 3600),
    );
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room)
        .start();
    let mut users: Vec<User> = (0..40).map(User::new).collect();
    for u in &mut users {
        let (decision, body) = u.decision(&v);
        assert_eq!(decision, "prequeue", "{body}");
        std::thread::sleep(Duration::from_millis(150));
    }
    let admitted = follow_from(&v, &mut users, start, (5_500, 20), Duration::from_secs(50));
    let first: Vec<usize> = admitted.iter().copied().take(20).collect();
    assert_eq!(first.len(), 20, "let in: {admitted:?}");
    let mean = first.iter().sum::<usize>() as f64 / first.len() as f64;
    println!("the first 20 let in: mean arrival rank {mean} ({first:?})");
    assert!(
        mean > 12.1,
        "the first 20 let in lean toward arrival order: mean rank {mean} ({first:?})"
    );
}

#[test]
fn an_event_applies_its_own_settings_only_while_it_runs() {
    // A room closed on its own settings (a lottery at 0 %) opens at 100 % for its event, which
    // has no pre-queue: before the start the room is closed, from it everyone gets in.
    let origin = Origin::start();
    let now = unix_now();
    let start = now + 4;
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&format!(
            "[[room]]\nname = \"drop\"\npages = \"pages\"\nallow_percentage = 0\n\
             [[room.event]]\nname = \"drop\"\nstart = \"{}\"\nend = \"{}\"\nallow_percentage = 100\n",
            rfc3339(start),
            rfc3339(start + 3600)
        ))
        .start();
    let mut u = User::new(1);
    let (decision, body) = u.decision(&v);
    assert_eq!(decision, "deny", "{body}");
    assert_eq!(body["event"]["state"], "scheduled");
    assert_eq!(v.status()["rooms"][0]["next_event"]["name"], "drop");
    while unix_now() < start {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Admitted on the first ask of the event: its wait token is let in at 100 %.
    let (decision, body) = u.decision(&v);
    assert_eq!(decision, "allow", "{body}");
    let (decision, _) = User::new(2).decision(&v);
    assert_eq!(decision, "allow");
    assert_eq!(v.status()["rooms"][0]["effective_allow_percentage"], 100.0);
}

#[test]
fn check_and_previews_know_events() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vestibule.toml");
    copy_pages(&dir.path().join("pages"));
    std::fs::write(
        dir.path().join("keys.toml"),
        format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
    )
    .unwrap();
    let (rooms, _) = event_room(3600, "");
    std::fs::write(
        &config,
        format!("[upstream]\npeers = [\"127.0.0.1:9\"]\n{rooms}"),
    )
    .unwrap();
    let path = config.to_str().unwrap();
    let (code, out, err) = run_cli(&["--config", path, "--check"]);
    assert_eq!(code, 0, "{out}{err}");
    // The pre-queue page in Japanese, as a visitor 1234 s before the start sees it.
    let (code, html, err) = run_cli(&[
        "--config", path, "pages", "render", "--room", "sale", "--page", "prequeue", "--lang",
        "ja", "--state", "prequeue",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(html.contains("<html lang=\"ja\""), "{html}");
    assert!(html.contains("The launch はまもなく開始します"), "{html}");
    assert!(html.contains("toStart=1234"), "{html}");
    // A time without a zone: the file, line and key.
    let text = std::fs::read_to_string(&config).unwrap();
    let bad = text.replacen("Z\"\nend", "\"\nend", 1);
    assert_ne!(bad, text);
    std::fs::write(&config, &bad).unwrap();
    let (code, out, err) = run_cli(&["--config", path, "--check"]);
    assert_eq!(code, 1, "{out}{err}");
    let line = bad.lines().position(|l| l.starts_with("start = ")).unwrap() + 1;
    assert!(
        err.contains(&format!(
            "vestibule.toml:{line}: room[0].event[0].start: \""
        )) && err.contains("is not an RFC 3339 time with a zone"),
        "{err}"
    );
}

/// Places recomputed outside vestibule, by Python's `hmac` and `hashlib`: for the `seed`
/// (hex) and each receipt, `HMAC-SHA256(seed, receipt)`; and `sha256(seed)`. `None` (said
/// loudly, a failure under CI) without python3.
fn python_places(seed: &str, receipts: &[String]) -> Option<(String, Vec<String>)> {
    use std::io::Write;
    let script = "import hashlib, hmac, json, sys\n\
                  d = json.load(sys.stdin)\n\
                  seed = bytes.fromhex(d['seed'])\n\
                  print(hashlib.sha256(seed).hexdigest())\n\
                  for r in d['receipts']:\n    \
                  print(hmac.new(seed, r.encode(), hashlib.sha256).hexdigest())\n";
    let child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            missing_tool("python3, to recompute a verifiable draw", e);
            return None;
        }
    };
    let input = serde_json::json!({ "seed": seed, "receipts": receipts });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python3 failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().map(str::to_owned);
    let commitment = lines.next().unwrap();
    Some((commitment, lines.collect()))
}

/// The fenced ```` ```lang ```` block of the verifiable draws' docs page.
fn docs_check(lang: &str) -> String {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/concepts/draws.md"),
    )
    .unwrap();
    let open = format!("```{lang}\n");
    let from = page.find(&open).expect("the docs' block") + open.len();
    page[from..from + page[from..].find("```").unwrap()].to_owned()
}

/// Runs the docs' ten-line check in `lang` (`python` or `js`) on the draw saved at `file`,
/// against the `commitment` noted before the start if given: `Some(passed)`, or `None` (said
/// loudly, a failure under CI) without its interpreter.
fn run_docs_check(lang: &str, file: &std::path::Path, commitment: Option<&str>) -> Option<bool> {
    let (program, ext) = if lang == "python" {
        ("python3", "py")
    } else {
        ("node", "js")
    };
    // Run as the docs say: a saved program, given the saved draw.
    let script = file.with_file_name(format!("check.{ext}"));
    std::fs::write(&script, docs_check(lang)).unwrap();
    match std::process::Command::new(program)
        .arg(&script)
        .arg(file)
        .args(commitment)
        .output()
    {
        Ok(out) => Some(out.status.success()),
        Err(e) => {
            missing_tool(&format!("{program}, to run the docs' draw check"), e);
            None
        }
    }
}

fn verify_draw(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(BIN)
        .arg("verify-draw")
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// A pre-queued event with a verifiable draw, end to end: the commitment is published before
/// the start (on /status, the page, the JSON answer and the draw's URL), each visitor holds one
/// receipt, the seed and every receipt's place are revealed after the start, places recomputed
/// by Python's `hmac` match, the first minute's admissions are the lowest places, and
/// `verify-draw` passes the real draw and names a tampered one.
#[test]
fn a_verifiable_draw_commits_before_the_start_and_reveals_after_it() {
    let origin = Origin::start();
    let start = unix_now() + 12;
    let room = format!(
        "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
         new_users_per_minute = 1000\nrefresh = \"5s\"\nrejoin_grace = \"1m\"\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"{}\"\nstart = \"{}\"\n\
         end = \"{}\"\nshuffle_at_start = true\ndraw = \"verifiable\"\nnew_users_per_minute = 4\n",
        rfc3339(start - 60),
        rfc3339(start),
        rfc3339(start + 3600),
    );
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room)
        .start();
    let draw_url = v.url("/.vestibule/rooms/sale/draws/launch");
    let get_draw = || -> serde_json::Value {
        let resp = client().get(&draw_url).send().unwrap();
        assert_eq!(resp.status(), 200);
        resp.json().unwrap()
    };
    // Before the start: the commitment, no seed, no receipts.
    let before = get_draw();
    let commitment = before["commitment"].as_str().unwrap().to_owned();
    assert_eq!(commitment.len(), 64, "{before}");
    assert!(
        before["seed"].is_null() && before.get("receipts").is_none(),
        "{before}"
    );
    let status = v.status();
    let room_status = status["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "sale")
        .unwrap();
    assert_eq!(
        room_status["event"]["draw"]["commitment"],
        commitment.as_str()
    );
    let (code, text) = verify_draw(&["--url", &draw_url]);
    assert_eq!(code, 2, "not revealed yet: {text}");

    // Twelve visitors pre-queue: each gets a receipt, the same when they ask again.
    let mut users: Vec<User> = (0..12).map(User::new).collect();
    let mut receipts = Vec::new();
    for u in &mut users {
        let (decision, body) = u.decision(&v);
        assert_eq!(decision, "prequeue", "{body}");
        assert_eq!(body["draw_commitment"], commitment.as_str(), "{body}");
        let receipt = body["receipt"].as_str().unwrap().to_owned();
        assert_eq!(receipt.len(), 19, "{receipt}");
        receipts.push(receipt);
    }
    let (_, again) = users[0].decision(&v);
    assert_eq!(again["receipt"], receipts[0].as_str());
    // The page shows the receipt, the commitment and where to check.
    let page = client()
        .get(v.url("/"))
        .header("X-Forwarded-For", &users[1].ip)
        .header(
            "Cookie",
            format!("waiting_room={}", users[1].cookie.as_deref().unwrap()),
        )
        .header("Accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains(&receipts[1]), "{page}");
    assert!(page.contains(&commitment), "{page}");
    // (The link's slashes are escaped as `&#x2f;`, as every value on a page is.)
    assert!(
        page.contains("href=\"&#x2f;.vestibule&#x2f;rooms&#x2f;sale&#x2f;draws&#x2f;launch\""),
        "{page}"
    );
    assert!(!page.contains(vestibule::draws::RECEIPT_MARK));

    // From the start, each comes back when their token says, until the minute's 4 are in.
    let admitted = follow_from(&v, &mut users, start, (200, 4), Duration::from_secs(45));
    assert_eq!(admitted.len(), 4, "let in: {admitted:?}");

    // The reveal: the seed, and every receipt with its place, lowest first.
    let after = get_draw();
    assert_eq!(after["commitment"], commitment.as_str());
    let seed = after["seed"].as_str().unwrap().to_owned();
    let revealed: Vec<(String, String)> = after["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["receipt"].as_str().unwrap().to_owned(),
                r["place"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut listed: Vec<String> = revealed.iter().map(|r| r.0.clone()).collect();
    listed.sort();
    let mut handed: Vec<String> = receipts.clone();
    handed.sort();
    assert_eq!(listed, handed, "every receipt handed out is revealed");
    assert!(!after.to_string().contains("10.1.0."), "no identities");
    if let Some((sha, places)) = python_places(&seed, &receipts) {
        assert_eq!(sha, commitment, "the commitment is sha256(seed)");
        for (receipt, place) in receipts.iter().zip(&places) {
            let shown = &revealed.iter().find(|r| &r.0 == receipt).unwrap().1;
            assert_eq!(shown, place, "{receipt}");
        }
    }
    // The minute's four are the four lowest places, to the room's resolution: a place is an
    // arrival within the pre-queue (its first 53 bits as a fraction of it, as the docs say),
    // and a fifo room lets in out of arrival order only visitors who arrived within one
    // refresh interval (5 s here) of each other.
    let place_of = |i: usize| {
        revealed
            .iter()
            .find(|r| r.0 == receipts[i])
            .unwrap()
            .1
            .clone()
    };
    let opens = start - 60;
    let span = (start / 2 * 2 - opens) as f64;
    let arrival = |i: usize| {
        let top = u64::from_str_radix(&place_of(i)[..16], 16).unwrap();
        opens + ((top >> 11) as f64 / (1u64 << 53) as f64 * span) as u64
    };
    let mut order: Vec<usize> = (0..receipts.len()).collect();
    order.sort_by_key(|i| place_of(*i));
    let fourth = arrival(order[3]);
    println!("admitted {admitted:?}; the draw's order {order:?}");
    for &i in &admitted {
        assert!(
            arrival(i) <= fourth + 5,
            "visitor {i} got in ahead of the four lowest places: {admitted:?}, order {order:?}"
        );
    }
    for &i in &order {
        if arrival(i) + 5 < fourth {
            assert!(
                admitted.contains(&i),
                "visitor {i}, among the four lowest places, waits: {admitted:?}, order {order:?}"
            );
        }
    }

    // verify-draw: the real draw passes; a tampered copy fails naming it; junk cannot be read.
    let (code, text) = verify_draw(&["--url", &draw_url]);
    assert_eq!(code, 0, "{text}");
    // Against the commitment noted before the start, and a visitor's own receipt.
    let (code, text) = verify_draw(&[
        "--url",
        &draw_url,
        "--commitment",
        &commitment,
        "--receipt",
        &receipts[5],
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("{}: place", receipts[5])), "{text}");
    let other = "0".repeat(64);
    let (code, text) = verify_draw(&["--url", &draw_url, "--commitment", &other]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("published before the start"), "{text}");
    let (code, text) = verify_draw(&["--url", &draw_url, "--receipt", "0000-0000-0000-0000"]);
    assert_eq!(code, 1, "{text}");
    let saved = v.path("draw.json");
    // The docs' Python and JavaScript checks pass the real draw, and fail the tampered one.
    std::fs::write(&saved, after.to_string()).unwrap();
    for lang in ["python", "js"] {
        if let Some(passed) = run_docs_check(lang, &saved, Some(&commitment)) {
            assert!(passed, "the docs' {lang} check fails the real draw");
        }
        if let Some(passed) = run_docs_check(lang, &saved, Some(&other)) {
            assert!(!passed, "the docs' {lang} check takes another commitment");
        }
    }
    let mut tampered = after.clone();
    tampered["receipts"][2]["place"] = tampered["receipts"][3]["place"].clone();
    std::fs::write(&saved, tampered.to_string()).unwrap();
    let (code, text) = verify_draw(&["--file", saved.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("receipts[2]"), "{text}");
    for lang in ["python", "js"] {
        if let Some(passed) = run_docs_check(lang, &saved, None) {
            assert!(!passed, "the docs' {lang} check passes a tampered draw");
        }
    }
    std::fs::write(&saved, "not json").unwrap();
    assert_eq!(verify_draw(&["--file", saved.to_str().unwrap()]).0, 2);
}

/// A single node keeps its draw secret and its receipts in the state folder: a restart keeps
/// the commitment, every visitor's receipt, and the receipts to reveal, even of a visitor who
/// never asks again.
#[test]
fn a_verifiable_draw_keeps_its_commitment_and_receipts_across_a_restart() {
    let origin = Origin::start();
    let start = unix_now() + 25;
    let room = format!(
        "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
         new_users_per_minute = 1000\nrefresh = \"5s\"\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"{}\"\nstart = \"{}\"\n\
         end = \"{}\"\nshuffle_at_start = true\ndraw = \"verifiable\"\n",
        rfc3339(start - 600),
        rfc3339(start),
        rfc3339(start + 3600),
    );
    let mut v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room)
        .start();
    let commitment = |v: &Vestibule| {
        v.status()["rooms"][0]["event"]["draw"]["commitment"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = commitment(&v);
    let mut u = User::new(7);
    let (decision, body) = u.decision(&v);
    assert_eq!(decision, "prequeue", "{body}");
    let receipt = body["receipt"].as_str().unwrap().to_owned();
    // A second visitor never asks again: their receipt is in the reveal from the file the
    // node wrote it to (synced every second).
    let (_, body) = User::new(8).decision(&v);
    let silent = body["receipt"].as_str().unwrap().to_owned();
    let written = v.path("state/draws");
    assert!(
        eventually(Duration::from_secs(5), || std::fs::read_dir(&written)
            .map(|d| d
                .flatten()
                .any(|f| std::fs::read_to_string(f.path()).is_ok_and(|t| t.contains(&silent))))
            .unwrap_or(false)),
        "the receipts are written down in {}",
        written.display()
    );
    let secret = v.path("state/draw-secret");
    assert!(
        secret.exists(),
        "the draw secret is kept in the state folder"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    v.proc.signal("TERM");
    assert!(v.proc.wait_exit(Duration::from_secs(10)).is_some());
    v.start_again("vestibule.log");
    assert_eq!(commitment(&v), before, "a restart keeps the commitment");
    let (_, body) = u.decision(&v);
    assert_eq!(
        body["receipt"],
        receipt.as_str(),
        "and the visitor's receipt"
    );
    // After the start the reveal lists it, with the seed the commitment named.
    std::thread::sleep(Duration::from_secs(start.saturating_sub(unix_now()) + 1));
    let _ = u.decision(&v);
    let draw: serde_json::Value = client()
        .get(v.url("/.vestibule/rooms/sale/draws/launch"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(draw["commitment"], before.as_str());
    for r in [&receipt, &silent] {
        assert!(
            draw["receipts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["receipt"] == r.as_str()),
            "{r}: {draw}"
        );
    }
    assert_eq!(
        vestibule_core::room::draw::verify(draw.to_string().as_bytes()),
        Ok(2)
    );
}

/// `verify-draw --url https://…` checks the certificate against the trusted roots: a site whose
/// certificate nobody vouches for cannot be read (exit 2), and one the roots trust is
/// (`SSL_CERT_FILE` names them, as OpenSSL's tools read it).
#[test]
fn verify_draw_reads_https_only_from_a_trusted_certificate() {
    let origin = Origin::start();
    let start = unix_now() + 2;
    let tls = free_addr();
    let room = format!(
        "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
         new_users_per_minute = 10\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"{}\"\nstart = \"{}\"\n\
         end = \"{}\"\nshuffle_at_start = true\ndraw = \"verifiable\"\n",
        rfc3339(start - 60),
        rfc3339(start),
        rfc3339(start + 3600),
    );
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room)
        .self_signed_tls(tls, &["localhost"])
        .start();
    assert!(wait_for_port(tls, Duration::from_secs(5)));
    std::thread::sleep(Duration::from_secs(start.saturating_sub(unix_now()) + 1));
    let url = format!(
        "https://localhost:{}/.vestibule/rooms/sale/draws/launch",
        tls.port()
    );
    let run = |trusted: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["verify-draw", "--url", &url]);
        if let Some(pem) = trusted {
            cmd.env("SSL_CERT_FILE", pem);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned()
                + &String::from_utf8_lossy(&out.stdout),
        )
    };
    let (code, text) = run(Some(&v.path("tls/site.pem")));
    assert_eq!(code, 0, "{text}");
    let empty = v.path("no-roots.pem");
    std::fs::write(&empty, "").unwrap();
    let (code, text) = run(Some(&empty));
    assert_eq!(code, 2, "{text}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");
}
