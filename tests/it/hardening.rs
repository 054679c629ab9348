//! Defects an attacker found, each shown through the real proxy: absolute-form targets, replayed
//! revokes, encoded traversal, hoarded lottery tokens, framing tricks and header smuggling.

use std::time::Duration;

use crate::common::*;

const VIP_AND_SITE: &str = "[[room]]\nname = \"vip\"\nhosts = [\"vip.example\"]\ncookie_name = \"wr_vip\"\npages = \"pages\"\nallow_percentage = 0\n\
[[room]]\nname = \"site\"\npages = \"pages\"\nallow_percentage = 100\n";

/// `GET http://vip.example/x` with no Host header must be routed by the target's authority.
#[test]
fn absolute_form_targets_are_routed_by_their_authority() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).extra(VIP_AND_SITE).start();
    let before = origin.served();
    let answer = raw_exchange(
        v.proxy,
        b"GET http://vip.example/__echo HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("closed right now"),
        "the vip room's deny page, not the origin: {answer}"
    );
    // Case and port do not matter; with a matching Host as well, same room.
    for request in [
        &b"GET http://VIP.example:8080/__echo HTTP/1.1\r\nConnection: close\r\n\r\n"[..],
        b"GET http://vip.example/__echo HTTP/1.1\r\nHost: vip.example\r\nConnection: close\r\n\r\n",
    ] {
        let answer = raw_exchange(v.proxy, request);
        assert!(answer.contains("closed right now"), "{answer}");
    }
    // A Host that contradicts the target is refused, never routed by either.
    let answer = raw_exchange(
        v.proxy,
        b"GET http://vip.example/__echo HTTP/1.1\r\nHost: www.example\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(origin.served(), before, "nothing reached the origin");
    // The catch-all room still serves other hosts.
    let answer = raw_exchange(
        v.proxy,
        b"GET http://www.example/__echo HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.contains("\"host\""), "{answer}");
    assert_eq!(origin.served(), before + 1);
}

/// A saved cookie replayed to a URL that answers `Vestibule-Command: revoke` frees one place,
/// once: the cap holds.
#[test]
fn a_replayed_revoke_cannot_break_the_capacity_cap() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\ntotal_active_users = 2\nrefresh = \"5s\"")
        .start();
    let mut a = User::new(1);
    let mut b = User::new(2);
    assert_eq!(a.decision(&v).0, "allow");
    assert_eq!(b.decision(&v).0, "allow");
    let saved = a.cookie.clone();
    assert_eq!(a.get(&v, "/__revoke").status(), 200);
    assert_eq!(a.cookie, None, "the revoke deletes the cookie");
    for _ in 0..5 {
        a.cookie = saved.clone();
        a.get(&v, "/__revoke");
    }
    let mut newcomers: Vec<User> = (10..17).map(User::new).collect();
    let admitted = newcomers
        .iter_mut()
        .map(|u| u.decision(&v).0)
        .filter(|d| d == "allow")
        .count();
    assert_eq!(admitted, 1, "b holds one of the two places");
    let status = v.status();
    assert_eq!(status["rooms"][0]["active_users"], 2);
    let m = v.metrics();
    assert!(
        metric_value(
            &m,
            "vestibule_token_rejected_total{reason=\"revoked\",room=\"sale\"}"
        ) >= 5.0,
        "{m}"
    );
}

/// An edit that moves the admin endpoint to loopback (which waits for a restart) and drops its
/// token in the same breath must not leave the open listener without a token.
#[test]
fn a_reload_never_removes_the_token_of_an_open_admin_listener() {
    let origin = Origin::start();
    let port = free_port();
    let token = "s3cret-admin-token-for-tests";
    let mut setup = Setup::new(origin.addr);
    setup.admin = Some(format!("listen = \"0.0.0.0:{port}\"\ntoken = \"{token}\""));
    let v = setup.start();
    let generation = v.generation();
    let config = v.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    let edited = text.replace(
        &format!("listen = \"0.0.0.0:{port}\"\ntoken = \"{token}\""),
        &format!("listen = \"127.0.0.1:{port}\""),
    );
    assert_ne!(text, edited);
    std::fs::write(&config, edited).unwrap();
    v.proc.signal("HUP");
    assert!(eventually(Duration::from_secs(5), || {
        v.metric("vestibule_config_reloads_total{result=\"failure\"}") >= 1.0
    }));
    assert_eq!(v.generation(), generation, "the edit was not applied");
    let url = format!("http://127.0.0.1:{port}/status");
    assert_eq!(client().get(&url).send().unwrap().status(), 401);
    let error = v.status()["last_reload_error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("admin.token") && error.contains("until a restart"),
        "{error}"
    );
    // `bearer` is as good as `Bearer`: the scheme is case-insensitive (RFC 9110 §11.1).
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let resp = client()
            .get(&url)
            .header("Authorization", format!("{scheme} {token}"))
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200, "{scheme}");
    }
}

