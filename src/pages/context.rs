//! The page data: the built-in templates ([`builtin_source`]), the variables a template may use
//! ([`PageContext`]), and the challenge value spliced into a rendered page ([`splice_challenge`]).
//! The page data rooms produce ([`PageKind`], [`Estimates`], [`CHALLENGE_MARK`]) lives in
//! `crate::room::page`, re-exported here.

use bytes::Bytes;
use serde::Serialize;

use crate::i18n::Catalogs;
pub use crate::room::page::{Estimates, PageKind, CHALLENGE_MARK};

/// The template compiled into the binary (`vestibule init` writes it out for editing).
pub(crate) fn builtin_source(kind: PageKind) -> &'static str {
    match kind {
        PageKind::StartWaiting => include_str!("../../pages/startwaiting.html"),
        PageKind::KeepWaiting => include_str!("../../pages/keepwaiting.html"),
        PageKind::Deny => include_str!("../../pages/deny.html"),
        PageKind::RateLimited => include_str!("../../pages/ratelimited.html"),
        PageKind::Error => include_str!("../../pages/error.html"),
        PageKind::SoldOut => include_str!("../../pages/soldout.html"),
        PageKind::QueueFull => include_str!("../../pages/queuefull.html"),
        PageKind::PreQueue => include_str!("../../pages/prequeue.html"),
        PageKind::Challenge => include_str!("../../pages/challenge.html"),
        PageKind::Invite => include_str!("../../pages/invite.html"),
        PageKind::Enqueue => include_str!("../../pages/enqueue.html"),
    }
}

/// The template the built-in pages extend (`{% extends "base.html" %}`): a pages folder may hold
/// its own, and its pages that extend it without one get this.
pub(crate) const BASE_FILE: &str = "base.html";

/// The built-in [`BASE_FILE`] (`vestibule init` writes it out beside the pages).
pub(crate) const BUILTIN_BASE: &str = include_str!("../../pages/base.html");

/// Every variable a template may use.
#[derive(Clone, Debug, Serialize)]
pub struct PageContext<'a> {
    /// The room's name (or "this site" outside rooms).
    pub room: &'a str,
    /// What visitors are told they are waiting for: the room's `title` (its name unless set).
    pub title: &'a str,
    /// `anon`, `wait`, `deny`, `ratelimited` or `error`.
    pub decision: &'a str,
    /// Seconds until the page should check again.
    pub refresh_seconds: u64,
    /// `lottery`, `random` or `fifo`.
    pub queueing: &'a str,
    pub queue_all: bool,
    /// FIFO rooms: estimated users ahead.
    pub users_ahead: Option<u64>,
    /// Rooms with the queue API: the visitor's queue number, and the serving counter.
    pub queue_number: Option<u64>,
    pub serving_number: Option<u64>,
    pub wait_estimate_minutes: Estimates,
    /// The estimate in words' terms: under a minute (`wait_soon`), else whole minutes from
    /// `wait_low` (the 25th percentile, at least 1) to `wait_high` (the 75th, at least
    /// `wait_low`); `None` when unknown. Set by [`PageContext::with_wait`].
    pub wait_soon: bool,
    pub wait_low: Option<u64>,
    pub wait_high: Option<u64>,
    /// Rate-limit and error pages: seconds until trying again makes sense.
    pub retry_after: u64,
    /// Rate-limit pages: the rule that denied the request.
    pub rule: &'a str,
    /// The status of the response.
    pub status: u16,
    /// The line is paused by an operator: nobody is let in for now.
    pub paused: bool,
    /// The operator's notice for the room, if any (escaped like every value).
    pub message: Option<&'a str>,
    /// The visitor's language (`<html lang>`), and its direction: `ltr` or `rtl`.
    pub lang: &'a str,
    pub dir: &'static str,
    /// The language's catalog, and the one missing messages come from (the room's default).
    pub lang_index: usize,
    pub fallback_index: usize,
    /// The room's event: the one in force, else the next, else the last; `None`
    /// for a room without events. `starts_at` and `ends_at` are RFC 3339 (UTC).
    pub event: Option<&'a str>,
    /// `scheduled`, `prequeue`, `running` or `ended` (empty without an event).
    pub event_state: &'static str,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
    /// Seconds until the event starts (0 once it has).
    pub seconds_to_start: Option<u64>,
    /// The same for people without JavaScript: the start as `2026-12-01 10:00 UTC`, and the
    /// time left as `h:mm:ss`, `m:ss` or seconds (derived from `starts_at` and
    /// `seconds_to_start`, so the page cache needs no more).
    pub starts_at_text: Option<String>,
    pub countdown: Option<String>,
    /// Pre-queued visitors get their places by a random draw at the start.
    pub shuffle_at_start: bool,
    /// Challenge pages: the value to solve, the leading zero bits asked for, and
    /// the cookie the solution goes back in. Pages are rendered (and cached) with
    /// [`CHALLENGE_MARK`] as the value; [`splice_challenge`] puts each visitor's in.
    pub challenge_value: &'a str,
    pub challenge_difficulty: u8,
    pub solution_cookie: &'a str,
    /// Invitation pages: the visitor presented an invitation, and it was refused.
    pub invitation_refused: bool,
    /// A pre-queue with a verifiable draw: its commitment, and where it is published.
    pub draw_commitment: Option<String>,
    pub draw_url: Option<String>,
    /// The visitor's receipt in that draw: pages are rendered (and cached) with
    /// [`crate::draws::RECEIPT_MARK`], and each visitor's is spliced in.
    pub receipt: &'a str,
    /// Waiting pages: the visitor's stream (`{api_prefix}/rooms/<room>/stream`), which tells
    /// the page when it is their turn; `None` where there is none (`max_streams = 0`).
    pub stream_url: Option<&'a str>,
}

