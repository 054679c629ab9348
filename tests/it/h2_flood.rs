//! HTTP/2 abuse: a rapid-reset flood (CVE-2023-44487) and a CONTINUATION flood
//! (CVE-2024-27316 and kin) against the real server over h2c, while another client keeps being
//! served. Memory is read from /proc before and after; every loop is bounded in count and time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::*;

fn start(origin: &Origin) -> Vestibule {
    Setup::new(origin.addr)
        .server("h2c = true\nheader_timeout = \"2s\"")
        .start()
}

/// A request by another client, over HTTP/1.1 on a fresh connection.
fn bystander_served(v: &Vestibule) -> bool {
    client()
        .get(v.url("/__echo"))
        .send()
        .is_ok_and(|r| r.status() == 200)
}

/// Opens streams and cancels each at once, as fast as the server lets it, for at most
/// `streams` streams or `limit` of time. Returns (streams opened, whether the server ended the
/// connection).
async fn rapid_reset(addr: SocketAddr, streams: usize, limit: Duration) -> (usize, bool) {
    let deadline = Instant::now() + limit;
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return (0, true);
    };
    let Ok((mut h2, conn)) = h2::client::handshake(tcp).await else {
        return (0, true);
    };
    let driver = tokio::spawn(conn);
    let mut opened = 0;
    let mut ended = false;
    while opened < streams && Instant::now() < deadline {
        let ready = tokio::time::timeout(Duration::from_secs(2), h2.clone().ready()).await;
        h2 = match ready {
            Ok(Ok(h2)) => h2,
            _ => {
                ended = true;
                break;
            }
        };
        let req = http::Request::get(format!("http://{addr}/__echo?i={opened}"))
            .body(())
            .unwrap();
        match h2.send_request(req, true) {
            Ok((response, mut stream)) => {
                // RST_STREAM(CANCEL) right behind the HEADERS.
                stream.send_reset(h2::Reason::CANCEL);
                drop(response);
                opened += 1;
            }
            Err(_) => {
                ended = true;
                break;
            }
        }
        if opened % 256 == 0 {
            tokio::task::yield_now().await;
        }
    }
    drop(h2);
    let _ = tokio::time::timeout(Duration::from_secs(2), driver).await;
    (opened, ended)
}