/// Encoded and backslash traversal never walks out of a bypass prefix: the rooms see the path
/// an origin that decodes it would serve.
#[test]
fn encoded_traversal_does_not_escape_a_bypass_prefix() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\nname = \"shop\"\npages = \"pages\"\nallow_percentage = 0\nbypass_paths = [\"/static/\"]")
        .start();
    let before = origin.served();
    for path in [
        "/static/..%2fcheckout",
        "/static/..%2Fcheckout",
        "/static/%2e%2e%2fcheckout",
        "/static/..%5ccheckout",
        "/static/..%5Ccheckout",
        "/static/..\\checkout",
        "/static%2F..%2Fcheckout",
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(
            answer.starts_with("HTTP/1.1 400") || answer.contains("closed right now"),
            "{path} must be held or refused: {answer}"
        );
    }
    assert_eq!(origin.served(), before, "nothing reached the origin");
    // A real static file still passes.
    let resp = client().get(v.url("/static/app.css")).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(origin.served(), before + 1);
}

/// A lottery wait token is drawn within one wait period after its exp; presented later it is a
/// new arrival, so winners cannot be collected and replayed.
#[test]
fn old_lottery_wait_tokens_are_new_arrivals() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\nname = \"shop\"\npages = \"pages\"\nallow_percentage = 99\nwait_period = \"1s\"\nqueue_all = true")
        .start();
    let mut u = User::at("127.0.0.1");
    assert_eq!(u.decision(&v).0, "anon");
    let token = u.cookie.clone().unwrap();
    let exp: u64 = vestibule::token::Token::parse(token.as_bytes())
        .unwrap()
        .claims
        .exp;
    // Open the room, then come back more than a wait period after exp.
    let config = v.config_path();
    let generation = v.generation();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("queue_all = true", "queue_all = false"),
    )
    .unwrap();
    v.wait_generation_above(generation);
    let stale_at =
        std::time::UNIX_EPOCH + Duration::from_secs(exp + 1) + Duration::from_millis(100);
    if let Ok(d) = stale_at.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(d);
    }
    let (decision, _) = u.decision(&v);
    assert_eq!(
        decision, "anon",
        "a stale token is a new arrival, whatever its draw"
    );
    assert_ne!(
        u.cookie.as_deref(),
        Some(token.as_str()),
        "with a new token"
    );
    assert_eq!(
        v.metric("vestibule_token_rejected_total{reason=\"expired\",room=\"shop\"}"),
        1.0
    );
}

/// Duplicate or listed `Content-Length` values are refused unless all equal; equal ones reach
/// the origin as one value.
#[test]
fn content_length_must_be_unambiguous() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).start();
    let before = origin.served();
    for framing in [
        "Content-Length: 3\r\nContent-Length: 5",
        "Content-Length: 3, 5",
        "Content-Length: 3,",
        "Content-Length: +3",
    ] {
        let request = format!(
            "POST /__echo HTTP/1.1\r\nHost: x\r\n{framing}\r\nConnection: close\r\n\r\nabcde"
        );
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 400"), "{framing}: {answer}");
    }
    assert_eq!(
        origin.served(),
        before,
        "nothing ambiguous reached the origin"
    );
    for framing in [
        "Content-Length: 3, 3",
        "Content-Length: 3\r\nContent-Length: 3",
    ] {
        let request = format!(
            "POST /__echo HTTP/1.1\r\nHost: x\r\n{framing}\r\nConnection: close\r\n\r\nabc"
        );
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{framing}: {answer}");
        let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
        let headers = echo_headers(body);
        assert_eq!(
            header_values(&headers, "content-length"),
            ["3"],
            "{framing}"
        );
    }
}

