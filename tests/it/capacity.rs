//! Capacity rooms through the real proxy, users simulated through trusted X-Forwarded-For.

use std::time::Duration;

use crate::common::*;

fn room(extra: &str) -> String {
    format!("[[room]]\nname = \"sale\"\npages = \"pages\"\nrefresh = \"5s\"\n{extra}")
}

fn room_status(v: &Vestibule) -> serde_json::Value {
    v.status()["rooms"][0].clone()
}

#[test]
fn new_users_per_minute_is_respected() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room("admission = \"fifo\"\nnew_users_per_minute = 3"))
        .start();
    let mut users: Vec<User> = (0..8).map(User::new).collect();
    let decisions: Vec<String> = users.iter_mut().map(|u| u.decision(&v).0).collect();
    // Straight in while there are free slots and nobody waits; then the queue. (Should the
    // test straddle a minute boundary, a fourth may get in: never more than 3 a minute.)
    let admitted = decisions.iter().filter(|d| *d == "allow").count();
    assert!(
        (3..=4).contains(&admitted) && decisions[..3].iter().all(|d| d == "allow"),
        "{decisions:?}"
    );
    assert!(
        decisions[admitted..].iter().all(|d| d == "anon"),
        "{decisions:?}"
    );
    let status = room_status(&v);
    assert_eq!(status["admission"], "fifo");
    assert_eq!(status["active_users"].as_u64(), Some(admitted as u64));
    assert_eq!(status["waiting_users"].as_u64(), Some(8 - admitted as u64));
    let m = v.metrics();
    assert_eq!(
        metric_value(&m, "vestibule_room_active_users{room=\"sale\"}"),
        admitted as f64
    );
    assert_eq!(
        metric_value(&m, "vestibule_room_admitted_total{room=\"sale\"}"),
        admitted as f64
    );
}

#[test]
fn total_active_users_is_respected() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room("admission = \"random\"\ntotal_active_users = 2"))
        .start();
    let mut users: Vec<User> = (0..5).map(User::new).collect();
    let decisions: Vec<String> = users.iter_mut().map(|u| u.decision(&v).0).collect();
    assert_eq!(decisions, ["allow", "allow", "anon", "anon", "anon"]);
    // Admitted users keep access; waiting ones do not get in while the room is full.
    for _ in 0..3 {
        assert_eq!(users[0].decision(&v).0, "allow");
        assert_eq!(users[1].decision(&v).0, "allow");
    }
    std::thread::sleep(Duration::from_secs(7));
    for u in &mut users[2..] {
        assert_eq!(u.decision(&v).0, "wait", "the cap must hold");
    }
    assert_eq!(room_status(&v)["active_users"], 2);
}

#[test]
fn queue_all_holds_everyone_but_the_admitted() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room("admission = \"fifo\"\nnew_users_per_minute = 100"))
        .start();
    let mut admitted = User::new(1);
    assert_eq!(admitted.decision(&v).0, "allow");
    let g = v.generation();
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    std::fs::write(
        v.config_path(),
        text.replace(
            "new_users_per_minute = 100",
            "new_users_per_minute = 100\nqueue_all = true",
        ),
    )
    .unwrap();
    v.wait_generation_above(g);
    let mut newcomer = User::new(2);
    let (d, json) = newcomer.decision(&v);
    assert_eq!(d, "anon");
    assert_eq!(json["queue_all"], true);
    assert_eq!(admitted.decision(&v).0, "allow");
    assert_eq!(
        v.metric("vestibule_room_allow_percentage{room=\"sale\"}"),
        0.0
    );
}

#[test]
fn revoke_ends_a_session() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room("admission = \"fifo\"\ntotal_active_users = 1"))
        .start();
    let mut a = User::new(1);
    assert_eq!(a.decision(&v).0, "allow");
    let mut b = User::new(2);
    assert_eq!(b.decision(&v).0, "anon");
    assert_eq!(room_status(&v)["active_users"], 1);
    // The origin signs the user out.
    let resp = a.get(&v, "/__revoke");
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers().get("vestibule-command").is_none(),
        "the command reached the client"
    );
    let set = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(set.starts_with("waiting_room=deleted;"), "{set}");
    assert_eq!(a.cookie, None);
    assert_eq!(room_status(&v)["active_users"], 0);
    // Their slot is free: the waiting user gets it at the next check-in, and the revoked user
    // is a new arrival (behind them).
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(b.decision(&v).0, "allow");
    assert_eq!(a.decision(&v).0, "anon");
}

