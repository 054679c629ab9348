//! The edge of the proxy: what happens on a client connection before Pingora's HTTP code sees a
//! request.
//!
//! [`Edge`] wraps the Pingora proxy app and owns the HTTP/1 connection loop, so that time spent
//! *waiting for a client* is bounded:
//!
//! - between requests, a connection may stay idle for `keepalive_timeout`; a new connection must
//!   send its first byte within `header_timeout`;
//! - once a request has started, its whole head must arrive within `header_timeout`, however
//!   slowly it trickles in (a per-read timeout would let a client reset it byte by byte);
//! - a head larger than [`MAX_HEAD`] is refused with 431.
//!
//! The head is read here and handed to Pingora as the session's pipelined prefix, so Pingora
//! parses it without another read: the syscalls per request stay those of a plain proxy. HTTP/2
//! connections (ALPN `h2`, or h2c) go to the edge's HTTP/2 loop ([`h2`]): Pingora's stream
//! limits, and GOAWAY for a client that resets too many of the streams it opens.
//!
//! An idle connection holds only its socket, this small future and the head buffer it is about
//! to fill: the L4 read buffer Pingora puts in front of plain sockets (64 KiB by default) is
//! left out for plain listeners, where the HTTP parser reads into its own buffer anyway.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{SocketDigest, Stream, ALPN};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::app::App;
pub use crate::metrics::Closed;

#[macro_use]
mod forward;
pub mod h2;
pub mod home;
pub mod proxy_protocol;
mod replay;
pub mod threads;

/// The largest request head accepted (request line and headers). Browsers send a few KiB;
/// nginx's default allows 4 × 8 KiB.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// What the head buffer starts with (Pingora's own initial size).
const HEAD_BUF: usize = 4096;

/// How long the edge waits for a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waits {
    pub keepalive: Duration,
    pub header: Duration,
}

/// The first bytes of an HTTP/2 connection with prior knowledge (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The proxy app behind the edge's connection handling.
pub struct Edge<A> {
    inner: Arc<A>,
    app: Arc<App>,
    /// This edge's listeners speak TLS (with the snapshot's certificates).
    tls: bool,
}

impl<A> Edge<A> {
    /// An edge for plain listeners.
    pub fn new(inner: Arc<A>, app: Arc<App>) -> Edge<A> {
        Edge {
            inner,
            app,
            tls: false,
        }
    }

    /// An edge for TLS listeners: it runs the handshake itself (after any PROXY header), with
    /// the certificates of the snapshot in service when the connection arrives.
    pub fn tls(inner: Arc<A>, app: Arc<App>) -> Edge<A> {
        Edge {
            tls: true,
            ..Edge::new(inner, app)
        }
    }

    /// The HTTP/2 client preface, within `header_timeout`; `None` (the connection is closed)
    /// when it is late or wrong.
    async fn read_preface(&self, stream: &mut Stream) -> Option<bytes::Bytes> {
        let mut preface = BytesMut::with_capacity(H2_PREFACE.len());
        let read = tokio::time::timeout(self.waits().header, async {
            while preface.len() < H2_PREFACE.len() {
                let mut limited = (&mut *stream).take((H2_PREFACE.len() - preface.len()) as u64);
                match limited.read_buf(&mut preface).await {
                    Ok(n) if n > 0 => {}
                    _ => return false,
                }
            }
            true
        })
        .await;
        match read {
            Ok(true) if preface[..] == *H2_PREFACE => Some(preface.freeze()),
            Ok(_) => None,
            Err(_) => {
                self.closed(Closed::HeaderTimeout);
                None
            }
        }
    }

    /// The TLS handshake, within `header_timeout`; `early` are bytes already read past a PROXY
    /// header (the start of the ClientHello). Counted either way.
    async fn handshake(&self, stream: Stream, early: &[u8]) -> Option<Stream> {
        let snapshot = self.app.snapshot();
        let handshakes = &self.app.metrics.tls_handshakes;
        let Some(tls) = snapshot.tls.clone() else {
            // Validation keeps certificates while a TLS listener is open; refuse rather than panic.
            handshakes[1].inc();
            return None;
        };
        let timeout = snapshot.config.server.header_timeout;
        drop(snapshot);
        // Bytes read ahead go back in front of the listener's stream.
        let Some(homed) = rewound(stream, early) else {
            handshakes[1].inc();
            return None;
        };
        let handshake = tokio::time::timeout(timeout, tls.acceptor.tls_handshake(*homed)).await;
        match handshake {
            Ok(Ok(stream)) => {
                handshakes[0].inc();
                Some(Box::new(stream))
            }
            Ok(Err(e)) => {
                handshakes[1].inc();
                log::debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                handshakes[1].inc();
                self.closed(Closed::HeaderTimeout);
                None
            }
        }
    }

