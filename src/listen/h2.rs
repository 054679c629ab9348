//! The edge's HTTP/2 connection loop: Pingora's, with a way to send GOAWAY.
//!
//! Pingora 0.9.1 drives an HTTP/2 connection in `accept_downstream_sessions`, which is private
//! to its crate and keeps the `h2` connection to itself: nothing outside it can end a connection
//! whose client misbehaves. This loop does what that one does, with the parts Pingora makes
//! public (`v2::server::handshake`, `HttpSession::from_h2_conn`): the handshake with the app's
//! HTTP/2 options, one task per stream, GOAWAY on shutdown, the close of a connection idle for
//! `keepalive_timeout`, and a budget of malformed streams. And it adds the one thing that loop
//! lacks: a connection asked to end ([`H2Connection::go_away`]) gets GOAWAY and is closed.
//!
//! Each stream's task runs with its connection in a task-local ([`H2Connection::current`]), so
//! the proxy's hooks can count a stream's premature reset against the connection
//! (`crate::resets`) and ask for GOAWAY when the budget is spent.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pingora::apps::HttpServerApp;
use pingora::protocols::http::v2::server::{handshake, H2Accept, HttpSession};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Digest, Stream};
use pingora::server::ShutdownWatch;
use tokio::sync::Notify;

use super::Closed;
use crate::app::App;
use crate::resets::ConnectionResets;

/// Streams rejected while being accepted (a forbidden byte in the target, an ambiguous
/// `content-length`) that one connection may send before it is closed: Pingora's own budget,
/// which its loop keeps across a connection's life and `from_h2_conn` alone does not.
const MAX_MALFORMED_STREAMS: usize = 32;

/// How long a connection told to go away may take to finish the streams it has. The client is
/// one that cancels what it asks for: it is not waited on for long.
const GO_AWAY_DRAIN: Duration = Duration::from_secs(2);

tokio::task_local! {
    static CONNECTION: Arc<H2Connection>;
}

/// What the streams of one HTTP/2 connection share.
#[derive(Debug, Default)]
pub(crate) struct H2Connection {
    /// Its streams and its client's premature resets of them.
    pub resets: ConnectionResets,
    /// 0: serving; [`GRACEFUL`] or [`ABRUPT`]: asked to go away.
    ending: AtomicU8,
    wake: Notify,
    /// Streams being served.
    active: AtomicUsize,
    idle: Notify,
}

const GRACEFUL: u8 = 1;
const ABRUPT: u8 = 2;

/// How a connection asked to end says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GoAway {
    /// GOAWAY(NO_ERROR): the streams already open are answered, then the connection closes.
    Graceful,
    /// GOAWAY(ENHANCE_YOUR_CALM), and the connection closes as soon as that is sent: what is
    /// in flight is dropped.
    EnhanceYourCalm,
}

impl H2Connection {
    /// The connection of the stream this task serves; `None` outside an HTTP/2 stream's task.
    pub fn current() -> Option<Arc<H2Connection>> {
        CONNECTION.try_with(Arc::clone).ok()
    }

