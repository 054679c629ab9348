//! The PROXY protocol on plain listeners (`[server] proxy_protocol`): the real server
//! behind a balancer that opens every connection with a v1 or v2 header, spoken over raw TCP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;

fn v2(local: bool, src: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(if local { 0x20 } else { 0x21 });
    h.push(0x11);
    h.extend_from_slice(&12u16.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&[10, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h
}

const ECHO: &[u8] = b"GET /__echo HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n";

/// The X-Forwarded-For the origin received for `prefix` + a request.
fn forwarded_for(v: &Vestibule, prefix: &[u8]) -> String {
    let mut req = prefix.to_vec();
    req.extend_from_slice(ECHO);
    let answer = raw_exchange(v.proxy, &req);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("not an echo: {answer}"));
    header_values(&echo_headers(&json.to_string()), "x-forwarded-for").join(",")
}

fn start(origin: &Origin, trusted: &str) -> Vestibule {
    Setup::new(origin.addr)
        .server("proxy_protocol = true\nheader_timeout = \"1s\"")
        .extra(&format!("[identity]\ntrusted_proxies = [{trusted}]"))
        .start()
}

#[test]
fn a_trusted_balancer_names_the_client_in_v1_and_v2() {
    let origin = Origin::start();
    let v = start(&origin, "\"127.0.0.1/32\"");
    // The harness's port probe (one connection without a header) is counted when the proxy gets
    // to it, which can be after start returns: wait for it, so it cannot land between the two
    // readings this test compares.
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_proxy_protocol_rejected_total") >= 1.0
    }));
    let rejected = v.metric("vestibule_proxy_protocol_rejected_total");
    assert_eq!(
        forwarded_for(&v, b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 80\r\n"),
        "203.0.113.7"
    );
    assert_eq!(
        forwarded_for(&v, b"PROXY TCP6 2001:db8::7 2001:db8::1 51000 80\r\n"),
        "2001:db8::7"
    );
    assert_eq!(
        forwarded_for(&v, &v2(false, [198, 51, 100, 9], 4000)),
        "198.51.100.9"
    );
    // LOCAL (the balancer's own health check) and UNKNOWN keep the peer.
    assert_eq!(
        forwarded_for(&v, &v2(true, [198, 51, 100, 9], 4000)),
        "127.0.0.1"
    );
    assert_eq!(forwarded_for(&v, b"PROXY UNKNOWN\r\n"), "127.0.0.1");
    // One header per connection: the next request on it needs none.
    let mut s = TcpStream::connect(v.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = b"PROXY TCP4 203.0.113.8 10.0.0.1 51000 80\r\n".to_vec();
    req.extend_from_slice(b"GET /__echo HTTP/1.1\r\nHost: a\r\n\r\n");
    s.write_all(&req).unwrap();
    let mut first = vec![0u8; 4096];
    let n = s.read(&mut first).unwrap();
    let first = String::from_utf8_lossy(&first[..n]).into_owned();
    assert!(first.contains("203.0.113.8"), "{first}");
    s.write_all(ECHO).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(
        out.starts_with("HTTP/1.1 200") && out.contains("203.0.113.8"),
        "{out}"
    );
    assert_eq!(
        v.metric("vestibule_proxy_protocol_rejected_total"),
        rejected
    );
}

#[test]
fn an_untrusted_peer_keeps_its_own_address() {
    let origin = Origin::start();
    let v = start(&origin, "\"192.0.2.0/24\"");
    assert_eq!(
        forwarded_for(&v, b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 80\r\n"),
        "127.0.0.1"
    );
}

#[test]
fn missing_garbage_truncated_and_slow_headers_close_the_connection() {
    let origin = Origin::start();
    let v = start(&origin, "\"127.0.0.1/32\"");
    let rejected = v.metric("vestibule_proxy_protocol_rejected_total");
    // No header: a plain request is not answered.
    assert_eq!(raw_exchange(v.proxy, ECHO), "");
    // Garbage, and a broken v1 line.
    assert_eq!(raw_exchange(v.proxy, b"\x16\x03\x01\x00\x05hello"), "");
    assert_eq!(
        raw_exchange(
            v.proxy,
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 80\r\nGET / HTTP/1.1\r\n\r\n"
        ),
        ""
    );
    // Truncated: the client goes away mid-header.
    {
        let mut s = TcpStream::connect(v.proxy).unwrap();
        s.write_all(b"PROXY TCP4 203.0").unwrap();
    }
    // Slow: half a header, then silence; closed within header_timeout (1 s), not answered.
    let mut s = TcpStream::connect(v.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"PROXY TCP4 203.0.113.7 ").unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(out.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "closed by header_timeout"
    );
    assert!(
        eventually(Duration::from_secs(5), || v
            .metric("vestibule_proxy_protocol_rejected_total")
            >= rejected + 5.0),
        "{}",
        v.metric("vestibule_proxy_protocol_rejected_total")
    );
    // And the server goes on serving.
    assert_eq!(
        forwarded_for(&v, b"PROXY TCP4 203.0.113.9 10.0.0.1 51000 80\r\n"),
        "203.0.113.9"
    );
}
