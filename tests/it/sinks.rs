//! Events out (`[[events.sink]]`): a real webhook receiver that fails, goes away and comes
//! back while vestibule is SIGKILLed and started again, and still gets every event with a valid
//! signature; a file sink rotated by size; a Redis stream on a real `redis-server`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::common::*;

const SECRET: &str = "a-webhook-secret-for-the-tests-0123456789";

/// A capacity room that lets everyone straight in: each new visitor is one `admission.granted`.
const OPEN_ROOM: &str = "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
    [[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 100000\n";

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Every request, answered or not: (signature valid, answered status).
    attempts: Vec<(bool, u16)>,
    /// Events accepted (2xx), by id: the event's JSON.
    delivered: BTreeMap<String, serde_json::Value>,
    /// Deliveries of an id already delivered (at least once allows them).
    duplicates: usize,
}

/// A webhook receiver on `addr`: checks `Vestibule-Signature` on every request, answers 500
/// to the first `fail_first`, 200 after. Stopped (its port closed) by [`Receiver::stop`].
struct Receiver {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start(listener: TcpListener, seen: Arc<Mutex<Seen>>, fail_first: usize) -> Receiver {
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let failed = AtomicUsize::new(0);
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let fail = failed.fetch_add(1, Ordering::Relaxed) < fail_first;
                            serve(stream, &seen, fail);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Receiver {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One request on `stream`: read, check, answer, close.
fn serve(mut stream: TcpStream, seen: &Mutex<Seen>, fail: bool) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = &buf[head_end..head_end + length];
    let valid = header("vestibule-signature").is_some_and(|s| signature_ok(&s, body))
        && header("content-type").as_deref() == Some("application/cloudevents+json");
    let status = if fail || !valid { 500 } else { 200 };
    {
        let mut seen = seen.lock().unwrap();
        seen.attempts.push((valid, status));
        if status == 200 {
            let event: serde_json::Value = serde_json::from_slice(body).unwrap();
            let id = event["id"].as_str().unwrap().to_owned();
            if seen.delivered.insert(id, event).is_some() {
                seen.duplicates += 1;
            }
        }
    }
    let reason = if status == 200 {
        "OK"
    } else {
        "Internal Server Error"
    };
    let _ = stream.write_all(
        format!("HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    );
}

/// `t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`, with the test's secret, and a recent `t`.
fn signature_ok(header: &str, body: &[u8]) -> bool {
    let parts: BTreeMap<&str, &str> = header
        .split(',')
        .filter_map(|p| p.split_once('='))
        .collect();
    let (Some(t), Some(v1)) = (parts.get("t"), parts.get("v1")) else {
        return false;
    };
    let Ok(t_secs) = t.parse::<u64>() else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if now.abs_diff(t_secs) > 300 {
        return false;
    }
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::decode(v1).is_ok_and(|v| mac.verify_slice(&v).is_ok())
}

/// New visitors, one request each, from `ips` (each admitted straight in).
fn visit(v: &Vestibule, ips: impl IntoIterator<Item = String>) {
    let c = client();
    for ip in ips {
        let resp = c
            .get(v.url("/"))
            .header("X-Forwarded-For", &ip)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200, "{ip}");
    }
}

/// A sample of `v`'s metrics, 0 while it is absent.
fn count(v: &Vestibule, series: &str) -> f64 {
    metric_sample(&v.metrics(), series).unwrap_or(0.0)
}

/// The events a JSON-lines file holds, in order. A last line still being written (no newline
/// yet) is left for the next look.
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| serde_json::from_str(l.trim_end()).unwrap())
        .collect()
}

#[test]
fn every_event_reaches_a_failing_receiver_across_an_outage_and_a_sigkill() {
    let origin = Origin::start();
    let listener = bind_loopback();
    let hook: SocketAddr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    // First the receiver answers 500 three times.
    let receiver = Receiver::start(listener, seen.clone(), 3);
    let mut v = Setup::new(origin.addr)
        .file("hook-secret", format!("{SECRET}\n"))
        .extra(OPEN_ROOM)
        .extra(&format!(
            "[[events.sink]]\nname = \"shop\"\nkind = \"webhook\"\nurl = \"http://{hook}/hooks/vestibule\"\n\
             secret_file = \"hook-secret\"\ntypes = [\"admission.granted\"]\ninclude_client_ip = true\n\
             [[events.sink]]\nname = \"witness\"\nkind = \"file\"\npath = \"events.jsonl\"\n\
             types = [\"admission.granted\"]\ninclude_client_ip = true\n"
        ))
        .start();
    let ip = |i: u32| format!("198.51.100.{i}");
    visit(&v, (1..=5).map(ip));
    // The three 500s are retried (1 s, 2 s, 4 s at most), then the first events arrive.
    assert!(
        eventually(Duration::from_secs(20), || seen
            .lock()
            .unwrap()
            .delivered
            .len()
            >= 2),
        "{}",
        v.log_text()
    );
    // The receiver goes away; more visitors come; vestibule is killed outright.
    receiver.stop();
    visit(&v, (6..=10).map(ip));
    // Spooled (the writer appends within milliseconds), and tried against the closed port.
    assert!(eventually(Duration::from_secs(5), || {
        count(
            &v,
            "vestibule_events_total{result=\"retried\",sink=\"shop\",type=\"admission.granted\"}",
        ) > 3.0
    }));
    std::thread::sleep(Duration::from_millis(300));
    v.proc.signal("KILL");
    assert!(v.proc.wait_exit(Duration::from_secs(5)).is_some());
    // Started again on the same folder: it carries on from its spool.
    v.start_again("vestibule-2.log");
    let held = || {
        v.log_text().lines().find_map(|l| {
            let rest = l.split("events sink shop: spool ").nth(1)?;
            rest.split(" holds ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || held().is_some()),
        "the spool's recovery is logged\n{}",
        v.log_text()
    );
    let held = held().unwrap();
    assert!(
        held >= 5,
        "the killed process's events wait in the spool: {held}"
    );
    visit(&v, (11..=15).map(ip));
    // The receiver comes back on its port, answering 200.
    let listener = TcpListener::bind(hook).expect("the receiver's port again");
    let receiver = Receiver::start(listener, seen.clone(), 0);
    let witness = v.dir.path().join("events.jsonl");
    let all_there = || {
        let ids: BTreeSet<String> = lines(&witness)
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect();
        ids.len() >= 15 && {
            let seen = seen.lock().unwrap();
            ids.iter().all(|id| seen.delivered.contains_key(id))
        }
    };
    assert!(
        eventually(Duration::from_secs(60), all_there),
        "delivered {} of {:?}\n{}",
        seen.lock().unwrap().delivered.len(),
        lines(&witness).len(),
        v.log_text()
    );
    receiver.stop();
    let seen = seen.lock().unwrap();
    // Every visitor's admission arrived, each once by id, with its address (include_client_ip).
    let ips: BTreeSet<&str> = seen
        .delivered
        .values()
        .map(|e| e["data"]["client_ip"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=15).map(ip).collect();
    assert_eq!(ips, expected.iter().map(String::as_str).collect());
    assert_eq!(seen.delivered.len(), 15, "one id per admission");
    // Every request the receiver got was signed, the 500s' too.
    assert!(
        seen.attempts.iter().all(|(valid, _)| *valid),
        "{:?}",
        seen.attempts
    );
    assert!(seen.attempts.iter().filter(|(_, s)| *s == 500).count() >= 3);
    for e in seen.delivered.values() {
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["type"], "vestibule.admission.granted");
        assert_eq!(e["subject"], "sale");
        assert_eq!(e["data"]["identity"].as_str().unwrap().len(), 32);
    }
    // Nothing left waiting.
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_events_spooled{sink=\"shop\"}") == 0.0
    }));
}

#[test]
fn a_file_sink_writes_json_lines_rotated_by_size() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(OPEN_ROOM)
        .extra(
            "[[events.sink]]\nname = \"archive\"\nkind = \"file\"\npath = \"out/events.jsonl\"\n\
             max_file_bytes = \"4KiB\"\nrooms = [\"sale\"]\n",
        )
        .start();
    visit(&v, (1..=30).map(|i| format!("203.0.113.{i}")));
    assert!(eventually(Duration::from_secs(10), || {
        count(&v, "vestibule_events_total{result=\"delivered\",sink=\"archive\",type=\"admission.granted\"}")
            >= 30.0
    }));
    let now = lines(&v.dir.path().join("out/events.jsonl"));
    let before = lines(&v.dir.path().join("out/events.jsonl.1"));
    for (name, file) in [("events.jsonl", &now), ("events.jsonl.1", &before)] {
        assert!(!file.is_empty(), "{name} is empty");
        let bytes = std::fs::metadata(v.dir.path().join("out").join(name))
            .unwrap()
            .len();
        assert!(bytes <= 4096, "{name}: {bytes} bytes");
    }
    // Rotation keeps the newest; each line an event of its own, no address without
    // include_client_ip.
    let ids: BTreeSet<&str> = now
        .iter()
        .chain(&before)
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), now.len() + before.len());
    assert!(now
        .iter()
        .chain(&before)
        .all(|e| e["data"].get("client_ip").is_none()));
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_events_spooled{sink=\"archive\"}") == 0.0
            && v.status()["events"][0]["spooled"] == 0
    }));
    let status = v.status();
    assert_eq!(status["events"][0]["sink"], "archive");
    assert_eq!(status["events"][0]["kind"], "file");
}

