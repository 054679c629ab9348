//! The Pingora `ProxyHttp` implementation: HTTP in, the core's decisions out.
//!
//! This file only translates. It reads the request into the core's inputs, asks the core, and
//! writes what the core decided: a synthetic page, or a forwarded request with its headers
//! cleaned. Every synthetic response sets `Content-Length` so keep-alive survives.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::ErrorSource;
use smallvec::SmallVec;

use crate::app::App;
use crate::cookie::{self, Stripped};
use crate::decide::{
    self, set_cookie_value, Answer, ClientAddress, Limited, Notes, Request, Verdict,
};
use crate::invite;
use crate::listen::h2::{GoAway, H2Connection};
use crate::logging::AccessLine;
use crate::pages::{self, PageContext, PageKind, WaitingJson, Wants};
use crate::path;
use crate::resets;
use crate::room::{Decision, Outcome, Room};
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

/// Request headers with this prefix are ours: a client's copies never reach the origin.
const INTERNAL_PREFIX: &str = "vestibule-";
const NO_STORE: &str = "no-store, private";
/// The origin's response header to command vestibule (`Vestibule-Command: revoke`), never
/// passed on.
const COMMAND_HEADER: http::HeaderName = http::HeaderName::from_static("vestibule-command");

pub struct Proxy {
    app: Arc<App>,
}

impl Proxy {
    pub fn new(app: Arc<App>) -> Proxy {
        Proxy { app }
    }
}

/// Per-request state, boxed. Pingora keeps a request's context in its per-request future (three
/// copies of it: `process_new_http` holds one, `process_request` an upvar and a local), and that
/// future is boxed and moved (copied) once per request. Behind a `Box` the context is 8 bytes
/// there instead of ~480 three times over: the future shrinks by ~1.4 KiB, against one small
/// allocation.
pub type Ctx = Box<RequestCtx>;

