//! The per-minute history and `vestibule report` through the real proxy: traffic across a
//! minute's end, a SIGTERM (the minute in progress is written), then the report, whose
//! per-minute sums must be the traffic the test sent; a torn history line is skipped and said;
//! and a history directory that cannot be written costs no request.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vestibule_core::history::rfc3339;

use crate::common::*;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

const ROOM: &str = "[[room]]\nname = \"sale\"\npages = \"pages\"\nrefresh = \"5s\"\nadmission = \"fifo\"\nnew_users_per_minute = 3";

/// Asks once for every user in `users` not admitted yet; counts those let in now.
fn ask_all(v: &Vestibule, users: &mut [User], admitted: &mut BTreeSet<usize>) {
    for (i, u) in users.iter_mut().enumerate() {
        if admitted.contains(&i) {
            continue;
        }
        if u.decision(v).0 == "allow" {
            admitted.insert(i);
        }
    }
}

#[test]
fn the_report_s_minutes_add_up_to_the_traffic_sent() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(ROOM)
        .start();
    // A second proxy whose history directory is under a file: it cannot be written.
    let admin = free_addr();
    let mut broken = Setup::new(origin.addr).extra(TRUST_LOCAL).extra(ROOM);
    broken.admin = Some(format!(
        "listen = \"{admin}\"\nhistory_dir = \"keys.toml/history\""
    ));
    let broken = broken.start();
    let started = unix_now();

    // Eight arrivals: three straight in, five in line.
    let mut users: Vec<User> = (0..8).map(User::new).collect();
    let mut admitted = BTreeSet::new();
    ask_all(&v, &mut users, &mut admitted);
    assert!((3..=4).contains(&admitted.len()), "{admitted:?}");
    assert_eq!(User::new(99).decision(&broken).0, "allow");

    // Into the next minute: those in line check in and three more get in.
    let next_minute = (unix_now() / 60 + 1) * 60;
    while unix_now() < next_minute + 1 {
        std::thread::sleep(Duration::from_millis(250));
    }
    let before = admitted.len();
    // Two more arrivals in the new minute.
    users.extend((100..102).map(User::new));
    let deadline = unix_now() + 12;
    while unix_now() < deadline && admitted.len() < before + 3 {
        ask_all(&v, &mut users, &mut admitted);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(admitted.len() > before, "nobody got in from the line");
    let m = v.metrics();
    let from_line = metric_value(&m, "vestibule_room_wait_seconds_count{room=\"sale\"}");
    assert!(from_line >= 1.0, "no wait observed");
    assert_eq!(
        metric_value(&m, "vestibule_room_arrivals_total{room=\"sale\"}"),
        users.len() as f64
    );

    // The broken history costs a logged, counted error once its first minute has ended, and no
    // request.
    assert!(eventually(Duration::from_secs(5), || {
        metric_value(&broken.metrics(), "vestibule_history_errors_total") >= 1.0
    }));
    assert_eq!(User::new(98).decision(&broken).0, "allow");
    // The line is logged just after the count, through a buffered log: wait for it too.
    assert!(
        eventually(Duration::from_secs(5), || broken
            .proc
            .log_text()
            .contains("history: cannot write")),
        "{}",
        broken.proc.log_text()
    );

    // Those still in line check in once more, so the minute in progress counts them waiting.
    ask_all(&v, &mut users, &mut admitted);
    // SIGTERM: the minute in progress is written too.
    let mut v = v;
    v.proc.signal("TERM");
    assert!(
        v.proc.wait_exit(Duration::from_secs(15)).is_some(),
        "no exit"
    );

    let config = v.config_path();
    let out = v.dir.path().join("report");
    let from = started / 60 * 60;
    let span = [
        "report",
        "--config",
        config.to_str().unwrap(),
        "--room",
        "sale",
        "--from",
        &rfc3339(from),
        "--to",
        &rfc3339(from + 600),
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = run_cli(&span);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.is_empty(), "nothing to skip: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let minutes = report["minutes"].as_array().unwrap();
    assert!(minutes.len() >= 2, "{report}");
    let sum = |k: &str| -> u64 { minutes.iter().map(|m| m[k].as_u64().unwrap()).sum() };
    assert_eq!(sum("arrivals"), users.len() as u64, "{report}");
    assert_eq!(sum("admitted"), admitted.len() as u64, "{report}");
    assert_eq!(sum("waited"), from_line as u64, "{report}");
    assert_eq!(report["totals"]["admitted"], admitted.len());
    assert!(minutes.iter().all(|m| m["cap"] == 3.0), "{report}");
    assert_eq!(minutes.last().unwrap()["partial"], true, "{report}");
    assert!(
        minutes.iter().any(|m| m["wait_p50"].is_number()),
        "{report}"
    );
    assert!(minutes.iter().any(|m| m["waiting"].as_u64() > Some(0)));
    let csv = std::fs::read_to_string(out.join("minutes.csv")).unwrap();
    assert_eq!(csv.lines().count(), minutes.len() + 1);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    // The charts are inline SVG in every build, a line per series: admissions among them.
    assert!(
        html.contains("<svg ") && html.contains("role=\"img\""),
        "charts inline"
    );
    assert_eq!(html.matches("<svg ").count(), 1, "one figure");
    let admitted = html
        .split("<title>admitted</title>")
        .nth(1)
        .expect("an admitted series");
    assert!(
        admitted.starts_with("<polyline points=\"") || admitted.starts_with("<circle "),
        "{admitted}"
    );
    for series in [
        "arrivals",
        "waiting",
        "active",
        "abandoned",
        "origin errors / min",
    ] {
        assert!(
            html.contains(&format!("<title>{series}</title>")),
            "{series}"
        );
    }
    assert!(
        !html.contains("No charts") && !html.contains("<img"),
        "no PNG"
    );

    // A torn last line (a crash mid-write) is skipped and said; the report is the same.
    let history = v.dir.path().join("state/history");
    let file = std::fs::read_dir(&history)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("a history file");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(br#"{"start":"2026-11-27T20:15:00Z","room":"sa"#);
    std::fs::write(&file, bytes).unwrap();
    let (code, _, stderr) = run_cli(&span);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("skipped") && stderr.contains(".jsonl:"),
        "{stderr}"
    );
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(again["totals"], report["totals"]);

    // Nothing in the span: 1. Half a span: 2.
    let empty = [
        "report",
        "--config",
        config.to_str().unwrap(),
        "--room",
        "sale",
        "--from",
        "2001-01-01T00:00:00Z",
        "--to",
        "2001-01-02T00:00:00Z",
        "--out",
        out.to_str().unwrap(),
    ];
    assert_eq!(run_cli(&empty).0, 1);
    assert_eq!(run_cli(&span[..8]).0, 2);
}

/// `--event` spans the event's pre-queue's opening to its end; the proxy need not run.
#[test]
fn an_event_s_report_spans_its_pre_queue_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vestibule.toml");
    std::fs::write(
        &config,
        "[upstream]\npeers = [\"127.0.0.1:8000\"]\n\
         [[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 5\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-11-27T19:00:00Z\"\n\
         start = \"2026-11-27T19:30:00Z\"\nend = \"2026-11-27T20:00:00Z\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("state/history")).unwrap();
    let line = |start: &str, arrivals: u64| {
        format!(
            "{{\"start\":\"{start}\",\"room\":\"sale\",\"node\":\"a\",\"arrivals\":{arrivals}}}\n"
        )
    };
    let text = [
        line("2026-11-27T18:59:00Z", 1000),
        line("2026-11-27T19:00:00Z", 1),
        line("2026-11-27T19:59:00Z", 2),
        line("2026-11-27T20:00:00Z", 1000),
    ]
    .concat();
    std::fs::write(dir.path().join("state/history/2026-11-27.jsonl"), text).unwrap();
    let out = dir.path().join("out");
    let args = |event: &str| {
        vec![
            "report".to_owned(),
            "--config".into(),
            config.to_str().unwrap().into(),
            "--room".into(),
            "sale".into(),
            "--event".into(),
            event.into(),
            "--out".into(),
            out.to_str().unwrap().into(),
        ]
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_cli(&a)
    };
    let (code, stdout, stderr) = run(args("launch"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["event"], "launch");
    assert_eq!(report["from"], "2026-11-27T19:00:00Z");
    assert_eq!(report["to"], "2026-11-27T20:00:00Z");
    assert_eq!(report["totals"]["arrivals"], 3, "{report}");
    // An event the room does not have, or --event with --from: usage.
    let (code, _, stderr) = run(args("nope"));
    assert_eq!(code, 2);
    assert!(stderr.contains("no event named \"nope\""), "{stderr}");
    let mut both = args("launch");
    both.extend(["--from".into(), "2026-11-27T19:00:00Z".into()]);
    assert_eq!(run(both).0, 2);
}
