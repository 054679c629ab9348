//! What a room decides for one request, and what the request brings it: the [`Decision`],
//! the [`Outcome`] with its cookie and figures, and the checked cookie ([`Presented`]).

use std::sync::Arc;

use super::page::{Estimates, PageKind};
use crate::challenge::Challenge;
use crate::identity::Identity;
use crate::invite::Refusal;
use crate::keys::KeyRing;
use crate::time::Timestamp;
use crate::token::{Reject, Token};

/// What a room decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Forward to the origin.
    Allow,
    /// Unknown user: issue a wait token, show `startwaiting`.
    Anon,
    /// Valid wait token, not yet eligible: show `keepwaiting`, no new cookie.
    Wait,
    /// Lottery: an eligible wait token lost its draw; a new wait token, `keepwaiting`.
    Lost,
    /// The room is closed: show `deny`; the visitor keeps their place in line.
    Deny,
    /// Never held (bypass rule, or the room is disabled).
    Bypass,
    /// The room is sold out: show `soldout`; the visitor keeps their place in line.
    SoldOut,
    /// The line is full (`max_waiting_users`): show `queuefull`, no wait token.
    QueueFull,
    /// An event's pre-queue: show `prequeue`, a wait token due at the start.
    PreQueue,
    /// A new arrival in a `pow` room: show `challenge`, no token until it is solved.
    Challenge,
    /// A visitor without a valid invitation in an `invite` room: show `invite` with
    /// status 403, no token.
    Uninvited,
}

impl Decision {
    pub const ALL: [Decision; 11] = [
        Decision::Allow,
        Decision::Anon,
        Decision::Wait,
        Decision::Lost,
        Decision::Deny,
        Decision::Bypass,
        Decision::SoldOut,
        Decision::QueueFull,
        Decision::PreQueue,
        Decision::Challenge,
        Decision::Uninvited,
    ];

    /// Position in [`Decision::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The `decision` label and JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Anon => "anon",
            Decision::Wait => "wait",
            Decision::Lost => "lost",
            Decision::Deny => "deny",
            Decision::Bypass => "bypass",
            Decision::SoldOut => "sold_out",
            Decision::QueueFull => "queue_full",
            Decision::PreQueue => "prequeue",
            Decision::Challenge => "challenge",
            Decision::Uninvited => "uninvited",
        }
    }

    /// Whether the request goes on to the origin.
    pub fn forwards(self) -> bool {
        matches!(self, Decision::Allow | Decision::Bypass)
    }

    /// The page shown when the request does not go on.
    pub fn page(self) -> PageKind {
        match self {
            Decision::Deny => PageKind::Deny,
            Decision::SoldOut => PageKind::SoldOut,
            Decision::QueueFull => PageKind::QueueFull,
            Decision::PreQueue => PageKind::PreQueue,
            Decision::Challenge => PageKind::Challenge,
            Decision::Uninvited => PageKind::Invite,
            Decision::Wait | Decision::Lost => PageKind::KeepWaiting,
            _ => PageKind::StartWaiting,
        }
    }
}

/// What to do with the room cookie on the response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CookieAction {
    Keep,
    /// Send this new value.
    Set(Arc<str>),
    Delete,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub decision: Decision,
    pub cookie: CookieAction,
    /// Why the presented cookie was not trusted, if one was presented and was not.
    pub rejected: Option<Reject>,
    /// A waiting user was let in by this request (in a capacity room, a new arrival let
    /// straight in too: see [`Outcome::waited_secs`]).
    pub admitted: bool,
    /// A visitor new to the room: given their first place in line (a first wait token, a
    /// pre-queue place) or let straight in. `vestibule_room_arrivals_total` counts it.
    pub arrived: bool,
    /// Capacity rooms, with `admitted`: seconds from the visitor's arrival (their wait token's
    /// `arr`, as they first arrived, before any pre-queue draw) to this admission; `None` for a
    /// new arrival let straight in without waiting, and in lottery rooms (whose tokens carry no
    /// arrival). `vestibule_room_wait_seconds` observes it.
    pub waited_secs: Option<u64>,
    /// Waiting decisions: seconds until the client should check in again.
    pub refresh_secs: u64,
    /// FIFO rooms: users ahead in the queue.
    pub users_ahead: Option<u64>,
    pub estimates: Estimates,
    /// Capacity rooms: the admitted user's place, which a revoke gives back.
    pub place: Option<Place>,
    /// Held because an operator paused the line.
    pub paused: bool,
    /// Held requests: the operator's notice for the room.
    pub message: Option<Arc<String>>,
    /// `pow` rooms: the challenge to solve (with [`Decision::Challenge`]).
    pub challenge: Option<Challenge>,
    /// `pow` rooms: what this request did with a challenge.
    pub pow: PowCount,
    /// The invitation this request presented, if it needed one: accepted, or why not.
    pub invitation: Option<Result<(), Refusal>>,
    /// Rooms with the queue API: the visitor's queue number, when they have one.
    pub queue_number: Option<u64>,
    /// Capacity rooms with priority lanes, with `admitted`: the lane the visitor was let in
    /// from (`None`: `public`, or a room without lanes).
    pub lane: Option<std::sync::Arc<str>>,
    /// A pre-queue with a verifiable draw: the visitor's receipt.
    pub receipt: Option<super::draw::Receipt>,
}

