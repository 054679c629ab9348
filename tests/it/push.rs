//! The visitor push (`{api_prefix}/rooms/<room>/stream`) through the real proxy: a waiting
//! visitor's stream holds their place without a single request of theirs, says `turn` within a
//! second of a slot opening for them, and ends; streams are bounded per node; thousands stay
//! open at a small cost each.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;

const STREAM: &str = "/.vestibule/rooms/sale/stream";

fn room(extra: &str) -> String {
    format!(
        "{TRUST_LOCAL}\n[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\n\
         refresh = \"5s\"\nsession_duration = \"10m\"\n{extra}"
    )
}

/// A stream opened with a raw socket, as a browser's EventSource would open it.
pub(crate) struct Stream {
    pub(crate) status: u16,
    pub(crate) head: String,
    reader: BufReader<TcpStream>,
}

impl Stream {
    /// Opens `path` as the visitor at `ip` holding `cookie` (the room's, `waiting_room`).
    pub(crate) fn open(v: &Vestibule, path: &str, ip: &str, cookie: Option<&str>) -> Stream {
        let mut sock = TcpStream::connect(v.proxy).expect("connect");
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let cookie = cookie.map_or(String::new(), |c| format!("Cookie: waiting_room={c}\r\n"));
        write!(
            sock,
            "GET {path} HTTP/1.1\r\nHost: shop.example\r\nAccept: text/event-stream\r\n\
             X-Forwarded-For: {ip}\r\n{cookie}\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(sock);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {head:?}"));
        Stream {
            status,
            head,
            reader,
        }
    }

    /// The next event (`event` name, `data`), skipping comments and chunk framing, until
    /// `within`; `None` when the stream ended or nothing came.
    pub(crate) fn next(&mut self, within: Duration) -> Option<(String, serde_json::Value)> {
        let deadline = Instant::now() + within;
        let (mut name, mut data) = (String::new(), String::new());
        while Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            self.reader
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(10))))
                .unwrap();
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(_) => return None,
            }
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("event: ") {
                name = n.to_owned();
            } else if let Some(d) = line.strip_prefix("data: ") {
                data = d.to_owned();
            } else if line.is_empty() && !name.is_empty() {
                let value = serde_json::from_str(&data).expect("data is JSON");
                return Some((name, value));
            }
        }
        None
    }

    /// Whether the server ended the stream (a zero-length chunk, then nothing) within `within`.
    pub(crate) fn ended(&mut self, within: Duration) -> bool {
        self.reader
            .get_ref()
            .set_read_timeout(Some(within))
            .unwrap();
        let mut rest = Vec::new();
        let _ = self.reader.read_to_end(&mut rest);
        String::from_utf8_lossy(&rest).contains("0\r\n\r\n")
    }
}

fn streams_open(v: &Vestibule) -> f64 {
    metric_sample(&v.metrics(), "vestibule_streams_open{room=\"sale\"}").unwrap_or(0.0)
}

#[test]
fn a_stream_holds_a_place_without_requests_and_tells_the_turn() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("total_active_users = 1\nnew_users_per_minute = 100"))
        .start();
    let mut first = User::new(1);
    assert_eq!(first.decision(&v).0, "allow");
    // Two visitors wait for the one place: one streams, one just leaves its page.
    let mut streaming = User::new(2);
    let mut idle = User::new(3);
    assert_eq!(streaming.decision(&v).0, "anon");
    assert_eq!(idle.decision(&v).0, "anon");
    let mut stream = Stream::open(&v, STREAM, &streaming.ip, streaming.cookie.as_deref());
    assert_eq!(stream.status, 200, "{}", stream.head);
    let head = stream.head.to_ascii_lowercase();
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("cache-control: no-store"), "{head}");
    assert!(
        !head.contains("set-cookie"),
        "the stream sets no cookie: {head}"
    );
    let (name, data) = stream.next(Duration::from_secs(3)).expect("an estimate");
    assert_eq!(name, "estimate", "{data}");
    // Nobody is ahead but, as far as the room can tell, the other visitor of the same moment.
    assert!(
        data["users_ahead"].as_u64().is_some_and(|n| n <= 1),
        "{data}"
    );
    assert!(
        data["ahead_text"].as_str().is_some_and(|t| !t.is_empty()),
        "{data}"
    );
    assert_eq!(streams_open(&v), 1.0);

    // Longer than a waiting visitor stays counted after their last check-in (1.2 × refresh and
    // a browser's slack, in 5 s ticks): the idle visitor drops out, the streaming one, who has
    // not sent a request since, is still in line.
    std::thread::sleep(Duration::from_secs(16));
    let waiting = v.status()["rooms"][0]["waiting_users"].as_u64();
    assert_eq!(waiting, Some(1), "{}", v.status()["rooms"][0]);

    // A place opens: the stream says it is their turn within a second or two.
    let resp = client()
        .get(v.url("/__revoke"))
        .header("X-Forwarded-For", &first.ip)
        .header(
            "Cookie",
            format!("waiting_room={}", first.cookie.as_ref().unwrap()),
        )
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let freed = Instant::now();
    let turn = loop {
        match stream.next(Duration::from_secs(5)) {
            Some((name, _)) if name == "estimate" => continue,
            other => break other,
        }
    };
    let took = freed.elapsed();
    assert_eq!(
        turn.as_ref().map(|(n, d)| (n.as_str(), d.clone())),
        Some(("turn", serde_json::json!({}))),
        "{}",
        v.log_text()
    );
    assert!(took < Duration::from_secs(3), "turn after {took:?}");
    eprintln!("turn {took:?} after the place opened");
    assert!(stream.ended(Duration::from_secs(3)), "the stream ends");
    // They come in by their own request, as the stream said.
    assert_eq!(streaming.decision(&v).0, "allow");
    assert!(eventually(Duration::from_secs(3), || streams_open(&v) == 0.0));
    let room = &v.status()["rooms"][0];
    assert_eq!(room["active_users"], 1, "{room}");
    assert_eq!(room["waiting_users"], 0, "{room}");
}

