//! One room's queue API on the proxy listeners: `queue`, `queue/<request_id>`, `serving`,
//! `waiting` and `token` under `{api_prefix}/rooms/<room>/`, and an event's verifiable draw at
//! `draws/<event>` (any room: [`crate::draws`]). The core decides
//! ([`vestibule_core::api::queue`]); this reads the body and writes the JSON.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::Method;
use pingora::proxy::Session;
use serde_json::{json, Value};
use vestibule_core::api::queue::{self as core, ApiError, Status};
use vestibule_core::api::RoomEndpoint;
use vestibule_core::identity::Identity;

use super::error;
use crate::app::App;
use crate::snapshot::Snapshot;

/// Most bytes a request body may have.
pub(crate) const MAX_BODY: usize = 8 * 1024;

/// What was asked.
pub(super) struct Asked<'a> {
    pub room: &'a str,
    pub what: &'a RoomEndpoint,
    pub method: &'a Method,
    pub identity: &'a Identity,
}

/// What to write back.
pub(super) struct Reply {
    pub status: u16,
    pub body: Bytes,
    pub cache_control: &'static str,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Reply {
    pub(super) fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body: Bytes::from(body.to_string()),
            cache_control: "no-store",
            headers: Vec::new(),
        }
    }

    pub(super) fn error(status: u16, code: &str, message: &str) -> Reply {
        let (status, body) = error(status, code, message);
        Reply {
            status,
            body,
            cache_control: "no-store",
            headers: Vec::new(),
        }
    }

    pub(super) fn allow(mut self, methods: &'static str) -> Reply {
        self.headers
            .push((header::ALLOW, HeaderValue::from_static(methods)));
        self
    }
}

pub(super) async fn answer(
    session: &mut Session,
    asked: Asked<'_>,
    snapshot: &Snapshot,
    app: &App,
) -> Reply {
    let now = crate::time::now();
    if let RoomEndpoint::Draw(event) = asked.what {
        if !matches!(*asked.method, Method::GET | Method::HEAD) {
            return Reply::error(405, "method_not_allowed", "this endpoint answers GET")
                .allow("GET, HEAD, OPTIONS");
        }
        let (status, body) = crate::draws::published(&snapshot.rooms, asked.room, event, now);
        let mut reply = Reply {
            status,
            body,
            cache_control: if status == 200 {
                "max-age=5"
            } else {
                "no-store"
            },
            headers: Vec::new(),
        };
        if status == 503 {
            reply
                .headers
                .push((header::RETRY_AFTER, HeaderValue::from_static("1")));
        }
        return reply;
    }
    let Some(room) = snapshot
        .rooms
        .iter()
        .find(|r| r.name() == asked.room && r.numbered(now).is_some())
    else {
        return Reply::error(
            404,
            "unknown_room",
            "no room of that name has the queue API (api = true)",
        );
    };
    let Some(ring) = snapshot.keys.as_ref() else {
        return Reply::error(503, "unavailable", "the key ring is not loaded");
    };
    let ledger = app.state.ledgers.cell(room.name());
    let get = matches!(*asked.method, Method::GET | Method::HEAD);
    let post = *asked.method == Method::POST;
    match asked.what {
        RoomEndpoint::Queue if post => {
            let body = match read_json(session).await {
                Ok(body) => body,
                Err(reply) => return reply,
            };
            if body.as_ref().is_some_and(|b| !b.is_object()) {
                return Reply::error(400, "bad_request", "the body must be a JSON object");
            }
            let token = match body.as_ref().and_then(|b| b.get("enqueue_token")) {
                None | Some(Value::Null) => enqueue_header(session),
                Some(Value::String(t)) => Some(t.clone()),
                Some(_) => {
                    return Reply::error(400, "bad_request", "enqueue_token must be a string")
                }
            };
            let identity = core::identity_of(room, token.as_deref(), asked.identity, now);
            count_enqueue(app, room, token.is_some(), &identity);
            match identity.and_then(|who| core::enqueue(room, ring, &ledger, &who, now)) {
                Ok(s) => Reply::json(200, queued(&s)),
                Err(e) => refusal(&e),
            }
        }
        RoomEndpoint::Request(id) if get => {
            match core::check_in(room, ring, &ledger, id, now) {
                Ok(s) | Err(ApiError::NotYet(s)) => Reply::json(200, standing(&s)),
                // An expired or ended request is unknown here.
                Err(ApiError::Expired | ApiError::Ended) => {
                    Reply::error(404, "unknown_request", "this request has expired or ended")
                }
                Err(e) => refusal(&e),
            }
        }
        RoomEndpoint::Token if post => {
            let body = match read_json(session).await {
                Ok(Some(body)) => body,
                Ok(None) => {
                    return Reply::error(
                        400,
                        "bad_request",
                        "the body must be {\"request_id\": ...}",
                    )
                }
                Err(reply) => return reply,
            };
            let Some(id) = body.get("request_id").and_then(Value::as_str) else {
                return Reply::error(400, "bad_request", "the body must be {\"request_id\": ...}");
            };
            match core::token(room, ring, &ledger, &snapshot.config.jwt, id, now) {
                Ok(issued) => {
                    app.metrics
                        .jwt_issued
                        .with_label_values(&[room.name()])
                        .inc();
                    app.events.jwt_issued(room.name(), id, "api");
                    Reply::json(
                        200,
                        json!({
                            "access_token": issued.access_token,
                            "token_type": "Bearer",
                            "expires_in": issued.expires_in,
                        }),
                    )
                }
                Err(e) => refusal(&e),
            }
        }
        RoomEndpoint::Serving if get => {
            let queue = room.numbered(now).map_or(0, |q| q.serving_number());
            let mut reply = Reply::json(200, json!({ "serving_number": queue }));
            reply.cache_control = "max-age=1";
            reply
        }
        RoomEndpoint::Waiting if get => {
            let waiting = room.numbered(now).map_or(0, |q| q.figures(now).waiting);
            Reply::json(200, json!({ "waiting": waiting }))
        }
        RoomEndpoint::Queue | RoomEndpoint::Token => {
            Reply::error(405, "method_not_allowed", "this endpoint answers POST")
                .allow("POST, OPTIONS")
        }
        RoomEndpoint::Request(_)
        | RoomEndpoint::Serving
        | RoomEndpoint::Waiting
        | RoomEndpoint::Draw(_)
        | RoomEndpoint::Stream => {
            Reply::error(405, "method_not_allowed", "this endpoint answers GET")
                .allow("GET, HEAD, OPTIONS")
        }
    }
}

