//! The visitor push's parts below the API: the streams a node holds ([`Streams`]), which pages
//! open one ([`streams`]), and what an `estimate` says in the page's words ([`texts`]). The
//! endpoint itself, `GET {api_prefix}/rooms/<room>/stream`, is `crate::api::stream`; what a
//! stream tells is decided by the room (`vestibule_core::room::watch`).

use std::sync::atomic::{AtomicU64, Ordering};

use vestibule_core::room::{Decision, Outcome, Room};

/// People ahead, and the wait as a page words it: under a minute, or from and to whole minutes.
pub(crate) type Told = (Option<u64>, bool, Option<u64>, Option<u64>);

/// The streams open on this node, and the wait tokens they watch.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: AtomicU64,
    /// One stream per wait token (`Watch::key`): a second one (another tab, a copied
    /// cookie) would count the same place twice.
    watched: std::sync::Mutex<std::collections::HashSet<u64>>,
}

impl Streams {
    /// Notes a stream on the token `key`; `false` when one is open already.
    pub(crate) fn watch(&self, key: u64) -> bool {
        self.watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key)
    }

    pub(crate) fn unwatch(&self, key: u64) {
        self.watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    }

    /// Takes one of `max` places, if one is free.
    pub(crate) fn take(&self, max: u64) -> bool {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a place [`Streams::take`] took.
    pub(crate) fn release(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether a page answering `outcome` opens its room's stream: the pages of visitors who hold a
/// wait token (waiting in a capacity room, paused or not, or drawn at a lottery's next period).
pub(crate) fn streams(outcome: &Outcome) -> bool {
    matches!(
        outcome.decision,
        Decision::Anon | Decision::Wait | Decision::Lost
    )
}

/// The page's own sentences for `users_ahead` and `estimates`, in catalog `language`: what the
/// page shows under its countdown, so a page updated by the stream reads as a fresh one would.
pub(crate) fn texts(
    room: &Room,
    pages: &crate::pages::RoomPages,
    language: usize,
    users_ahead: Option<u64>,
    estimates: vestibule_core::room::page::Estimates,
    now: vestibule_core::time::Timestamp,
) -> (Option<String>, Option<String>) {
    let ctx = crate::pages::PageContext::plain(room.name(), "wait", 1, 200)
        .with_wait(estimates)
        .in_language(pages.at(room, now).catalogs(), language, language);
    let catalogs = pages.at(room, now).catalogs();
    let say = |id: &str, args: &[(&str, i64)]| {
        let mut fluent = fluent_bundle::FluentArgs::new();
        for (k, v) in args {
            fluent.set(*k, *v);
        }
        catalogs.message(language, ctx.fallback_index, id, &fluent)
    };
    let ahead = users_ahead.map(|n| say("ahead", &[("n", n as i64)]));
    let wait = if ctx.wait_soon {
        Some(say("wait-soon", &[]))
    } else {
        match (ctx.wait_low, ctx.wait_high) {
            (Some(low), Some(high)) if low == high => Some(say("wait-about", &[("n", low as i64)])),
            (Some(low), Some(high)) => Some(say(
                "wait-range",
                &[("low", low as i64), ("high", high as i64)],
            )),
            _ => None,
        }
    };
    (ahead, wait)
}