#[test]
fn streams_are_bounded_and_only_for_waiting_visitors() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .server("max_streams = 1\n")
        .extra(&room("total_active_users = 1\nnew_users_per_minute = 100"))
        .start();
    let mut admitted = User::new(1);
    assert_eq!(admitted.decision(&v).0, "allow");
    let mut a = User::new(2);
    let mut b = User::new(3);
    assert_eq!(a.decision(&v).0, "anon");
    assert_eq!(b.decision(&v).0, "anon");

    // Nothing to watch: no cookie, or an admitted visitor's: 204, the page polls.
    assert_eq!(Stream::open(&v, STREAM, &a.ip, None).status, 204);
    let s = Stream::open(&v, STREAM, &admitted.ip, admitted.cookie.as_deref());
    assert_eq!(s.status, 204);
    // Another visitor's cookie from another address is not theirs.
    assert_eq!(
        Stream::open(&v, STREAM, "10.9.9.9", a.cookie.as_deref()).status,
        204
    );
    let unknown = Stream::open(
        &v,
        "/.vestibule/rooms/nope/stream",
        &a.ip,
        a.cookie.as_deref(),
    );
    assert_eq!(unknown.status, 404);
    let post = client()
        .post(v.url(STREAM))
        .header("X-Forwarded-For", &a.ip)
        .send()
        .unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()["allow"], "GET, OPTIONS");

    // One stream per node here: the second visitor is told to poll.
    let mut held = Stream::open(&v, STREAM, &a.ip, a.cookie.as_deref());
    assert_eq!(held.status, 200);
    assert!(held.next(Duration::from_secs(3)).is_some());
    // One stream per wait token: another tab of the same visitor polls (and takes no place).
    assert_eq!(
        Stream::open(&v, STREAM, &a.ip, a.cookie.as_deref()).status,
        204
    );
    let refused = Stream::open(&v, STREAM, &b.ip, b.cookie.as_deref());
    assert_eq!(refused.status, 503, "{}", refused.head);
    let head = refused.head.to_ascii_lowercase();
    assert!(head.contains("retry-after: 5"), "{head}");
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_api_requests_total{endpoint=\"stream\",room=\"sale\",status_class=\"5xx\"}"
        ),
        1.0
    );
    // The first visitor leaves: their place in `max_streams` is free again at once.
    drop(held);
    assert!(eventually(Duration::from_secs(3), || streams_open(&v) == 0.0));
    let mut second = Stream::open(&v, STREAM, &b.ip, b.cookie.as_deref());
    assert_eq!(second.status, 200);
    assert!(second.next(Duration::from_secs(3)).is_some());
}

#[test]
fn five_thousand_open_streams_cost_little_each() {
    const STREAMS: usize = 5_000;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .server(&format!("max_streams = {STREAMS}\n"))
        // Nobody gets in: everyone waits, and keeps their stream.
        .extra(&room("total_active_users = 1\nnew_users_per_minute = 100"))
        .start();
    let mut first = User::new(0);
    assert_eq!(first.decision(&v).0, "allow");
    let visitors: Vec<User> = (1..=STREAMS as u32 + 1)
        .map(|i| {
            let mut u = User::new(i);
            assert_eq!(u.decision(&v).0, "anon");
            u
        })
        .collect();
    let pid = v.proc.pid();
    let before = rss_kib(pid);
    let started = Instant::now();
    let mut open: Vec<Stream> = visitors[..STREAMS]
        .iter()
        .map(|u| {
            let s = Stream::open(&v, STREAM, &u.ip, u.cookie.as_deref());
            assert_eq!(s.status, 200, "{}", s.head);
            s
        })
        .collect();
    let opening = started.elapsed();
    // Every stream has said something: each is being asked about, not just connected.
    for s in open.iter_mut().step_by(500) {
        assert_eq!(
            s.next(Duration::from_secs(20)).map(|e| e.0).as_deref(),
            Some("estimate")
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    let after = rss_kib(pid);
    assert_eq!(streams_open(&v), STREAMS as f64);
    // Past `max_streams`, the next one is told to poll.
    let last = &visitors[STREAMS];
    assert_eq!(
        Stream::open(&v, STREAM, &last.ip, last.cookie.as_deref()).status,
        503
    );
    let per_stream = (after.saturating_sub(before) * 1024) as f64 / STREAMS as f64;
    eprintln!(
        "{STREAMS} streams opened in {opening:?}; RSS {before} KiB -> {after} KiB: {per_stream:.0} bytes per open stream"
    );
    // A bound, not a speed: an open stream holds its connection's buffers and one watch.
    assert!(per_stream < 64.0 * 1024.0, "{per_stream} bytes per stream");
    // The place each one held goes back as they leave.
    open.clear();
    assert!(
        eventually(Duration::from_secs(20), || streams_open(&v) == 0.0),
        "{}",
        streams_open(&v)
    );
    let room = &v.status()["rooms"][0];
    assert_eq!(room["active_users"], 1, "{room}");
}
