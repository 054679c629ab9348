//! Origins behind the proxy: the demo origin in its own process ([`Origin`]), canned and
//! stalling ones, and a strict HTTP/1.1 origin that keeps what it was sent ([`RawOrigin`]).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::*;

/// The demo origin in its own process.
pub struct Origin {
    pub addr: SocketAddr,
    /// Held for its drop, which stops the origin with the test.
    #[allow(dead_code)]
    pub proc: Proc,
    _dir: tempfile::TempDir,
}

impl Origin {
    pub fn start() -> Origin {
        Origin::start_with(&[])
    }

    /// The demo origin started with these extra arguments (`--model-capacity 20`, …).
    pub fn start_with(extra: &[&str]) -> Origin {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr = free_addr();
        let addr_text = addr.to_string();
        let mut args = vec!["origin", "--listen", &addr_text, "--threads", "2"];
        args.extend_from_slice(extra);
        let proc = spawn(&args, &dir.path().join("origin.log"), &[]);
        assert!(
            wait_for_port(addr, Duration::from_secs(10)),
            "origin did not start"
        );
        Origin {
            addr,
            proc,
            _dir: dir,
        }
    }

    /// Requests the origin has served so far (`/__stats` does not count itself). Panics when the
    /// origin does not answer: a count that reads 0 on error would let "nothing reached the
    /// origin" pass whenever the origin is down.
    pub fn served(&self) -> u64 {
        let resp = client()
            .get(format!("http://{}/__stats", self.addr))
            .send()
            .expect("the origin answers /__stats");
        assert_eq!(resp.status(), 200, "/__stats");
        let v: serde_json::Value = resp.json().expect("/__stats is JSON");
        v["served"].as_u64().expect("/__stats has a served count")
    }
}

/// An origin that answers every request with the same bytes, written as given (for answers the
/// demo origin cannot give, such as informational responses), then closes the connection.
/// Serves until the test ends.
pub fn canned_origin(answer: &'static [u8]) -> SocketAddr {
    scripted_origin(answer, false)
}

/// An origin that reads each request head, writes `answer` (possibly nothing, possibly part of
/// a response), and then holds the connection open without another byte for up to 30 s.
pub fn stalling_origin(answer: &'static [u8]) -> SocketAddr {
    scripted_origin(answer, true)
}

fn scripted_origin(answer: &'static [u8], hold: bool) -> SocketAddr {
    use std::io::Write;
    let listener = bind_loopback();
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = s.write_all(answer);
                if hold {
                    // Until the proxy gives up on it (a read returns 0) or 30 s pass.
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let _ = s.read(&mut byte);
                }
            });
        }
    });
    addr
}

/// A strict HTTP/1.1 origin on loopback, in this test process, that keeps what it was sent:
/// every connection's raw bytes (the first 256 KiB of each), how many connections and requests
/// it took, and how many requests it could not parse. Bodies are read by `Content-Length` or
/// chunked framing; a request line that is not `METHOD target HTTP/1.x` gets 400 and the
/// connection is closed, as a strict origin does. Each answer is 200 with the body
/// `<n> <method> <target> <body length>`, `n` counting from 1 over the origin's life. A target
/// with `?ms=N` is answered after N milliseconds (at most 5 s). Serves until the test ends.
pub struct RawOrigin {
    pub addr: SocketAddr,
    state: std::sync::Arc<RawState>,
}

#[derive(Default)]
struct RawState {
    connections: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
    malformed: std::sync::atomic::AtomicU64,
    received: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// How much of each connection's bytes a [`RawOrigin`] keeps.
const RAW_KEEP: usize = 256 * 1024;

impl RawOrigin {
    pub fn start() -> RawOrigin {
        let listener = bind_loopback();
        let addr = listener.local_addr().expect("addr");
        let state = std::sync::Arc::new(RawState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { continue };
                let state = shared.clone();
                let index = {
                    let mut received = state.received.lock().unwrap_or_else(|p| p.into_inner());
                    received.push(Vec::new());
                    received.len() - 1
                };
                state
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || raw_serve(s, &state, index));
            }
        });
        RawOrigin { addr, state }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state
            .connections
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Well-formed requests read so far (answered or not).
    pub fn requests(&self) -> u64 {
        self.state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests it could not parse (each answered with 400, its connection closed).
    pub fn malformed(&self) -> u64 {
        self.state
            .malformed
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The bytes received, one entry per connection, in the order they were accepted.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.state
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Reads from `s` into `buf` (recording what came) until `buf` holds at least `want` bytes;
/// false when the connection ends first.
fn raw_fill(s: &mut TcpStream, buf: &mut Vec<u8>, want: usize, state: &RawState, i: usize) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < want {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                let mut received = state.received.lock().unwrap_or_else(|p| p.into_inner());
                let kept = &mut received[i];
                let room = RAW_KEEP.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&chunk[..room]);
            }
        }
    }
    true
}

/// Reads one CRLF-ended line from the front of the connection's buffer.
fn raw_line(s: &mut TcpStream, buf: &mut Vec<u8>, state: &RawState, i: usize) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf[..end].to_vec();
            buf.drain(..end + 2);
            return Some(line);
        }
        if buf.len() > 64 * 1024 || !raw_fill(s, buf, buf.len() + 1, state, i) {
            return None;
        }
    }
}

fn raw_serve(mut s: TcpStream, state: &RawState, i: usize) {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    loop {
        let Some(request_line) = raw_line(&mut s, &mut buf, state, i) else {
            return;
        };
        let text = String::from_utf8_lossy(&request_line).into_owned();
        let parts: Vec<&str> = text.split(' ').collect();
        let well_formed = parts.len() == 3
            && !parts[0].is_empty()
            && parts[0].bytes().all(|b| b.is_ascii_uppercase())
            && parts[2].starts_with("HTTP/1.");
        if !well_formed {
            state.malformed.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nbad request",
            );
            return;
        }
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let Some(line) = raw_line(&mut s, &mut buf, state, i) else {
                return;
            };
            if line.is_empty() {
                break;
            }
            let line = String::from_utf8_lossy(&line).to_ascii_lowercase();
            if let Some((name, value)) = line.split_once(':') {
                match name.trim() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "transfer-encoding" => chunked = value.contains("chunked"),
                    _ => {}
                }
            }
        }
        let mut body = 0usize;
        if chunked {
            loop {
                let Some(size) = raw_line(&mut s, &mut buf, state, i) else {
                    return;
                };
                let size = String::from_utf8_lossy(&size);
                let Ok(size) =
                    usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                else {
                    state.malformed.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                if size == 0 {
                    // Trailers, up to the empty line.
                    loop {
                        match raw_line(&mut s, &mut buf, state, i) {
                            Some(l) if l.is_empty() => break,
                            Some(_) => {}
                            None => return,
                        }
                    }
                    break;
                }
                if !raw_fill(&mut s, &mut buf, size + 2, state, i) {
                    return;
                }
                buf.drain(..size + 2);
                body += size;
            }
        } else if length > 0 {
            if !raw_fill(&mut s, &mut buf, length, state, i) {
                return;
            }
            buf.drain(..length);
            body = length;
        }
        let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
        let target = parts[1];
        if let Some(ms) = target
            .split_once("ms=")
            .and_then(|(_, v)| v.split('&').next())
            .and_then(|v| v.parse::<u64>().ok())
        {
            std::thread::sleep(Duration::from_millis(ms.min(5_000)));
        }
        let answer = format!("{n} {} {target} {body}", parts[0]);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        );
        if s.write_all(head.as_bytes()).is_err() || s.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
