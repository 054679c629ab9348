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
    let start_at = Instant::now()
        + Duration::from_secs_f64(
            start as f64
                - SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64(),
        );
    let mut next = vec![start_at + Duration::from_millis(5_500); users.len()];
    let mut admitted: Vec<usize> = Vec::new();
    let deadline = start_at + Duration::from_secs(50);
    while admitted.len() < 20 && Instant::now() < deadline {
        let now = Instant::now();
        for (i, u) in users.iter_mut().enumerate() {
            if admitted.contains(&i) || next[i] > now {
                continue;
            }
            let (decision, body) = u.decision(&v);
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