#[test]
fn revoke_in_a_lottery_room_deletes_the_cookie() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 100")
        .start();
    let resp = client().get(v.url("/__revoke")).send().unwrap();
    assert!(resp.headers().get("vestibule-command").is_none());
    let cookies = set_cookies(&resp);
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    assert!(cookies[0].starts_with("waiting_room=deleted;"));
}

/// A non-empty fifo queue end to end: the exact place and estimates its JSON gives
/// (the `estimates` of `room::capacity`).
#[test]
fn json_carries_the_estimates() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room("admission = \"fifo\"\nnew_users_per_minute = 2"))
        .start();
    // Two get in at once, nine more queue up (new arrivals, not back yet): enough that the
    // users ahead fill several minutes, so the pace and the position both show in the figure.
    let first = unix_now();
    let mut users: Vec<User> = (0..11).map(User::new).collect();
    let decisions: Vec<String> = users.iter_mut().map(|u| u.decision(&v).0).collect();
    let straight_in = decisions.iter().filter(|d| *d == "allow").count();
    assert!(straight_in >= 2, "{decisions:?}");
    let queued = 11 - straight_in as u64;
    // Buckets are half the 5 s refresh: three seconds on, the next user is in a later one.
    std::thread::sleep(Duration::from_secs(3));
    let before = unix_now();
    let (decision, mut last) = User::new(9).decision(&v);
    let after = unix_now();
    assert_eq!(decision, "anon", "{last}");
    assert_eq!(last["queueing"], "fifo");
    assert_eq!(last["in_waiting_room"], true);
    // The queued users are ahead (nobody has walked away yet: all count).
    assert_eq!(last["users_ahead"].as_u64(), Some(queued), "{last}");
    // The minute's slots are gone unless it turned since the first two got in (then two are
    // free again). The pace is the configured 2 a minute. The rest of this minute, the minutes
    // the users ahead fill beyond the free slots, then where a check-in falls once that minute
    // starts: 0.3, 0.6 and 0.9 refresh at the quartiles (the head holds more than the minute's
    // two slots, so no later passes). Slots free now go at the next check-in (0.8-1.2 refresh).
    let free_now = if (first / 60.0).floor() == (before / 60.0).floor() {
        0.0
    } else {
        2.0
    };
    let estimate = |at: f64, q: f64| {
        let position = queued as f64 + q;
        if position < free_now {
            return (0.8 + 0.4 * q) * 5.0 / 60.0;
        }
        let to_next = (60.0 - at.floor() % 60.0) / 60.0;
        let wait = to_next + ((position - free_now) / 2.0).floor() + 1.2 * q * 5.0 / 60.0;
        wait.max((0.8 + 0.4 * q) * 5.0 / 60.0)
    };
    for (q, key) in [(0.25, "p25"), (0.5, "p50"), (0.75, "p75")] {
        let got = last["wait_estimate_minutes"][key].as_f64().expect(key);
        assert!(
            [before, after]
                .iter()
                .any(|t| (got - estimate(*t, q)).abs() < 1e-9),
            "{key}: {got} vs {} or {} ({last})",
            estimate(before, q),
            estimate(after, q)
        );
        // Nobody still waiting is told less than a check-in.
        assert!(got >= 4.0 / 60.0, "{key}: {got}");
    }
    let refresh = last["refresh_seconds"].as_u64().unwrap();
    assert!(
        (4..=6).contains(&refresh),
        "jittered 5 s refresh: {refresh}"
    );

    // A random room reports quantiles.
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room("admission = \"random\"\nnew_users_per_minute = 2"))
        .start();
    let mut users: Vec<User> = (0..10).map(User::new).collect();
    for u in &mut users {
        last = u.decision(&v).1;
    }
    assert_eq!(last["queueing"], "random");
    assert_eq!(last["users_ahead"], serde_json::Value::Null);
    let e = &last["wait_estimate_minutes"];
    let (p25, p50, p75) = (
        e["p25"].as_f64().unwrap(),
        e["p50"].as_f64().unwrap(),
        e["p75"].as_f64().unwrap(),
    );
    assert!(p25 < p50 && p50 < p75, "{e}");
    // The HTML page shows them too.
    let html = client()
        .get(v.url("/"))
        .header("X-Forwarded-For", "10.9.9.9")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(html.contains("Expected wait: "), "{html}");
    assert!(
        v.metric("vestibule_room_wait_estimate_seconds{percentile=\"50\",room=\"sale\"}") > 0.0
    );
}