    /// Asks the connection's loop to send GOAWAY and close. A later, harsher request wins until
    /// the loop acts; the loop acts once.
    pub(crate) fn go_away(&self, how: GoAway) {
        let level = match how {
            GoAway::Graceful => GRACEFUL,
            GoAway::EnhanceYourCalm => ABRUPT,
        };
        self.ending.fetch_max(level, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Whether the connection was asked to go away: its streams may then end as if reset.
    pub(crate) fn is_ending(&self) -> bool {
        self.ending.load(Ordering::Relaxed) != 0
    }

    fn start(self: &Arc<Self>) -> StreamGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    /// Ready once no stream has been served for `idle` (never when `idle` is zero).
    async fn idle_for(&self, idle: Duration) {
        loop {
            // Registered before the count is read, so a guard dropped in between still wakes it.
            let notified = self.idle.notified();
            if self.active.load(Ordering::Relaxed) == 0 {
                break;
            }
            notified.await;
        }
        if idle.is_zero() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(idle).await;
    }
}

/// One stream being served; the connection is idle when none is left.
struct StreamGuard(Arc<H2Connection>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Serves an HTTP/2 connection (its preface not yet read by the handshake) with `inner`'s
/// streams until it closes. `idle`: an HTTP/2 connection with no stream in service is closed
/// after this.
pub async fn serve<A>(
    inner: &Arc<A>,
    app: &App,
    stream: Stream,
    shutdown: &ShutdownWatch,
    idle: Duration,
) where
    A: HttpServerApp + Send + Sync + 'static,
{
    let digest = Arc::new(Digest {
        ssl_digest: stream.get_ssl_digest(),
        timing_digest: stream.get_timing_digest(),
        proxy_digest: stream.get_proxy_digest(),
        socket_digest: stream.get_socket_digest(),
    });
    let mut conn = match handshake(stream, inner.h2_options()).await {
        Ok(conn) => conn,
        Err(e) => {
            log::debug!("HTTP/2 handshake failed: {e}");
            return;
        }
    };
    let connection = Arc::new(H2Connection::default());
    let mut shutdown_rx = shutdown.clone();
    // Set once GOAWAY is sent: for shutdown (no deadline but the server's own grace period),
    // or to a client asked to go away (a short one).
    let mut going_away = false;
    let drain = tokio::time::sleep(Duration::MAX);
    tokio::pin!(drain);
    let mut drain_armed = false;
    let mut malformed = 0usize;
    loop {
        let accepted = tokio::select! {
            // As Pingora's loop: the shutdown signal first, so it is seen deterministically;
            // `from_h2_conn` is cancel-safe and polled again on the next turn.
            biased;
            _ = shutdown_rx.changed(), if !going_away => {
                conn.graceful_shutdown();
                going_away = true;
                continue;
            }
            _ = connection.wake.notified(), if !going_away => {
                // A connection cut for its own resets is logged; those of a client already
                // refused are not (it may reconnect many times a second).
                let level = match connection.ending.load(Ordering::Relaxed) {
                    ABRUPT => {
                        conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                        log::Level::Info
                    }
                    GRACEFUL => {
                        conn.graceful_shutdown();
                        log::Level::Debug
                    }
                    _ => continue,
                };
                app.metrics.downstream_closed[Closed::H2ResetFlood.index()].inc();
                let (streams, premature) = connection.resets.counts();
                log::log!(
                    level,
                    "HTTP/2 connection from {} told to go away: {premature} of its {streams} streams reset early",
                    digest
                        .socket_digest
                        .as_ref()
                        .and_then(|d| d.peer_addr())
                        .map_or_else(|| "-".to_owned(), |a| a.to_string()),
                );
                going_away = true;
                drain.as_mut().reset(tokio::time::Instant::now() + GO_AWAY_DRAIN);
                drain_armed = true;
                continue;
            }
            _ = drain.as_mut(), if drain_armed => {
                // Dropping the connection closes the socket.
                return;
            }
            accepted = HttpSession::from_h2_conn(&mut conn, digest.clone()) => accepted,
            // Any accepted stream ends this wait; the next turn waits for every stream to
            // finish before the idle time starts again.
            _ = connection.idle_for(idle), if !going_away => return,
        };
        match accepted {
            Err(e) => {
                // Clients often close TCP without ending HTTP/2 first: not worth a warning.
                log::debug!("HTTP/2 connection ended: {e}");
                return;
            }
            Ok(None) => return,
            Ok(Some(H2Accept::Rejected)) => {
                malformed += 1;
                if malformed >= MAX_MALFORMED_STREAMS {
                    log::warn!("HTTP/2 connection closed: {malformed} malformed streams");
                    return;
                }
            }
            Ok(Some(H2Accept::Session(session))) => {
                connection.resets.stream();
                let guard = connection.start();
                let inner = inner.clone();
                let shutdown = shutdown.clone();
                // This thread's runtime, as Pingora's own loop spawns on the current one.
                tokio::spawn(CONNECTION.scope(connection.clone(), async move {
                    let _guard = guard;
                    inner
                        .process_new_http(ServerSession::new_http2(session), &shutdown)
                        .await;
                }));
            }
        }
    }
}