    /// An HTTP/2 connection, in the edge's own loop (`h2.rs`): Pingora's, able to send GOAWAY
    /// to a client that resets too much.
    async fn serve_h2(&self, stream: Stream, shutdown: &ShutdownWatch)
    where
        A: HttpServerApp + Send + Sync + 'static,
    {
        let idle = self.waits().keepalive;
        h2::serve(&self.inner, &self.app, stream, shutdown, idle).await;
    }

    fn waits(&self) -> Waits {
        // This thread's reference: no shared reference count written per request.
        let snapshot = self.app.request_snapshot();
        Waits {
            keepalive: snapshot.config.server.keepalive_timeout,
            header: snapshot.config.server.header_timeout,
        }
    }

    fn closed(&self, why: Closed) {
        self.app.metrics.downstream_closed[why.index()].inc();
    }

    /// Makes `source` (from a PROXY header) the connection's client, if the peer that sent the
    /// header is a trusted proxy: identity, rate limits and X-Forwarded-For then all see it.
    fn believe(&self, stream: &mut Stream, source: std::net::SocketAddr) {
        let peer = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let trusted = peer.is_some_and(|ip| self.app.snapshot().config.identity.is_trusted(ip));
        if !trusted {
            return;
        }
        let digest = SocketDigest::from_raw_fd(stream.id());
        let _ = digest
            .peer_addr
            .set(Some(pingora::protocols::l4::socket::SocketAddr::Inet(
                source,
            )));
        stream.set_socket_digest(digest);
    }
}

/// Reads a PROXY header within `header`: the bytes that followed it and the client it names,
/// or `None` when it is missing, invalid, truncated or late.
async fn read_proxy_header(
    stream: &mut Stream,
    header: Duration,
) -> Option<(BytesMut, Option<std::net::SocketAddr>)> {
    let deadline = tokio::time::Instant::now() + header;
    let mut buf = BytesMut::with_capacity(256);
    loop {
        match proxy_protocol::parse(&buf) {
            proxy_protocol::Parsed::Complete { len, source } => {
                let rest = buf.split_off(len);
                return Some((rest, source));
            }
            proxy_protocol::Parsed::Invalid => return None,
            proxy_protocol::Parsed::Incomplete => {}
        }
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}

#[async_trait]
impl<A> ServerApp for Edge<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let mut settings: Option<HttpPersistentSettings> = None;
        let mut first = true;
        // What followed a PROXY header in the same reads: the start of the first request.
        let mut leftover = BytesMut::new();
        let (proxy_protocol, h2c) = {
            let snapshot = self.app.snapshot();
            (
                snapshot.config.server.proxy_protocol,
                snapshot.config.server.h2c,
            )
        };
        if proxy_protocol {
            match read_proxy_header(&mut stream, self.waits().header).await {
                Some((rest, source)) => {
                    leftover = rest;
                    if let Some(source) = source {
                        self.believe(&mut stream, source);
                    }
                }
                None => {
                    self.app.metrics.proxy_protocol_rejected.inc();
                    return None;
                }
            }
        }
        if self.tls {
            stream = self
                .handshake(stream, &std::mem::take(&mut leftover))
                .await?;
            if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
                // The HTTP/2 handshake waits for the client's preface without a deadline: read
                // it here within header_timeout, then hand it over with the connection.
                let preface = self.read_preface(&mut stream).await?;
                let stream: Stream = Box::new(replay::Replay::new(stream, preface));
                self.serve_h2(stream, shutdown).await;
                return None;
            }
        }
        // One timer and one shutdown wait for the connection's life, re-armed per request.
        // Pushing a registered timer later is one atomic write, where a timer per request was
        // inserted into and taken out of the thread's timer wheel; the shutdown wait stays on
        // the shared waiter list instead of joining and leaving it on every request.
        let timer = tokio::time::sleep(self.waits().header);
        tokio::pin!(timer);
        let mut shutdown_rx = shutdown.clone();
        let down = shutdown_rx.wait_for(|down| *down);
        tokio::pin!(down);
        loop {
            let waits = self.waits();
            // A new connection gets header_timeout for its first byte; a kept-alive one may
            // idle for keepalive_timeout.
            let idle = if first { waits.header } else { waits.keepalive };
            let buf = std::mem::take(&mut leftover);
            let wait = Wait {
                idle,
                header: waits.header,
                timer: timer.as_mut(),
                down: down.as_mut(),
            };
            let head = match read_head(&mut stream, buf, wait).await {
                Head::Complete(head) => head,
                Head::Closed => return None,
                Head::TimedOut { started } => {
                    self.closed(match (started, first) {
                        (false, false) => Closed::KeepaliveTimeout,
                        _ => Closed::HeaderTimeout,
                    });
                    return None;
                }
                Head::TooLarge => {
                    self.closed(Closed::HeaderTooLarge);
                    let _ = stream
                        .write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .await;
                    let _ = stream.flush().await;
                    return None;
                }
            };
            if first && !self.tls && h2c && head.starts_with(H2_PREFACE) {
                // HTTP/2 with prior knowledge: the HTTP/2 loop takes the connection, and its
                // handshake finds the preface where it was read.
                let stream: Stream = rewound(stream, &head)?;
                self.serve_h2(stream, shutdown).await;
                return None;
            }
            let mut session = ServerSession::new_http1(stream);
            match settings.take() {
                Some(s) => s.apply_to_session(&mut session),
                None => session.set_keepalive(Some(waits.keepalive.as_secs().max(1))),
            }
            session.set_pipelined_prefix(head);
            let reused = self.inner.process_new_http(session, shutdown).await?;
            let (next, next_settings) = reused.consume();
            stream = next;
            settings = next_settings;
            first = false;
        }
    }

    async fn cleanup(&self) {
        ServerApp::cleanup(&*self.inner).await;
    }
}