/// Per-request state. Dropped after `logging` on every path.
pub struct RequestCtx {
    /// This thread's reference to the snapshot in service (see `App::request_snapshot`).
    snapshot: Arc<crate::app::ThreadSnapshot>,
    started: Instant,
    peer_ip: Option<IpAddr>,
    /// What the decision left for the response, the metrics and the access log.
    notes: Notes,
    /// Origin addresses tried for this request (retries skip them).
    tried: SmallVec<[SocketAddr; 2]>,
    upstream_sent: Option<Instant>,
    upstream_status: Option<u16>,
    upstream_seconds: Option<f64>,
    /// The origin could not be reached or timed out (502, 504).
    upstream_failed: bool,
    /// The client's key in the HTTP/2 reset budget (`crate::resets`), once known.
    reset_key: Option<u64>,
    /// The client is the connection's own peer (not a client named by a trusted proxy, whose
    /// connection carries others' requests too).
    reset_direct: bool,
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Box::new(RequestCtx {
            snapshot: self.app.request_snapshot(),
            started: Instant::now(),
            peer_ip: None,
            notes: Notes::default(),
            tried: SmallVec::new(),
            upstream_sent: None,
            upstream_status: None,
            upstream_seconds: None,
            upstream_failed: false,
            reset_key: None,
            reset_direct: false,
        })
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let now = Timestamp::now();
        let snapshot = ctx.snapshot.clone();
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip().to_canonical());
        ctx.peer_ip = Some(peer);
        let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
        let h2 = session.is_http2();
        self.app.metrics.downstream_requests[usize::from(h2) * 2 + usize::from(tls)].inc();
        // A path that origins would read in different ways gets no room and no rule: no answer
        // it could be given would hold for the origin that serves it.
        let path = match path::normalize(session.req_header().uri.path()) {
            Ok(path) => path,
            Err(unfit) => {
                let body = Bytes::from(format!("Bad request: {unfit}.\n"));
                respond(session, 400, "text/plain; charset=utf-8", Vec::new(), body).await?;
                return Ok(true);
            }
        };
        let header = session.req_header();
        let client = decide::client_address(&header.headers, &snapshot.config.identity, peer);
        if let Some(until) = self.reset_penalty(client, &snapshot, now, ctx) {
            return refuse_for_resets(session, until, now).await.map(|()| true);
        }
        let request = Request {
            method: &header.method,
            uri: &header.uri,
            headers: &header.headers,
            host: request_host(header),
            path,
            client,
            tls,
        };
        let Verdict { answer, notes } = decide::decide(&request, &snapshot, now);
        drop(request);
        self.record(&snapshot, &notes);
        ctx.notes = notes;
        match answer {
            Answer::Forward => Ok(false),
            Answer::Redirect(location) => {
                let extra = vec![(
                    header::LOCATION,
                    HeaderValue::from_str(&location).map_err(|_| {
                        Error::explain(ErrorType::HTTPStatus(400), "host not fit for a URL")
                    })?,
                )];
                let body = Bytes::from(format!("This site is served over https: {location}\n"));
                respond(session, 308, "text/plain; charset=utf-8", extra, body).await?;
                Ok(true)
            }
            Answer::RoomPage(room, outcome) => {
                ctx.notes.slots.clear();
                let room = snapshot.rooms.get(room).ok_or_else(|| {
                    Error::explain(ErrorType::InternalError, "routed to a room that is gone")
                })?;
                let clear = ctx.notes.clear_solution.take();
                // `Accept` was read once, by the decision.
                let json = ctx
                    .notes
                    .wants
                    .map_or_else(|| wants_json(session), |w| w == Wants::Json);
                let page = PageAnswer {
                    secure: ctx.notes.secure,
                    json,
                    clear_solution: clear,
                };
                write_room_page(session, room, &outcome, page, now).await?;
                Ok(true)
            }
            Answer::Invited { location, cookies } => {
                ctx.notes.slots.clear();
                let mut extra = Vec::with_capacity(1 + cookies.len());
                if let Ok(v) = HeaderValue::from_str(&location) {
                    extra.push((header::LOCATION, v));
                }
                for value in cookies.into_iter().chain(ctx.notes.clear_solution.take()) {
                    if let Ok(v) = HeaderValue::try_from(value) {
                        extra.push((header::SET_COOKIE, v));
                    }
                }
                let body = Bytes::from_static(b"Invitation accepted.\n");
                respond(session, 303, "text/plain; charset=utf-8", extra, body).await?;
                Ok(true)
            }
            Answer::Held(retry_after) => {
                ctx.notes.slots.clear();
                let extra = vec![(header::RETRY_AFTER, HeaderValue::from(retry_after))];
                let body = Bytes::from(format!(
                    "Held in a waiting room: try again in {retry_after} seconds.\n"
                ));
                respond(session, 503, "text/plain; charset=utf-8", extra, body).await?;
                Ok(true)
            }
            Answer::RateLimited(check) => {
                ctx.notes.slots.clear();
                let set_cookie = ctx.notes.set_cookie.take();
                write_rate_limited(session, &snapshot, ctx.notes.room, &check, set_cookie).await?;
                Ok(true)
            }
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        match ctx.snapshot.upstream.select(&ctx.tried) {
            Some(mut peer) => {
                if !ctx.snapshot.config.server.work_stealing {
                    peer.group_key = worker_group();
                }
                if let Some(addr) = peer.address().as_inet() {
                    ctx.tried.push(*addr);
                }
                Ok(peer)
            }
            None => Err(Error::create(
                ErrorType::ConnectNoRoute,
                ErrorSource::Upstream,
                Some("no healthy origin peer is left to try".into()),
                None,
            )),
        }
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        // Another peer may answer: let upstream_peer pick the next untried one.
        if ctx.tried.len() < ctx.snapshot.upstream.peer_count() {
            e.set_retry(true);
        }
        e
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        strip_internal_headers(upstream);
        if let Some(uri) = decide::without_invitation(&upstream.uri) {
            upstream.set_uri(uri);
        }
        single_content_length(upstream)?;
        strip_room_cookies(upstream, ctx.snapshot.rooms.cookie_names())?;
        // Static values: no allocation, nothing to validate.
        upstream.insert_header(
            "X-Forwarded-Proto",
            HeaderValue::from_static(if ctx.notes.secure { "https" } else { "http" }),
        )?;
        if let Some(peer) = ctx.peer_ip {
            let trusted = ctx.snapshot.config.identity.is_trusted(peer);
            set_forwarded_for(upstream, peer, trusted)?;
        }
        ctx.upstream_sent = Some(Instant::now());
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // The command never reaches the client, on informational answers (103) either. Looked up
        // once by its ready-made name before removing: an answer without one (nearly all) costs
        // one lookup, where a removal by text parsed the name and searched both of Pingora's
        // header maps.
        let command = if upstream_response.headers.contains_key(&COMMAND_HEADER) {
            upstream_response.remove_header(&COMMAND_HEADER)
        } else {
            None
        };
        if upstream_response.status.is_informational() {
            return Ok(());
        }
        // The origin ends this user's session: the room cookie is deleted (their next request
        // is a new arrival).
        if let Some(command) = command {
            let revoke = command
                .to_str()
                .is_ok_and(|c| c.trim().eq_ignore_ascii_case("revoke"));
            if let (true, Some(room)) = (
                revoke,
                ctx.notes.room.and_then(|i| ctx.snapshot.rooms.get(i)),
            ) {
                room.revoke(ctx.notes.place.take(), Timestamp::now());
                ctx.notes.set_cookie = Some(cookie::delete(&room.config.cookie, ctx.notes.secure));
            }
        }
        ctx.upstream_status = Some(upstream_response.status.as_u16());
        ctx.upstream_seconds = ctx.upstream_sent.map(|t| t.elapsed().as_secs_f64());
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(value) = ctx.notes.set_cookie.take() {
            // Added, not set: cookies the origin sets survive.
            response.append_header(header::SET_COOKIE, value)?;
            response.insert_header("Cache-Control", NO_STORE)?;
        }
        if let Some(value) = ctx.notes.clear_solution.take() {
            response.append_header(header::SET_COOKIE, value)?;
        }
        if !ctx.notes.quotas.is_empty() {
            // Appended: `RateLimit` fields are lists, and an origin's own items survive.
            let (policy, items) = quota_headers(&ctx.snapshot, &ctx.notes.quotas);
            response.append_header("RateLimit-Policy", policy)?;
            response.append_header("RateLimit", items)?;
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        // An HTTP/2 body may end with an empty DATA frame carrying END_STREAM. Pingora 0.9.1
        // passes that empty piece to the HTTP/1.1 origin connection, whose chunked writer turns
        // a zero-length write into the `0\r\n\r\n` terminator, and then writes the terminator
        // again when the body finishes (cloudflare/pingora#935). The origin reads the second
        // one as the start of another request and answers it, and that answer would go to
        // whoever uses the pooled connection next. With no piece at all, Pingora only finishes
        // the body: one terminator. Empty pieces before the end are already dropped by Pingora.
        if end_of_stream && body.as_ref().is_some_and(Bytes::is_empty) {
            *body = None;
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<std::time::Duration>> {
        if end_of_stream {
            ctx.notes.slots.clear();
        }
        Ok(None)
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(code) => *code,
            ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                504
            }
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        // Nothing can be written once the client is gone or a response has started.
        if code == 0 || session.response_written().is_some() {
            return FailToProxy {
                error_code: code,
                can_reuse_downstream: false,
            };
        }
        if code == 502 {
            self.app.metrics.upstream_unavailable.inc();
        }
        ctx.upstream_failed = matches!(code, 502 | 504) && e.esource() == &ErrorSource::Upstream;
        // The connection is not reused after an error: say so (`Connection: close`), or a
        // client would send its next request on a connection that is about to close.
        session.set_keepalive(None);
        ctx.notes.slots.clear();
        // A user let in by this request keeps the admission: a retry presents the allow token
        // instead of arriving (and being counted) again.
        let set_cookie = ctx.notes.set_cookie.take();
        let written = write_error_page(session, &ctx.snapshot, code, set_cookie).await;
        if let Err(err) = written {
            log::debug!("could not write the {code} page: {err}");
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// Errors a client causes (it went away mid-answer, closed without TLS close_notify, sent
    /// something broken) are not logged at error level: any client could otherwise write one
    /// line per connection, and they say nothing about the proxy. They stay at debug.
    fn suppress_error_log(&self, session: &Session, ctx: &Ctx, error: &Error) -> bool {
        let client = error.esource() == &ErrorSource::Downstream;
        if client {
            log::debug!(
                "client error: {error}, {}",
                self.request_summary(session, ctx)
            );
        }
        client
    }

    /// What Pingora's own error lines say about a request: no query string, which may carry
    /// secrets, and no headers.
    fn request_summary(&self, session: &Session, _ctx: &Ctx) -> String {
        let req = session.req_header();
        format!(
            "{} {}, Host: {}",
            req.method,
            req.uri.path(),
            request_host(req)
        )
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        self.count_reset(session, e, ctx);
        if let Some(status) = ctx.upstream_status {
            self.app
                .metrics
                .observe_upstream(status, ctx.upstream_seconds);
        }
        // An autopilot room's origin answers: how long, and whether they failed.
        if let Some(room) = ctx.notes.room.and_then(|i| ctx.snapshot.rooms.get(i)) {
            if room.config.autopilot.is_some() {
                let seconds = ctx.upstream_seconds.or_else(|| {
                    ctx.upstream_failed.then(|| {
                        ctx.upstream_sent
                            .unwrap_or(ctx.started)
                            .elapsed()
                            .as_secs_f64()
                    })
                });
                if let Some(seconds) = seconds {
                    let error =
                        ctx.upstream_failed || ctx.upstream_status.is_some_and(|s| s >= 500);
                    room.pilot().record(seconds, error);
                }
            }
        }
        if !ctx.snapshot.config.log.access {
            return;
        }
        let ctx = &*ctx;
        let snapshot = &ctx.snapshot;
        let req = session.req_header();
        let rules: SmallVec<[(&str, &str); 4]> = ctx
            .notes
            .rule_outcomes
            .iter()
            .filter_map(|(i, o)| snapshot.rules.get(*i).map(|r| (r.name(), o.as_str())))
            .collect();
        let line = AccessLine {
            client: ctx.notes.client_ip.or(ctx.peer_ip),
            method: req.method.as_str(),
            path: req.uri.path(),
            status: session.response_written().map_or(0, |r| r.status.as_u16()),
            room: ctx
                .notes
                .room
                .and_then(|i| snapshot.rooms.get(i))
                .map(Room::name),
            decision: ctx.notes.decision.map(Decision::as_str),
            rules: &rules,
            upstream: ctx.tried.last().copied(),
            upstream_ms: ctx.upstream_seconds.map(|s| s * 1000.0),
            ms: ctx.started.elapsed().as_secs_f64() * 1000.0,
        };
        line.write();
    }
}

/// Whether a request ended because its HTTP/2 client reset the stream: a RST_STREAM from the
/// client, or h2's own reset of a stream the client broke. A connection that was lost ends its
/// streams with I/O errors, and one the edge told to go away with its own GOAWAY: neither is a
/// reset the client chose, and counting them would charge a visitor whose network dropped for
/// every request it had in flight.
fn reset_by_client(e: &Error) -> bool {
    if e.esource() != &ErrorSource::Downstream {
        return false;
    }
    // Pingora wraps the stream's error (in the origin peer's context, say): look down the chain.
    let mut level = e;
    loop {
        // Pingora's watch of an idle stream reports a reset by its reason alone (the stream was
        // closed by a reset or a GOAWAY; a lost connection is an I/O error there instead).
        if level.etype() == &ErrorType::H2Error
            && level
                .context
                .as_ref()
                .is_some_and(|c| c.as_str().starts_with(CLIENT_CLOSED_H2))
        {
            return true;
        }
        let Some(cause) = level.cause.as_deref() else {
            return false;
        };
        if let Some(inner) = cause.downcast_ref::<Error>() {
            level = inner;
        } else if let Some(inner) = cause.downcast_ref::<Box<Error>>() {
            level = inner;
        } else {
            return cause
                .downcast_ref::<h2::Error>()
                .is_some_and(|h2| h2.is_reset() && h2.is_remote());
        }
    }
}

/// How Pingora 0.9.1's `read_body_or_idle` words a stream its client closed with a reason.
const CLIENT_CLOSED_H2: &str = "Client closed H2, reason:";

/// The answer to a client refused for resetting too many HTTP/2 streams early: 429 until its
/// penalty ends. Nothing of it reaches the origin.
async fn refuse_for_resets(session: &mut Session, until: Timestamp, now: Timestamp) -> Result<()> {
    let retry_after = crate::time::ceil_secs(until.since(now)).max(1);
    let extra = vec![(header::RETRY_AFTER, HeaderValue::from(retry_after))];
    let body = Bytes::from(format!(
        "Too many cancelled requests: try again in {retry_after} seconds.\n"
    ));
    respond(session, 429, "text/plain; charset=utf-8", extra, body).await
}

impl Proxy {
    /// The HTTP/2 reset budget's part in a request (`crate::resets`): remembers who the client
    /// is for counting a reset later, and says until when the client is refused, if it is.
    /// A refused client's HTTP/2 connection is told to go away once its open streams are
    /// answered, unless the connection is a trusted proxy's, shared with other clients.
    fn reset_penalty(
        &self,
        client: ClientAddress,
        snapshot: &Snapshot,
        now: Timestamp,
        ctx: &mut RequestCtx,
    ) -> Option<Timestamp> {
        let resets = &self.app.state.resets;
        ctx.reset_direct = !client.trusted;
        // A trusted proxy that did not name the client (no usable X-Forwarded-For) leaves its
        // own address as the client's: one budget for everyone behind it would let one of them
        // get all the others refused. Its connections keep their own budget.
        if snapshot.config.identity.is_trusted(client.ip) {
            ctx.reset_key = None;
            return None;
        }
        let key = resets.key(client.ip, snapshot.config.identity.ipv6_prefix);
        ctx.reset_key = Some(key);
        let until = resets.penalized(key, now)?;
        if ctx.reset_direct {
            if let Some(connection) = H2Connection::current() {
                connection.go_away(GoAway::Graceful);
            }
        }
        Some(until)
    }

    /// Counts a request that its client cancelled, if it was an HTTP/2 stream reset early, and
    /// tells the connection to go away when its budget or its client's is spent.
    fn count_reset(&self, session: &Session, e: Option<&Error>, ctx: &RequestCtx) {
        let Some(e) = e else { return };
        if !session.is_http2() || !reset_by_client(e) {
            return;
        }
        let Some(connection) = H2Connection::current() else {
            return;
        };
        // Streams cut by the edge's own GOAWAY end as if reset: not the client's doing.
        if connection.is_ending() {
            return;
        }
        let budget = &ctx.snapshot.config.server.h2_resets;
        if !resets::is_premature(ctx.started.elapsed(), budget) {
            return;
        }
        let connection_spent = connection.resets.premature(budget.per_connection);
        let client_spent = ctx.reset_key.is_some_and(|key| {
            self.app
                .state
                .resets
                .premature(key, budget, Timestamp::now())
        });
        if ctx.reset_direct && (connection_spent || client_spent) {
            connection.go_away(GoAway::EnhanceYourCalm);
        } else if connection_spent {
            // A trusted proxy's connection carries other clients too: it is asked to go away
            // once its open streams are answered, not cut under them.
            connection.go_away(GoAway::Graceful);
        }
    }

    /// Counts what the decision did: the room's decision and each rule's verdict.
    fn record(&self, snapshot: &Snapshot, notes: &Notes) {
        self.app.metrics.with_handles(snapshot, |handles| {
            for (rule, outcome) in &notes.rule_outcomes {
                if let Some(counters) = handles.rules.get(*rule) {
                    counters[outcome.index()].inc();
                }
            }
            let Some((room, counted)) = &notes.counted else {
                return;
            };
            let Some(h) = handles.rooms.get(*room) else {
                return;
            };
            h.decisions[counted.decision.index()].inc();
            if counted.admitted {
                h.admitted.inc();
            }
            if let Some(reason) = counted.rejected {
                h.rejected[reason.index()].inc();
            }
            if let Some(invitation) = counted.invitation {
                h.invitations[usize::from(invitation.is_err())].inc();
            }
            if let Some(c) = &h.challenges {
                let pow = &counted.pow;
                for (counter, on) in c.iter().zip([pow.issued, pow.solved, pow.failed.is_some()]) {
                    if on {
                        counter.inc();
                    }
                }
            }
        });
    }
}

/// The origin connection pool's group of this worker thread. Without work stealing each worker
/// thread is a runtime of its own, and a pooled origin connection stays registered with the
/// reactor of the thread that opened it: reused from another thread, every read on it is
/// woken there and handed across, which cost the allowed path about half again as much CPU
/// per request at two threads as at one. Grouping the pool by thread keeps each connection on
/// its thread.
fn worker_group() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    thread_local! {
        static GROUP: u64 = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    GROUP.try_with(|g| *g).unwrap_or(0)
}

/// The host a request is routed by, lowercase, without port or trailing dot: the authority of
/// the request target when it has one (an absolute-form target, RFC 9112 §3.2.2, or HTTP/2's
/// `:authority`), else the `Host` header. Pingora refuses a request whose `Host` contradicts its
/// absolute-form target, and sends the origin the same authority as `Host`, so the room that
/// decides is always the room of the host the origin serves.
fn request_host(req: &RequestHeader) -> std::borrow::Cow<'_, str> {
    // Pingora keeps an absolute-form target's authority in the raw target only (its URI holds
    // the path); HTTP/2 carries it in the URI.
    let absolute = pingora::protocols::http::authority::raw_target_authority(req.raw_path())
        .authority()
        .and_then(|a| std::str::from_utf8(a).ok());
    let raw = absolute
        .or_else(|| req.uri.authority().map(|a| a.as_str()))
        .or_else(|| req.headers.get(header::HOST).and_then(|v| v.to_str().ok()))
        .unwrap_or("");
    let host = if let Some(rest) = raw.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match memchr::memrchr(b':', raw.as_bytes()) {
            Some(colon) if raw.as_bytes()[colon + 1..].iter().all(u8::is_ascii_digit) => {
                &raw[..colon]
            }
            _ => raw,
        }
    };
    let host = host.trim_end_matches('.');
    // Borrowed unless it must be lowercased (most clients send it lowercase).
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        host.to_ascii_lowercase().into()
    } else {
        host.into()
    }
}