#[test]
fn a_rapid_reset_flood_leaves_others_served_and_memory_bounded() {
    let origin = Origin::start();
    let v = start(&origin);
    assert!(bystander_served(&v));
    let before = rss_kib(v.proc.pid());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = v.proxy;
    let flood = rt.spawn(async move {
        let mut total = 0;
        let mut ended = 0;
        for _ in 0..4 {
            let (opened, closed) = rapid_reset(addr, 20_000, Duration::from_secs(10)).await;
            total += opened;
            ended += usize::from(closed);
        }
        (total, ended)
    });
    // Others are served while the flood runs.
    let mut served = 0;
    for _ in 0..10 {
        if bystander_served(&v) {
            served += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (opened, ended) = rt.block_on(flood).unwrap();
    assert_eq!(served, 10, "a bystander was refused during the flood");
    assert!(opened > 400, "the flood never got going: {opened} streams");
    eprintln!("rapid reset: {opened} streams opened and cancelled; the server ended {ended} of 4 connections");

    assert!(bystander_served(&v));
    // Memory comes back to about where it was: nothing per cancelled stream is kept.
    let settled = eventually(Duration::from_secs(15), || {
        rss_kib(v.proc.pid()) < before + 64 * 1024
    });
    let after = rss_kib(v.proc.pid());
    assert!(settled, "RSS grew from {before} KiB to {after} KiB");
    eprintln!("RSS {before} KiB before, {after} KiB after");
    assert!(!v.log_text().contains("panicked"));
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// One HPACK literal header field without indexing, new name: `x-flood-NNNN: <value>`.
fn literal(i: usize, value_len: usize) -> Vec<u8> {
    let name = format!("x-flood-{i:06}");
    let mut b = vec![0x00, name.len() as u8];
    b.extend_from_slice(name.as_bytes());
    // Value length with a 7-bit prefix integer.
    let mut n = value_len;
    if n < 127 {
        b.push(n as u8);
    } else {
        b.push(127);
        n -= 127;
        while n >= 128 {
            b.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        b.push(n as u8);
    }
    b.extend(std::iter::repeat_n(b'a', value_len));
    b
}

#[test]
fn a_continuation_flood_is_cut_off_and_others_are_served() {
    let origin = Origin::start();
    let v = start(&origin);
    let before = rss_kib(v.proc.pid());

    let mut s = TcpStream::connect(v.proxy).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
    // HEADERS with the request's pseudo-headers (indexed :method GET, :scheme http, :path /),
    // END_STREAM but no END_HEADERS; then CONTINUATION frames that never end.
    let mut first = vec![0x82, 0x86, 0x84];
    first.extend(literal(0, 100));
    s.write_all(&frame(0x1, 0x1, 1, &first)).unwrap();
    let started = Instant::now();
    let mut sent = 0usize;
    let mut cut_off = false;
    let mut scratch = [0u8; 4096];
    while sent < 20_000 && started.elapsed() < Duration::from_secs(20) {
        let block = literal(sent + 1, 4000);
        if s.write_all(&frame(0x9, 0, 1, &block)).is_err() {
            cut_off = true;
            break;
        }
        sent += 1;
        match s.read(&mut scratch) {
            Ok(0) => {
                cut_off = true;
                break;
            }
            // A GOAWAY (or anything): keep going until the socket says it is closed.
            Ok(_) => {}
            Err(_) => {}
        }
    }
    assert!(
        cut_off,
        "the server took {sent} CONTINUATION frames ({} MiB) without closing",
        sent * 4 / 1024
    );
    eprintln!("CONTINUATION flood cut off after {sent} frames of 4 KiB");
    // 64 KiB of header list is the limit: far fewer than the 20,000 frames tried.
    assert!(sent < 1000, "{sent} frames");
    assert!(bystander_served(&v));
    let after = rss_kib(v.proc.pid());
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert!(!v.log_text().contains("panicked"));
}

/// How one connection's paced reset flood went, as its client saw it.
#[derive(Debug, Default)]
struct Paced {
    /// Streams opened (and each reset 5 ms later).
    opened: usize,
    /// How the connection ended, if the server ended it: `GOAWAY(<reason>)`, `closed`, or
    /// `stalled` (no stream capacity for 2 s); `None` when it was still open at the deadline.
    ended: Option<String>,
    /// From the connection's start to the end of the flood.
    lasted: Duration,
}

fn describe(e: &h2::Error) -> String {
    if e.is_go_away() {
        format!("GOAWAY({:?})", e.reason().unwrap_or(h2::Reason::NO_ERROR))
    } else if e.is_io() {
        "closed".into()
    } else {
        e.to_string()
    }
}

/// The paced variant of the rapid reset (CVE-2023-44487) on one h2c connection: 20 requests
/// for `path`, a pause of `pace`, RST_STREAM(CANCEL) on all 20, and again, until `limit` or
/// until the server ends the connection. `prefix` goes first on the connection (a PROXY header).
async fn paced_reset(
    addr: SocketAddr,
    prefix: &[u8],
    path: &str,
    pace: Duration,
    limit: Duration,
) -> Paced {
    use tokio::io::AsyncWriteExt;
    let started = Instant::now();
    let deadline = started + limit;
    let mut out = Paced::default();
    let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
        out.ended = Some("refused".into());
        return out;
    };
    if !prefix.is_empty() && tcp.write_all(prefix).await.is_err() {
        out.ended = Some("closed".into());
        return out;
    }
    let (mut h2, conn) = match h2::client::handshake(tcp).await {
        Ok(pair) => pair,
        Err(e) => {
            out.ended = Some(describe(&e));
            return out;
        }
    };
    let driver = tokio::spawn(conn);
    'flood: while Instant::now() < deadline {
        let mut batch = Vec::with_capacity(20);
        for _ in 0..20 {
            match tokio::time::timeout(Duration::from_secs(2), h2.clone().ready()).await {
                Ok(Ok(ready)) => h2 = ready,
                Ok(Err(e)) => {
                    out.ended = Some(describe(&e));
                    break 'flood;
                }
                Err(_) => {
                    out.ended = Some("stalled".into());
                    break 'flood;
                }
            }
            let req = http::Request::get(format!("http://{addr}{path}"))
                .body(())
                .unwrap();
            match h2.send_request(req, true) {
                Ok(pair) => {
                    batch.push(pair);
                    out.opened += 1;
                }
                Err(e) => {
                    out.ended = Some(describe(&e));
                    break 'flood;
                }
            }
        }
        tokio::time::sleep(pace).await;
        for (response, mut stream) in batch {
            stream.send_reset(h2::Reason::CANCEL);
            drop(response);
        }
    }
    out.lasted = started.elapsed();
    drop(h2);
    // The driver's own end says more than a refused stream when the server sent GOAWAY.
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(2), driver).await {
        let goaway_seen = out
            .ended
            .as_deref()
            .is_some_and(|s| s.starts_with("GOAWAY"));
        if !goaway_seen && (e.is_go_away() || out.ended.is_some()) {
            out.ended = Some(describe(&e));
        }
    }
    out
}

/// Measures the paced reset flood (20 requests, 5 ms, reset) against a recording origin with
/// the default budgets, and prints what the origin saw and how the connections ended: on one
/// h2c connection for up to 4 s, as issue 54 measured it, and for 4 s by a client that opens a
/// new connection whenever the server ends one; for an origin that answers at once and one
/// that takes 20 ms. Each on a proxy and origin of its own. A measurement, not a check:
///
/// `cargo build --release --bin vestibule` then
/// `VESTIBULE_BIN=target/release/vestibule cargo test --test it h2_flood::measure -- --ignored --nocapture`
/// (`FLOOD_PACE_MS=20` for a slower pace; a debug build is slow enough that the `h2` crate's own cap on resets of streams it has not
/// handed over yet ends the flood first; so is a busy machine).
#[test]
#[ignore = "a measurement; run it by name with --ignored --nocapture"]
fn measure_paced_reset_flood() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // FLOOD_PACE_MS: another pause between the requests and their resets than issue 54's 5 ms.
    let pace = Duration::from_millis(
        std::env::var("FLOOD_PACE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5),
    );
    let limit = Duration::from_secs(4);
    for path in ["/flood", "/flood?ms=20"] {
        for reconnect in [false, true] {
            let origin = RawOrigin::start();
            let v = Setup::new(origin.addr)
                .server("h2c = true")
                .upstream_extra("health_check = \"0s\"\n")
                .start();
            let started = Instant::now();
            let mut fates = Vec::new();
            let mut streams = 0;
            loop {
                let left = limit.saturating_sub(started.elapsed());
                if left.is_zero() || (!reconnect && !fates.is_empty()) {
                    break;
                }
                let paced = rt.block_on(paced_reset(v.proxy, b"", path, pace, left));
                streams += paced.opened;
                fates.push(format!(
                    "{} after {} streams",
                    paced.ended.as_deref().unwrap_or("open at the end"),
                    paced.opened
                ));
                // Bounded: a server that refuses connections at once must not spin this.
                if fates.len() >= 200 {
                    break;
                }
            }
            let lasted = started.elapsed();
            // Requests the proxy had sent when the flood ended still arrive.
            std::thread::sleep(Duration::from_millis(500));
            let polite = rt.block_on(h2_get(v.proxy, b"", "/polite"));
            let mut summary: Vec<(String, usize)> = Vec::new();
            for fate in &fates {
                let kind = fate.split(" after ").next().unwrap_or("").to_owned();
                match summary.iter_mut().find(|(k, _)| *k == kind) {
                    Some((_, n)) => *n += 1,
                    None => summary.push((kind, 1)),
                }
            }
            eprintln!(
                "{path} {}, {} ms: {streams} streams in {:.2} s over {} connections; the origin saw {} requests \
                 on {} connections; connections: {:?}; first: {}; last: {}; then a polite request \
                 gets {:?}; h2_reset_flood closes: {}",
                if reconnect { "reconnecting for 4 s" } else { "one connection" },
                pace.as_millis(),
                lasted.as_secs_f64(),
                fates.len(),
                origin.requests(),
                origin.connections(),
                summary,
                fates.first().map_or("-", String::as_str),
                fates.last().map_or("-", String::as_str),
                polite.map(|(status, _)| status),
                metric_sample(
                    &v.metrics(),
                    "vestibule_downstream_closed_total{reason=\"h2_reset_flood\"}"
                )
                .map_or_else(|| "absent".to_owned(), |n| n.to_string()),
            );
            assert!(!v.log_text().contains("panicked"));
        }
    }
}

/// A PROXY v1 header naming `client` (the tests' way to give loopback clients their own
/// addresses: the proxy trusts 127.0.0.1 to say who the client is).
fn proxy_v1(client: &str) -> Vec<u8> {
    format!("PROXY TCP4 {client} 127.0.0.1 40000 80\r\n").into_bytes()
}

/// One GET over a new h2c connection opened with `prefix`: the status and body, or `None`
/// when the connection or the stream was refused.
async fn h2_get(addr: SocketAddr, prefix: &[u8], path: &str) -> Option<(u16, String)> {
    use tokio::io::AsyncWriteExt;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    tcp.write_all(prefix).await.ok()?;
    let (h2, conn) = h2::client::handshake(tcp).await.ok()?;
    let driver = tokio::spawn(conn);
    let answer = async {
        let mut h2 = h2.ready().await.ok()?;
        let req = http::Request::get(format!("http://{addr}{path}"))
            .body(())
            .unwrap();
        let (response, _) = h2.send_request(req, true).ok()?;
        let response = response.await.ok()?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.ok()?;
            let _ = body.flow_control().release_capacity(chunk.len());
            text.extend_from_slice(&chunk);
        }
        Some((status, String::from_utf8_lossy(&text).into_owned()))
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .ok()
        .flatten();
    driver.abort();
    answer
}

/// Premature resets one connection may make in the test below.
const PER_CONNECTION: u64 = 40;
/// Premature resets one client may make in the test below, across its connections.
const PER_CLIENT: u64 = 60;
/// Streams a flood can have opened that the budget has not seen yet when it trips: the batch
/// in flight while the last counted resets were being counted, and the one sent before the
/// GOAWAY arrived.
const IN_FLIGHT: u64 = 2 * 20;

/// A recording origin, a proxy with the budgets above that believes PROXY headers (so loopback
/// clients have addresses of their own), and a runtime for the h2 clients.
fn start_with_budgets() -> (RawOrigin, Vestibule, tokio::runtime::Runtime) {
    let origin = RawOrigin::start();
    let v = Setup::new(origin.addr)
        .server(&format!(
            "h2c = true\nproxy_protocol = true\nh2_reset_per_connection = {PER_CONNECTION}\n\
             h2_reset_per_client = {PER_CLIENT}\nh2_reset_window = \"10m\"\nh2_reset_penalty = \"5m\""
        ))
        .upstream_extra("health_check = \"0s\"\n")
        .extra("[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]")
        .start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (origin, v, rt)
}

#[test]
fn a_paced_reset_flood_is_cut_off_per_connection_and_per_client() {
    let (origin, v, rt) = start_with_budgets();
    let flooder = proxy_v1("203.0.113.50");
    let bystander = proxy_v1("203.0.113.60");
    let limit = Duration::from_secs(4);
    // Each answer takes the origin 300 ms and the client resets its streams 50 ms after opening
    // them: every reset comes once the stream was accepted and its request is at the origin,
    // even in a debug build. (Resets of streams not accepted yet are the h2 crate's to count.)
    let path = "/flood?ms=300";
    let pace = Duration::from_millis(50);

    // The first connection is told to go away once its resets reach its budget.
    let first = rt.block_on(paced_reset(v.proxy, &flooder, path, pace, limit));
    eprintln!("first connection: {first:?}");
    assert_eq!(
        first.ended.as_deref(),
        Some("GOAWAY(ENHANCE_YOUR_CALM)"),
        "{first:?}"
    );
    assert!(first.lasted < limit, "{first:?}");
    std::thread::sleep(Duration::from_millis(300));
    let after_first = origin.requests();
    assert!(
        after_first <= PER_CONNECTION + IN_FLIGHT,
        "the origin saw {after_first} requests from one connection with a budget of {PER_CONNECTION}"
    );

    // Reconnecting does not start a new budget: the client's own runs out on the second
    // connection, which is told to go away too.
    let second = rt.block_on(paced_reset(v.proxy, &flooder, path, pace, limit));
    eprintln!("second connection: {second:?}");
    assert_eq!(
        second.ended.as_deref(),
        Some("GOAWAY(ENHANCE_YOUR_CALM)"),
        "{second:?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let after_second = origin.requests();
    assert!(
        after_second <= PER_CLIENT + 2 * IN_FLIGHT,
        "the origin saw {after_second} requests from a client with a budget of {PER_CLIENT}"
    );

    // From then on the client is refused before the origin: a polite request on a new
    // connection gets 429, and a third flood reaches nothing.
    let polite = rt.block_on(h2_get(v.proxy, &flooder, "/polite"));
    let (status, body) = polite.expect("a refusal is still an answer");
    assert_eq!(status, 429, "{body}");
    let third = rt.block_on(paced_reset(
        v.proxy,
        &flooder,
        path,
        pace,
        Duration::from_secs(2),
    ));
    eprintln!("third connection: {third:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        origin.requests(),
        after_second,
        "a refused client's requests reached the origin"
    );

    // Another client is served, over HTTP/2 and HTTP/1.1.
    let (status, body) = rt
        .block_on(h2_get(v.proxy, &bystander, "/bystander"))
        .expect("the bystander is answered");
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with(" GET /bystander 0"), "{body}");
    let mut s = TcpStream::connect(v.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut request = bystander.clone();
    request.extend_from_slice(b"GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(&request).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A request cancelled mid-answer costs its origin connection (Pingora cannot reuse one it
    // stopped reading), and one cancelled while connecting may cost one that carried nothing:
    // so origin connections are bounded by the same budget, not by the flood.
    assert!(
        origin.connections() <= PER_CLIENT + 2 * IN_FLIGHT + 2,
        "{} origin connections for {} requests",
        origin.connections(),
        origin.requests()
    );
    let flood_closed = v.metric("vestibule_downstream_closed_total{reason=\"h2_reset_flood\"}");
    assert!(flood_closed >= 3.0, "{flood_closed} connections counted");
    assert!(!v.log_text().contains("panicked"));
}

/// A client whose connections drop with requests in flight (a phone leaving Wi-Fi, a laptop
/// lid closed) reset nothing: its streams end with the connection, not by its RST_STREAM. Four
/// connections each dropped with 25 requests at the origin are 100 ended streams, past a client
/// budget of 60, and the client is still served afterwards.
#[test]
fn connections_that_drop_with_requests_in_flight_are_not_charged() {
    let (origin, v, rt) = start_with_budgets();
    let visitor = proxy_v1("203.0.113.70");
    let addr = v.proxy;
    for round in 0..4 {
        let sent = rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&visitor).await.unwrap();
            let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
            let driver = tokio::spawn(conn);
            let mut responses = Vec::new();
            for i in 0..25 {
                h2 = h2.ready().await.unwrap();
                let req = http::Request::get(format!("http://{addr}/slow?ms=2000&r={round}&i={i}"))
                    .body(())
                    .unwrap();
                let (response, _) = h2.send_request(req, true).unwrap();
                responses.push(response);
            }
            // Every request reaches the origin, then the connection goes: its socket is closed
            // under the streams, no RST_STREAM sent.
            tokio::time::sleep(Duration::from_millis(400)).await;
            driver.abort();
            let _ = driver.await;
            drop(responses);
            drop(h2);
            25
        });
        assert_eq!(sent, 25);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        origin.requests() >= 60,
        "{} requests reached the origin",
        origin.requests()
    );
    let (status, body) = rt
        .block_on(h2_get(v.proxy, &visitor, "/after"))
        .expect("the visitor is answered");
    assert_eq!(
        status, 200,
        "a visitor whose connections dropped was refused: {body}"
    );
    let flood_closed = v.metric("vestibule_downstream_closed_total{reason=\"h2_reset_flood\"}");
    assert_eq!(
        flood_closed, 0.0,
        "a dropped connection counted as a reset flood"
    );
}