#[test]
fn a_redis_stream_sink_xadds_each_event() {
    let Some(redis) = Redis::start() else { return };
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(OPEN_ROOM)
        .extra(&format!(
            "[[events.sink]]\nname = \"stream\"\nkind = \"redis_stream\"\nredis = \"{}\"\n\
             stream = \"shop:events\"\nmax_len = 1000\ntypes = [\"admission.granted\"]\n",
            redis.url()
        ))
        .start();
    visit(&v, (1..=3).map(|i| format!("192.0.2.{i}")));
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut entries = || -> Vec<(String, BTreeMap<String, String>)> {
        let reply: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg("shop:events")
            .arg("-")
            .arg("+")
            .query(&mut conn)
            .unwrap();
        reply
            .into_iter()
            .map(|(id, fields)| (id, fields.into_iter().collect()))
            .collect()
    };
    let started = Instant::now();
    let mut got = Vec::new();
    while started.elapsed() < Duration::from_secs(10) {
        got = entries();
        if got.len() >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(got.len(), 3, "{}", v.log_text());
    for (_, fields) in &got {
        let event: serde_json::Value = serde_json::from_str(&fields["event"]).unwrap();
        assert_eq!(fields["id"], event["id"].as_str().unwrap());
        assert_eq!(fields["type"], "vestibule.admission.granted");
        assert_eq!(event["type"], fields["type"].as_str());
    }
    assert!(eventually(Duration::from_secs(5), || count(
        &v,
        "vestibule_events_total{result=\"delivered\",sink=\"stream\",type=\"admission.granted\"}"
    ) == 3.0));
}

#[test]
fn check_names_the_key_of_a_bad_sink() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("keys.toml"),
        format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("hook-secret"), format!("{SECRET}\n")).unwrap();
    let config = dir.path().join("vestibule.toml");
    let sink = |url: &str, secret: &str| {
        format!(
            "[[events.sink]]\nname = \"s{}\"\nkind = \"webhook\"\nurl = \"{url}\"\nsecret_file = \"{secret}\"\n",
            url.len() + secret.len()
        )
    };
    let text = format!(
        "[upstream]\npeers = [\"127.0.0.1:9\"]\n{}{}",
        sink("hooks.example/in", "hook-secret"),
        sink("https://hooks.example/in", "no-such-file")
    );
    std::fs::write(&config, text).unwrap();
    let (code, out, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    let said = format!("{out}{err}");
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("events.sink[0].url"), "{said}");
    assert!(said.contains("events.sink[1].secret_file"), "{said}");
    assert!(!said.contains(SECRET), "{said}");
    std::fs::write(
        &config,
        format!(
            "[upstream]\npeers = [\"127.0.0.1:9\"]\n{}",
            sink("https://hooks.example/in", "hook-secret")
        ),
    )
    .unwrap();
    let (code, out, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn each_kind_of_event_is_sent_from_where_it_happens() {
    let origin = Origin::start();
    let fmt = |secs: u64| {
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(secs))
            .to_string()
    };
    let mut setup = Setup::new(origin.addr)
        .extra(&format!(
            "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
             [[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 100000\napi = true\njwt = true\n\
             [[room.event]]\nname = \"launch\"\nstart = \"{}\"\nend = \"{}\"\n\
             [[events.sink]]\nname = \"all\"\nkind = \"file\"\npath = \"all.jsonl\"\n",
            // Far enough ahead that the first housekeeping tick, on a loaded machine too, sees
            // it scheduled before it starts.
            fmt(10),
            fmt(3600)
        ));
    setup.admin = Some(format!(
        "listen = \"{}\"\ntoken = \"an-operator-token-for-sinks\"",
        free_addr()
    ));
    // The queue API signs with a JWT key.
    setup = setup.file(
        "jwt-1.pem",
        vestibule::jwt::generate(vestibule::jwt::Algorithm::Es256),
    );
    setup.keys = crate::jwt::ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    let v = setup.start();
    let mut a = User::at("198.51.100.77");
    assert_eq!(a.get(&v, "/").status(), 200);
    // The origin ends the session.
    assert_eq!(a.get(&v, "/__revoke").status(), 200);
    // An operator moves the serving counter.
    let resp = client()
        .post(format!("http://{}/rooms/sale/serving", v.admin))
        .bearer_auth("an-operator-token-for-sinks")
        .body(r#"{"increment_by": 2}"#)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().unwrap_or_default());
    // An app takes a number through the queue API and exchanges it for a JWT.
    let api = |path: &str, body: Option<String>| -> serde_json::Value {
        let mut req = client()
            .post(v.url(&format!("/.vestibule/rooms/sale{path}")))
            .header("X-Forwarded-For", "198.51.100.78");
        if let Some(b) = body {
            req = req.header("Content-Type", "application/json").body(b);
        }
        let resp = req.send().unwrap();
        assert_eq!(resp.status(), 200);
        resp.json().unwrap()
    };
    let placed = api("/queue", None);
    let id = placed["request_id"].as_str().unwrap().to_owned();
    api("/token", Some(format!("{{\"request_id\": \"{id}\"}}")));
    // The site marks that session completed.
    let resp = client()
        .put(format!("http://{}/rooms/sale/sessions/{id}", v.admin))
        .bearer_auth("an-operator-token-for-sinks")
        .body(r#"{"status": "completed"}"#)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().unwrap_or_default());
    let path = v.dir.path().join("all.jsonl");
    let by_type = || -> BTreeMap<String, serde_json::Value> {
        lines(&path)
            .into_iter()
            .map(|e| (e["type"].as_str().unwrap().to_owned(), e))
            .collect()
    };
    let wanted = [
        "vestibule.admission.granted",
        "vestibule.session.updated",
        "vestibule.serving.moved",
        "vestibule.operator.action",
        "vestibule.event.state_changed",
    ];
    assert!(
        eventually(Duration::from_secs(30), || {
            let got = by_type();
            wanted.iter().all(|t| got.contains_key(*t))
        }),
        "{:?}\n{}",
        by_type().keys().collect::<Vec<_>>(),
        v.log_text()
    );
    let jwt_admission = || {
        lines(&path)
            .into_iter()
            .find(|e| e["type"] == "vestibule.admission.granted" && e["data"]["via"] == "api")
    };
    assert!(eventually(Duration::from_secs(5), || jwt_admission().is_some()));
    let by_jwt = jwt_admission().unwrap();
    assert_eq!(by_jwt["data"]["queue_number"], placed["queue_number"]);
    assert!(by_jwt["data"]["identity"].is_null());
    let by_request = lines(&path)
        .into_iter()
        .find(|e| e["type"] == "vestibule.admission.granted" && e["data"]["via"] == "request")
        .expect("the visitor's own admission");
    assert_eq!(by_request["data"]["room"], "sale");
    assert!(by_request["data"].get("client_ip").is_none());
    let got = by_type();
    let data = |t: &str| &got[t]["data"];
    let sessions: Vec<serde_json::Value> = lines(&path)
        .into_iter()
        .filter(|e| e["type"] == "vestibule.session.updated")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    assert_eq!(sessions[0]["status"], "revoked");
    assert_eq!(
        (&sessions[1]["status"], &sessions[1]["queue_number"]),
        (&serde_json::json!("completed"), &placed["queue_number"]),
        "{sessions:?}"
    );
    let moved = data("vestibule.serving.moved");
    assert_eq!(
        (
            moved["why"].as_str(),
            moved["to"].as_u64().unwrap() - moved["from"].as_u64().unwrap()
        ),
        (Some("operator"), 2)
    );
    let action = data("vestibule.operator.action");
    assert_eq!(action["action"], "serving");
    assert_eq!(action["operator"], "admin");
    assert!(action["source"].as_str().unwrap().starts_with("127.0.0.1"));
    let changed = data("vestibule.event.state_changed");
    assert_eq!(
        (
            changed["event"].as_str(),
            changed["from"].as_str(),
            changed["to"].as_str()
        ),
        (Some("launch"), Some("scheduled"), Some("running"))
    );
    assert_eq!(got["vestibule.event.state_changed"]["subject"], "sale");
}

/// Figures for the docs, not a check: `cargo test --test it sinks::sigkill_loss -- --ignored
/// --nocapture`. Visitors are let in from four threads as fast as they go while vestibule is
/// SIGKILLed; after a restart, how many of the admissions never reach the file sink.
#[test]
#[ignore]
fn sigkill_loss() {
    let origin = Origin::start();
    let mut v = Setup::new(origin.addr)
        .extra(OPEN_ROOM)
        .extra("[[events.sink]]\nname = \"witness\"\nkind = \"file\"\npath = \"events.jsonl\"\ninclude_client_ip = true\n")
        .start();
    let admitted = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (admitted, stop, url) = (admitted.clone(), stop.clone(), v.url("/"));
            std::thread::spawn(move || {
                let c = client();
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let ip = format!("10.{t}.{}.{}", i / 256, i % 256);
                    let ok = c
                        .get(&url)
                        .header("X-Forwarded-For", &ip)
                        .send()
                        .is_ok_and(|r| r.status() == 200);
                    if ok {
                        admitted.lock().unwrap().insert(ip);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    v.proc.signal("KILL");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(v.proc.wait_exit(Duration::from_secs(5)).is_some());
    let path = v.dir.path().join("events.jsonl");
    let before_restart = lines(&path).len();
    v.start_again("vestibule-2.log");
    std::thread::sleep(Duration::from_secs(3));
    let events = lines(&path);
    let ips: BTreeSet<String> = events
        .iter()
        .map(|e| e["data"]["client_ip"].as_str().unwrap().to_owned())
        .collect();
    let ids: BTreeSet<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    let admitted = admitted.lock().unwrap();
    let lost = admitted.difference(&ips).count();
    println!(
        "admitted {} visitors before SIGKILL; the file held {before_restart} lines then, {} after the restart ({} ids, {} duplicates); lost: {lost}",
        admitted.len(),
        events.len(),
        ids.len(),
        events.len() - ids.len()
    );
}

#[test]
fn a_rejected_event_and_a_too_old_one_are_dropped_counted_and_passed() {
    let origin = Origin::start();
    // One receiver refuses every event (400); the other is not there at all.
    let rejecting = canned_origin(
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
    let nobody = free_addr();
    let v = Setup::new(origin.addr)
        .file("hook-secret", format!("{SECRET}\n"))
        .extra(OPEN_ROOM)
        .extra(&format!(
            "[[events.sink]]\nname = \"rejecting\"\nkind = \"webhook\"\nurl = \"http://{rejecting}/\"\nsecret_file = \"hook-secret\"\n\
             [[events.sink]]\nname = \"nobody\"\nkind = \"webhook\"\nurl = \"http://{nobody}/\"\nsecret_file = \"hook-secret\"\nmax_retry_age = \"1s\"\n"
        ))
        .start();
    visit(&v, (1..=3).map(|i| format!("192.0.2.{i}")));
    let series = |result: &str, sink: &str| {
        format!("vestibule_events_total{{result=\"{result}\",sink=\"{sink}\",type=\"admission.granted\"}}")
    };
    assert!(
        eventually(Duration::from_secs(10), || {
            count(&v, &series("rejected", "rejecting")) == 3.0
                && count(&v, &series("dropped", "nobody")) == 3.0
        }),
        "{}\n{}",
        v.metrics(),
        v.log_text()
    );
    assert!(count(&v, &series("retried", "nobody")) >= 1.0);
    assert_eq!(count(&v, &series("delivered", "rejecting")), 0.0);
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_events_spooled{sink=\"nobody\"}") == 0.0
            && v.metric("vestibule_events_oldest_spooled_seconds{sink=\"nobody\"}") == 0.0
    }));
    // Each logged once, not once an event (the log line may trail the counter).
    assert!(
        eventually(Duration::from_secs(5), || {
            let log = v.log_text();
            log.matches("rejected: the receiver answered 400").count() == 1
                && log.matches("not delivered within max_retry_age").count() == 1
        }),
        "{}",
        v.log_text()
    );
}

/// A full disk under a spool (its segment is `/dev/full`, which answers every write with
/// ENOSPC): visitors are served as ever, the events are counted as dropped and logged once, and
/// once there is room again events flow.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_under_the_spool_is_counted_and_logged_never_felt() {
    let origin = Origin::start();
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let segment = spool.join(format!("{:020}.seg", 1));
    std::os::unix::fs::symlink("/dev/full", &segment).unwrap();
    let v = Setup::new(origin.addr)
        .extra(OPEN_ROOM)
        .extra(&format!(
            "[[events.sink]]\nname = \"archive\"\nkind = \"file\"\npath = \"events.jsonl\"\nspool_dir = \"{}\"\n\
             types = [\"admission.granted\"]\n",
            spool.display()
        ))
        .start();
    visit(&v, (1..=5).map(|i| format!("203.0.113.{i}")));
    let dropped =
        "vestibule_events_total{result=\"dropped\",sink=\"archive\",type=\"admission.granted\"}";
    assert!(
        eventually(Duration::from_secs(5), || count(&v, dropped) == 5.0),
        "{}",
        v.log_text()
    );
    assert!(
        eventually(Duration::from_secs(5), || v
            .log_text()
            .matches("cannot write to the spool")
            .count()
            == 1),
        "{}",
        v.log_text()
    );
    // Room again.
    std::fs::remove_file(&segment).unwrap();
    visit(&v, (6..=8).map(|i| format!("203.0.113.{i}")));
    let delivered =
        "vestibule_events_total{result=\"delivered\",sink=\"archive\",type=\"admission.granted\"}";
    assert!(
        eventually(Duration::from_secs(5), || count(&v, delivered) == 3.0),
        "{}",
        v.log_text()
    );
    assert!(eventually(Duration::from_secs(5), || v
        .log_text()
        .contains("the spool takes events again")));
    assert_eq!(lines(&v.dir.path().join("events.jsonl")).len(), 3);
}

/// `store.state_changed` when the cluster's store is reached, and when it stops answering; and
/// a `redis_stream` sink with no `redis` of its own writes to the cluster's.
#[test]
fn the_cluster_store_coming_and_going_is_an_event() {
    let Some(redis) = Redis::start() else { return };
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(OPEN_ROOM)
        .extra(&format!(
            "[cluster]\nstore = \"redis\"\nredis = [\"{}\"]\nnode = \"edge-1\"\nsync_interval = \"250ms\"\n\
             [[events.sink]]\nname = \"ops\"\nkind = \"file\"\npath = \"ops.jsonl\"\ntypes = [\"store.state_changed\"]\n\
             [[events.sink]]\nname = \"stream\"\nkind = \"redis_stream\"\ntypes = [\"admission.granted\"]\n",
            redis.url()
        ))
        .start();
    let path = v.dir.path().join("ops.jsonl");
    let states = || -> Vec<(serde_json::Value, serde_json::Value)> {
        lines(&path)
            .into_iter()
            .map(|e| (e["data"]["from"].clone(), e["data"]["to"].clone()))
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(10), || !states().is_empty()),
        "{}",
        v.log_text()
    );
    assert_eq!(states()[0], (serde_json::Value::Null, "up".into()));
    let first = &lines(&path)[0];
    assert_eq!(first["source"], "edge-1");
    assert!(first.get("subject").is_none(), "no room");
    // The cluster's Redis takes the stream.
    visit(&v, ["192.0.2.50".to_owned()]);
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        redis::cmd("XLEN")
            .arg("vestibule:events")
            .query::<u64>(&mut conn)
            .unwrap()
            == 1
    }));
    // The store freezes.
    redis.signal("STOP");
    let down = eventually(Duration::from_secs(10), || {
        states().contains(&("up".into(), "down".into()))
    });
    redis.signal("CONT");
    assert!(down, "{:?}\n{}", states(), v.log_text());
    assert!(
        eventually(Duration::from_secs(10), || {
            states().contains(&("down".into(), "up".into()))
        }),
        "{:?}",
        states()
    );
}

