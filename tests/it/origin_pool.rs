//! Origin connections are reused when many requests are in flight (`[upstream]
//! keepalive_pool_size`): 300 requests held at the origin at once, twice, open 300 origin
//! connections with the default pool, and hundreds more with a pool smaller than that.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::common::*;

/// A keep-alive origin that holds each answer for `hold`, counting the connections it accepts.
fn slow_origin(hold: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = bind_loopback();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk) {
                            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    std::thread::sleep(hold);
                    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// `clients` keep-alive clients send one request each, all in flight together, `rounds` times.
fn waves(proxy: SocketAddr, clients: usize, rounds: usize) {
    let barrier = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(proxy).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                for _ in 0..rounds {
                    barrier.wait();
                    s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
                    let mut got = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !got.ends_with(b"ok") {
                        let n = s.read(&mut chunk).unwrap();
                        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
                        got.extend_from_slice(&chunk[..n]);
                    }
                    assert!(got.starts_with(b"HTTP/1.1 200"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn origin_connections(pool: Option<usize>) -> usize {
    let (origin, accepted) = slow_origin(Duration::from_millis(300));
    let mut upstream = "health_check = \"0s\"\n".to_owned();
    if let Some(size) = pool {
        upstream.push_str(&format!("keepalive_pool_size = {size}\n"));
    }
    let v = Setup::new(origin).upstream_extra(&upstream).start();
    waves(v.proxy, 300, 3);
    let n = accepted.load(Ordering::SeqCst);
    eprintln!("pool {pool:?}: {n} origin connections for 3 waves of 300");
    n
}

#[test]
fn origin_connections_are_reused_with_300_requests_in_flight() {
    // The default pool keeps all 300: later waves open (almost) nothing.
    let default = origin_connections(None);
    assert!(default <= 330, "{default} origin connections");
    // A pool of 50 per thread (100 in all) closes about 200 after each wave.
    let small = origin_connections(Some(50));
    assert!(small >= 600, "{small} origin connections with a small pool");
}
