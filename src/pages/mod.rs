//! Page templates and JSON bodies for every answer vestibule writes itself.
//!
//! A page set is a folder with `startwaiting.html`, `keepwaiting.html`, `deny.html`,
//! `ratelimited.html` and `error.html`. Templates are compiled once at load (minijinja, values
//! HTML-escaped, undefined variables an error) and test-rendered with every variable, so a broken
//! template fails `--check` and reloads instead of a request. The same files ship in `pages/` and
//! are built into the binary for requests outside every room.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use crate::config::{ConfigError, ConfigErrors};
use crate::i18n::Catalogs;
use crate::thread_cache::PerThreadLru;

/// The pages a set must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKind {
    StartWaiting,
    KeepWaiting,
    Deny,
    RateLimited,
    Error,
    SoldOut,
    QueueFull,
    PreQueue,
    Challenge,
    Invite,
}

impl PageKind {
    pub const ALL: [PageKind; 10] = [
        PageKind::StartWaiting,
        PageKind::KeepWaiting,
        PageKind::Deny,
        PageKind::RateLimited,
        PageKind::Error,
        PageKind::SoldOut,
        PageKind::QueueFull,
        PageKind::PreQueue,
        PageKind::Challenge,
        PageKind::Invite,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            PageKind::StartWaiting => "startwaiting.html",
            PageKind::KeepWaiting => "keepwaiting.html",
            PageKind::Deny => "deny.html",
            PageKind::RateLimited => "ratelimited.html",
            PageKind::Error => "error.html",
            PageKind::SoldOut => "soldout.html",
            PageKind::QueueFull => "queuefull.html",
            PageKind::PreQueue => "prequeue.html",
            PageKind::Challenge => "challenge.html",
            PageKind::Invite => "invite.html",
        }
    }

    /// The template compiled into the binary (`vestibule init` writes it out for editing).
    pub(crate) fn builtin_source(self) -> &'static str {
        match self {
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
        }
    }
}

/// The template the built-in pages extend (`{% extends "base.html" %}`): a pages folder may hold
/// its own, and its pages that extend it without one get this.
pub(crate) const BASE_FILE: &str = "base.html";

/// The built-in [`BASE_FILE`] (`vestibule init` writes it out beside the pages).
pub(crate) const BUILTIN_BASE: &str = include_str!("../../pages/base.html");

/// Wait estimates in minutes; `None` when unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Estimates {
    pub p25: Option<f64>,
    pub p50: Option<f64>,
    pub p75: Option<f64>,
}

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
}

/// Stands for the challenge value in a rendered challenge page: it appears where the template
/// writes `challenge_value` and nowhere else. Values are made of `[A-Za-z0-9._~-]`, which
/// neither HTML nor a script string escapes.
pub const CHALLENGE_MARK: &str = "__VESTIBULE_CHALLENGE__";

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
    let finder = memchr::memmem::Finder::new(CHALLENGE_MARK);
    let mut out = Vec::with_capacity(page.len() + 2 * value.len());
    let mut rest = &page[..];
    while let Some(at) = finder.find(rest) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(value.as_bytes());
        rest = &rest[at + CHALLENGE_MARK.len()..];
    }
    out.extend_from_slice(rest);
    let out = Bytes::from(out);
    let _ = LAST.try_with(|last| {
        *last.borrow_mut() = Some((page.clone(), value.clone(), out.clone()));
    });
    out
}

/// `2026-12-01T10:00:00Z` as `2026-12-01 10:00 UTC` (seconds kept when not zero).
fn readable_time(rfc3339: &str) -> String {
    let Some(utc) = rfc3339.strip_suffix('Z') else {
        return rfc3339.to_owned();
    };
    let utc = utc.strip_suffix(":00").unwrap_or(utc);
    format!("{} UTC", utc.replacen('T', " ", 1))
}