/// A rendered challenge page with `value` in place of [`CHALLENGE_MARK`]. The last page made
/// on each thread is kept: one identity is given the same challenge value for a few seconds
/// (`challenge::issue`), and its page is then the same bytes.
pub(crate) fn splice_challenge(page: &Bytes, value: &std::sync::Arc<str>) -> Bytes {
    type Last = std::cell::RefCell<Option<(Bytes, std::sync::Arc<str>, Bytes)>>;
    thread_local! {
        static LAST: Last = const { std::cell::RefCell::new(None) };
    }
    let hit = LAST
        .try_with(|last| {
            last.borrow().as_ref().and_then(|(p, v, out)| {
                (p.as_ptr() == page.as_ptr()
                    && p.len() == page.len()
                    && std::sync::Arc::ptr_eq(v, value))
                .then(|| out.clone())
            })
        })
        .ok()
        .flatten();
    if let Some(out) = hit {
        return out;
    }
    let out = splice(page, CHALLENGE_MARK, value);
    let _ = LAST.try_with(|last| {
        *last.borrow_mut() = Some((page.clone(), value.clone(), out.clone()));
    });
    out
}

/// `page` with `value` in place of every `mark`: a visitor's own value in a page rendered, and
/// cached, with a placeholder.
pub(crate) fn splice(page: &Bytes, mark: &str, value: &str) -> Bytes {
    let finder = memchr::memmem::Finder::new(mark);
    let mut out = Vec::with_capacity(page.len() + 2 * value.len());
    let mut rest = &page[..];
    while let Some(at) = finder.find(rest) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(value.as_bytes());
        rest = &rest[at + mark.len()..];
    }
    out.extend_from_slice(rest);
    Bytes::from(out)
}

/// `2026-12-01T10:00:00Z` as `2026-12-01 10:00 UTC` (seconds kept when not zero).
pub(super) fn readable_time(rfc3339: &str) -> String {
    let Some(utc) = rfc3339.strip_suffix('Z') else {
        return rfc3339.to_owned();
    };
    let utc = utc.strip_suffix(":00").unwrap_or(utc);
    format!("{} UTC", utc.replacen('T', " ", 1))
}

