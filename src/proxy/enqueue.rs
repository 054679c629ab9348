//! Enqueue tokens at the edge: the 403 a room answers when it refuses a request's token (or
//! wants one and got none), the token's query parameter kept from the origin, and the counts.
//! The decision is the core's (`vestibule_core::enqueue`); the `Vestibule-Enqueue` header goes
//! with the other internal headers.

use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::proxy::Session;

use crate::decide::{self, Notes};
use crate::enqueue::Refusal;
use crate::metrics::Metrics;
use crate::pages::{self, PageContext, PageKind};
use crate::snapshot::Snapshot;
use crate::time::Timestamp;

use super::answer::{accept_language, language_headers, respond};

/// The 403 of room `room` refusing a request's enqueue token: JSON
/// (`{"error": "enqueue_required" | "enqueue_invalid", "reason", "room"}`) for clients that
/// asked for it, else the room's `enqueue.html` in the visitor's language.
pub(super) async fn write_refusal(
    session: &mut Session,
    snapshot: &Snapshot,
    room: usize,
    refusal: Refusal,
    json: bool,
    now: Timestamp,
) -> Result<()> {
    let (room, pages) = snapshot
        .rooms
        .get(room)
        .zip(snapshot.pages_of(room))
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "routed to a room that is gone"))?;
    if json {
        let body = pages::json(&serde_json::json!({
            "error": refusal.error(),
            "reason": refusal.as_str(),
            "room": room.name(),
        }));
        return respond(session, 403, "application/json", Vec::new(), body).await;
    }
    let mut extra = Vec::with_capacity(2);
    let shown = pages.at(room, now);
    let default = pages.language_for(room, None, now);
    let language = pages.language_for(room, accept_language(session), now);
    let mut ctx = PageContext::plain(room.name(), refusal.error(), 0, 403);
    ctx.title = room.config.title.as_str();
    ctx.queueing = room.config.admission.method();
    let ctx = ctx.in_language(shown.catalogs(), language, default);
    language_headers(&mut extra, &ctx);
    let body = shown.render(PageKind::Enqueue, &ctx);
    respond(session, 403, "text/html; charset=utf-8", extra, body).await
}

/// Takes the enqueue token's query parameter out of the request to the origin.
pub(super) fn strip_parameter(upstream: &mut RequestHeader) {
    if let Some(uri) = decide::without_enqueue_token(&upstream.uri) {
        upstream.set_uri(uri);
    }
}

/// `vestibule_enqueue_accepted_total` and `vestibule_enqueue_rejected_total` for a request
/// that brought a token to a room with `enqueue` on, or needed one.
pub(super) fn record(metrics: &Metrics, snapshot: &Snapshot, notes: &Notes) {
    let Some(result) = notes.enqueue else {
        return;
    };
    let Some(room) = notes.room.and_then(|i| snapshot.rooms.get(i)) else {
        return;
    };
    match result {
        Ok(()) => metrics
            .enqueue_accepted
            .with_label_values(&[room.name()])
            .inc(),
        Err(reason) => metrics
            .enqueue_rejected
            .with_label_values(&[room.name(), reason.as_str()])
            .inc(),
    }
}
