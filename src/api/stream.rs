//! The visitor push: `GET {api_prefix}/rooms/<room>/stream`, server-sent events that tell a
//! waiting visitor where they stand (`estimate`) and when their next request lets them in
//! (`turn`), so their page need not poll.
//!
//! The room decides nothing here ([`vestibule_core::room::watch`]): once a second the stream
//! asks the room what to tell, and on `turn` the page makes its request, which the room decides
//! as it always does. The stream sets no cookie and gives no place.
//!
//! - **Who.** A browser is known by its room cookie, an API client by `?request_id=`.
//! - **Bounds.** At most `[server] max_streams` streams are open on a node; past it a stream
//!   answers 503 with `Retry-After` and the page polls. A stream ends by itself after at most
//!   [`MAX_WATCH_SECS`](vestibule_core::room::watch::MAX_WATCH_SECS), or earlier when the
//!   visitor must check in to keep their place. One wait token has one stream on a node: a
//!   second tab gets 204 and polls. Each open stream holds one [`Watch`] and a timer, a few
//!   hundred bytes besides its connection.
//! - **Answers.** 200 `text/event-stream`; 204 when there is nothing to watch (not waiting in
//!   this room, or a pre-queue is open: the page polls); 404 for a room that does not exist;
//!   503 past `max_streams`.
//!
//! The event format is three lines (`event:`, `data:`, a blank line), written here as the
//! console's feed writes it: an SSE crate would add a body type to adapt to Pingora's session
//! and nothing else.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::Method;
use pingora::prelude::*;
use pingora::proxy::Session;
use vestibule_core::identity::Identity;
use vestibule_core::room::watch::{Tell, Unwatched, Watch};
use vestibule_core::room::Room;

use crate::app::App;
use crate::push::{texts, Told};
use crate::snapshot::Snapshot;

/// How often a stream asks its room.
const TICK: Duration = Duration::from_secs(1);
/// A stream that has said nothing for this long says its `estimate` again, so that proxies on
/// the way keep it open and the page knows the stream is alive (a comment would not reach its
/// script).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// A write that cannot finish within this ends the stream (a client that stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a finished attempt to open a stream answered, for the API's request metric.
pub(crate) struct Opened {
    pub status: u16,
}

/// Answers `GET {api_prefix}/rooms/<room_name>/stream` from `identity`, with the API's CORS
/// headers `cors`. Returns once the stream is over.
pub(crate) async fn serve(
    session: &mut Session,
    room_name: &str,
    identity: &Identity,
    snapshot: &Snapshot,
    app: &App,
    cors: Vec<(HeaderName, HeaderValue)>,
) -> Result<Opened> {
    let now = crate::time::now();
    let method = session.req_header().method.clone();
    if method != Method::GET {
        let mut extra = cors;
        extra.push((header::ALLOW, HeaderValue::from_static("GET, OPTIONS")));
        return refuse(
            session,
            405,
            "method_not_allowed",
            "this endpoint answers GET",
            extra,
        )
        .await;
    }
    let Some(room) = snapshot.rooms.iter().find(|r| r.name() == room_name) else {
        return refuse(session, 404, "unknown_room", "no room of that name", cors).await;
    };
    let Some(ring) = snapshot.keys.as_ref() else {
        return refuse(
            session,
            503,
            "unavailable",
            "the key ring is not loaded",
            cors,
        )
        .await;
    };
    // Who is watched first (nothing is counted until the stream opens): a visitor with nothing
    // to watch takes no place in `max_streams`.
    let watched = match request_id(session) {
        Some(id) => watch_request(room, ring, app, &id, now),
        None => {
            let headers = session.req_header().headers.get_all(header::COOKIE);
            let cookies = vestibule_core::cookie::values(
                headers.iter().map(|v| v.as_bytes()),
                &room.config.cookie.name,
            );
            room.watch(ring, identity, &cookies, now).map(Some)
        }
    };
    let watch = match watched {
        // Another stream watches this token already (another tab): this page polls.
        Ok(Some(watch)) if !app.streams.watch(watch.key()) => {
            return crate::proxy::respond(session, 204, "text/plain", cors, Bytes::new())
                .await
                .map(|()| Opened { status: 204 });
        }
        Ok(Some(watch)) => Some(watch),
        // An API client already let in: its turn has come.
        Ok(None) => None,
        Err(_) => {
            return crate::proxy::respond(session, 204, "text/plain", cors, Bytes::new())
                .await
                .map(|()| Opened { status: 204 });
        }
    };
    let retry_after = room.retry_after().clamp(1, 60);
    let max = u64::from(snapshot.config.server.max_streams);
    if !app.streams.take(max) {
        if let Some(w) = &watch {
            app.streams.unwatch(w.key());
        }
        let mut extra = cors;
        extra.push((header::RETRY_AFTER, HeaderValue::from(retry_after)));
        return refuse(
            session,
            503,
            "too_many_streams",
            "this node holds as many streams as it may: check in by polling",
            extra,
        )
        .await;
    }
    // From here the place is ours: the guard gives it back, and ends the watch, however the
    // stream ends (the client leaving, a write timing out, the process shutting down).
    let mut guard = Guard {
        app,
        room: room_name.to_owned(),
        snapshot: app.snapshot(),
        watch: None,
        counted: false,
    };
    guard.watch = watch;
    guard.count_open();
    open_stream(session, cors).await?;
    if guard.watch.is_none() {
        write_last(session, TURN).await;
        return Ok(Opened { status: 200 });
    }
    run(session, &mut guard, ring.clone()).await;
    Ok(Opened { status: 200 })
}