/// Seconds left as `h:mm:ss` from an hour, `m:ss` from a minute, else the seconds.
pub(super) fn countdown(secs: u64) -> String {
    match secs {
        3600.. => format!("{}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60),
        60.. => format!("{}:{:02}", secs / 60, secs % 60),
        _ => secs.to_string(),
    }
}

impl<'a> PageContext<'a> {
    /// Tells the page about an event: its name, state, start and end (Unix seconds), at `now`.
    pub fn with_event(
        mut self,
        name: &'a str,
        state: &'static str,
        (start, end): (u64, u64),
        shuffle_at_start: bool,
        now: u64,
    ) -> Self {
        self.shuffle_at_start = shuffle_at_start;
        self.event = Some(name);
        self.event_state = state;
        self.starts_at = Some(crate::config::event::rfc3339(start));
        self.ends_at = Some(crate::config::event::rfc3339(end));
        self.seconds_to_start = Some(start.saturating_sub(now));
        self.starts_at_text = self.starts_at.as_deref().map(readable_time);
        self.countdown = self.seconds_to_start.map(countdown);
        self
    }

    /// A context for `room` with nothing to wait for (rate-limit and error pages).
    pub fn plain(room: &'a str, decision: &'a str, retry_after: u64, status: u16) -> Self {
        PageContext {
            room,
            title: room,
            decision,
            refresh_seconds: retry_after,
            queueing: "",
            queue_all: false,
            users_ahead: None,
            queue_number: None,
            serving_number: None,
            wait_estimate_minutes: Estimates::default(),
            wait_soon: false,
            wait_low: None,
            wait_high: None,
            retry_after,
            rule: "",
            status,
            paused: false,
            message: None,
            lang: "en",
            dir: "ltr",
            lang_index: 0,
            fallback_index: 0,
            event: None,
            event_state: "",
            starts_at: None,
            ends_at: None,
            seconds_to_start: None,
            starts_at_text: None,
            countdown: None,
            shuffle_at_start: false,
            challenge_value: "",
            challenge_difficulty: 0,
            solution_cookie: "",
            invitation_refused: false,
            draw_commitment: None,
            draw_url: None,
            receipt: "",
            stream_url: None,
        }
    }

    /// Speaks language `index` of `catalogs`, falling back to `fallback` for missing messages.
    pub(crate) fn in_language(
        mut self,
        catalogs: &'a Catalogs,
        index: usize,
        fallback: usize,
    ) -> Self {
        let lang = catalogs.get(index);
        self.lang = &lang.tag;
        self.dir = if lang.rtl { "rtl" } else { "ltr" };
        self.lang_index = index;
        self.fallback_index = fallback;
        self
    }

    /// Sets the estimates and the words' terms derived from them.
    pub(crate) fn with_wait(mut self, e: Estimates) -> Self {
        self.wait_estimate_minutes = e;
        self.wait_soon = e.p75.is_some_and(|m| m < 1.0);
        self.wait_low = e.p25.map(|m| (m.floor() as u64).max(1));
        self.wait_high = match (e.p75, self.wait_low) {
            (Some(m), Some(low)) => Some((m.ceil() as u64).max(low)),
            _ => None,
        };
        if self.wait_high.is_none() {
            self.wait_low = None;
        }
        self
    }

    pub(super) fn sample() -> PageContext<'static> {
        PageContext {
            room: "sample",
            title: "Sample sale",
            decision: "wait",
            refresh_seconds: 30,
            queueing: "fifo",
            queue_all: false,
            users_ahead: Some(10),
            queue_number: Some(1842),
            serving_number: Some(1610),
            wait_estimate_minutes: Estimates {
                p25: Some(1.0),
                p50: Some(2.0),
                p75: Some(3.0),
            },
            wait_soon: false,
            wait_low: Some(1),
            wait_high: Some(3),
            retry_after: 5,
            rule: "sample",
            status: 502,
            paused: true,
            message: Some("Sample notice: doors open at 10:00."),
            lang: "en",
            dir: "ltr",
            lang_index: 0,
            fallback_index: 0,
            event: Some("launch"),
            event_state: "prequeue",
            starts_at: Some("2026-12-01T10:00:00Z".into()),
            ends_at: Some("2026-12-01T14:00:00Z".into()),
            seconds_to_start: Some(1234),
            starts_at_text: Some("2026-12-01 10:00 UTC".into()),
            countdown: Some("20:34".into()),
            shuffle_at_start: true,
            challenge_value: CHALLENGE_MARK,
            challenge_difficulty: 16,
            solution_cookie: "vestibule_pow",
            invitation_refused: true,
            draw_commitment: Some(
                "9f2c5e1d4b7a0c3e6f8192a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8".into(),
            ),
            draw_url: Some("/.vestibule/rooms/sample/draws/launch".into()),
            receipt: "3f9a-0c41-7be2-d856",
            stream_url: Some("/.vestibule/rooms/sample/stream"),
        }
    }
}
