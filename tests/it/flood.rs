//! A flood of distinct rate-limit keys against the real proxy: memory stays bounded by
//! `max_keys`. Its own test binary, so its load never runs beside tests that time answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;

/// Sends `count` keep-alive requests with distinct `X-Key` values on one connection, one after
/// the other, reading each response; returns how many were 429.
fn flood(addr: std::net::SocketAddr, first: u64, count: u64) -> u64 {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut limited = 0;
    let mut line = String::new();
    let mut request = Vec::with_capacity(128);
    for k in first..first + count {
        request.clear();
        write!(
            request,
            "GET / HTTP/1.1\r\nHost: flood\r\nX-Key: key-{k}\r\n\r\n"
        )
        .unwrap();
        writer.write_all(&request).unwrap();
        let mut length = 0usize;
        let mut status_line = true;
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if status_line {
                assert!(line.starts_with("HTTP/1.1 "), "{line:?}");
                if line.starts_with("HTTP/1.1 429") {
                    limited += 1;
                }
                status_line = false;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
    }
    limited
}

/// A flood of distinct keys (30 times `max_keys`; `VESTIBULE_FLOOD_KEYS=1000000` for the
/// README's million) never grows memory past what `max_keys` allows.
#[test]
fn a_flood_of_distinct_keys_stays_within_the_memory_bound() {
    let keys: u64 = std::env::var("VESTIBULE_FLOOD_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let origin = Origin::start();
    // Answers come from memory (a closed room), so only the rules do work per key.
    let v = Setup::new(origin.addr)
        .extra("[[room]]\npages = \"pages\"\nallow_percentage = 0")
        .extra("[[rate_limit]]\nname = \"per-key-window\"\nkey = [\"header:x-key\"]\nwindow = \"10s\"\nlimit = 1000\nmax_keys = 10000")
        .extra("[[rate_limit]]\nname = \"per-key-bucket\"\nkey = [\"header:x-key\"]\nalgorithm = \"token_bucket\"\nlimit = 10\nperiod = \"1m\"\nmax_keys = 10000")
        .start();
    // Warm up, so allocator arenas and pools exist before measuring.
    flood(v.proxy, u64::MAX / 2, 20_000);
    let before = rss_kib(v.proc.pid());
    let start = Instant::now();
    let connections = 16;
    std::thread::scope(|s| {
        for c in 0..connections {
            let addr = v.proxy;
            s.spawn(move || flood(addr, c * keys / connections, keys / connections));
        }
    });
    let after = rss_kib(v.proc.pid());
    let grew = after.saturating_sub(before);
    eprintln!(
        "{keys} distinct keys in {:.1} s: RSS {before} KiB -> {after} KiB (+{grew} KiB)",
        start.elapsed().as_secs_f64()
    );
    // Bound: two 10,000-entry tables (~1.5 MB) plus allocator slack; the window sketch was
    // allocated at start. Anything that kept 40 bytes per key would add 12 MB here.
    assert!(grew < 12 * 1024, "RSS grew by {grew} KiB for {keys} keys");
    let m = v.metrics();
    let passes = metric_value(
        &m,
        "vestibule_ratelimit_decisions_total{outcome=\"pass\",rule=\"per-key-bucket\"}",
    );
    assert!(passes >= keys as f64, "every key was checked: {passes}");
}