/// The origin's command header never reaches the client, on informational answers either.
#[test]
fn informational_answers_do_not_leak_the_command_header() {
    let origin = canned_origin(
        b"HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\nVestibule-Command: revoke\r\n\r\n\
          HTTP/1.1 200 OK\r\nContent-Length: 2\r\nVestibule-Command: revoke\r\n\r\nok",
    );
    let v = Setup::new(origin)
        .upstream_extra("health_check = \"0s\"\n")
        .start();
    let answer = raw_exchange(
        v.proxy,
        b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.contains("HTTP/1.1 200"), "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("vestibule-command"),
        "{answer}"
    );
}

/// `Vestibule_X` is ours as much as `Vestibule-X`: it never reaches the origin.
#[test]
fn internal_headers_spelled_with_underscores_are_stripped() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).start();
    let answer = raw_exchange(
        v.proxy,
        b"GET /__echo HTTP/1.1\r\nHost: x\r\nVestibule_Command: revoke\r\nvestibule_x: 1\r\nX_Keep: 1\r\nConnection: close\r\n\r\n",
    );
    let body = &answer[answer.find("\r\n\r\n").expect("a body") + 4..];
    let names: Vec<String> = echo_headers(body).into_iter().map(|(n, _)| n).collect();
    assert!(
        names.iter().all(|n| !n.starts_with("vestibule")),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "x_keep"), "{names:?}");
}

/// A user let in keeps the admission when the origin is down (the 502 page carries the allow
/// token), and is counted once however often they retry.
#[test]
fn a_user_let_in_is_counted_once_and_keeps_access_on_an_error_page() {
    let dead = free_addr();
    let v = Setup::new(dead)
        .upstream_extra("health_check = \"0s\"\n")
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\nnew_users_per_minute = 100\n\
                [[room]]\nname = \"shop\"\npaths = [\"/shop\"]\ncookie_name = \"wr_shop\"\npages = \"pages\"\nallow_percentage = 100\n")
        .start();
    let mut capacity = User::new(1);
    let mut lottery = User::new(2).with_cookie_name("wr_shop");
    let uid = vestibule::identity::Identity::of_ip("10.1.0.2".parse().unwrap(), 64);
    let now = vestibule::time::now().secs();
    // A lottery wait token that has come due: at 100 % it wins.
    lottery.cookie = Some(mint(vestibule::token::Dec::Wait, now - 1, &uid));
    for _ in 0..4 {
        let resp = capacity.get(&v, "/__echo");
        assert_eq!(resp.status(), 502);
        // Not reused after an error, and the client is told so.
        assert_eq!(resp.headers()["connection"], "close");
        assert!(capacity
            .cookie
            .as_deref()
            .is_some_and(|c| c.starts_with("dec=allow&")));
        let resp = lottery.get(&v, "/shop/x");
        assert_eq!(resp.status(), 502);
        assert!(lottery
            .cookie
            .as_deref()
            .is_some_and(|c| c.starts_with("dec=allow&")));
    }
    let m = v.metrics();
    assert_eq!(
        metric_value(&m, "vestibule_room_admitted_total{room=\"sale\"}"),
        1.0
    );
    assert_eq!(
        metric_value(&m, "vestibule_room_admitted_total{room=\"shop\"}"),
        1.0
    );
}

/// `identity.source = "header"` with nobody trusted to set the header is a config error.
#[test]
fn a_header_identity_without_trusted_proxies_fails_check() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vestibule.toml");
    std::fs::write(
        &config,
        "[upstream]\npeers = [\"127.0.0.1:1\"]\n[identity]\nsource = \"header\"\nheader = \"x-user\"\n",
    )
    .unwrap();
    let (code, _, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "vestibule.toml:4: identity.source: \"header\" needs identity.trusted_proxies"
        ),
        "{err}"
    );
}

/// Reads from `s` until the server closes it or `limit` passes; returns what arrived and how
/// long the server took to close (None if it did not).
fn until_closed(s: &mut std::net::TcpStream, limit: Duration) -> (String, Option<Duration>) {
    use std::io::Read;
    let start = std::time::Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into(), Some(start.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (String::from_utf8_lossy(&got).into(), Some(start.elapsed())),
        }
    }
    (String::from_utf8_lossy(&got).into(), None)
}