/// A reload, even one that edits the sinks (which wait for a restart), leaves what is spooled
/// alone: once the receiver is up, every event arrives.
#[test]
fn a_reload_loses_nothing_spooled() {
    let origin = Origin::start();
    let listener = bind_loopback();
    let hook = listener.local_addr().unwrap();
    // The receiver is not there yet.
    drop(listener);
    let v = Setup::new(origin.addr)
        .file("hook-secret", format!("{SECRET}\n"))
        .extra(OPEN_ROOM)
        .extra(&format!(
            "[[events.sink]]\nname = \"shop\"\nkind = \"webhook\"\nurl = \"http://{hook}/\"\nsecret_file = \"hook-secret\"\n\
             types = [\"admission.granted\"]\n"
        ))
        .start();
    visit(&v, (1..=3).map(|i| format!("192.0.2.{i}")));
    assert!(eventually(Duration::from_secs(5), || {
        count(&v, "vestibule_events_spooled{sink=\"shop\"}") == 3.0
    }));
    // The oldest one's age keeps counting while the sender waits to retry.
    assert!(eventually(Duration::from_secs(6), || {
        count(&v, "vestibule_events_oldest_spooled_seconds{sink=\"shop\"}") >= 2.5
    }));
    let before = v.edit_config(
        "types = [\"admission.granted\"]\n",
        "types = [\"admission.granted\", \"event.state_changed\"]\n",
    );
    v.wait_generation_above(before);
    assert!(
        eventually(Duration::from_secs(5), || v
            .log_text()
            .contains("events.sink")
            && v.log_text().contains("needs a restart")),
        "{}",
        v.log_text()
    );
    // Still admission events for this run: the sinks wait for a restart.
    visit(&v, ["192.0.2.4".to_owned()]);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let receiver = Receiver::start(
        TcpListener::bind(hook).expect("the receiver's port"),
        seen.clone(),
        0,
    );
    let admissions = || {
        seen.lock()
            .unwrap()
            .delivered
            .values()
            .filter(|e| e["type"] == "vestibule.admission.granted")
            .count()
    };
    assert!(
        eventually(Duration::from_secs(20), || admissions() == 4),
        "{}",
        v.log_text()
    );
    receiver.stop();
}

