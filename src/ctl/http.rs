//! A small blocking HTTP/1.1 client for `vestibule ctl`: one request per connection, plain
//! `http://` only (the admin listener speaks nothing else), bodies framed by `Content-Length`,
//! `chunked` or the end of the connection, and a deadline on every step.
//!
//! Why not a crate: the proxy binary has no HTTP client, and one request to a loopback listener
//! does not warrant linking one (and its TLS stack) into every build. Anything beyond that,
//! redirects, TLS, keep-alive, is deliberately missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long connecting, and then each read or write, may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Longest head of an answer.
const MAX_HEAD: usize = 64 * 1024;
/// Longest body of an answer (a `/status` of many rooms is well below).
const MAX_BODY: u64 = 32 * 1024 * 1024;

/// Where the admin listener is: `http://host:port`, with an optional path prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` as written, for `Host:` and messages.
    pub authority: String,
    /// What requests' paths are put after (no trailing `/`).
    pub prefix: String,
}

impl Endpoint {
    /// Reads `http://host[:port][/prefix]` (port 80 when none is written).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(format!(
                "--admin {url}: only http:// URLs are served (the admin listener is plain HTTP)"
            ));
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!("--admin {url}: no host:port"));
        }
        let has_port = match authority.rfind(':') {
            Some(i) => !authority[i..].contains(']'),
            None => false,
        };
        let authority = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            prefix: prefix.to_owned(),
        })
    }

    fn addrs(&self) -> Result<Vec<SocketAddr>, String> {
        let host = self.authority.replace(['[', ']'], "");
        let addrs: Vec<SocketAddr> = match host.rsplit_once(':') {
            Some((h, p)) => {
                let port: u16 = p
                    .parse()
                    .map_err(|_| format!("{}: the port is not a number", self.authority))?;
                (h, port)
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve {}: {e}", self.authority))?
                    .collect()
            }
            None => Vec::new(),
        };
        if addrs.is_empty() {
            return Err(format!("cannot resolve {}", self.authority));
        }
        Ok(addrs)
    }
}

/// An answer: its status, its `Content-Type`, its body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// Sends one request and reads the whole answer, each step within [`TIMEOUT`]. `body` is
/// `(content type, bytes)`. Failing to connect names the address tried.
pub fn request(
    at: &Endpoint,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, &[u8])>,
) -> Result<Answer, String> {
    request_within(at, (method, path), token, body, TIMEOUT)
}