/// Seconds left as `h:mm:ss` from an hour, `m:ss` from a minute, else the seconds.
fn countdown(secs: u64) -> String {
    match secs {
        3600.. => format!("{}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60),
        60.. => format!("{}:{:02}", secs / 60, secs % 60),
        _ => secs.to_string(),
    }
}

/// The JSON `event` of a waiting-room answer.
#[derive(Debug, Serialize)]
pub(crate) struct EventJson<'a> {
    pub name: &'a str,
    pub state: &'static str,
    pub starts_at: &'a str,
    pub ends_at: &'a str,
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

    fn sample() -> PageContext<'static> {
        PageContext {
            room: "sample",
            title: "Sample sale",
            decision: "wait",
            refresh_seconds: 30,
            queueing: "fifo",
            queue_all: false,
            users_ahead: Some(10),
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
        }
    }
}

/// Rendered pages kept per set and worker thread: lottery pages differ only by their
/// countdown, so during a surge nearly every waiting page is a hit.
const RENDERED_CACHE: usize = 128;

/// What a rendered page depends on, owned.
#[derive(Clone, Debug, PartialEq)]
struct RenderKey {
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
    fn of(kind: PageKind, c: &PageContext) -> RenderKey {
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
        }
    }

    /// Whether `c` renders to the page cached under this key.
    fn matches(&self, kind: PageKind, c: &PageContext) -> bool {
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
    }
}

fn render_hash(hasher: &ahash::RandomState, kind: PageKind, c: &PageContext) -> u64 {
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
    c.invitation_refused.hash(&mut h);
    estimate_bits(&c.wait_estimate_minutes).hash(&mut h);
    h.finish()
}

/// A compiled page set.
pub struct Pages {
    catalogs: Arc<Catalogs>,
    /// Per thread: a hit touches nothing another thread writes (see [`crate::thread_cache`]).
    rendered: PerThreadLru<u64, (RenderKey, Bytes)>,
    hasher: ahash::RandomState,
    env: Environment<'static>,
    /// Where the set came from; `None` for the built-in set.
    dir: Option<PathBuf>,
    /// Page file name, line and URL of every reference a browser would fetch from the origin.
    origin_refs: Vec<(PathBuf, usize, String)>,
    /// SHA-256 over every source, to tell a reload whether the pages changed.
    fingerprint: [u8; 32],
    /// Pages the folder lacks, served built in.
    missing: Vec<&'static str>,
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages").field("dir", &self.dir).finish()
    }
}

fn environment(catalogs: Arc<Catalogs>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // `t("id", name=value, …)`: message `id` in the visitor's language; its value is escaped
    // like any other.
    env.add_function(
        "t",
        move |state: &minijinja::State, id: &str, kwargs: minijinja::value::Kwargs| {
            let index = |name: &str| state.lookup(name).and_then(|v| v.as_usize()).unwrap_or(0);
            let mut args = fluent_bundle::FluentArgs::new();
            for name in kwargs.args() {
                let value: minijinja::Value = kwargs.get(name)?;
                args.set(name.to_owned(), crate::i18n::fluent_value(&value));
            }
            Ok::<_, minijinja::Error>(catalogs.message(
                index("lang_index"),
                index("fallback_index"),
                id,
                &args,
            ))
        },
    );
    env
}