/// The `Vestibule-Enqueue` header's token, if the request sent one (not text: kept, so it is
/// refused as malformed rather than ignored).
fn enqueue_header(session: &Session) -> Option<String> {
    session
        .req_header()
        .headers
        .get(vestibule_core::enqueue::HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned())
}

/// Counts an enqueue token a room with `enqueue` on took or refused.
fn count_enqueue(
    app: &App,
    room: &vestibule_core::room::Room,
    brought: bool,
    identity: &Result<Identity, ApiError>,
) {
    if room.config.enqueue.is_none() {
        return;
    }
    match identity {
        Ok(_) if brought => app
            .metrics
            .enqueue_accepted
            .with_label_values(&[room.name()])
            .inc(),
        Err(ApiError::Enqueue(r)) => app
            .metrics
            .enqueue_rejected
            .with_label_values(&[room.name(), r.as_str()])
            .inc(),
        _ => {}
    }
}

/// The answer to `queue`.
fn queued(s: &Status) -> Value {
    json!({
        "request_id": s.request_id,
        "queue_number": s.queue_number,
        "serving_number": s.serving_number,
        "waiting": s.waiting,
        "estimate_seconds": s.estimate_seconds,
    })
}

/// The answer to `queue/<request_id>`.
fn standing(s: &Status) -> Value {
    json!({
        "queue_number": s.queue_number,
        "serving_number": s.serving_number,
        "expires_at": s.expires_at.map(rfc3339),
        "estimate_seconds": s.estimate_seconds,
        "retry_after": s.retry_after,
    })
}

fn rfc3339(secs: u64) -> String {
    vestibule_core::time::Timestamp::from_secs(secs).rfc3339()
}

/// The JSON answer to a refusal.
pub(crate) fn refusal_body(e: &ApiError) -> (u16, Value) {
    let (status, code, message) = match e {
        ApiError::UnknownRoom => (
            404,
            "unknown_room",
            "no room of that name has the queue API",
        ),
        ApiError::UnknownRequest => (404, "unknown_request", "no such request in this room"),
        ApiError::Expired => (410, "expired", "this request's place has expired"),
        ApiError::Ended => (410, "expired", "this request's session has ended"),
        ApiError::QueueFull => (429, "queue_full", "the line is full; try again later"),
        ApiError::Closed("sold_out") => (410, "sold_out", "the room is sold out"),
        ApiError::Closed(code) => (503, *code, "the room lets nobody in line now"),
        ApiError::NumbersPending => (
            503,
            "numbers_pending",
            "this node has no queue number to give right now; try again in a second",
        ),
        ApiError::NoKeys => (
            503,
            "no_jwt_keys",
            "the key ring has no [[jwt_key]] to sign a token with",
        ),
        ApiError::Enqueue(r) => {
            return (
                403,
                json!({
                    "error": r.error(),
                    "reason": r.as_str(),
                    "message": match r {
                        vestibule_core::enqueue::Refusal::Missing => "this room asks for an enqueue token",
                        _ => "the enqueue token is not valid for this room",
                    },
                }),
            )
        }
        ApiError::NotYet(s) => {
            return (
                409,
                json!({
                    "error": "not_yet",
                    "message": "the serving counter has not reached this number",
                    "queue_number": s.queue_number,
                    "serving_number": s.serving_number,
                    "estimate_seconds": s.estimate_seconds,
                    "retry_after": s.retry_after,
                }),
            )
        }
    };
    (status, json!({ "error": code, "message": message }))
}

fn refusal(e: &ApiError) -> Reply {
    let (status, body) = refusal_body(e);
    let mut reply = Reply::json(status, body);
    let retry = match e {
        ApiError::NotYet(s) => Some(s.retry_after),
        ApiError::NumbersPending | ApiError::QueueFull => Some(1),
        _ => None,
    };
    if let Some(secs) = retry {
        reply
            .headers
            .push((header::RETRY_AFTER, HeaderValue::from(secs)));
    }
    reply
}

/// The body as JSON: `None` when empty; a reply for one too long or malformed.
async fn read_json(session: &mut Session) -> Result<Option<Value>, Reply> {
    let body = read_body(session).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|_| Reply::error(400, "bad_request", "the body is not JSON"))
}

/// The body, at most [`MAX_BODY`] bytes; a reply for one too long or unreadable.
pub(super) async fn read_body(session: &mut Session) -> Result<Vec<u8>, Reply> {
    crate::body::read(session, MAX_BODY)
        .await
        .map_err(|e| match e {
            crate::body::BodyError::TooLong(_) => {
                Reply::error(413, "payload_too_large", &e.to_string())
            }
            crate::body::BodyError::Unreadable(_) => {
                Reply::error(400, "bad_request", "the body could not be read")
            }
        })
}