/// `?request_id=` of the request, if it has one.
fn request_id(session: &Session) -> Option<String> {
    let query = session.req_header().uri.query()?;
    vestibule_core::api::stream_request_id(query).map(str::to_owned)
}

/// An API client's watch: the wait token its request's next check-in presents.
fn watch_request(
    room: &Room,
    ring: &vestibule_core::keys::KeyRing,
    app: &App,
    id: &str,
    now: vestibule_core::time::Timestamp,
) -> std::result::Result<Option<Watch>, Unwatched> {
    let ledger = app.state.ledgers.cell(room.name());
    match vestibule_core::api::queue::watched(room, ring, &ledger, id, now) {
        Ok(Some((uid, token))) => room.watch(ring, &uid, &[token.as_bytes()], now).map(Some),
        Ok(None) => Ok(None),
        Err(_) => Err(Unwatched::NotWaiting),
    }
}

const TURN: &[u8] = b"event: turn\ndata: {}\n\n";

/// Asks the room once a second until the visitor's turn, the stream's end, or the client goes.
async fn run(session: &mut Session, guard: &mut Guard<'_>, ring: vestibule_core::keys::KeyRing) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What the visitor was last told: the people ahead and the wait in the page's words (its
    // bounds in minutes), so a stream speaks when that changes, not every second.
    let mut told: Option<Told> = None;
    let accept_language = session
        .req_header()
        .headers
        .get(header::ACCEPT_LANGUAGE)
        .map(|v| v.as_bytes().to_vec());
    let mut last_write = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // The client closed the connection (or reset the stream): the guard ends the watch
            // now rather than at the next write.
            read = session.downstream_session.read_body_or_idle(true) => {
                if read.is_err() {
                    return;
                }
                continue;
            }
        }
        let now = crate::time::now();
        // A reload may have changed the room: ask the one in service.
        let snapshot = guard.app.snapshot();
        let Some((room, pages)) = snapshot.room_named(&guard.room) else {
            guard.end(now);
            write_last(session, b"").await;
            return;
        };
        let ring = snapshot.keys.as_ref().unwrap_or(&ring);
        guard.snapshot = snapshot.clone();
        let Some(watch) = guard.watch.as_mut() else {
            return;
        };
        match room.tell(ring, watch, now) {
            Tell::Turn => {
                guard.end(now);
                write_last(session, TURN).await;
                return;
            }
            Tell::End => {
                guard.end(now);
                write_last(session, b"").await;
                return;
            }
            Tell::Wait {
                users_ahead,
                estimates,
            } => {
                let estimate_secs = estimates.p50.map(|m| (m * 60.0).round() as u64);
                let wait = crate::pages::PageContext::plain("", "", 0, 0).with_wait(estimates);
                let now_told = (users_ahead, wait.wait_soon, wait.wait_low, wait.wait_high);
                let fresh = told != Some(now_told);
                let quiet = last_write.elapsed() >= KEEPALIVE;
                if !fresh && !quiet {
                    continue;
                }
                let chunk = {
                    told = Some(now_told);
                    let language = pages.language_for(room, accept_language.as_deref(), now);
                    let texts = texts(room, pages, language, users_ahead, estimates, now);
                    let data = serde_json::json!({
                        "users_ahead": users_ahead,
                        "estimate_seconds": estimate_secs,
                        "ahead_text": texts.0,
                        "wait_text": texts.1,
                    });
                    format!("event: estimate\ndata: {data}\n\n")
                };
                if session
                    .write_response_body(Some(Bytes::from(chunk)), false)
                    .await
                    .is_err()
                {
                    // The client went: the guard ends the watch.
                    return;
                }
                last_write = tokio::time::Instant::now();
            }
        }
    }
}