/// How a room page answers one request.
struct PageAnswer {
    /// Over TLS (or so a trusted proxy said): the cookie is `Secure`.
    secure: bool,
    /// The JSON body rather than the page.
    json: bool,
    /// Deletes a used solution cookie.
    clear_solution: Option<String>,
}

/// A waiting or deny page (or its JSON), served from memory: the origin is never contacted.
async fn write_room_page(
    session: &mut Session,
    room: &Room,
    outcome: &Outcome,
    answer: PageAnswer,
    now: Timestamp,
) -> Result<()> {
    let PageAnswer {
        secure,
        json,
        clear_solution,
    } = answer;
    // Room for every header a page can carry: two cookies, Retry-After, Content-Language, Vary.
    let mut extra = Vec::with_capacity(5);
    let cookies = set_cookie_value(room, &outcome.cookie, secure)
        .into_iter()
        .chain(clear_solution);
    for value in cookies {
        if let Ok(v) = HeaderValue::try_from(value) {
            extra.push((header::SET_COOKIE, v));
        }
    }
    // `Retry-After` only: a `Refresh` header would reload the page on top of its own script
    // (two requests per check-in). Pages reload by script, or by a `<noscript>` meta refresh.
    if matches!(
        outcome.decision,
        Decision::Anon
            | Decision::Wait
            | Decision::Lost
            | Decision::Deny
            | Decision::SoldOut
            | Decision::QueueFull
            | Decision::PreQueue
    ) {
        extra.push((header::RETRY_AFTER, HeaderValue::from(outcome.refresh_secs)));
    }
    let language = if json {
        0
    } else {
        room.language_for(accept_language(session), now)
    };
    let page = room.page_context(outcome, language, now);
    let (content_type, body) = if json {
        let mut answer = WaitingJson::from(&page);
        answer.challenge = outcome.challenge.as_ref().map(|c| pages::ChallengeJson {
            algorithm: "sha256",
            difficulty: c.difficulty,
            value: &c.value,
            expires_in: c.expires_in,
        });
        answer.invitation_refused = outcome
            .invitation
            .and_then(Result::err)
            .map(invite::Refusal::as_str);
        ("application/json", pages::json(&answer))
    } else {
        language_headers(&mut extra, &page);
        let body = room.pages_at(now).render(outcome.decision.page(), &page);
        let body = match &outcome.challenge {
            Some(c) => pages::splice_challenge(&body, &c.value),
            None => body,
        };
        ("text/html; charset=utf-8", body)
    };
    respond(session, page.status, content_type, extra, body).await
}