fn request_within(
    at: &Endpoint,
    (method, path): (&str, &str),
    token: Option<&str>,
    body: Option<(&str, &[u8])>,
    timeout: Duration,
) -> Result<Answer, String> {
    let mut last = String::new();
    let mut stream = None;
    for addr in at.addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to the admin listener at {addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or(last)?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{}: {e}", at.authority))?;
    let mut head = format!(
        "{method} {}{path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: vestibule-ctl/{}\r\nAccept: application/json, text/plain\r\nConnection: close\r\n",
        at.prefix,
        at.authority,
        env!("CARGO_PKG_VERSION")
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let payload = body.map_or(&[][..], |(_, b)| b);
    if let Some((content_type, bytes)) = body {
        head.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            bytes.len()
        ));
    } else if matches!(method, "POST" | "PUT") {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("\r\n");
    let fail = |e: std::io::Error| format!("{}: {e}", at.authority);
    stream.write_all(head.as_bytes()).map_err(fail)?;
    stream.write_all(payload).map_err(fail)?;
    stream.flush().map_err(fail)?;
    // One deadline for the whole answer: a server that trickles bytes cannot hold ctl.
    let reader = Deadline {
        stream,
        until: std::time::Instant::now() + timeout * ANSWER_TIMEOUTS,
    };
    read_answer(BufReader::new(reader), method == "HEAD")
        .map_err(|e| format!("{}: {e}", at.authority))
}

/// How many of the per-step timeouts the whole answer may take.
pub const ANSWER_TIMEOUTS: u32 = 3;

/// A connection read under one deadline: each read waits at most what is left of it.
pub struct Deadline {
    pub stream: TcpStream,
    pub until: std::time::Instant,
}

impl Write for Deadline {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self
            .until
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the answer took too long",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// Reads an HTTP/1.1 answer from `r` (interim `1xx` answers are skipped).
pub fn read_answer(mut r: impl BufRead, head_only: bool) -> Result<Answer, String> {
    loop {
        let (status, headers) = read_head(&mut r)?;
        if (100..200).contains(&status) {
            continue;
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        let content_type = header("content-type").unwrap_or("").to_owned();
        let body = if head_only || status == 204 || status == 304 {
            Vec::new()
        } else if header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            read_chunked(&mut r)?
        } else if let Some(len) = header("content-length") {
            let len: u64 = len
                .trim()
                .parse()
                .map_err(|_| format!("a bad Content-Length: {len}"))?;
            if len > MAX_BODY {
                return Err(format!("an answer of {len} bytes is too long"));
            }
            let mut body = Vec::with_capacity(len as usize);
            r.by_ref()
                .take(len)
                .read_to_end(&mut body)
                .map_err(io_error)?;
            if (body.len() as u64) < len {
                return Err("the answer ended early".into());
            }
            body
        } else {
            let mut body = Vec::new();
            r.by_ref()
                .take(MAX_BODY + 1)
                .read_to_end(&mut body)
                .map_err(io_error)?;
            if body.len() as u64 > MAX_BODY {
                return Err("the answer is too long".into());
            }
            body
        };
        return Ok(Answer {
            status,
            content_type,
            body,
        });
    }
}

/// An error reading the answer, in words: a timeout says so.
fn io_error(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "no answer in time".into(),
        _ => e.to_string(),
    }
}

/// A line ending in CRLF (or LF), without it; at most `MAX_HEAD` bytes.
fn read_line(r: &mut impl BufRead) -> Result<String, String> {
    let mut line = Vec::new();
    r.by_ref()
        .take(MAX_HEAD as u64)
        .read_until(b'\n', &mut line)
        .map_err(io_error)?;
    if !line.ends_with(b"\n") {
        return Err(if line.is_empty() {
            "the connection closed without an answer".into()
        } else {
            "the answer ended early".into()
        });
    }
    line.pop();
    if line.ends_with(b"\r") {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| "the answer's head is not text".into())
}

fn read_head(r: &mut impl BufRead) -> Result<(u16, Vec<(String, String)>), String> {
    let status_line = read_line(r)?;
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {}", status_line.escape_default()))?;
    let mut headers = Vec::new();
    let mut size = status_line.len();
    loop {
        let line = read_line(r)?;
        if line.is_empty() {
            return Ok((status, headers));
        }
        size += line.len();
        if size > MAX_HEAD {
            return Err("the answer's head is too long".into());
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
}

fn read_chunked(r: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line = read_line(r)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size, 16)
            .map_err(|_| format!("a bad chunk size: {}", size.escape_default()))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_line(r)?.is_empty() {}
            return Ok(body);
        }
        if body.len() as u64 + size > MAX_BODY {
            return Err("the answer is too long".into());
        }
        let before = body.len();
        r.by_ref()
            .take(size)
            .read_to_end(&mut body)
            .map_err(io_error)?;
        if ((body.len() - before) as u64) < size {
            return Err("the answer ended early".into());
        }
        if !read_line(r)?.is_empty() {
            return Err("a chunk is longer than it said".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(raw: &str) -> Result<Answer, String> {
        read_answer(raw.as_bytes(), false)
    }

    #[test]
    fn endpoints_are_read() {
        let e = Endpoint::parse("http://127.0.0.1:9901").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.prefix.as_str()),
            ("127.0.0.1:9901", "")
        );
        let e = Endpoint::parse("http://admin.internal/vestibule/").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.prefix.as_str()),
            ("admin.internal:80", "/vestibule")
        );
        let e = Endpoint::parse("http://[::1]:9901").unwrap();
        assert_eq!(e.authority, "[::1]:9901");
        assert!(e.addrs().unwrap()[0].ip().is_loopback());
        assert!(Endpoint::parse("https://x:1")
            .unwrap_err()
            .contains("only http://"));
        assert!(Endpoint::parse("http://").is_err());
    }

    #[test]
    fn bodies_are_framed_by_length_chunks_or_close() {
        let a = read(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}extra",
        )
        .unwrap();
        assert_eq!(
            (a.status, a.content_type.as_str(), &a.body[..]),
            (200, "application/json", &b"{}"[..])
        );
        let a = read("HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nnot \r\n5\r\nfound\r\n0\r\nTrailer: t\r\n\r\n").unwrap();
        assert_eq!((a.status, &a.body[..]), (404, &b"not found"[..]));
        let a = read("HTTP/1.0 200 OK\nX: y\n\nto the end").unwrap();
        assert_eq!(&a.body[..], b"to the end");
        let a = read("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n").unwrap();
        assert_eq!((a.status, a.body.len()), (204, 0));
        assert!(read("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort")
            .unwrap_err()
            .contains("early"));
        assert!(
            read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .unwrap_err()
                .contains("chunk size")
        );
        assert!(read("SSH-2.0\r\n\r\n")
            .unwrap_err()
            .contains("not an HTTP answer"));
        assert!(read("").unwrap_err().contains("without an answer"));
    }

    #[test]
    fn a_refused_connection_names_the_address() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let at = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let e = request(&at, "GET", "/status", None, None).unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    }

    #[test]
    fn a_listener_that_never_answers_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = Endpoint::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        // Accepted (by the backlog), read by nobody, answered never.
        let started = std::time::Instant::now();
        let e = request_within(
            &at,
            ("GET", "/status"),
            None,
            None,
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{e}");
        assert_eq!(e, format!("{}: no answer in time", at.authority));
        drop(listener);
    }
}