/// A listener's stream ([`home::Homed`]) with bytes already read put back in front; `None` for
/// any other kind of stream.
fn rewound(stream: Stream, data: &[u8]) -> Option<Box<home::Homed>> {
    let mut homed = stream.into_any().downcast::<home::Homed>().ok()?;
    homed.rewind(data);
    Some(homed)
}

/// What reading a request head came to.
#[derive(Debug)]
enum Head {
    /// A whole head (and whatever followed it in the same reads).
    Complete(BytesMut),
    /// The client closed the connection (or the server is shutting down) between requests.
    Closed,
    /// Nothing complete in time; `started` says whether any byte of a request had arrived.
    TimedOut {
        started: bool,
    },
    TooLarge,
}

/// How long [`read_head`] may wait, with the connection's timer and shutdown wait.
struct Wait<'a, D> {
    /// For the first byte.
    idle: Duration,
    /// For the whole head, from its first byte.
    header: Duration,
    timer: Pin<&'a mut tokio::time::Sleep>,
    /// Ready once the server shuts down.
    down: Pin<&'a mut D>,
}

/// Reads until a whole request head is buffered: the first byte within `idle`, the whole head
/// within `header` of that first byte.
async fn read_head<D: Future>(stream: &mut Stream, mut buf: BytesMut, wait: Wait<'_, D>) -> Head {
    let Wait {
        idle,
        header,
        mut timer,
        mut down,
    } = wait;
    if buf.is_empty() {
        buf.reserve(HEAD_BUF);
        timer.as_mut().reset(tokio::time::Instant::now() + idle);
        // The first byte: an idle connection is closed at once when the server shuts down.
        // Polled in this order, as a timeout around the read was.
        let first = tokio::select! {
            biased;
            read = stream.read_buf(&mut buf) => read,
            _ = timer.as_mut() => return Head::TimedOut { started: false },
            _ = down.as_mut() => return Head::Closed,
        };
        match first {
            Ok(0) | Err(_) => return Head::Closed,
            Ok(_) => {}
        }
    }
    let deadline = tokio::time::Instant::now() + header;
    let mut armed = false;
    loop {
        match head_end(&buf) {
            Some(end) if end > MAX_HEAD => return Head::TooLarge,
            Some(_) => return Head::Complete(buf),
            None => {}
        }
        if buf.len() > MAX_HEAD {
            return Head::TooLarge;
        }
        if buf.capacity() == buf.len() {
            buf.reserve(buf.len());
        }
        if !armed {
            timer.as_mut().reset(deadline);
            armed = true;
        }
        let read = tokio::select! {
            biased;
            read = stream.read_buf(&mut buf) => read,
            _ = timer.as_mut() => return Head::TimedOut { started: true },
        };
        match read {
            // Closed or broken mid-head: nothing to answer.
            Ok(0) | Err(_) => return Head::Closed,
            Ok(_) => {}
        }
    }
}

/// Where the head in `buf` ends (just past its blank line), if it has ended: `\r\n\r\n`, or a
/// bare `\n\n` as the parser also accepts. Empty lines before the request line (which RFC 9112
/// §2.2 lets a server ignore) are skipped, so they cannot pass for a whole head.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &rest[from..]) {
        let at = from + i;
        match rest.get(at + 1) {
            Some(b'\n') => return Some(start + at + 2),
            Some(b'\r') if rest.get(at + 2) == Some(&b'\n') => return Some(start + at + 3),
            _ => from = at + 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_end_of_a_head() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\n"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r"), None);
        assert_eq!(head_end(b""), None);
        // Leading empty lines are not a head.
        assert_eq!(head_end(b"\r\n\r\n"), None);
        assert_eq!(head_end(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), Some(22));
    }
}