#[test]
fn simulate_writes_csv_heatmaps_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let (code, stdout, stderr) = run_cli(&[
        "simulate",
        "--users",
        "2000",
        "--minutes",
        "20",
        "--new-users-per-minute",
        "80",
        "--total-active-users",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for name in [
        "simulate-fifo.csv",
        "simulate-random.csv",
        "heatmap-fifo.png",
        "heatmap-random.png",
    ] {
        let bytes = std::fs::read(out.join(name)).unwrap();
        assert!(bytes.len() > 100, "{name}");
    }
    let png = std::fs::read(out.join("heatmap-fifo.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let csv = std::fs::read_to_string(out.join("simulate-fifo.csv")).unwrap();
    assert!(csv.starts_with(
        "user,arrival_secs,arrival_minute,admitted_secs,wait_secs,check_ins,abandoned,estimate_p25_min,estimate_p50_min,estimate_p75_min,lane,queue_number\n"
    ));
    assert_eq!(csv.lines().count(), 2001);
    assert!(
        stdout.contains("== fifo ==") && stdout.contains("== random =="),
        "{stdout}"
    );
    assert!(
        stdout.contains("Kendall tau") && !stdout.contains("MISSED"),
        "{stdout}"
    );
}

/// Liveness on the real server: half the queue walks away after its first page, the
/// other half checks in when told; the next full minute still takes at least 90 % of its slots.
#[test]
fn walking_away_does_not_hold_slots() {
    const CAP: usize = 10;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room(&format!(
            "admission = \"fifo\"\nnew_users_per_minute = {CAP}"
        )))
        .start();
    // The queue builds in this minute (not in its last seconds, so the arrivals do not
    // straddle two), and the next minute is measured whole.
    let into = unix_now() as u64 % 60;
    if into > 54 {
        std::thread::sleep(Duration::from_secs(60 - into + 1));
    }
    let measured = unix_now() as u64 / 60 + 1;
    // 40 arrivals: the first 10 get in, 30 queue; every other one walks away.
    let mut users: Vec<User> = (0..4 * CAP as u32).map(User::new).collect();
    for u in &mut users {
        u.decision(&v);
    }
    let admitted_in = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (i, mut u) in users.into_iter().enumerate() {
            if i % 2 == 1
                || u.cookie
                    .as_deref()
                    .is_some_and(|c| c.starts_with("dec=allow"))
            {
                continue; // walked away, or already in
            }
            let (admitted_in, v) = (&admitted_in, &v);
            s.spawn(move || {
                let deadline = (measured + 1) * 60 - 1;
                while (unix_now() as u64) < deadline {
                    let (decision, body) = u.decision(v);
                    if decision == "allow" {
                        admitted_in.lock().unwrap().push(unix_now() as u64 / 60);
                        return;
                    }
                    let wait = body["refresh_seconds"].as_u64().unwrap_or(5);
                    std::thread::sleep(Duration::from_secs(wait));
                }
            });
        }
    });
    let admitted_in = admitted_in.into_inner().unwrap();
    let in_measured = admitted_in.iter().filter(|m| **m == measured).count();
    // 15 live users waited into the measured minute: its 10 slots are taken (at least 9).
    assert!(
        in_measured >= CAP * 9 / 10,
        "{in_measured} of {CAP} slots taken in the full minute; admissions by minute: {admitted_in:?}"
    );
    assert!(in_measured <= CAP, "never more than the cap");
}

