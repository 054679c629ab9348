//! The per-thread cache of rendered pages: the key a rendered page is kept under
//! ([`RenderKey`]) and its hash.

use super::{Estimates, PageContext, PageKind};

/// Rendered pages kept per set and worker thread: lottery pages differ only by their
/// countdown, so during a surge nearly every waiting page is a hit.
pub(super) const RENDERED_CACHE: usize = 128;

/// What a rendered page depends on, owned.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RenderKey {
    kind: PageKind,
    room: Box<str>,
    title: Box<str>,
    decision: Box<str>,
    refresh_seconds: u64,
    queueing: Box<str>,
    queue_all: bool,
    users_ahead: Option<u64>,
    estimates: [Option<u64>; 3],
    retry_after: u64,
    rule: Box<str>,
    status: u16,
    paused: bool,
    message: Option<Box<str>>,
    lang: (usize, usize),
    event: Option<OwnedEventKey>,
    challenge: (Box<str>, u8, Box<str>),
    invitation_refused: bool,
    draw: (Option<Box<str>>, Option<Box<str>>, bool),
    stream_url: Option<Box<str>>,
}

/// What a page's event part depends on, owned.
type OwnedEventKey = (
    Box<str>,
    &'static str,
    Option<Box<str>>,
    Option<Box<str>>,
    Option<u64>,
    bool,
);

type EventKey<'k> = Option<(
    &'k str,
    &'static str,
    Option<&'k str>,
    Option<&'k str>,
    Option<u64>,
    bool,
)>;

fn event_key<'k>(c: &'k PageContext) -> EventKey<'k> {
    c.event.map(|name| {
        (
            name,
            c.event_state,
            c.starts_at.as_deref(),
            c.ends_at.as_deref(),
            c.seconds_to_start,
            c.shuffle_at_start,
        )
    })
}

fn estimate_bits(e: &Estimates) -> [Option<u64>; 3] {
    [e.p25, e.p50, e.p75].map(|v| v.map(f64::to_bits))
}

impl RenderKey {
    pub(super) fn of(kind: PageKind, c: &PageContext) -> RenderKey {
        RenderKey {
            kind,
            room: c.room.into(),
            title: c.title.into(),
            decision: c.decision.into(),
            refresh_seconds: c.refresh_seconds,
            queueing: c.queueing.into(),
            queue_all: c.queue_all,
            users_ahead: c.users_ahead,
            estimates: estimate_bits(&c.wait_estimate_minutes),
            retry_after: c.retry_after,
            rule: c.rule.into(),
            status: c.status,
            paused: c.paused,
            message: c.message.map(Into::into),
            lang: (c.lang_index, c.fallback_index),
            event: event_key(c).map(|(n, st, a, b, secs, shuffle)| {
                (
                    n.into(),
                    st,
                    a.map(Into::into),
                    b.map(Into::into),
                    secs,
                    shuffle,
                )
            }),
            challenge: (
                c.challenge_value.into(),
                c.challenge_difficulty,
                c.solution_cookie.into(),
            ),
            invitation_refused: c.invitation_refused,
            draw: (
                c.draw_commitment.as_deref().map(Into::into),
                c.draw_url.as_deref().map(Into::into),
                !c.receipt.is_empty(),
            ),
            stream_url: c.stream_url.map(Into::into),
        }
    }

    /// Whether `c` renders to the page cached under this key.
    pub(super) fn matches(&self, kind: PageKind, c: &PageContext) -> bool {
        self.kind == kind
            && *self.room == *c.room
            && *self.title == *c.title
            && *self.decision == *c.decision
            && self.refresh_seconds == c.refresh_seconds
            && *self.queueing == *c.queueing
            && self.queue_all == c.queue_all
            && self.users_ahead == c.users_ahead
            && self.estimates == estimate_bits(&c.wait_estimate_minutes)
            && self.retry_after == c.retry_after
            && *self.rule == *c.rule
            && self.status == c.status
            && self.paused == c.paused
            && self.message.as_deref() == c.message
            && self.lang == (c.lang_index, c.fallback_index)
            && self.event.as_ref().map(|(n, st, a, b, secs, shuffle)| {
                (&**n, *st, a.as_deref(), b.as_deref(), *secs, *shuffle)
            }) == event_key(c)
            && (&*self.challenge.0, self.challenge.1, &*self.challenge.2)
                == (c.challenge_value, c.challenge_difficulty, c.solution_cookie)
            && self.invitation_refused == c.invitation_refused
            && (self.draw.0.as_deref(), self.draw.1.as_deref(), self.draw.2)
                == (
                    c.draw_commitment.as_deref(),
                    c.draw_url.as_deref(),
                    !c.receipt.is_empty(),
                )
            && self.stream_url.as_deref() == c.stream_url
    }
}

pub(super) fn render_hash(hasher: &ahash::RandomState, kind: PageKind, c: &PageContext) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = hasher.build_hasher();
    kind.hash(&mut h);
    (c.room, c.title, c.decision, c.queueing, c.rule).hash(&mut h);
    (
        c.refresh_seconds,
        c.queue_all,
        c.users_ahead,
        c.retry_after,
        c.status,
        c.paused,
        c.message,
        c.lang_index,
        c.fallback_index,
    )
        .hash(&mut h);
    event_key(c).hash(&mut h);
    (c.challenge_value, c.challenge_difficulty, c.solution_cookie).hash(&mut h);
    (&c.draw_commitment, &c.draw_url, c.receipt).hash(&mut h);
    c.stream_url.hash(&mut h);
    c.invitation_refused.hash(&mut h);
    estimate_bits(&c.wait_estimate_minutes).hash(&mut h);
    h.finish()
}
