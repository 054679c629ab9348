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
use crate::cookie::{self};
use crate::decide::{self, Answer, ClientAddress, Notes, Request};
use crate::listen::h2::{GoAway, H2Connection};
use crate::logging::AccessLine;
use crate::metrics::AnswerKind;
use crate::pages::Wants;
use crate::path;
use crate::resets;
use crate::room::{Decision, Room};
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

mod answer;
mod enqueue;
#[cfg(test)]
mod tests;
mod upstream;

use answer::{
    quota_headers, wants_json, write_error_page, write_rate_limited, write_room_page, PageAnswer,
};
pub(crate) use answer::{respond, respond_cached};
use upstream::{
    set_forwarded_for, single_content_length, strip_internal_headers, strip_room_cookies,
};

/// Request headers with this prefix are ours: a client's copies never reach the origin.
const INTERNAL_PREFIX: &str = "vestibule-";
const NO_STORE: &str = "no-store, private";
/// The origin's response header to command vestibule (`Vestibule-Command: revoke`), never
/// passed on.
const COMMAND_HEADER: http::HeaderName = http::HeaderName::from_static("vestibule-command");
/// `jwt` rooms: the admitted visitor's JWT, to the origin.
const ADMISSION_HEADER: http::HeaderName = http::HeaderName::from_static("vestibule-admission");

pub(crate) struct Proxy {
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
pub(crate) type Ctx = Box<RequestCtx>;

/// Per-request state. Dropped after `logging` on every path.
pub(crate) struct RequestCtx {
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
        let now = crate::time::now();
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
        let answer = decide::decide_into(&request, &snapshot.policy(), now, &mut ctx.notes);
        drop(request);
        self.record(&snapshot, &ctx.notes);
        let metrics = &self.app.metrics;
        match answer {
            Answer::Forward => Ok(false),
            Answer::Api { endpoint, identity } => {
                if let Some(room) = ctx.notes.room {
                    metrics.count_answer(&snapshot, room, AnswerKind::Api);
                }
                let cookie = ctx.notes.set_cookie.take();
                crate::api::answer(session, endpoint, &identity, cookie, &snapshot, &self.app)
                    .await?;
                Ok(true)
            }
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
                let room_at = room;
                let room = snapshot.rooms.get(room).zip(snapshot.pages_of(room));
                let room = room.ok_or_else(|| {
                    Error::explain(ErrorType::InternalError, "routed to a room that is gone")
                })?;
                let clear = ctx.notes.clear_solution.take();
                // `Accept` was read once, by the decision.
                let json = ctx
                    .notes
                    .wants
                    .map_or_else(|| wants_json(session), |w| w == Wants::Json);
                let kind = if json {
                    AnswerKind::Json
                } else {
                    AnswerKind::Page
                };
                metrics.count_answer(&snapshot, room_at, kind);
                let page = PageAnswer {
                    secure: ctx.notes.secure,
                    json,
                    clear_solution: clear,
                    api_prefix: &snapshot.config.server.api_prefix,
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
            Answer::EnqueueRefused(room, refusal) => {
                ctx.notes.slots.clear();
                let json = ctx
                    .notes
                    .wants
                    .map_or_else(|| wants_json(session), |w| w == Wants::Json);
                enqueue::write_refusal(session, &snapshot, room, refusal, json, now).await?;
                Ok(true)
            }
            Answer::RateLimited(check) => {
                ctx.notes.slots.clear();
                if let Some(room) = ctx.notes.room {
                    metrics.count_answer(&snapshot, room, AnswerKind::RateLimited);
                }
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
        if let Some(jwt) = ctx.notes.jwt.as_ref().and_then(|j| j.admission.as_ref()) {
            // Set after the client's copies of internal headers are gone.
            upstream.insert_header(
                ADMISSION_HEADER,
                HeaderValue::from_str(jwt)
                    .or_err(ErrorType::InternalError, "a JWT that is no header value")?,
            )?;
        }
        if let Some(uri) = decide::without_invitation(&upstream.uri) {
            upstream.set_uri(uri);
        }
        enqueue::strip_parameter(upstream);
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
                room.revoke(ctx.notes.place.take(), crate::time::now());
                self.app
                    .events
                    .session_updated(room.name(), "revoked", None, ctx.notes.client_ip);
                ctx.notes.set_cookie = Some(cookie::delete(&room.config.cookie, ctx.notes.secure));
                // The session's JWT cookie goes too (a JWT held elsewhere lives until it
                // expires, within the session it stood for).
                if let Some(name) = room.jwt_cookie() {
                    let jwt = ctx.notes.jwt.get_or_insert_default();
                    jwt.set_cookie = Some(cookie::delete_named(
                        &room.config.cookie,
                        name,
                        ctx.notes.secure,
                    ));
                }
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
        if let Some(value) = ctx.notes.jwt.as_mut().and_then(|j| j.set_cookie.take()) {
            response.append_header(header::SET_COOKIE, value)?;
            response.insert_header("Cache-Control", NO_STORE)?;
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
                .premature(key, budget, crate::time::now())
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
        self.record_jwt(snapshot, notes);
        self.app.events.admission_granted(snapshot, notes);
        enqueue::record(&self.app.metrics, snapshot, notes);
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
            if counted.arrived {
                h.arrivals.inc();
            }
            if let Some(secs) = counted.waited_secs {
                h.wait.observe(secs as f64);
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

impl Proxy {
    /// JWTs signed and refused, by room (only `jwt` rooms' requests have any).
    fn record_jwt(&self, snapshot: &Snapshot, notes: &Notes) {
        let Some(jwt) = notes.jwt.as_deref() else {
            return;
        };
        let Some(room) = notes.room.and_then(|i| snapshot.rooms.get(i)) else {
            return;
        };
        let metrics = &self.app.metrics;
        if jwt.set_cookie.is_some() {
            metrics.jwt_issued.with_label_values(&[room.name()]).inc();
        }
        if let Some(reason) = jwt.refused {
            metrics
                .jwt_rejected
                .with_label_values(&[room.name(), reason.as_str()])
                .inc();
        }
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