/// What a request brings besides its cookies. Only a visitor without a valid token
/// needs either.
#[derive(Clone, Copy, Debug, Default)]
pub struct Brought<'a> {
    /// A proof-of-work solution, `value:nonce`.
    pub solution: Option<&'a [u8]>,
    /// An invitation code.
    pub invitation: Option<&'a [u8]>,
}

/// What one request did with a room's proof-of-work, for
/// `vestibule_room_challenges_total{result}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowCount {
    pub issued: bool,
    pub solved: bool,
    pub failed: Option<crate::challenge::Failure>,
}

/// What bears on a room beyond its own settings, handed to its admission policy:
/// operator actions, and the event running now.
pub struct Hold<'a> {
    /// Paused or sold out: nobody new is let in; everyone keeps their place.
    pub held: bool,
    /// Takes one admission from an operator's `admit` grant, if there is one.
    pub grant: &'a dyn Fn() -> bool,
    /// The event running now, if any: those who pre-queued for it go before later arrivals.
    pub event: Option<&'a crate::config::EventConfig>,
    /// The priority lane a new arrival waits in: their invitation's.
    pub lane: Option<&'a str>,
}

impl Hold<'_> {
    /// Nothing holds the room.
    pub(crate) const NONE: Hold<'static> = Hold {
        held: false,
        grant: &|| false,
        event: None,
        lane: None,
    };
}

/// An admitted user's place in a capacity room: their session, and the minute they are counted
/// in now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// A digest of what every token of the session carries (see `capacity::session_of`).
    pub session: u64,
    pub minute: u64,
}

impl Outcome {
    /// An event's pre-queue page: the visitor's token is due at `due` (Unix seconds); the page
    /// asks again then, or every [`event::PREQUEUE_REFRESH_MAX`] until then.
    pub fn prequeued(cookie: CookieAction, due: u64, now: Timestamp) -> Outcome {
        let mut outcome = Outcome::new(Decision::PreQueue, cookie);
        outcome.refresh_secs = due
            .saturating_sub(now.secs())
            .clamp(1, super::event::PREQUEUE_REFRESH_MAX);
        outcome
    }

    pub fn new(decision: Decision, cookie: CookieAction) -> Outcome {
        Outcome {
            decision,
            cookie,
            rejected: None,
            admitted: false,
            arrived: false,
            waited_secs: None,
            refresh_secs: 0,
            users_ahead: None,
            estimates: Estimates::default(),
            place: None,
            paused: false,
            message: None,
            challenge: None,
            pow: PowCount::default(),
            invitation: None,
            queue_number: None,
            lane: None,
            receipt: None,
        }
    }
}

/// The verdict on the cookie values a request presented.
#[derive(Debug)]
pub struct Presented {
    /// Whether any value was presented at all.
    pub any: bool,
    /// The first value that verified.
    pub valid: Option<Arc<Token>>,
    /// Why the first value failed, when none verified.
    pub rejected: Option<Reject>,
}

/// Which tokens a room takes: those issued by no room in particular, or by this one; and only
/// its own when it asks who may join.
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    pub room: &'a str,
    pub required: bool,
}

impl Binding<'_> {
    /// Tokens of no room in particular (tests).
    pub const ANY: Binding<'static> = Binding {
        room: "",
        required: false,
    };

    fn takes(&self, token: &Token) -> Result<(), Reject> {
        match token.claims.room.as_deref() {
            Some(r) if r == self.room => Ok(()),
            None if !self.required => Ok(()),
            _ => Err(Reject::WrongRoom),
        }
    }
}

impl Presented {
    pub fn check(
        ring: &KeyRing,
        uid: &Identity,
        values: &[&[u8]],
        binding: Binding,
        now: Timestamp,
    ) -> Presented {
        let mut rejected = None;
        for value in values {
            match ring.check(value).and_then(|t| {
                t.check_binding(uid, now)?;
                binding.takes(&t)?;
                Ok(t)
            }) {
                Ok(token) => {
                    return Presented {
                        any: true,
                        valid: Some(token),
                        rejected: None,
                    }
                }
                Err(reason) => {
                    rejected.get_or_insert(reason);
                }
            }
        }
        Presented {
            any: !values.is_empty(),
            valid: None,
            rejected,
        }
    }
}