/// Priority lanes on the real server: a minute's slots go 3 : 1 to members (who
/// joined with an invitation link of their lane) over the public line, though the public line
/// arrived first; each lane is counted apart in `/status` and the metrics.
#[test]
fn lanes_split_a_minute_by_weight() {
    const CAP: usize = 8;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&room(&format!(
            "admission = \"fifo\"\nnew_users_per_minute = {CAP}\nsession_duration = \"10m\"\n\
             lanes = {{ members = 3, public = 1 }}"
        )))
        .start();
    let code = v.invite_codes("sale", &["--lane", "members", "--uses", "12"]);
    assert_eq!(code.len(), 1, "{code:?}");
    let link = format!("/__echo?vestibule_invite={}", code[0]);
    // 8 arrivals take this minute's slots; then 12 of the public and 12 members queue, the
    // public first: in arrival order they would take the next minute whole.
    let q = queue_in_lanes(&[&v], &link, CAP as u32);
    let measured = q.measured;
    // Each lane's queue, apart, in /status (JSON and HTML) and in the metrics.
    let lanes = room_status(&v)["lanes"].clone();
    assert_eq!(lanes["members"]["weight"], 3, "{lanes}");
    assert_eq!(lanes["members"]["waiting_users"], 12, "{lanes}");
    assert_eq!(lanes["public"]["weight"], 1, "{lanes}");
    assert_eq!(lanes["public"]["waiting_users"], 12, "{lanes}");
    let (_, html) = v.admin_get("/status.html");
    assert!(
        html.contains("<h2>Lanes</h2>") && html.contains("<td>members</td><td>3</td><td>12</td>"),
        "{html}"
    );
    let metrics = v.metrics();
    for lane in ["members", "public"] {
        let series = format!("vestibule_room_waiting_users{{lane=\"{lane}\",room=\"sale\"}}");
        assert_eq!(metric_value(&metrics, &series), 12.0, "{series}");
    }

    // Everyone checks in when told, until the measured minute ends.
    let (admitted, (m, p)) = check_in_lanes(&[&v], q);
    // 3 : 1 of 8 is 6 : 2. The minute's last seconds let anyone take a slot still free, so
    // allow one either way. A room without lanes would give 0 : 8 (arrival order); with the
    // split switched off (a mutation), the lanes' own queues gave 3 : 5.
    assert!(
        m + p <= CAP && m + p >= CAP - 1,
        "the minute's slots, no more: members {m}, public {p}; {admitted:?}"
    );
    assert!(
        (5..=6).contains(&m) && (2..=3).contains(&p),
        "members {m}, public {p} (weights 3 : 1 of {CAP}); {admitted:?}"
    );
    // The next minute, /status says what each lane was let in.
    let to_next = (measured + 1) as f64 * 60.0 + 0.5 - unix_now();
    if to_next > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(to_next));
    }
    let lanes = room_status(&v)["lanes"].clone();
    assert_eq!(lanes["members"]["admitted_last_minute"], m, "{lanes}");
    assert_eq!(lanes["public"]["admitted_last_minute"], p, "{lanes}");
}

#[test]
fn simulate_shows_the_lane_split() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let (code, stdout, stderr) = run_cli(&[
        "simulate",
        "--order",
        "fifo",
        "--users",
        "2000",
        "--minutes",
        "10",
        "--new-users-per-minute",
        "80",
        "--total-active-users",
        "0",
        "--lanes",
        "members=3,public=1",
        "--lane-share",
        "members=0.5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "lanes: public (weight 1, 50% of arrivals), members (weight 3, 50% of arrivals)"
        ),
        "{stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("lanes: in the"))
        .unwrap_or_else(|| panic!("no lane split in {stdout}"));
    assert!(line.ends_with("[ok]"), "{line}");
    assert!(!stdout.contains("MISSED"), "{stdout}");
    let csv = std::fs::read_to_string(out.join("simulate-fifo.csv")).unwrap();
    // The lane is the next to last column (the queue number, empty without --api, is last).
    let members = csv.lines().filter(|l| l.ends_with(",members,")).count();
    assert!((900..=1100).contains(&members), "{members} members of 2000");
    // A mistake in the lanes is named.
    let (code, _, stderr) = run_cli(&["simulate", "--lanes", "members=3"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("a public lane is required"), "{stderr}");
}
