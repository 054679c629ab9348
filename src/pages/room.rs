//! A room's pages: which page set a room shows at a given time ([`RoomPages`]: its own, or the
//! folder of the event in force) and the template variables of its waiting, deny and
//! invitation pages ([`room_context`]), built from what the room decided. The room itself holds
//! no pages: the snapshot keeps a [`RoomPages`] beside each room.

use std::sync::Arc;

use super::{PageContext, Pages, CHALLENGE_MARK};
use crate::room::{event, Decision, Outcome, Room};
use crate::time::Timestamp;

/// The pages one room shows, each with the catalog of the room's `default_language`.
#[derive(Clone, Debug)]
pub struct RoomPages {
    /// The room's own pages, and its default language among them.
    pages: Arc<Pages>,
    language: usize,
    /// Per event (as `config.events`): its pages (the room's unless it has its own folder),
    /// and the default language among them.
    events: Vec<(Arc<Pages>, usize)>,
    /// Where the room's waiting pages open their stream (`{api_prefix}/rooms/<room>/stream`),
    /// made once per snapshot; `None` with `max_streams = 0`.
    stream_url: Option<Box<str>>,
}

impl RoomPages {
    /// `pages` for a room and its `events` events, which speak catalog `language` unless the
    /// visitor asks for another.
    pub fn new(pages: Arc<Pages>, language: usize, events: usize) -> RoomPages {
        RoomPages {
            events: vec![(pages.clone(), language); events],
            pages,
            language,
            stream_url: None,
        }
    }

    /// The room's waiting pages open their stream at `url` (none: they poll).
    pub(crate) fn with_stream(mut self, url: Option<String>) -> Self {
        self.stream_url = url.map(String::into_boxed_str);
        self
    }

    /// Where the room's waiting pages open their stream, if they do.
    pub fn stream_url(&self) -> Option<&str> {
        self.stream_url.as_deref()
    }

    /// The built-in pages in their first language, for `room` and every one of its events.
    pub fn builtin(room: &Room) -> RoomPages {
        RoomPages::new(Pages::builtin(), 0, room.config.events.len())
    }

    /// Event `index` shows the pages of `pages` (its own folder), which speak catalog
    /// `language` unless the visitor asks for another.
    pub(crate) fn with_event(mut self, index: usize, pages: Arc<Pages>, language: usize) -> Self {
        if let Some(e) = self.events.get_mut(index) {
            *e = (pages, language);
        }
        self
    }

    /// The room's own pages (whatever event is in force).
    pub fn own(&self) -> &Arc<Pages> {
        &self.pages
    }

    /// The pages shown by `room` now, with their default language: the event's in force, else
    /// the room's.
    fn shown(&self, room: &Room, now: Timestamp) -> (&Arc<Pages>, usize) {
        room.event_now(now)
            .and_then(|p| self.events.get(p.index))
            .map_or((&self.pages, self.language), |(p, l)| (p, *l))
    }

    /// The pages shown by `room` now: the event's in force, else the room's.
    pub fn at(&self, room: &Room, now: Timestamp) -> &Arc<Pages> {
        self.shown(room, now).0
    }

    /// The language of a page `room` shows at `now` for a visitor who sent `accept_language`.
    pub fn language_for(
        &self,
        room: &Room,
        accept_language: Option<&[u8]>,
        now: Timestamp,
    ) -> usize {
        let (pages, default) = self.shown(room, now);
        pages.catalogs().negotiate(accept_language, default)
    }
}

/// The template variables for a waiting, deny or invitation page of `room`, which shows `pages`,
/// at `now` (its event, and the title in force), in catalog `language`.
pub fn room_context<'a>(
    room: &'a Room,
    pages: &'a RoomPages,
    outcome: &'a Outcome,
    language: usize,
    now: Timestamp,
) -> PageContext<'a> {
    let (shown, default) = pages.shown(room, now);
    let config = &room.config;
    let mut ctx = PageContext::plain(
        &config.name,
        outcome.decision.as_str(),
        outcome.refresh_secs,
        // Nobody without an invitation may join: a refusal, not a wait.
        if outcome.decision == Decision::Uninvited {
            403
        } else {
            config.wait_status
        },
    )
    .with_wait(outcome.estimates)
    .in_language(shown.catalogs(), language, default);
    ctx.title = room.title_at(now);
    ctx.queueing = config.admission.method();
    ctx.queue_all = config.queue_all;
    ctx.users_ahead = outcome.users_ahead;
    if let Some(queue) = room.numbered(now) {
        ctx.queue_number = outcome.queue_number.map(|n| queue.shown(n));
        ctx.serving_number = Some(queue.serving_number());
    }
    ctx.paused = outcome.paused;
    ctx.message = outcome.message.as_deref().map(String::as_str);
    ctx.invitation_refused = matches!(outcome.invitation, Some(Err(_)));
    if let (Some(c), Some(cookie)) = (&outcome.challenge, room.solution_cookie()) {
        ctx.challenge_value = CHALLENGE_MARK;
        ctx.challenge_difficulty = c.difficulty;
        ctx.solution_cookie = cookie;
    }
    if let Some(p) = event::current(&config.events, now) {
        ctx = ctx.with_event(
            &p.event.name,
            p.state.as_str(),
            (p.event.start, p.event.end),
            p.event.shuffle_at_start,
            now.secs(),
        );
    }
    ctx
}