/// `RateLimit-Policy` and `RateLimit` values for the token buckets that passed a request.
fn quota_headers(snapshot: &Snapshot, quotas: &[(usize, u64, u64)]) -> (HeaderValue, HeaderValue) {
    if let [(rule, remaining, reset)] = quotas {
        // One bucket (the usual case): its policy value was made at load, and its item is
        // written to a buffer of exactly its size.
        if let Some(rule) = snapshot.rules.get(*rule) {
            let item = Bytes::from(rule.ratelimit_item(*remaining, *reset));
            let item = HeaderValue::from_maybe_shared(item)
                .unwrap_or_else(|_| HeaderValue::from_static(""));
            return (rule.policy_value(), item);
        }
    }
    let mut items = String::with_capacity(32 * quotas.len());
    let mut policy = String::with_capacity(32 * quotas.len());
    for (i, (rule, remaining, reset)) in quotas.iter().enumerate() {
        let Some(rule) = snapshot.rules.get(*rule) else {
            continue;
        };
        if i > 0 {
            policy.push_str(", ");
            items.push_str(", ");
        }
        policy.push_str(rule.policy());
        rule.write_ratelimit_item(&mut items, *remaining, *reset);
    }
    (list_value(policy), list_value(items))
}

/// A header value made of a list built in `s`, without a second allocation: `Bytes` takes a
/// buffer whose length is its capacity as it is, and allocates a shared header for any other
/// (shrinking in place is a few instructions with mimalloc).
fn list_value(mut s: String) -> HeaderValue {
    s.shrink_to_fit();
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The 429 answer: `Retry-After`, IETF `RateLimit-Policy` / `RateLimit`, and the
/// `ratelimited` page of the request's room (or the server's) or JSON.
async fn write_rate_limited(
    session: &mut Session,
    snapshot: &Snapshot,
    room: Option<usize>,
    limited: &Limited,
    set_cookie: Option<String>,
) -> Result<()> {
    let mut extra = Vec::with_capacity(4);
    extra.push((header::RETRY_AFTER, HeaderValue::from(limited.retry_after)));
    let policy = HeaderValue::try_from(limited.policy.as_str());
    let item = HeaderValue::try_from(format!(
        "\"{}\";r=0;t={}",
        limited.rule, limited.retry_after
    ));
    if let (Ok(policy), Ok(item)) = (policy, item) {
        extra.push((RATELIMIT_POLICY, policy));
        extra.push((RATELIMIT, item));
    }
    if let Some(v) = set_cookie.and_then(|v| HeaderValue::try_from(v).ok()) {
        extra.push((header::SET_COOKIE, v));
    }
    let (content_type, body) = if wants_json(session) {
        let body = pages::json(&serde_json::json!({
            "error": "rate_limited",
            "rule": limited.rule,
            "retry_after": limited.retry_after,
        }));
        ("application/json", body)
    } else {
        let room = room.and_then(|i| snapshot.rooms.get(i));
        let pages = room.map_or(&snapshot.pages, |r| &r.pages);
        let mut ctx = PageContext::plain(
            room.map_or("this site", Room::name),
            "ratelimited",
            limited.retry_after,
            429,
        );
        ctx.title = room.map_or("this site", |r| r.config.title.as_str());
        ctx.queueing = room.map_or("", |r| r.config.admission.method());
        ctx.rule = &limited.rule;
        let default = room.map_or(0, |r| r.language_for(None, Timestamp::now()));
        let language = pages
            .catalogs()
            .negotiate(accept_language(session), default);
        let ctx = ctx.in_language(pages.catalogs(), language, default);
        language_headers(&mut extra, &ctx);
        (
            "text/html; charset=utf-8",
            pages.render(PageKind::RateLimited, &ctx),
        )
    };
    respond(session, 429, content_type, extra, body).await
}

/// Removes every room cookie from the `Cookie` headers bound for the origin; other cookies,
/// and headers without a room cookie, pass byte for byte.
fn strip_room_cookies(req: &mut RequestHeader, names: &[String]) -> Result<()> {
    let values = req.headers.get_all(header::COOKIE);
    let mut iter = values.iter();
    let (Some(first), second) = (iter.next(), iter.next()) else {
        return Ok(());
    };
    // One field (the usual HTTP/1.1 request): stripped in one pass, and left alone when it
    // holds no room cookie.
    if second.is_none() {
        return match cookie::strip(first.as_bytes(), names) {
            Stripped::Unchanged => Ok(()),
            Stripped::Empty => replace_cookie(req, Vec::new()),
            Stripped::Changed(bytes) => replace_cookie(req, bytes),
        };
    }
    // Several fields (HTTP/2 sends one per cookie) become one, as an HTTP/1.1 origin expects
    // (RFC 9113 §8.2.3), without the room cookies.
    let mut joined: Vec<u8> = Vec::new();
    for value in values.iter() {
        let part = match cookie::strip(value.as_bytes(), names) {
            Stripped::Unchanged => value.as_bytes().to_vec(),
            Stripped::Changed(bytes) => bytes,
            Stripped::Empty => continue,
        };
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(&part);
    }
    replace_cookie(req, joined)
}

/// Makes `value` the request's only `Cookie` field, or removes the field when it is empty.
fn replace_cookie(req: &mut RequestHeader, value: Vec<u8>) -> Result<()> {
    if value.is_empty() {
        req.remove_header(&header::COOKIE);
        return Ok(());
    }
    let value = HeaderValue::from_maybe_shared(Bytes::from(value)).map_err(|_| {
        Error::explain(
            ErrorType::InternalError,
            "stripped cookie is not a header value",
        )
    })?;
    // Replaces every field the request had.
    req.insert_header(header::COOKIE, value)
}

/// The request's `Accept-Language`, if it sent one.
fn accept_language(session: &Session) -> Option<&[u8]> {
    session
        .req_header()
        .headers
        .get(header::ACCEPT_LANGUAGE)
        .map(|v| v.as_bytes())
}

/// `Content-Language` of a page, and `Vary: Accept-Language` (a cache must not give one
/// visitor's language to another).
fn language_headers(extra: &mut Vec<(http::HeaderName, HeaderValue)>, page: &PageContext) {
    if let Ok(v) = HeaderValue::try_from(page.lang) {
        extra.push((header::CONTENT_LANGUAGE, v));
    }
    extra.push((header::VARY, HeaderValue::from_static("Accept-Language")));
}

/// Whether the client asked for JSON rather than a page.
fn wants_json(session: &Session) -> bool {
    let accept = session.req_header().headers.get(header::ACCEPT);
    pages::wants_json(accept.map(|v| v.as_bytes()))
}

/// Writes a complete synthetic response with `Content-Length`, keeping the connection alive.
/// Header names are given as written on the wire (`Retry-After`): appended to a fresh header,
/// they need no case conversion and no lookup.
pub(crate) async fn respond(
    session: &mut Session,
    status: u16,
    content_type: &'static str,
    extra: Vec<(http::HeaderName, HeaderValue)>,
    body: Bytes,
) -> Result<()> {
    // Built without Pingora's case map, straight into the header map: no name is parsed or
    // kept twice. HTTP/1 writes the common names titled and the others in lowercase (header
    // names are case-insensitive; HTTP/2 sends them all in lowercase).
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status =
        http::StatusCode::from_u16(status).or_err(ErrorType::InternalError, "an invalid status")?;
    let headers = &mut parts.headers;
    headers.reserve(3 + extra.len());
    headers.append(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.append(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    headers.append(header::CACHE_CONTROL, HeaderValue::from_static(NO_STORE));
    for (name, value) in extra {
        headers.append(name, value);
    }
    let resp = ResponseHeader::from(parts);
    let head_only = session.req_header().method == http::Method::HEAD;
    session
        .write_response_header(Box::new(resp), head_only)
        .await?;
    if !head_only {
        session.write_response_body(Some(body), true).await?;
    }
    Ok(())
}

async fn write_error_page(
    session: &mut Session,
    snapshot: &Snapshot,
    code: u16,
    set_cookie: Option<String>,
) -> Result<()> {
    let retry_after = 5u64;
    let mut extra = vec![(header::RETRY_AFTER, HeaderValue::from(retry_after))];
    if let Some(v) = set_cookie.and_then(|v| HeaderValue::try_from(v).ok()) {
        extra.push((header::SET_COOKIE, v));
    }
    if wants_json(session) {
        let body = pages::json(&serde_json::json!({
            "error": if code == 502 { "origin_unavailable" } else { "proxy_error" },
            "status": code,
            "retry_after": retry_after,
        }));
        return respond(session, code, "application/json", extra, body).await;
    }
    let catalogs = snapshot.pages.catalogs();
    let language = catalogs.negotiate(accept_language(session), 0);
    let ctx = PageContext::plain("this site", "error", retry_after, code)
        .in_language(catalogs, language, 0);
    language_headers(&mut extra, &ctx);
    let body = snapshot.pages.render(PageKind::Error, &ctx);
    respond(session, code, "text/html; charset=utf-8", extra, body).await
}

const X_FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
const RATELIMIT_POLICY: http::HeaderName = http::HeaderName::from_static("ratelimit-policy");
const RATELIMIT: http::HeaderName = http::HeaderName::from_static("ratelimit");

/// Removes every request header in our namespace: the origin must never see one, and a client
/// must never be able to set one. `Vestibule_X` counts too: servers that map headers to
/// variables (CGI, many frameworks) read `_` as `-`.
fn strip_internal_headers(req: &mut RequestHeader) {
    let internal: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| is_internal(name.as_str()))
        .cloned()
        .collect();
    for name in internal {
        req.remove_header(&name);
    }
}

/// Whether a (lowercase) header name is in our namespace, spelled with `-` or `_`.
fn is_internal(name: &str) -> bool {
    name.len() >= INTERNAL_PREFIX.len()
        && name.as_bytes()[..INTERNAL_PREFIX.len()]
            .iter()
            .zip(INTERNAL_PREFIX.as_bytes())
            .all(|(a, b)| a == b || (*a == b'_' && *b == b'-'))
}

/// `Content-Length` as one value: several equal values (`3, 3`, or the header twice) become one;
/// values that differ are refused (Pingora refuses them first; this holds whatever reaches here).
fn single_content_length(req: &mut RequestHeader) -> Result<()> {
    let values = req.headers.get_all(header::CONTENT_LENGTH);
    let mut iter = values.iter();
    let (Some(first), second) = (iter.next(), iter.next()) else {
        return Ok(());
    };
    if second.is_none() && !first.as_bytes().contains(&b',') {
        return Ok(());
    }
    let mut length: Option<u64> = None;
    for item in values
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
    {
        let item = item.trim_ascii();
        let parsed = std::str::from_utf8(item)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok());
        match (parsed, length) {
            (Some(n), None) => length = Some(n),
            (Some(n), Some(m)) if n == m => {}
            _ => return Error::e_explain(ErrorType::HTTPStatus(400), "ambiguous Content-Length"),
        }
    }
    if let Some(n) = length {
        req.insert_header(header::CONTENT_LENGTH, n)?;
    }
    Ok(())
}

/// Appends the TCP peer to `X-Forwarded-For`. A chain is kept only when the peer is a trusted
/// proxy: an untrusted client's own claims are replaced, so every hop the origin sees was
/// recorded by someone we trust.
fn set_forwarded_for(req: &mut RequestHeader, peer: IpAddr, trusted: bool) -> Result<()> {
    if !trusted || !req.headers.contains_key(X_FORWARDED_FOR) {
        // The usual case: the peer is the whole chain. An IPv4 address is written on the
        // stack and copied once, into a buffer of exactly its length (a `String` of spare
        // capacity became a `Bytes` with a second allocation).
        let value = match peer {
            IpAddr::V4(v4) => HeaderValue::from_bytes(crate::identity::write_ipv4(
                v4,
                &mut [0; crate::identity::IPV4_TEXT_MAX],
            )),
            IpAddr::V6(v6) => HeaderValue::try_from(v6.to_string()),
        }
        .or_err(ErrorType::InternalError, "an address is not a header value")?;
        return req.insert_header("X-Forwarded-For", value);
    }
    let mut chain = String::new();
    for value in req.headers.get_all(X_FORWARDED_FOR) {
        if let Ok(v) = value.to_str() {
            let v = v.trim();
            if !v.is_empty() {
                if !chain.is_empty() {
                    chain.push_str(", ");
                }
                chain.push_str(v);
            }
        }
    }
    if !chain.is_empty() {
        chain.push_str(", ");
    }
    chain.push_str(&crate::identity::ip_text(peer));
    req.insert_header("X-Forwarded-For", chain)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_clients_reset_counts_as_one() {
        let closed = || Error::explain(ErrorType::H2Error, "Client closed H2, reason: CANCEL");
        // As Pingora reports it: the idle watch's error, wrapped in the origin peer's context.
        let wrapped = Error::because(ErrorType::H2Error, "Peer: addr: 127.0.0.1:1", closed());
        assert!(reset_by_client(&wrapped.into_down()));
        assert!(reset_by_client(&closed().into_down()));
        // The origin's side of things is never the client's reset.
        assert!(!reset_by_client(&closed().into_up()));
        // A lost connection: an I/O error under the idle watch's, or a read error.
        let idle = Error::because(
            ErrorType::H2Error,
            "downstream error while idling",
            std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        );
        assert!(!reset_by_client(&idle.into_down()));
        let read = Error::because(
            ErrorType::ReadError,
            "while reading downstream request body",
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        );
        assert!(!reset_by_client(&read.into_down()));
        assert!(!reset_by_client(
            &Error::explain(ErrorType::ConnectionClosed, "downstream closed").into_down()
        ));
        // An h2 error that is the server's own (not a reset the client sent).
        let local = Error::because(
            ErrorType::H2Error,
            "write",
            h2::Error::from(h2::Reason::ENHANCE_YOUR_CALM),
        );
        assert!(!reset_by_client(&local.into_down()));
    }

    /// Pingora keeps three copies of the context in the per-request future it boxes (and so
    /// copies) for every request: the context must stay one pointer there, however
    /// `RequestCtx` grows.
    #[test]
    fn the_request_context_is_one_pointer_in_pingoras_future() {
        assert_eq!(
            std::mem::size_of::<<Proxy as ProxyHttp>::CTX>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn forwarded_for_trust() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("x-forwarded-for", "6.6.6.6").unwrap();
        req.append_header("x-forwarded-for", "7.7.7.7").unwrap();
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let mut trusted = req.clone();
        set_forwarded_for(&mut trusted, peer, true).unwrap();
        assert_eq!(
            trusted
                .headers
                .get_all("x-forwarded-for")
                .iter()
                .collect::<Vec<_>>(),
            ["6.6.6.6, 7.7.7.7, 10.0.0.1"]
        );
        set_forwarded_for(&mut req, peer, false).unwrap();
        assert_eq!(
            req.headers
                .get_all("x-forwarded-for")
                .iter()
                .collect::<Vec<_>>(),
            ["10.0.0.1"]
        );
    }

    #[test]
    fn internal_headers_are_stripped() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("Vestibule-Command", "revoke").unwrap();
        req.append_header("vestibule-decision", "allow").unwrap();
        req.append_header("Vestibule_X", "1").unwrap();
        req.append_header("vestibule_command", "revoke").unwrap();
        req.append_header("x-keep", "1").unwrap();
        req.append_header("vestibulex", "1").unwrap();
        strip_internal_headers(&mut req);
        assert_eq!(req.headers.len(), 2);
        assert!(req.headers.contains_key("x-keep"));
        assert!(req.headers.contains_key("vestibulex"));
    }

    #[test]
    fn content_length_becomes_one_value() {
        let mut req = RequestHeader::build("POST", b"/", None).unwrap();
        req.append_header("content-length", "3, 3").unwrap();
        single_content_length(&mut req).unwrap();
        assert_eq!(req.headers.get_all("content-length").iter().count(), 1);
        assert_eq!(req.headers["content-length"], "3");
        req.append_header("content-length", "3").unwrap();
        single_content_length(&mut req).unwrap();
        assert_eq!(req.headers["content-length"], "3");
        req.append_header("content-length", "4").unwrap();
        assert!(single_content_length(&mut req).is_err());
    }
}