/// A queue API room's serving counter, once a minute: moved by admissions since the minute
/// before, it is sent as `serving.moved` with `why: "minute"`.
#[test]
fn the_serving_counter_is_sent_once_a_minute_when_it_moved() {
    let second = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % 60
    };
    // The first look at the counters (a second after the start) must fall in the minute of the
    // admissions: start early enough in a minute.
    if second() > 45 {
        std::thread::sleep(Duration::from_secs(61 - second()));
    }
    let origin = Origin::start();
    let mut setup = Setup::new(origin.addr).extra(
        "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
         [[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 100000\napi = true\njwt = true\n\
         [[events.sink]]\nname = \"serving\"\nkind = \"file\"\npath = \"serving.jsonl\"\ntypes = [\"serving.moved\"]\n",
    );
    setup = setup.file(
        "jwt-1.pem",
        vestibule::jwt::generate(vestibule::jwt::Algorithm::Es256),
    );
    setup.keys = crate::jwt::ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    let v = setup.start();
    std::thread::sleep(Duration::from_millis(1500));
    for ip in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        let resp = client()
            .post(v.url("/.vestibule/rooms/sale/queue"))
            .header("X-Forwarded-For", ip)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let path = v.dir.path().join("serving.jsonl");
    let moved = || {
        lines(&path)
            .into_iter()
            .find(|e| e["data"]["why"] == "minute")
    };
    assert!(
        eventually(Duration::from_secs(70), || moved().is_some()),
        "{}",
        v.log_text()
    );
    let data = &moved().unwrap()["data"];
    assert_eq!(
        (
            data["room"].as_str(),
            data["from"].as_u64(),
            data["to"].as_u64()
        ),
        (Some("sale"), Some(0), Some(3)),
        "{data}"
    );
}