/// Reads one answer whose body is framed by `Content-Length`, leaving the connection open.
fn read_one_answer(s: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a Content-Length");
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => panic!("closed before a whole answer: {text}"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// An idle keep-alive connection is closed as soon as the server starts shutting down, not at
/// the end of its keepalive_timeout or of the grace period.
#[test]
fn idle_connections_close_at_once_on_shutdown() {
    use std::io::Write;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .server("keepalive_timeout = \"30s\"")
        .start();
    let mut s = std::net::TcpStream::connect(v.proxy).unwrap();
    // Two requests: the wait for shutdown is the connection's, kept across requests.
    for _ in 0..2 {
        s.write_all(b"GET /__echo HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert!(read_one_answer(&mut s).starts_with("HTTP/1.1 200"));
    }
    std::thread::sleep(Duration::from_millis(300));
    v.proc.signal("TERM");
    let (answer, closed) = until_closed(&mut s, Duration::from_secs(5));
    assert!(answer.is_empty(), "{answer}");
    let closed = closed.expect("the idle connection was closed");
    // Closed when the shutdown is announced (well under 1 ms here). Without the edge's own
    // wait for it, the connection lasted until Pingora's services stopped, 1 s later.
    assert!(closed < Duration::from_millis(500), "{closed:?}");
}

/// Idle keep-alive connections close after keepalive_timeout; a request head must arrive whole
/// within header_timeout however it trickles; a new connection that sends nothing is closed
/// within header_timeout; an oversized head gets 431.
#[test]
fn idle_and_slow_connections_are_closed() {
    use std::io::Write;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .server("keepalive_timeout = \"2s\"\nheader_timeout = \"3s\"")
        .start();
    let connect = || std::net::TcpStream::connect(v.proxy).unwrap();

    // Kept alive after a request, then idle: closed after ~2 s, not before. The idle wait is
    // re-armed for each request on the connection, so three go first, 1 s apart (each within
    // keepalive_timeout of the one before).
    let mut s = connect();
    for i in 0..3 {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        s.write_all(b"GET /__echo HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let answer = read_one_answer(&mut s);
        assert!(answer.starts_with("HTTP/1.1 200"), "request {i}: {answer}");
    }
    let (answer, closed) = until_closed(&mut s, Duration::from_secs(6));
    assert!(answer.is_empty(), "{answer}");
    let closed = closed.expect("the idle connection was closed");
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_secs(4),
        "{closed:?}"
    );

    // A head trickling in, one byte every 500 ms: closed ~3 s after its first byte.
    let mut s = connect();
    let start = std::time::Instant::now();
    let mut closed_at = None;
    for b in b"GET /__echo HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n" {
        if s.write_all(&[*b]).is_err() {
            closed_at = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        let mut probe = [0u8; 1];
        s.set_nonblocking(true).unwrap();
        let gone = matches!(std::io::Read::read(&mut s, &mut probe), Ok(0));
        s.set_nonblocking(false).unwrap();
        if gone {
            closed_at = Some(start.elapsed());
            break;
        }
    }
    let closed_at = closed_at.expect("the slow head was cut off");
    assert!(closed_at < Duration::from_secs(5), "{closed_at:?}");

    // A connection that never sends a byte: closed within header_timeout.
    let mut s = connect();
    let (_, closed) = until_closed(&mut s, Duration::from_secs(6));
    let closed = closed.expect("the silent connection was closed");
    assert!(closed < Duration::from_secs(4), "{closed:?}");

    // A 100 KiB head: 431.
    let mut s = connect();
    let big = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let _ = s.write_all(big.as_bytes());
    let (answer, _) = until_closed(&mut s, Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    let m = v.metrics();
    assert!(
        metric_value(
            &m,
            "vestibule_downstream_closed_total{reason=\"keepalive_timeout\"}"
        ) >= 1.0,
        "{m}"
    );
    assert!(
        metric_value(
            &m,
            "vestibule_downstream_closed_total{reason=\"header_timeout\"}"
        ) >= 2.0,
        "{m}"
    );
    assert_eq!(
        metric_value(
            &m,
            "vestibule_downstream_closed_total{reason=\"header_too_large\"}"
        ),
        1.0
    );
    // Ordinary keep-alive still works: several requests on one connection.
    let c = client();
    for _ in 0..3 {
        assert_eq!(c.get(v.url("/__echo")).send().unwrap().status(), 200);
    }
}

/// Clients that hang up before their answer are the clients' doing: the log gets no error line
/// for them (at error level, any client could write one line per connection).
#[test]
fn clients_that_hang_up_do_not_fill_the_log() {
    use std::io::Write;
    let origin = Origin::start();
    let v = Setup::new(origin.addr).start();
    for _ in 0..20 {
        let mut s = std::net::TcpStream::connect(v.proxy).unwrap();
        s.write_all(b"GET /__slow?ms=300 HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        drop(s);
    }
    // Every one of them reached the origin and was given up on by the proxy.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(origin.served() >= 20, "{} served", origin.served());
    let log = v.log_text();
    assert!(!log.contains("Fail to proxy"), "{log}");
    // The proxy still answers.
    assert_eq!(client().get(v.url("/__echo")).send().unwrap().status(), 200);
}

/// With several rooms on one key ring, a place let in by the easy room was a place in the closed
/// one: its cookie copied under the other room's name was taken. Each room now signs its name
/// into its tokens and refuses another's.
#[test]
fn a_place_in_one_room_is_no_place_in_another() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(VIP_AND_SITE)
        .start();
    let resp = client()
        .get(v.url("/__echo"))
        .header("X-Forwarded-For", "10.12.0.1")
        .send()
        .unwrap();
    let site = room_cookie(&resp, "waiting_room").expect("the open room lets in");
    assert!(site.contains("&rm=site&"), "{site}");
    let before = origin.served();
    let resp = client()
        .get(v.url("/__echo"))
        .header("Host", "vip.example")
        .header("X-Forwarded-For", "10.12.0.1")
        .header("Cookie", format!("wr_vip={site}"))
        .send()
        .unwrap();
    let vip = room_cookie(&resp, "wr_vip").expect("a place in the vip room's own line");
    assert!(
        vip.contains("dec=wait") && vip.contains("&rm=vip&"),
        "{vip}"
    );
    assert!(resp.text().unwrap().contains("closed right now"));
    assert_eq!(origin.served(), before, "the origin never saw it");
    assert_eq!(
        v.metric("vestibule_token_rejected_total{reason=\"wrong_room\",room=\"vip\"}"),
        1.0
    );
}

/// An origin that takes a request and never answers gets `read_timeout`, then the client a 504
/// page; one that stops in the middle of a body has the client's connection closed, so neither
/// holds a client (or a worker's connection) for ever.
#[test]
fn an_origin_that_stops_answering_times_out() {
    use std::io::{Read, Write};
    let v = Setup::new(stalling_origin(b""))
        .upstream_extra("health_check = \"0s\"\nread_timeout = \"1s\"\n")
        .start();
    let answer = raw_exchange(
        v.proxy,
        b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");

    // A streamed answer: what came is passed on at once, then the connection is closed without
    // the last chunk, so the client can tell the answer was cut short.
    let v = Setup::new(stalling_origin(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\ne\r\nthe first part\r\n",
    ))
    .upstream_extra("health_check = \"0s\"\nread_timeout = \"1s\"\n")
    .start();
    let mut s = std::net::TcpStream::connect(v.proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = Vec::new();
    // Ok: the proxy closed the connection (an error would be this client's own timeout).
    let closed = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(closed.is_ok(), "{closed:?} after {text}");
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("\r\nthe first part\r\n"),
        "{text}"
    );
}

/// Path parameters, NUL and other control characters never walk out of a bypass prefix: a path
/// that origins would resolve to different places is refused with 400, and one that merely
/// carries a parameter is matched without it.
#[test]
fn parameters_and_control_characters_do_not_escape_a_bypass_prefix() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\nname = \"shop\"\npages = \"pages\"\nallow_percentage = 0\nbypass_paths = [\"/static/\"]")
        .start();
    let before = origin.served();
    for path in [
        "/static/..;/checkout",
        "/static/%2e%2e;/checkout",
        "/static/..%00/checkout",
        "/static/..;x=1/checkout",
        "/static/..%3B/checkout",
        "/static/.;/../checkout",
        "/static/;x/../../checkout",
        "/static/%00/../../checkout",
        "/static/..%0a/checkout",
        "/static/..%7f/checkout",
        "/static/..;/..;/checkout",
        "/static\\x/..",
        "/static/x;%2F..%2F..%2Fcheckout",
        "/checkout/%2e%2e/static/app.css",
        "/checkout/.%2e/static/app.css",
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "{path} must be refused: {answer}"
        );
        let why = if path.contains("%0") || path.contains("%7f") {
            "Bad request: the path holds a control character."
        } else {
            "Bad request: the path resolves differently on different servers"
        };
        assert!(answer.contains(why), "{path}: {answer}");
    }
    // Guarded paths too: a control character is refused wherever it is.
    let answer = raw_exchange(
        v.proxy,
        b"GET /checkout%00 HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // A parameter on a folder, which nginx reads as another folder, or an escape, which an
    // origin routing on the path as sent reads as another name, is held, not bypassed.
    for path in [
        "/static;v=2/app.css",
        "/static%3Bv=2/app.css",
        "/%73tatic/app.css",
        "/checkout;jsessionid=1",
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(
            answer.contains("closed right now"),
            "{path} must be held: {answer}"
        );
    }
    assert_eq!(origin.served(), before, "nothing reached the origin");
    // Static files pass, with or without a parameter of their own.
    for path in [
        "/static/app.css",
        "/static/app.css;v=2",
        "/static/a;x/b.css",
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        assert!(!answer.contains("closed right now"), "{path}: {answer}");
    }
    assert_eq!(origin.served(), before + 3);
}

const ACME: &str = "/.well-known/acme-challenge/Zk9_tOkEn-1/__echo";

/// A lottery room on `/`, a proof-of-work room and an invitation room, with a rate rule on the
/// ACME path.
fn acme_setup(origin: &Origin, server: &str) -> Vestibule {
    Setup::new(origin.addr)
        .server(server)
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\nallow_percentage = 50\n\
                [[room]]\nname = \"pow\"\nhosts = [\"pow.example\"]\ncookie_name = \"wr_pow\"\npages = \"pages\"\nchallenge = \"pow\"\n\
                [[room]]\nname = \"members\"\nhosts = [\"members.example\"]\ncookie_name = \"wr_members\"\npages = \"pages\"\naccess = \"invite\"\n\
                [[rate_limit]]\nname = \"acme\"\nkey = [\"path\"]\npaths = [\"/.well-known/acme-challenge/\"]\nalgorithm = \"token_bucket\"\nlimit = 6\nperiod = \"1m\"")
        .start()
}

/// ACME HTTP-01 validators (several addresses, as Let's Encrypt's are) reach the origin through
/// a lottery room, a proof-of-work room and an invitation room; rate rules still count them.
#[test]
fn acme_challenges_pass_the_rooms_but_not_the_rate_rules() {
    let origin = Origin::start();
    let v = acme_setup(&origin, "");
    let before = origin.served();
    for i in 0..4 {
        let mut validator = User::new(i);
        let body: serde_json::Value = validator.get(&v, ACME).json().expect("JSON");
        assert_eq!(decision_in(&body), "allow", "validator {i}: {body}");
        assert_eq!(body["path"], ACME, "the origin saw the challenge path");
        // The same address asking for a page is held like anyone.
        let (decision, page) = validator.decision(&v);
        assert_ne!(decision, "allow", "validator {i}: {page}");
        assert_eq!(page["in_waiting_room"], true, "validator {i}: {page}");
    }
    assert_eq!(origin.served(), before + 4);
    for host in ["pow.example", "members.example"] {
        let request = format!(
            "GET {ACME} HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: 192.0.2.7\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_exchange(v.proxy, request.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
        assert!(answer.contains("acme-challenge"), "{host}: {answer}");
    }
    assert_eq!(origin.served(), before + 6);
    // The rule's six tokens are spent: the seventh is refused, whoever asks.
    let resp = User::new(40).get(&v, ACME);
    assert_eq!(resp.status(), 429);
    assert_eq!(origin.served(), before + 6);
}

/// With `bypass_acme_challenge = false`, the challenge path is held like any other.
#[test]
fn acme_challenges_are_held_when_the_bypass_is_off() {
    let origin = Origin::start();
    let v = acme_setup(&origin, "bypass_acme_challenge = false");
    let before = origin.served();
    for i in 0..4 {
        let body: serde_json::Value = User::new(i).get(&v, ACME).json().expect("JSON");
        assert_ne!(decision_in(&body), "allow", "validator {i}: {body}");
        assert_eq!(body["in_waiting_room"], true, "validator {i}: {body}");
    }
    assert_eq!(origin.served(), before);
}
