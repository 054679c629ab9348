//! Hot reload against the real process: edits take effect within seconds, bad edits change
//! nothing, keys rotate, renames are seen, and nothing breaks under load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::*;

fn edit(v: &Vestibule, f: impl FnOnce(&str) -> String) {
    let path = v.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, f(&text)).unwrap();
}

/// The decision for a request carrying `cookie` as the room cookie.
fn decision(v: &Vestibule, cookie: Option<&str>) -> String {
    let mut u = User::at("127.0.0.1");
    u.cookie = cookie.map(str::to_owned);
    u.decision(v).0
}

#[test]
fn allow_percentage_change_shows_within_two_seconds() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0")
        .start();
    assert_eq!(decision(&v, None), "deny");
    let written = Instant::now();
    edit(&v, |t| {
        t.replace("allow_percentage = 0", "allow_percentage = 100")
    });
    assert!(
        eventually(Duration::from_secs(2), || decision(&v, None) == "allow"),
        "still denying 2 s after the edit"
    );
    eprintln!("0 -> 100 visible after {:?}", written.elapsed());
    assert_eq!(
        v.metric("vestibule_config_reloads_total{result=\"success\"}"),
        1.0
    );
    assert_eq!(v.metric("vestibule_config_generation"), 2.0);
    assert!(
        v.log_text()
            .contains("room default: allow_percentage 0 -> 100"),
        "{}",
        v.log_text()
    );
}

#[test]
fn bad_edits_change_nothing_and_fixing_them_works() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0")
        .start();
    let config = std::fs::read_to_string(v.config_path()).unwrap();
    let keys = std::fs::read_to_string(v.path("keys.toml")).unwrap();
    let page = v.path("pages/deny.html");
    let page_text = std::fs::read_to_string(&page).unwrap();
    type Break = Box<dyn Fn(&Vestibule)>;
    let cases: Vec<(&str, Break, &str)> = vec![
        (
            "invalid TOML",
            Box::new(|v: &Vestibule| {
                edit(v, |t| {
                    t.replace("allow_percentage = 0", "allow_percentage = = 100")
                })
            }),
            "vestibule.toml:",
        ),
        (
            "active key missing",
            Box::new(|v: &Vestibule| {
                std::fs::write(
                    v.path("keys.toml"),
                    format!("active = \"nope\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
                )
                .unwrap()
            }),
            "keys.toml:1: active: names key \"nope\"",
        ),
        (
            "key too short",
            Box::new(|v: &Vestibule| {
                std::fs::write(
                    v.path("keys.toml"),
                    "active = \"key1\"\n[ring]\nkey1 = \"c2hvcnQ=\"\n",
                )
                .unwrap()
            }),
            "keys.toml:3: ring.key1: decodes to 5 bytes",
        ),
        (
            "broken page",
            Box::new(|v: &Vestibule| std::fs::write(v.path("pages/deny.html"), "{{ room }").unwrap()),
            "deny.html:1: room[0].pages: template error",
        ),
        (
            "unknown key",
            Box::new(|v: &Vestibule| {
                edit(v, |t| {
                    t.replace("allow_percentage = 0", "allow_percentage = 0\nallow_percent = 5")
                })
            }),
            "room[0].allow_percent: unknown field `allow_percent`; did you mean `allow_percentage`?",
        ),
        (
            "value of the wrong type",
            Box::new(|v: &Vestibule| {
                edit(v, |t| t.replace("allow_percentage = 0", "allow_percentage = \"0\""))
            }),
            "room[0].allow_percentage: invalid type",
        ),
        (
            "rate over a window that does not exist",
            Box::new(|v: &Vestibule| {
                edit(v, |t| format!("{t}\n[[rate_limit]]\nlimit = \"5/30s\"\n"))
            }),
            "rate_limit[0].limit: \"5/30s\": a window rule counts over 1s, 10s or 60s",
        ),
    ];
    let mut failures = 0.0;
    let mut successes = 0.0;
    for (name, break_it, expected) in cases {
        let g = v.generation();
        break_it(&v);
        failures += 1.0;
        assert!(
            eventually(Duration::from_secs(5), || v
                .metric("vestibule_config_reloads_total{result=\"failure\"}")
                >= failures),
            "{name}: no failed reload counted"
        );
        // The old config keeps serving.
        assert_eq!(v.generation(), g, "{name}");
        assert_eq!(decision(&v, None), "deny", "{name}");
        let status = v.status();
        let message = status["last_reload_error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains(expected), "{name}: {message}");
        assert!(status["last_reload_error"]["at"]
            .as_str()
            .unwrap()
            .ends_with('Z'));
        assert!(!message.contains(KEY1), "{name}: a secret reached /status");
        // Fix it.
        std::fs::write(v.config_path(), &config).unwrap();
        std::fs::write(v.path("keys.toml"), &keys).unwrap();
        std::fs::write(&page, &page_text).unwrap();
        successes += 1.0;
        assert!(
            eventually(Duration::from_secs(5), || v
                .metric("vestibule_config_reloads_total{result=\"success\"}")
                >= successes),
            "{name}: fixing it did not reload"
        );
        assert_eq!(
            v.status()["last_reload_error"],
            serde_json::Value::Null,
            "{name}"
        );
    }
    assert!(!v.log_text().contains(KEY1), "a secret reached the log");
    assert!(
        v.log_text().contains("failed, generation"),
        "{}",
        v.log_text()
    );
}

#[test]
fn key_rotation_end_to_end() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 100")
        .start();
    // 1. An allow cookie signed by key1.
    let resp = client().get(v.url("/__echo")).send().unwrap();
    let old_cookie = room_cookie(&resp, "waiting_room").unwrap();
    assert!(old_cookie.contains("&kid=key1&"), "{old_cookie}");
    // Lower the percentage so that only valid allow cookies get in.
    let g = v.generation();
    edit(&v, |t| {
        t.replace("allow_percentage = 100", "allow_percentage = 1")
    });
    let g = v.wait_generation_above(g);
    assert_eq!(decision(&v, Some(&old_cookie)), "allow");
    // 2. Add key2 and make it active.
    std::fs::write(
        v.path("keys.toml"),
        format!("active = \"key2\"\n[ring]\nkey1 = \"{KEY1}\"\nkey2 = \"{KEY2}\"\n"),
    )
    .unwrap();
    let g = v.wait_generation_above(g);
    assert!(
        v.log_text()
            .contains("keys: active key1 -> key2, added key2"),
        "{}",
        v.log_text()
    );
    let resp = client()
        .get(v.url("/__echo"))
        .header("Cookie", format!("waiting_room={old_cookie}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.text().unwrap().contains("\"headers\""),
        "the old cookie still lets its holder in"
    );
    let resp = client().get(v.url("/")).send().unwrap();
    assert!(
        room_cookie(&resp, "waiting_room")
            .unwrap()
            .contains("&kid=key2&"),
        "new cookies are signed by key2"
    );
    assert_eq!(v.status()["keys"]["active"], "key2");
    // 3. Remove key1: the old cookie is anonymous now.
    std::fs::write(
        v.path("keys.toml"),
        format!("active = \"key2\"\n[ring]\nkey2 = \"{KEY2}\"\n"),
    )
    .unwrap();
    v.wait_generation_above(g);
    assert_eq!(decision(&v, Some(&old_cookie)), "anon");
    assert!(
        v.metric("vestibule_token_rejected_total{reason=\"unknown_key\",room=\"default\"}") >= 1.0
    );
}

