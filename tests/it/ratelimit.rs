//! Edge rate limiting through the real proxy.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;

fn get(v: &Vestibule, path: &str, xff: &str) -> reqwest::blocking::Response {
    client()
        .get(v.url(path))
        .header("X-Forwarded-For", xff)
        .send()
        .unwrap()
}

/// A window rule written as a rate, "5/10s": five requests in ten seconds pass, the sixth is
/// refused, and the policy header reports the quota as written.
#[test]
fn a_window_limit_written_as_a_rate_allows_that_many_per_window() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[rate_limit]]\nname = \"login\"\nlimit = \"5/10s\"\npenalty = \"0s\"")
        .start();
    let user = "198.51.100.9";
    let started = Instant::now();
    for i in 0..5 {
        let resp = get(&v, "/__echo", user);
        assert_eq!(resp.status(), 200, "request {}", i + 1);
    }
    let resp = get(&v, "/__echo", user);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["ratelimit-policy"], "\"login\";q=5;w=10");
    assert!(resp.headers().contains_key("retry-after"));
    // Another identity has its own five.
    assert_eq!(get(&v, "/__echo", "198.51.100.10").status(), 200);
}

/// vsthrottle's example, 15 requests per 10 s, with a 3 s penalty (its 30 s would only make the
/// test slower): the sixteenth is blocked for the penalty, however the bucket refills.
#[test]
fn token_bucket_blocks_the_sixteenth_for_its_penalty() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[rate_limit]]\nname = \"api\"\nalgorithm = \"token_bucket\"\nlimit = 15\nperiod = \"10s\"\npenalty = \"3s\"")
        .start();
    let user = "198.51.100.7";
    for i in 0..15u64 {
        let resp = get(&v, "/__echo", user);
        assert_eq!(resp.status(), 200, "request {}", i + 1);
        // Allowed responses carry the quota left.
        assert_eq!(resp.headers()["ratelimit-policy"], "\"api\";q=15;w=10");
        let item = resp.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(
            item.starts_with(&format!("\"api\";r={};t=", 14 - i)),
            "{item}"
        );
    }
    // The proxy starts the penalty somewhere between sending the sixteenth and its answer.
    let blocked_at = Instant::now();
    let resp = get(&v, "/__echo", user);
    let blocked_by = Instant::now();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    assert_eq!(resp.headers()["ratelimit-policy"], "\"api\";q=15;w=10");
    assert_eq!(resp.headers()["ratelimit"], "\"api\";r=0;t=3");
    assert_eq!(resp.headers()["cache-control"], "no-store, private");
    assert!(resp.text().unwrap().contains("Too many requests"));
    // Another identity is unaffected.
    assert_eq!(get(&v, "/__echo", "198.51.100.8").status(), 200);
    // Still blocked through the penalty, with Retry-After counting down. Read half-way between
    // whole seconds, where only one answer is right.
    for wait_ms in [500u64, 1_500] {
        let target = blocked_at + Duration::from_millis(wait_ms);
        std::thread::sleep(target.saturating_duration_since(Instant::now()));
        let sent = Instant::now();
        let resp = get(&v, "/__echo", user);
        let received = Instant::now();
        assert_eq!(resp.status(), 429, "at +{wait_ms} ms");
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // Whole seconds left, rounded up. The proxy's clock reads whole milliseconds, and both of
        // its readings fall inside the client's round trips, which bound the time it saw left.
        let penalty = 3.0;
        let slack = 0.002;
        let least = penalty - received.duration_since(blocked_at).as_secs_f64() - slack;
        let most = penalty - sent.saturating_duration_since(blocked_by).as_secs_f64() + slack;
        assert!(
            (least.ceil()..=most.ceil()).contains(&(retry as f64)),
            "at +{wait_ms} ms: Retry-After {retry}, between {least:.3} and {most:.3} s left"
        );
    }
    std::thread::sleep(
        (blocked_at + Duration::from_millis(3_300)).saturating_duration_since(Instant::now()),
    );
    assert_eq!(
        get(&v, "/__echo", user).status(),
        200,
        "free again after the penalty"
    );
    let m = v.metrics();
    assert!(
        metric_value(
            &m,
            "vestibule_ratelimit_decisions_total{outcome=\"limited\",rule=\"api\"}"
        ) >= 1.0
    );
    assert!(
        metric_value(
            &m,
            "vestibule_ratelimit_decisions_total{outcome=\"penalized\",rule=\"api\"}"
        ) >= 2.0
    );
    assert!(
        metric_value(
            &m,
            "vestibule_ratelimit_decisions_total{outcome=\"pass\",rule=\"api\"}"
        ) >= 16.0
    );
}

/// Two buckets on one request: one `RateLimit-Policy` and one `RateLimit` field, each a list
/// with an item per bucket, in the rules' order.
#[test]
fn two_buckets_list_both_quotas() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[rate_limit]]\nname = \"per-ip\"\nalgorithm = \"token_bucket\"\nlimit = 15\nperiod = \"10s\"")
        .extra("[[rate_limit]]\nname = \"slots\"\nalgorithm = \"concurrency\"\nlimit = 50")
        .extra("[[rate_limit]]\nname = \"per-path\"\nkey = [\"client_ip\", \"path\"]\nalgorithm = \"token_bucket\"\nlimit = 100\nperiod = \"1m\"")
        .start();
    for i in 0..3u64 {
        let resp = get(&v, "/__echo", "198.51.100.20");
        assert_eq!(resp.status(), 200);
        let policies: Vec<_> = resp.headers().get_all("ratelimit-policy").iter().collect();
        assert_eq!(
            policies,
            ["\"per-ip\";q=15;w=10, \"per-path\";q=100;w=60"],
            "request {}",
            i + 1
        );
        let items: Vec<_> = resp.headers().get_all("ratelimit").iter().collect();
        assert_eq!(items.len(), 1, "{items:?}");
        // `t`, the seconds until a bucket is full again, grows with every token taken.
        let item = items[0].to_str().unwrap();
        let parts: Vec<_> = item.split(", ").collect();
        assert_eq!(parts.len(), 2, "{item}");
        assert!(
            parts[0].starts_with(&format!("\"per-ip\";r={};t=", 14 - i)),
            "{item}"
        );
        assert!(
            parts[1].starts_with(&format!("\"per-path\";r={};t=", 99 - i)),
            "{item}"
        );
    }
}