/// The message ids a template asks for (`t("id"`).
fn message_ids(text: &str) -> Vec<(usize, String)> {
    static PATTERN: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Some(re) = PATTERN
        .get_or_init(|| regex::Regex::new(r#"\bt\(\s*"([^"]*)""#).ok())
        .as_ref()
    else {
        return Vec::new();
    };
    text.lines()
        .enumerate()
        .flat_map(|(i, line)| {
            re.captures_iter(line)
                .map(move |c| (i + 1, c[1].to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

impl Pages {
    /// The pages compiled into the binary.
    pub fn builtin() -> Arc<Pages> {
        static BUILTIN: OnceLock<Arc<Pages>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                let sources = PageKind::ALL.map(|k| (k, k.builtin_source().to_owned()));
                // The shipped pages are tested (see tests below), so this cannot fail at runtime.
                let pages = Pages::compile(
                    None,
                    "<built-in pages>",
                    BUILTIN_BASE.to_owned(),
                    sources,
                    Catalogs::builtin(),
                )
                .unwrap_or_else(|e| panic!("built-in pages are invalid: {e}"));
                Arc::new(pages)
            })
            .clone()
    }

    /// Reads and compiles the set in `dir`. `key` (e.g. `room[0].pages`) labels errors. A page
    /// the folder lacks is the built-in one ([`Pages::missing`] names them).
    pub fn load(dir: &Path, key: &str) -> Result<Pages, ConfigErrors> {
        let mut errors = Vec::new();
        let mut sources = Vec::new();
        let mut missing = Vec::new();
        for kind in PageKind::ALL {
            let file = dir.join(kind.file_name());
            match std::fs::read_to_string(&file) {
                Ok(text) => sources.push((kind, text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    missing.push(kind.file_name());
                    sources.push((kind, kind.builtin_source().to_owned()))
                }
                Err(e) => errors.push(ConfigError::new(
                    &file,
                    Some(key.to_owned()),
                    format!("cannot read page: {e}"),
                )),
            }
        }
        // Pages may extend "base.html": the folder's own, or the built-in one.
        let base = dir.join(BASE_FILE);
        let base = match std::fs::read_to_string(&base) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BUILTIN_BASE.to_owned(),
            Err(e) => {
                errors.push(ConfigError::new(
                    &base,
                    Some(key.to_owned()),
                    format!("cannot read page: {e}"),
                ));
                String::new()
            }
        };
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        let sources: [(PageKind, String); PageKind::ALL.len()] = sources
            .try_into()
            .unwrap_or_else(|_| unreachable!("one source per page kind"));
        let catalogs = Arc::new(Catalogs::load(dir)?);
        let mut pages = Pages::compile(Some(dir.to_path_buf()), key, base, sources, catalogs)?;
        pages.missing = missing;
        Ok(pages)
    }

    /// Compiles `base` (as [`BASE_FILE`]) and the pages, and renders each page once with sample
    /// figures, so that a set that loads also renders.
    fn compile(
        dir: Option<PathBuf>,
        key: &str,
        base: String,
        sources: [(PageKind, String); PageKind::ALL.len()],
        catalogs: Arc<Catalogs>,
    ) -> Result<Pages, ConfigErrors> {
        let mut env = environment(catalogs.clone());
        let mut errors = Vec::new();
        let mut origin_refs = Vec::new();
        let mut digest = <sha2::Sha256 as sha2::Digest>::new();
        for text in std::iter::once(&base).chain(sources.iter().map(|(_, text)| text)) {
            sha2::Digest::update(&mut digest, text.as_bytes());
            sha2::Digest::update(&mut digest, [0u8]);
        }
        let fingerprint = sha2::Digest::finalize(digest).into();
        let path_of = |name: &str| match &dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        };
        let files = std::iter::once((BASE_FILE, base)).chain(
            sources
                .into_iter()
                .map(|(kind, text)| (kind.file_name(), text)),
        );
        for (name, text) in files {
            for (line, url) in origin_references(&text) {
                origin_refs.push((path_of(name), line, url));
            }
            for (line, id) in message_ids(&text) {
                if !catalogs.has(&id) {
                    errors.push(
                        ConfigError::new(
                            &path_of(name),
                            Some(key.to_owned()),
                            format!("no message \"{id}\" in the catalogs (pages/i18n/en.toml lists them)"),
                        )
                        .at_line(Some(line)),
                    );
                }
            }
            if let Err(e) = env.add_template_owned(name, text) {
                errors.push(template_error(&path_of(name), key, &e));
            }
        }
        if errors.is_empty() {
            let sample = PageContext::sample();
            for kind in PageKind::ALL {
                let rendered = env
                    .get_template(kind.file_name())
                    .and_then(|t| t.render(&sample));
                if let Err(e) = rendered {
                    // The error may lie in the base the page extends: name the file it is in.
                    let file = e.name().unwrap_or(kind.file_name());
                    errors.push(template_error(&path_of(file), key, &e));
                }
            }
        }
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(Pages {
            catalogs,
            rendered: PerThreadLru::new(RENDERED_CACHE),
            hasher: ahash::RandomState::new(),
            env,
            dir,
            origin_refs,
            fingerprint,
            missing: Vec::new(),
        })
    }

    /// Renders a page (or finds it rendered). Rendering was proven at load, so a failure here
    /// can only come from a value; it degrades to a plain message rather than an empty body.
    pub fn render(&self, kind: PageKind, ctx: &PageContext) -> Bytes {
        let hash = render_hash(&self.hasher, kind, ctx);
        let hit = self.rendered.with(|cache| {
            cache
                .get(&hash)
                .filter(|(key, _)| key.matches(kind, ctx))
                .map(|(_, body)| body.clone())
        });
        if let Some(Some(body)) = hit {
            return body;
        }
        let body = self.render_uncached(kind, ctx);
        self.rendered
            .with(|cache| cache.put(hash, (RenderKey::of(kind, ctx), body.clone())));
        body
    }

    fn render_uncached(&self, kind: PageKind, ctx: &PageContext) -> Bytes {
        match self
            .env
            .get_template(kind.file_name())
            .and_then(|t| t.render(ctx))
        {
            Ok(html) => Bytes::from(html),
            Err(e) => {
                log::error!("rendering {}: {e}", kind.file_name());
                Bytes::from_static(
                    b"<!doctype html><title>Please wait</title><p>Please try again shortly.</p>",
                )
            }
        }
    }

    /// References a browser would fetch from the origin (relative URLs in `src`, `href` of
    /// `<link>`, CSS `url()`, `@import`): `--check` warns about them, since a waiting page that
    /// pulls assets from the origin defeats the waiting room.
    pub(crate) fn origin_references(&self) -> &[(PathBuf, usize, String)] {
        &self.origin_refs
    }

    /// The pages the folder lacks, served built in: `--check` warns about them.
    pub fn missing(&self) -> &[&'static str] {
        &self.missing
    }

    /// Equal for page sets with identical sources.
    pub(crate) fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }

    /// The languages this set speaks.
    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

fn template_error(file: &Path, key: &str, e: &minijinja::Error) -> ConfigError {
    let mut message = format!("template error: {}", e.kind());
    if let Some(detail) = e.detail() {
        message.push_str(": ");
        message.push_str(detail);
    }
    ConfigError::new(file, Some(key.to_owned()), message).at_line(e.line())
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
        }
    }
}

/// Serialises a body struct; these types cannot fail to serialise.
pub fn json<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// What kind of answer a held request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wants {
    /// `Accept` names `application/json`: the JSON body (apps, `fetch` from single-page sites).
    Json,
    /// A browser's subresource (favicon, image, script): a short 503 with `Retry-After`, and
    /// no new cookie.
    Subresource,
    /// A navigation (or a client that says nothing, like curl): the HTML page and its cookie.
    Page,
}

/// The media ranges an `Accept` value lists (at most 64: a longer list is not a browser's).
fn media_ranges(accept: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(accept)
        .unwrap_or("")
        .split(',')
        .take(64)
        .map(|m| m.split(';').next().unwrap_or("").trim())
}

/// Which answer a held request gets, from its `Accept` and `Sec-Fetch-Mode` headers.
pub fn wants(accept: Option<&[u8]>, sec_fetch_mode: Option<&[u8]>) -> Wants {
    if let Some(accept) = accept {
        if media_ranges(accept).any(|m| m.eq_ignore_ascii_case("application/json")) {
            return Wants::Json;
        }
    }
    if sec_fetch_mode.is_some_and(|m| !m.trim_ascii().eq_ignore_ascii_case(b"navigate")) {
        return Wants::Subresource;
    }
    if let Some(accept) = accept {
        let page = media_ranges(accept).any(|m| m.eq_ignore_ascii_case("text/html") || m == "*/*");
        if !page {
            return Wants::Subresource;
        }
    }
    Wants::Page
}

/// Whether a request asked for JSON rather than a page.
pub(crate) fn wants_json(accept: Option<&[u8]>) -> bool {
    wants(accept, None) == Wants::Json
}

fn origin_references(html: &str) -> Vec<(usize, String)> {
    static PATTERNS: OnceLock<[regex::Regex; 3]> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            regex::Regex::new(
                r#"(?is)<(?:img|script|link|iframe|source|video|audio|embed|object|input|track)\b[^>]*?\b(?:src|href|data|poster)\s*=\s*["']?([^"'\s>]+)"#,
            ),
            regex::Regex::new(r#"(?i)url\(\s*["']?([^"')\s]+)"#),
            regex::Regex::new(r#"(?i)@import\s+["']([^"']+)"#),
        ]
        .map(|r| r.unwrap_or_else(|e| unreachable!("static regex: {e}")))
    });
    let mut found = Vec::new();
    for re in patterns {
        for cap in re.captures_iter(html) {
            let Some(m) = cap.get(1) else { continue };
            let url = m.as_str();
            let lower = url.to_ascii_lowercase();
            let elsewhere = [
                "data:",
                "#",
                "about:",
                "javascript:",
                "http://",
                "https://",
                "//",
                "blob:",
            ]
            .iter()
            .any(|p| lower.starts_with(p));
            if !elsewhere && !url.contains("{{") {
                let line = crate::config::error::line_of(html, m.start());
                found.push((line, url.to_owned()));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> PageContext<'static> {
        let mut c = PageContext::plain("<script>alert(1)</script>", "anon", 7, 502);
        c.title = "<b>Sale</b>";
        c.refresh_seconds = 42;
        c.queueing = "lottery";
        c.rule = "r";
        c
    }

    /// What a waiting visitor reads: their place and the estimate in words, with plurals, a
    /// range where there is one, and never "0 minutes" or "0 people" while they wait. Both
    /// waiting pages say the same.
    #[test]
    fn estimates_and_places_read_right() {
        let pages = Pages::builtin();
        let check = |ahead: Option<u64>, e: [Option<f64>; 3], want: &[&str], never: &[&str]| {
            let mut c = PageContext::plain("shop", "wait", 20, 200);
            c.queueing = "fifo";
            c.users_ahead = ahead;
            let c = c.with_wait(Estimates {
                p25: e[0],
                p50: e[1],
                p75: e[2],
            });
            for kind in [PageKind::StartWaiting, PageKind::KeepWaiting] {
                let html = pages.render(kind, &c);
                let t = std::str::from_utf8(&html).unwrap();
                for w in want {
                    assert!(t.contains(w), "{kind:?} lacks {w:?}:\n{t}");
                }
                for n in never
                    .iter()
                    .chain(&[" 0 minute", "1 minutes", "1 people", " 0 people"])
                {
                    assert!(!t.contains(n), "{kind:?} says {n:?}:\n{t}");
                }
            }
        };
        check(
            Some(0),
            [Some(0.2), Some(0.3), Some(0.5)],
            &[
                "You are at the front of the line.",
                "You should get in within a minute.",
            ],
            &[],
        );
        check(
            Some(1),
            [Some(0.5), Some(0.8), Some(1.0)],
            &[
                "About 1 person is ahead of you.",
                "Expected wait: about 1 minute.",
            ],
            &[],
        );
        check(
            Some(9),
            [Some(3.0), Some(3.0), Some(3.0)],
            &[
                "About 9 people are ahead of you.",
                "Expected wait: about 3 minutes.",
            ],
            &[],
        );
        // Whole minutes, rounded outwards: 1.1 to 1.4 minutes reads "1 to 2".
        check(
            Some(2),
            [Some(1.1), Some(1.2), Some(1.4)],
            &["Expected wait: 1 to 2 minutes."],
            &[],
        );
        check(
            Some(40),
            [Some(4.2), Some(5.0), Some(5.9)],
            &[
                "About 40 people are ahead of you.",
                "Expected wait: 4 to 6 minutes.",
            ],
            &[],
        );
        // Under a minute at the 25th percentile but not at the 75th: a range from 1, not 0.
        check(
            Some(3),
            [Some(0.4), Some(0.9), Some(1.6)],
            &["Expected wait: 1 to 2 minutes."],
            &[],
        );
        // Unknown (a held room, or random with no place): no estimate and no place at all.
        check(
            None,
            [None, None, None],
            &[],
            &[
                "Expected wait",
                "within a minute",
                "ahead of you",
                "front of the line",
            ],
        );
    }

    #[test]
    fn builtin_pages_render_and_escape() {
        let pages = Pages::builtin();
        let html = pages.render(PageKind::StartWaiting, &ctx());
        let html = std::str::from_utf8(&html).unwrap();
        assert!(html.contains("&lt;b&gt;Sale&lt;&#x2f;b&gt;"), "{html}");
        assert!(!html.contains("<b>Sale"));
        assert!(html.contains("content=\"42\""));
        let html = pages.render(PageKind::RateLimited, &ctx());
        assert!(std::str::from_utf8(&html).unwrap().contains(">7<"));
        assert!(
            pages.origin_references().is_empty(),
            "{:?}",
            pages.origin_references()
        );
    }

    #[test]
    fn rendered_pages_are_reused_only_for_the_same_context() {
        let pages = Pages::builtin();
        let a = pages.render(PageKind::StartWaiting, &ctx());
        let again = pages.render(PageKind::StartWaiting, &ctx());
        assert_eq!(a.as_ptr(), again.as_ptr(), "served from the cache");
        let mut other = ctx();
        other.refresh_seconds = 41;
        let b = pages.render(PageKind::StartWaiting, &other);
        assert!(std::str::from_utf8(&b).unwrap().contains("content=\"41\""));
        other.refresh_seconds = 42;
        other.title = "another room";
        let c = pages.render(PageKind::StartWaiting, &other);
        assert!(std::str::from_utf8(&c).unwrap().contains("another room"));
        let d = pages.render(PageKind::KeepWaiting, &ctx());
        assert_ne!(a, d);
    }

    #[test]
    fn each_thread_serves_its_own_copy_of_the_same_page() {
        let pages = Pages::builtin();
        let here = pages.render(PageKind::StartWaiting, &ctx());
        std::thread::scope(|s| {
            for refresh in [41, 43, 47] {
                let (pages, here) = (&pages, &here);
                s.spawn(move || {
                    let mut other = ctx();
                    other.refresh_seconds = refresh;
                    for _ in 0..3 {
                        let mine = pages.render(PageKind::StartWaiting, &ctx());
                        // The same bytes, but not a reference to the other thread's copy:
                        // a hit writes nothing another thread reads.
                        assert_eq!(mine, *here);
                        assert_ne!(mine.as_ptr(), here.as_ptr());
                        let again = pages.render(PageKind::StartWaiting, &ctx());
                        assert_eq!(mine.as_ptr(), again.as_ptr(), "this thread's cache");
                        let page = pages.render(PageKind::StartWaiting, &other);
                        let text = std::str::from_utf8(&page).unwrap();
                        assert!(text.contains(&format!("content=\"{refresh}\"")));
                    }
                });
            }
        });
    }

    #[test]
    fn shipped_pages_are_self_contained() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pages");
        let pages = Pages::load(&dir, "room[0].pages").unwrap();
        assert!(pages.origin_references().is_empty());
    }

    #[test]
    fn broken_pages_are_errors_and_missing_ones_are_built_in() {
        let dir = std::env::temp_dir().join(format!("vestibule-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for kind in PageKind::ALL {
            std::fs::write(dir.join(kind.file_name()), "ok {{ room }}").unwrap();
        }
        assert!(Pages::load(&dir, "room[0].pages").is_ok());
        std::fs::write(dir.join("deny.html"), "line1\n{{ room }\n").unwrap();
        let e = Pages::load(&dir, "room[0].pages").unwrap_err().to_string();
        assert!(
            e.contains("deny.html:2: room[0].pages: template error"),
            "{e}"
        );
        std::fs::write(dir.join("deny.html"), "{{ no_such_variable }}").unwrap();
        let e = Pages::load(&dir, "room[0].pages").unwrap_err().to_string();
        assert!(e.contains("deny.html:1"), "{e}");
        std::fs::remove_file(dir.join("deny.html")).unwrap();
        std::fs::remove_file(dir.join("invite.html")).unwrap();
        let pages = Pages::load(&dir, "room[0].pages").unwrap();
        assert_eq!(pages.missing(), ["deny.html", "invite.html"]);
        let deny = pages.render(PageKind::Deny, &ctx());
        assert_eq!(deny, Pages::builtin().render(PageKind::Deny, &ctx()));
        assert_eq!(
            &pages.render(PageKind::Error, &ctx())[..],
            b"ok &lt;script&gt;alert(1)&lt;&#x2f;script&gt;"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Pages in a folder are full templates, or extend "base.html": the folder's own when it
    /// has one, else the built-in one.
    #[test]
    fn folder_pages_extend_the_folders_base_or_the_built_in_one() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        for kind in PageKind::ALL {
            std::fs::write(dir.join(kind.file_name()), "full {{ room }}").unwrap();
        }
        std::fs::write(
            dir.join("deny.html"),
            "{% extends \"base.html\" %}{% block title %}Closed · {{ title }}{% endblock %}\
             {% block heading %}Not today{% endblock %}{% block main %}<p>Tomorrow.</p>{% endblock %}",
        )
        .unwrap();
        let render =
            |pages: &Pages, kind| String::from_utf8(pages.render(kind, &ctx()).to_vec()).unwrap();
        let pages = Pages::load(dir, "room[0].pages").unwrap();
        assert_eq!(
            render(&pages, PageKind::StartWaiting),
            "full &lt;script&gt;alert(1)&lt;&#x2f;script&gt;"
        );
        let deny = render(&pages, PageKind::Deny);
        for part in [
            "<!doctype html>",
            "<title>Closed · &lt;b&gt;Sale&lt;&#x2f;b&gt;</title>",
            "<h1>Not today</h1>",
            "<p>Tomorrow.</p>",
            "content=\"42\"",
            "location.reload()",
        ] {
            assert!(deny.contains(part), "{part} in {deny}");
        }

        std::fs::write(
            dir.join("base.html"),
            "<main class=mine>{% block main %}{% endblock %}</main>",
        )
        .unwrap();
        let pages = Pages::load(dir, "room[0].pages").unwrap();
        assert_eq!(
            render(&pages, PageKind::Deny),
            "<main class=mine><p>Tomorrow.</p></main>"
        );

        std::fs::write(dir.join("base.html"), "line1\n{{ broken }").unwrap();
        let e = Pages::load(dir, "room[0].pages").unwrap_err().to_string();
        assert!(
            e.contains("base.html:2: room[0].pages: template error"),
            "{e}"
        );
    }

    /// The built-in pages all extend the built-in base, which holds the skeleton once.
    #[test]
    fn builtin_pages_share_one_base() {
        for kind in PageKind::ALL {
            assert!(
                kind.builtin_source()
                    .starts_with("{% extends \"base.html\" %}\n"),
                "{}",
                kind.file_name()
            );
            assert!(!kind.builtin_source().contains("<style>"));
        }
        assert!(BUILTIN_BASE.contains("<!doctype html>"));
    }

    #[test]
    fn finds_origin_references() {
        let html = "<html>\n<link rel=stylesheet href=\"/static/app.css\">\n<img src='logo.png'>\n<img src=\"data:image/png;base64,AA\">\n<script src=\"https://cdn.example/x.js\"></script>\n<style>body{background:url(/bg.jpg)}</style>\n<a href=\"/home\">home</a>\n";
        let refs = origin_references(html);
        assert_eq!(
            refs,
            vec![
                (2, "/static/app.css".to_owned()),
                (3, "logo.png".to_owned()),
                (6, "/bg.jpg".to_owned())
            ]
        );
    }

    #[test]
    fn a_pre_queue_page_reads_without_javascript() {
        assert_eq!(
            readable_time("2026-12-01T10:00:00Z"),
            "2026-12-01 10:00 UTC"
        );
        assert_eq!(
            readable_time("2026-12-01T10:00:30Z"),
            "2026-12-01 10:00:30 UTC"
        );
        assert_eq!(countdown(3723), "1:02:03");
        assert_eq!(countdown(125), "2:05");
        assert_eq!(countdown(59), "59");
        let ctx = PageContext::plain("r", "prequeue", 300, 200).with_event(
            "launch",
            "prequeue",
            (1_796_119_200, 1_796_122_800),
            true,
            1_796_119_200 - 3723,
        );
        let html =
            String::from_utf8(Pages::builtin().render(PageKind::PreQueue, &ctx).to_vec()).unwrap();
        assert!(
            html.contains(">2026-12-01 10:00 UTC</time>") && html.contains(">1:02:03</span>"),
            "{html}"
        );
        assert!(html.contains("<span id=\"unit\" hidden>"), "{html}");
    }

    #[test]
    fn json_and_accept() {
        let body = json(&WaitingJson::from(&ctx()));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["in_waiting_room"], true);
        assert_eq!(v["refresh_seconds"], 42);
        assert_eq!(v["wait_estimate_minutes"]["p50"], serde_json::Value::Null);
        assert!(wants_json(Some(b"application/json")));
        assert!(wants_json(Some(b"Application/JSON; charset=utf-8, */*")));
        // Named anywhere, JSON wins (first rule).
        assert!(wants_json(Some(b"text/html,application/json")));
        assert!(!wants_json(None));
        assert!(!wants_json(Some(b"\xff")));
    }

    #[test]
    fn held_requests_get_the_answer_their_kind_needs() {
        let w = |accept: Option<&[u8]>, mode: Option<&[u8]>| wants(accept, mode);
        let nav = b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        // Browsers navigating, curl, monitors: the page.
        assert_eq!(w(Some(nav), Some(b"navigate")), Wants::Page);
        assert_eq!(w(None, None), Wants::Page);
        assert_eq!(w(Some(b"*/*"), None), Wants::Page);
        // A favicon, an image, a script: 503.
        assert_eq!(
            w(Some(b"image/avif,image/webp,*/*;q=0.8"), Some(b"no-cors")),
            Wants::Subresource
        );
        assert_eq!(w(Some(b"*/*"), Some(b"cors")), Wants::Subresource);
        assert_eq!(w(Some(b"image/png"), None), Wants::Subresource);
        assert_eq!(w(Some(b"text/css"), None), Wants::Subresource);
        // JSON first, whatever Sec-Fetch-Mode says.
        assert_eq!(w(Some(b"application/json"), Some(b"cors")), Wants::Json);
    }

    #[test]
    fn wait_words_never_say_zero() {
        let c = |p25, p75| {
            PageContext::plain("r", "wait", 20, 200).with_wait(Estimates {
                p25: Some(p25),
                p50: Some((p25 + p75) / 2.0),
                p75: Some(p75),
            })
        };
        let soon = c(0.3, 0.4);
        assert!(soon.wait_soon);
        let short = c(0.3, 1.2);
        assert_eq!(
            (short.wait_soon, short.wait_low, short.wait_high),
            (false, Some(1), Some(2))
        );
        let long = c(7.6, 12.1);
        assert_eq!((long.wait_low, long.wait_high), (Some(7), Some(13)));
        let unknown = PageContext::plain("r", "wait", 20, 200).with_wait(Estimates::default());
        assert_eq!(
            (unknown.wait_soon, unknown.wait_low, unknown.wait_high),
            (false, None, None)
        );
    }
}