/// A page removed from a room's folder is served built in from the next reload: one warning in
/// the log and from `--check`, no error.
#[test]
fn a_page_missing_from_the_folder_is_served_built_in() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0")
        .start();
    let page = v.path("pages/deny.html");
    let own = std::fs::read_to_string(&page).unwrap().replace(
        "{% block main %}",
        "{% block main %}<p>our own deny page</p>",
    );
    let g = v.generation();
    std::fs::write(&page, own).unwrap();
    let g = v.wait_generation_above(g);
    let body = |v: &Vestibule| {
        client()
            .get(v.url("/"))
            .header("Accept", "text/html")
            .send()
            .expect("the proxy answers")
            .text()
            .unwrap()
    };
    assert!(body(&v).contains("our own deny page"));

    std::fs::remove_file(&page).unwrap();
    v.wait_generation_above(g);
    assert_eq!(decision(&v, None), "deny");
    let served = body(&v);
    assert!(
        !served.contains("our own deny page") && served.contains("<!doctype html>"),
        "{served}"
    );
    let warning = "no deny.html; serving the built-in deny.html";
    assert!(v.log_text().contains(warning), "{}", v.log_text());
    assert_eq!(
        v.status()["last_reload_error"],
        serde_json::Value::Null,
        "a missing page is no error"
    );
    let (code, out, err) = run_cli(&["--check", "--config", v.config_path().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("warning: ") && err.contains(warning), "{err}");
}

