//! The JSON answers for clients that ask for `application/json`: [`WaitingJson`] (with its
//! [`EventJson`] and [`ChallengeJson`]) and [`json()`], which serialises a body.

use bytes::Bytes;
use serde::Serialize;

use super::{Estimates, PageContext};

/// The JSON `event` of a waiting-room answer.
#[derive(Debug, Serialize)]
pub(crate) struct EventJson<'a> {
    pub name: &'a str,
    pub state: &'static str,
    pub starts_at: &'a str,
    pub ends_at: &'a str,
}

/// The JSON answer for `Accept: application/json` clients of a waiting room.
#[derive(Debug, Serialize)]
pub(crate) struct WaitingJson<'a> {
    pub room: &'a str,
    pub decision: &'a str,
    pub in_waiting_room: bool,
    pub refresh_seconds: u64,
    pub queueing: &'a str,
    pub queue_all: bool,
    pub users_ahead: Option<u64>,
    /// Rooms with the queue API: the visitor's queue number and the serving counter; absent
    /// in other rooms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_number: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_number: Option<u64>,
    pub wait_estimate_minutes: Estimates,
    /// The line is paused by an operator.
    pub paused: bool,
    /// The operator's notice, if any.
    pub message: Option<&'a str>,
    /// The room's event: in force, else next, else last; null without events.
    pub event: Option<EventJson<'a>>,
    /// `decision = "challenge"`: what to solve; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<ChallengeJson<'a>>,
    /// Why the invitation this request presented was refused (`malformed`,
    /// `unknown_key`, `bad_signature`, `expired`, `used_up`, `full`, `revoked`); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invitation_refused: Option<&'static str>,
    /// A pre-queue with a verifiable draw: the visitor's receipt, the draw's commitment and
    /// where the draw is published; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw_commitment: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw_url: Option<&'a str>,
}

/// The proof-of-work in a JSON answer.
#[derive(Debug, Serialize)]
pub(crate) struct ChallengeJson<'a> {
    pub algorithm: &'static str,
    pub difficulty: u8,
    pub value: &'a str,
    pub expires_in: u64,
}

impl<'a> From<&'a PageContext<'a>> for WaitingJson<'a> {
    fn from(ctx: &'a PageContext<'a>) -> Self {
        WaitingJson {
            room: ctx.room,
            decision: ctx.decision,
            in_waiting_room: matches!(
                ctx.decision,
                "anon" | "wait" | "lost" | "deny" | "sold_out" | "prequeue"
            ),
            refresh_seconds: ctx.refresh_seconds,
            queueing: ctx.queueing,
            queue_all: ctx.queue_all,
            users_ahead: ctx.users_ahead,
            queue_number: ctx.queue_number,
            serving_number: ctx.serving_number,
            wait_estimate_minutes: ctx.wait_estimate_minutes,
            paused: ctx.paused,
            message: ctx.message,
            event: ctx.event.map(|name| EventJson {
                name,
                state: ctx.event_state,
                starts_at: ctx.starts_at.as_deref().unwrap_or(""),
                ends_at: ctx.ends_at.as_deref().unwrap_or(""),
            }),
            challenge: None,
            invitation_refused: None,
            receipt: None,
            draw_commitment: ctx.draw_commitment.as_deref(),
            draw_url: ctx.draw_url.as_deref(),
        }
    }
}

/// Serialises a body struct; these types cannot fail to serialise.
pub fn json<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}