/// Writes the stream's head: 200, `text/event-stream`, never cached or buffered.
async fn open_stream(session: &mut Session, cors: Vec<(HeaderName, HeaderValue)>) -> Result<()> {
    let mut resp = ResponseHeader::build(200, Some(6 + cors.len()))?;
    resp.insert_header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")?;
    resp.insert_header(header::CACHE_CONTROL, "no-store")?;
    resp.insert_header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")?;
    // Proxies in front (nginx) would otherwise hold the events back.
    resp.insert_header("x-accel-buffering", "no")?;
    if !session.is_http2() {
        resp.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    for (name, value) in cors {
        resp.append_header(name, value)?;
    }
    session.set_keepalive(None);
    session.set_write_timeout(Some(WRITE_TIMEOUT));
    session.write_response_header(Box::new(resp), false).await?;
    // A comment first: clients (and proxies) see the stream open at once.
    session
        .write_response_body(Some(Bytes::from_static(b": open\n\n")), false)
        .await
}

/// Writes the last event (if any) and ends the body.
async fn write_last(session: &mut Session, chunk: &'static [u8]) {
    if !chunk.is_empty()
        && session
            .write_response_body(Some(Bytes::from_static(chunk)), false)
            .await
            .is_err()
    {
        return;
    }
    let _ = session.write_response_body(Some(Bytes::new()), true).await;
}

/// A JSON error, as the API writes them.
async fn refuse(
    session: &mut Session,
    status: u16,
    code: &str,
    message: &str,
    extra: Vec<(HeaderName, HeaderValue)>,
) -> Result<Opened> {
    let (status, body) = super::error(status, code, message);
    crate::proxy::respond(session, status, "application/json", extra, body).await?;
    Ok(Opened { status })
}

/// An open stream's place in `max_streams` and its watch, given back when it ends.
struct Guard<'a> {
    app: &'a App,
    room: String,
    /// The snapshot last asked: its room ends the watch if the stream is dropped.
    snapshot: Arc<Snapshot>,
    watch: Option<Watch>,
    /// Whether `vestibule_streams_open` counts it.
    counted: bool,
}

impl Guard<'_> {
    fn count_open(&mut self) {
        self.gauge().inc();
        self.counted = true;
    }

    fn gauge(&self) -> prometheus::IntGauge {
        // A room label only for a room the config has: the label set stays bounded.
        self.app
            .metrics
            .streams_open
            .with_label_values(&[self.room.as_str()])
    }

    /// Ends the watch: what the stream counted for the visitor goes back to their cookie's.
    fn end(&mut self, now: vestibule_core::time::Timestamp) {
        if let Some(watch) = self.watch.take() {
            self.app.streams.unwatch(watch.key());
            if let Some(room) = self.snapshot.rooms.iter().find(|r| r.name() == self.room) {
                room.unwatch(&watch, now);
            }
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.end(crate::time::now());
        if self.counted {
            self.gauge().dec();
        }
        self.app.streams.release();
    }
}