#[test]
fn saving_by_rename_is_picked_up_and_sighup_reloads() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0")
        .start();
    let path = v.config_path();
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("allow_percentage = 0", "allow_percentage = 100");
    // Every worker thread has served a request, so each holds a reference to this snapshot.
    for _ in 0..8 {
        assert_eq!(decision(&v, None), "deny");
    }
    let before = v.generation();
    // The way vim or an atomic writer saves: write elsewhere, rename over the original.
    let tmp = v.path(".vestibule.toml.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    v.wait_generation_above(before);
    // Once the reload is in, no worker thread answers from the old snapshot.
    for _ in 0..8 {
        assert_eq!(decision(&v, None), "allow");
    }
    // SIGHUP always re-reads; nothing changed, yet it is a success.
    let g = v.generation();
    let ok = v.metric("vestibule_config_reloads_total{result=\"success\"}");
    v.proc.signal("HUP");
    assert_eq!(v.wait_generation_above(g), g + 1);
    assert_eq!(
        v.metric("vestibule_config_reloads_total{result=\"success\"}"),
        ok + 1.0
    );
    assert!(v.log_text().contains("reload (SIGHUP)"));
}

#[test]
fn restart_only_settings_are_reported_and_the_rest_applies() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0")
        .start();
    let g = v.generation();
    let other = free_port();
    edit(&v, |t| {
        t.replace(
            &format!("listen = [\"{}\"]", v.proxy),
            &format!("listen = [\"127.0.0.1:{other}\"]"),
        )
        .replace("threads = 2", "threads = 3")
        .replace("allow_percentage = 0", "allow_percentage = 100")
    });
    v.wait_generation_above(g);
    assert_eq!(decision(&v, None), "allow", "the room change applied");
    let log = v.log_text();
    assert!(
        log.contains("server.listen") && log.contains("needs a restart"),
        "{log}"
    );
    assert!(
        log.contains("server.threads 2 -> 3 needs a restart"),
        "{log}"
    );
    // Still serving on the old socket.
    assert_eq!(client().get(v.url("/")).send().unwrap().status(), 200);
}

#[test]
fn rate_limit_state_survives_a_reload() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[rate_limit]]\nname = \"tb\"\nalgorithm = \"token_bucket\"\nlimit = 2\nperiod = \"1h\"\npenalty = \"10m\"")
        .extra("[[rate_limit]]\nname = \"other\"\nwindow = \"10s\"\nlimit = 1000")
        .start();
    for _ in 0..2 {
        assert_eq!(client().get(v.url("/")).send().unwrap().status(), 200);
    }
    assert_eq!(client().get(v.url("/")).send().unwrap().status(), 429);
    let g = v.generation();
    // An edit to another rule leaves "tb" as it was.
    edit(&v, |t| t.replace("limit = 1000", "limit = 2000"));
    v.wait_generation_above(g);
    assert!(v
        .log_text()
        .contains("rate_limit other: limit 1000 -> 2000"));
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 429, "the penalty box was lost in the reload");
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry > 500, "{retry}");
    assert_eq!(
        v.metric("vestibule_ratelimit_penalty_box_entries{rule=\"tb\"}"),
        1.0
    );
}

/// A client keeps sending requests through 50 reloads: no connection errors, no 5xx. Also
/// measures the reload latency (file written -> new generation on /status).
#[test]
fn fifty_reloads_under_load() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 100\npaths = [\"/queue\"]")
        .extra("[[rate_limit]]\nname = \"loose\"\nwindow = \"1s\"\nlimit = 100000")
        .start();
    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let bad = std::sync::Mutex::new(Vec::new());
    let mut latencies = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let c = client();
                while !stop.load(Ordering::SeqCst) {
                    match c.get(v.url("/__echo")).send() {
                        Ok(r) if r.status().is_server_error() => {
                            bad.lock().unwrap().push(format!("status {}", r.status()))
                        }
                        Ok(r) => {
                            let _ = r.bytes();
                        }
                        Err(e) => bad.lock().unwrap().push(format!("error {e}")),
                    }
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let mut g = v.generation();
        for i in 0..50 {
            let written = Instant::now();
            edit(&v, |t| {
                let limit = if i % 2 == 0 {
                    "limit = 100001"
                } else {
                    "limit = 100000"
                };
                t.replace("limit = 100000", "LIMIT")
                    .replace("limit = 100001", "LIMIT")
                    .replace("LIMIT", limit)
            });
            g = v.wait_generation_above(g);
            latencies.push(written.elapsed());
        }
        stop.store(true, Ordering::SeqCst);
    });
    let bad = bad.into_inner().unwrap();
    assert!(
        bad.is_empty(),
        "{} bad answers: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    latencies.sort();
    eprintln!(
        "50 reloads under load ({} requests): latency median {:?}, max {:?}",
        sent.load(Ordering::SeqCst),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    assert!(sent.load(Ordering::SeqCst) > 200);
    assert_eq!(
        v.metric("vestibule_config_reloads_total{result=\"failure\"}"),
        0.0
    );
}