#[test]
fn window_penalty_box_json_and_metrics() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[rate_limit]]\nname = \"burst\"\nwindow = \"1s\"\nlimit = 5\npenalty = \"1m\"")
        .start();
    let c = client();
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let resp = c
            .get(v.url("/"))
            .header("X-Forwarded-For", "203.0.113.9")
            .header("Accept", "application/json")
            .send()
            .unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status() == 429 {
            assert_eq!(resp.headers()["ratelimit-policy"], "\"burst\";q=5;w=1");
            let body: serde_json::Value = resp.json().unwrap();
            assert_eq!(body["error"], "rate_limited");
            assert_eq!(body["rule"], "burst");
            assert!(body["retry_after"].as_u64().unwrap() > 50);
        }
    }
    // The burst is caught within the window (the sliding estimate counts the current
    // interval), and the penalty box holds the key afterwards.
    assert!(statuses.iter().take(5).all(|s| *s == 200), "{statuses:?}");
    assert!(statuses.iter().skip(6).all(|s| *s == 429), "{statuses:?}");
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_ratelimit_penalty_box_entries{rule=\"burst\"}"
        ),
        1.0
    );
}

#[test]
fn dry_run_counts_but_never_blocks() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[rate_limit]]\nname = \"observe\"\nwindow = \"10s\"\nlimit = 1\naction = \"log\"")
        .start();
    for _ in 0..30 {
        assert_eq!(client().get(v.url("/")).send().unwrap().status(), 200);
    }
    let m = v.metrics();
    let dry = metric_value(
        &m,
        "vestibule_ratelimit_decisions_total{outcome=\"dry_run\",rule=\"observe\"}",
    );
    assert!(dry >= 15.0, "{m}");
    assert_eq!(
        metric_value(
            &m,
            "vestibule_ratelimit_decisions_total{outcome=\"limited\",rule=\"observe\"}"
        ),
        0.0
    );
}

#[test]
fn concurrency_cap_in_front_of_a_slow_origin() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[rate_limit]]\nname = \"slots\"\nalgorithm = \"concurrency\"\nlimit = 2")
        .start();
    let url = v.url("/__slow?ms=1500");
    let results: Vec<(u16, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..5)
            .map(|i| {
                let url = url.clone();
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(if i < 2 { 0 } else { 300 }));
                    let start = Instant::now();
                    let status = client().get(&url).send().unwrap().status().as_u16();
                    (status, start.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    let limited: Vec<_> = results.iter().filter(|(s, _)| *s == 429).collect();
    assert_eq!((ok, limited.len()), (2, 3), "{results:?}");
    assert!(
        limited
            .iter()
            .all(|(_, d)| *d < Duration::from_millis(1000)),
        "429s come at once"
    );
    // Both slots came back when the slow requests ended.
    assert_eq!(
        client()
            .get(v.url("/__slow?ms=10"))
            .send()
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client()
            .get(v.url("/__slow?ms=10"))
            .send()
            .unwrap()
            .status(),
        200
    );

    // A client that gives up mid-request returns its slot too: the origin takes 30 s, far
    // longer than the wait below, so only the client's abort can free the slots.
    for _ in 0..2 {
        let mut s = TcpStream::connect(v.proxy).unwrap();
        s.write_all(b"GET /__slow?ms=30000 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(s);
    }
    assert!(
        eventually(Duration::from_secs(5), || client()
            .get(v.url("/"))
            .send()
            .unwrap()
            .status()
            == 200),
        "slots of aborted requests were not returned"
    );
}

#[test]
fn concurrency_slots_return_when_the_origin_fails() {
    let dead = free_addr();
    let v = Setup::new(dead)
        .upstream_extra("health_check = \"0s\"\n")
        .extra("[[rate_limit]]\nname = \"slots\"\nalgorithm = \"concurrency\"\nlimit = 1")
        .start();
    for _ in 0..5 {
        // Each request fails at the origin (502) and must give its only slot back.
        assert_eq!(client().get(v.url("/")).send().unwrap().status(), 502);
    }
}

#[test]
fn origin_scope_ignores_waiting_room_check_ins() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0\nbypass_paths = [\"/open/\"]")
        .extra("[[rate_limit]]\nname = \"origin-only\"\nscope = \"origin\"\nalgorithm = \"token_bucket\"\nlimit = 2\nperiod = \"1h\"\npenalty = \"0s\"")
        .start();
    // Ten visits to the waiting room (deny pages) count nothing.
    for _ in 0..10 {
        assert_eq!(client().get(v.url("/shop")).send().unwrap().status(), 200);
    }
    // Requests that reach the origin are counted: two tokens, then 429.
    assert_eq!(client().get(v.url("/open/a")).send().unwrap().status(), 200);
    assert_eq!(client().get(v.url("/open/a")).send().unwrap().status(), 200);
    let resp = client().get(v.url("/open/a")).send().unwrap();
    assert_eq!(resp.status(), 429);
    // With no penalty, Retry-After is the time until the next token (1800 s at 2 per hour).
    assert_eq!(resp.headers()["retry-after"], "1800");
}
