//! The autopilot on the real server, in front of the demo origin's model load
//! (`vestibule origin --model-capacity N`: latency grows with the users it saw in the last
//! seconds, 503 past its capacity).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::*;

/// A capacity room that lets everyone in at first (600 a minute), steered every second toward a
/// p95 of 150 ms.
const ROOM: &str = "[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
     new_users_per_minute = 600\nsession_duration = \"1m\"\nrefresh = \"5s\"\n\
     autopilot = true\nautopilot_interval = \"1s\"\nautopilot_target_latency = \"150ms\"\n\
     autopilot_min = 6\nautopilot_max = 600";

fn autopilot(v: &Vestibule) -> serde_json::Value {
    v.status()["rooms"][0]["autopilot"].clone()
}

/// One origin answer a visitor got: when it was asked, how long it took, its status.
type Answer = (Instant, Duration, u16);

/// A visitor asking for a page every 100 ms until `stop`; the origin's answers go to `answers`
/// (the room's own JSON answers, while held, do not).
fn browse(v: &Vestibule, mut user: User, stop: &AtomicBool, answers: &Mutex<Vec<Answer>>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let asked = Instant::now();
        let resp = user.get(v, "/shop");
        let took = asked.elapsed();
        let status = resp.status().as_u16();
        let from_room = resp
            .headers()
            .get("content-type")
            .is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
        drop(resp.bytes());
        if !from_room {
            answers.lock().unwrap().push((asked, took, status));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn p95(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[((v.len() as f64 * 0.95).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The value the autopilot sets, as a number.
fn value(v: &Vestibule) -> f64 {
    autopilot(v)["value"].as_f64().unwrap_or(f64::NAN)
}

/// A surge of 40 visitors against an origin that serves 20 (the model, 20 ms alone, a user
/// counted 2 s after their last request), in front of `room`, whose autopilot starts at
/// `start`. Then 35 leave, 5 go on browsing and 5 new visitors wait. The autopilot must cut
/// admission while the origin fails, bring it back under the target, and raise admission
/// again once it is healthy with visitors waiting. Returns the proxy for more checks.
fn surge_then_calm(room: &str, start: f64, metric: &str) -> (Origin, Vestibule) {
    let origin = Origin::start_with(&[
        "--model-capacity",
        "20",
        "--model-base",
        "20ms",
        "--model-window",
        "2s",
    ]);
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(room)
        .start();
    assert!(
        eventually(Duration::from_secs(5), || value(&v) == start),
        "the autopilot starts from the configured value: {}",
        autopilot(&v)
    );
    assert_eq!(v.metric(metric), start);
    // The surge, the cut and the raise must fall within one minute: a new minute's slots would
    // let the waiting visitors in before the autopilot sees them wait (a run that crossed a
    // minute once failed so). They take under 50 s; start in a minute's first seconds.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        % 60.0;
    if into_minute > 3.0 {
        std::thread::sleep(Duration::from_secs_f64(60.0 - into_minute + 0.2));
    }
    let leave = AtomicBool::new(false);
    let stay = AtomicBool::new(false);
    let wait = AtomicBool::new(false);
    let answers = Mutex::new(Vec::new());
    let stayers_answers = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        // A surge: 40 visitors, all let in, twice what the origin serves.
        for i in 0..40 {
            let (flag, to) = if i < 5 {
                (&stay, &stayers_answers)
            } else {
                (&leave, &answers)
            };
            let v = &v;
            s.spawn(move || browse(v, User::new(i), flag, to));
        }
        let mut lowest = start;
        let cut = eventually(Duration::from_secs(15), || {
            let a = autopilot(&v);
            lowest = value(&v);
            lowest < start && (a["reason"] == "errors" || a["reason"] == "slow")
        });
        let overloaded = answers
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.2 == 503)
            .count();
        assert!(overloaded > 0, "the surge overloaded the origin");
        assert!(cut, "the autopilot cut admission: {}", autopilot(&v));
        assert!(
            v.metric(metric) < start,
            "the metric shows the value in force"
        );
        // 35 of them leave; 5 go on browsing, and 5 new visitors wait.
        leave.store(true, Ordering::Relaxed);
        let left = Instant::now();
        for i in 100..105 {
            let v = &v;
            let (wait, to) = (&wait, &answers);
            s.spawn(move || browse(v, User::new(i), wait, to));
        }
        // The origin is healthy again and visitors wait: the autopilot raises admission.
        let raised = eventually(Duration::from_secs(30), || {
            let a = autopilot(&v);
            let now = value(&v);
            lowest = lowest.min(now);
            a["reason"] == "healthy_and_waiting" && now > lowest
        });
        assert!(raised, "the autopilot raised admission: {}", autopilot(&v));
        // Under target: what the remaining visitors got once the leavers' load had passed
        // (the model forgets a user 2 s after their last request).
        let since = left + Duration::from_secs(3);
        let settled = || -> Vec<Answer> {
            let answers = stayers_answers.lock().unwrap();
            answers.iter().filter(|a| a.0 > since).copied().collect()
        };
        eventually(Duration::from_secs(10), || settled().len() >= 30);
        stay.store(true, Ordering::Relaxed);
        wait.store(true, Ordering::Relaxed);
        let settled: Vec<Duration> = settled()
            .iter()
            .map(|a| {
                assert_eq!(a.2, 200, "no errors once under target");
                a.1
            })
            .collect();
        assert!(settled.len() >= 20, "{} answers", settled.len());
        let p = p95(settled);
        assert!(p < Duration::from_millis(150), "p95 {p:?} over the target");
    });
    let status = autopilot(&v);
    assert_eq!(status["configured"].as_f64(), Some(start));
    assert_eq!(status["target_latency_ms"], 150);
    assert!(status["changed_at"].as_str().unwrap().ends_with('Z'));
    let log = v.log_text();
    assert!(log.contains("(healthy_and_waiting: "), "{log}");
    (origin, v)
}

#[test]
fn the_autopilot_brings_an_overloaded_origin_under_target_then_raises_admission_again() {
    let (_origin, v) = surge_then_calm(
        ROOM,
        600.0,
        "vestibule_room_new_users_per_minute{room=\"sale\"}",
    );
    assert_eq!(autopilot(&v)["steers"], "new_users_per_minute");
    assert_eq!(autopilot(&v)["min"], 6);
    let log = v.log_text();
    assert!(
        log.contains("room sale: autopilot: new_users_per_minute 600 -> "),
        "every change is logged:\n{log}"
    );
}

#[test]
fn a_lotterys_autopilot_steers_its_percentage_by_the_same_law() {
    let room = "[[room]]\nname = \"sale\"\npages = \"pages\"\nallow_percentage = 100\n\
         wait_period = \"1s\"\nsession_duration = \"1m\"\n\
         autopilot = true\nautopilot_interval = \"1s\"\nautopilot_target_latency = \"150ms\"\n\
         autopilot_min = 0\nautopilot_max = 100";
    let (_origin, v) = surge_then_calm(
        room,
        100.0,
        "vestibule_room_allow_percentage{room=\"sale\"}",
    );
    assert_eq!(autopilot(&v)["steers"], "allow_percentage");
    let log = v.log_text();
    assert!(
        log.contains("room sale: autopilot: allow_percentage 100 -> "),
        "every change is logged:\n{log}"
    );
}

#[test]
fn a_reload_restarts_the_autopilot_from_the_configured_value_and_turning_it_off_restores_it() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(&ROOM.replace("= 600\nsession", "= 50\nsession"))
        .start();
    let pace = || v.metric("vestibule_room_new_users_per_minute{room=\"sale\"}");
    assert!(eventually(Duration::from_secs(5), || autopilot(&v)
        ["value"]
        == 50));
    assert_eq!(autopilot(&v)["reason"], "start");
    assert_eq!(pace(), 50.0);
    // Too few answers to judge: it holds.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(autopilot(&v)["value"], 50);
    assert_eq!(autopilot(&v)["reason"], "too_few_responses");
    assert_eq!(
        autopilot(&v)["last_interval"]["responses"],
        0,
        "{}",
        autopilot(&v)
    );

    let config = std::fs::read_to_string(v.config_path()).unwrap();
    let generation = v.generation();
    std::fs::write(
        v.config_path(),
        config.replace("= 50\nsession", "= 80\nsession"),
    )
    .unwrap();
    v.wait_generation_above(generation);
    assert!(
        eventually(Duration::from_secs(5), || autopilot(&v)["value"] == 80
            && autopilot(&v)["reason"] == "start"),
        "restarted from the new value: {}",
        autopilot(&v)
    );
    assert_eq!(pace(), 80.0);

    let generation = v.generation();
    std::fs::write(
        v.config_path(),
        config
            .replace("= 50\nsession", "= 70\nsession")
            .replace("autopilot = true", "autopilot = false"),
    )
    .unwrap();
    v.wait_generation_above(generation);
    assert!(
        eventually(Duration::from_secs(5), || autopilot(&v).is_null()),
        "off: {}",
        autopilot(&v)
    );
    assert_eq!(pace(), 70.0, "the configured value is in force");
    assert!(v
        .log_text()
        .contains("room sale: autopilot: off: the configured value is in force again"));
}

/// An origin on loopback that answers every request with a short 200, after `delay` while
/// `slow` is set: slow for reasons that have nothing to do with its load (a slow database).
fn slow_then_fast_origin(slow: &'static AtomicBool, delay: Duration) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = bind_loopback();
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                // One request head after another on the same connection (GETs: no bodies).
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                    if !head.ends_with(b"\r\n\r\n") {
                        continue;
                    }
                    head.clear();
                    if slow.load(Ordering::Relaxed) {
                        std::thread::sleep(delay);
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
                    if s.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A lottery room with the autopilot (target 200 ms, 5..100 %, every second, configured at
/// 80 %) in front of an origin slow for a few seconds (500 ms an answer, whatever its load),
/// then fast, while a crowd keeps coming: 40 visitors at a time, each asking every 100 ms
/// once let in and leaving 2 s later for a new visitor, or coming back when told while held.
/// The slowdown cuts the percentage to its floor; once the origin is fast, the autopilot must
/// take it off the floor within seconds (the floor lets in more than the ceiling the slowdown
/// left, so a law that only steps that ceiling up stays at 5 % with an idle origin).
#[test]
fn a_lotterys_autopilot_leaves_its_floor_once_a_slow_origin_is_fast_again() {
    static SLOW: AtomicBool = AtomicBool::new(true);
    let origin = slow_then_fast_origin(&SLOW, Duration::from_millis(500));
    let room = "[[room]]\nname = \"sale\"\npages = \"pages\"\nallow_percentage = 80\n\
         wait_period = \"1s\"\nsession_duration = \"1m\"\n\
         autopilot = true\nautopilot_interval = \"1s\"\nautopilot_target_latency = \"200ms\"\n\
         autopilot_min = 5\nautopilot_max = 100";
    let v = Setup::new(origin).extra(TRUST_LOCAL).extra(room).start();
    assert!(
        eventually(Duration::from_secs(5), || value(&v) == 80.0),
        "{}",
        autopilot(&v)
    );
    let stop = AtomicBool::new(false);
    let next_visitor = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..40 {
            let (v, stop, next_visitor) = (&v, &stop, &next_visitor);
            s.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let mut user = User::new(next_visitor.fetch_add(1, Ordering::Relaxed));
                    let mut let_in: Option<Instant> = None;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        if let_in.is_some_and(|t| t.elapsed() > Duration::from_secs(2)) {
                            break;
                        }
                        let resp = user.get(v, "/shop");
                        let held = resp
                            .headers()
                            .get("content-type")
                            .is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
                        let pause = if held {
                            let body: serde_json::Value = resp.json().unwrap_or_default();
                            Duration::from_secs(body["refresh_seconds"].as_u64().unwrap_or(1))
                        } else {
                            drop(resp.bytes());
                            let_in.get_or_insert_with(Instant::now);
                            Duration::from_millis(100)
                        };
                        std::thread::sleep(pause);
                    }
                }
            });
        }
        // The slowdown: cut to the floor, and held there while slow.
        let floored = eventually(Duration::from_secs(20), || value(&v) == 5.0);
        let cut = autopilot(&v);
        std::thread::sleep(Duration::from_secs(2));
        let held = eventually(Duration::from_secs(10), || value(&v) == 5.0);
        // Fast again: off the floor within seconds, for a healthy origin and a waiting crowd.
        SLOW.store(false, Ordering::Relaxed);
        let fast = Instant::now();
        let mut seen = serde_json::Value::Null;
        let left = eventually(Duration::from_secs(10), || {
            seen = autopilot(&v);
            seen["value"].as_f64().unwrap_or(0.0) > 5.0 && seen["reason"] == "healthy_and_waiting"
        });
        let after = fast.elapsed();
        stop.store(true, Ordering::Relaxed);
        assert!(floored, "cut to the floor while slow: {cut}");
        assert!(held, "at the floor while slow: {}", autopilot(&v));
        assert!(left, "still at the floor with a fast origin: {seen}");
        // The ceiling is never under the load the fast origin carried.
        let (ceiling, active) = (&seen["ceiling"], &seen["last_interval"]["active"]);
        assert!(
            ceiling.as_u64() >= active.as_u64(),
            "the ceiling under a healthy load: {seen}"
        );
        println!(
            "off the floor {:.1} s after the origin turned fast: {seen}",
            after.as_secs_f64()
        );
    });
}
