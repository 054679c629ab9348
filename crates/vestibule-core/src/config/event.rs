//! `[[room.event]]`: a room's scheduled events, as the core uses them, and the checks
//! that turn a file's events into them.
//!
//! Times are RFC 3339 with a zone (`2026-12-01T10:00:00Z`, `…+01:00`), kept as Unix seconds.
//! A room's events must not overlap (from the pre-queue, or the start, to the end), and an event
//! may override only what applies to the room's admission.

use std::path::PathBuf;
use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::file::{EventFile, TimeText};
use super::{Admission, QueueOrder};

/// One scheduled event of a room.
#[derive(Clone, Debug, PartialEq)]
pub struct EventConfig {
    pub name: String,
    /// Unix seconds: the pre-queue opens here (`None`: no pre-queue).
    pub prequeue_start: Option<u64>,
    /// Unix seconds: the line opens, and the overrides apply, from here…
    pub start: u64,
    /// …to here (Unix seconds), when the room's own settings return.
    pub end: u64,
    /// Pre-queued visitors get their places by a keyed random draw at `start`.
    pub shuffle_at_start: bool,
    /// How that draw is made: keyed, or verifiable by anyone after the start.
    pub draw: DrawKind,
    /// The event's page folder (falls back to the room's).
    pub pages: Option<PathBuf>,
    pub overrides: EventOverrides,
}

/// How an event's draw at the start is made (`draw`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DrawKind {
    /// A keyed hash of the identity: nobody can game it, nobody but the operator can compute it.
    #[default]
    Keyed,
    /// A committed seed and receipts, revealed after the start
    /// ([`crate::room::draw`]).
    Verifiable,
}

impl DrawKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DrawKind::Keyed => "keyed",
            DrawKind::Verifiable => "verifiable",
        }
    }
}

impl EventConfig {
    /// Whether the event's pre-queue is ordered by a verifiable draw.
    pub fn verifiable(&self) -> bool {
        self.shuffle_at_start && self.draw == DrawKind::Verifiable
    }
}

/// What an event changes from `start` to `end`; `None` keeps the room's setting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventOverrides {
    pub new_users_per_minute: Option<u32>,
    pub total_active_users: Option<u32>,
    pub session_duration: Option<Duration>,
    pub allow_percentage: Option<u8>,
    pub order: Option<QueueOrder>,
    pub title: Option<String>,
}

impl EventConfig {
    /// Where the event's window opens: the pre-queue, else the start.
    pub fn opens(&self) -> u64 {
        self.prequeue_start.unwrap_or(self.start)
    }

    /// The room's admission with this event's overrides.
    pub fn admission(&self, room: &Admission) -> Admission {
        let o = &self.overrides;
        match room {
            Admission::Lottery {
                allow_percentage,
                wait_period,
                allow_period,
                closed_refresh,
            } => Admission::Lottery {
                allow_percentage: o.allow_percentage.unwrap_or(*allow_percentage),
                wait_period: *wait_period,
                allow_period: *allow_period,
                closed_refresh: *closed_refresh,
            },
            Admission::Capacity(c) => {
                let mut c = c.clone();
                c.new_users_per_minute = o.new_users_per_minute.unwrap_or(c.new_users_per_minute);
                c.total_active_users = o.total_active_users.unwrap_or(c.total_active_users);
                c.session_duration = o.session_duration.unwrap_or(c.session_duration);
                c.order = o.order.unwrap_or(c.order);
                Admission::Capacity(c)
            }
        }
    }
}

/// Unix seconds as RFC 3339 in UTC (`2026-12-01T10:00:00Z`).
pub fn rfc3339(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// Parses an RFC 3339 time with a zone to Unix seconds.
pub(crate) fn parse_time(text: &str) -> Result<u64, String> {
    let t = OffsetDateTime::parse(text.trim(), &Rfc3339).map_err(|_| {
        format!(
            "\"{text}\" is not an RFC 3339 time with a zone (such as 2026-12-01T10:00:00Z or \
             2026-12-01T11:00:00+01:00)"
        )
    })?;
    u64::try_from(t.unix_timestamp())
        .ok()
        .filter(|s| *s < 253_402_300_800)
        .ok_or_else(|| format!("\"{text}\" is out of range (1970 to 9999)"))
}

/// A problem with one key of one event: the key under `room[i].event[j]`, and what is wrong.
pub(crate) type Problem = (String, String);

/// Checks one room's events. `capacity`: whether the room admits by capacity (else lottery).
/// `resolve` turns a page folder into a path. Returns the events that are whole, and the
/// problems, each naming its key under the room (`event[1].start`).
pub(crate) fn check_events(
    events: &[EventFile],
    capacity: bool,
    resolve: &dyn Fn(&str) -> PathBuf,
) -> (Vec<EventConfig>, Vec<Problem>) {
    let mut out = Vec::new();
    let mut problems: Vec<Problem> = Vec::new();
    for j in 0..events.len() {
        if let Some(event) = check_event(events, j, capacity, resolve, &mut problems) {
            out.push((j, event));
        }
    }
    check_overlaps(&mut out, &mut problems);
    (out.into_iter().map(|(_, e)| e).collect(), problems)
}

/// Checks event `j` of `events`, adding its problems; the event when it is whole.
fn check_event(
    events: &[EventFile],
    j: usize,
    capacity: bool,
    resolve: &dyn Fn(&str) -> PathBuf,
    problems: &mut Vec<Problem>,
) -> Option<EventConfig> {
    let e = &events[j];
    let k = |field: &str| format!("event[{j}].{field}");
    let mut bad = |field: &str, message: String| problems.push((k(field), message));
    let name = e.name.clone().unwrap_or_default();
    // At least one letter or digit: "." and ".." would name no path (the draw's URL).
    if !name.chars().any(|c| c.is_ascii_alphanumeric())
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        bad(
            "name",
            format!(
                "needs a name of letters, digits, '_', '-' and '.' (at most 64, a letter or digit \
                 among them), got \"{name}\""
            ),
        );
    }
    if events[..j].iter().any(|o| o.name.as_deref() == Some(&name)) && !name.is_empty() {
        bad(
            "name",
            format!("another event of this room is named \"{name}\""),
        );
    }
    let mut time = |field: &str, v: &Option<TimeText>, required: bool| -> Option<u64> {
        match v {
            None if required => {
                bad(field, "is required (an RFC 3339 time with a zone)".into());
                None
            }
            None => None,
            Some(t) => match parse_time(&t.text()) {
                Ok(secs) => Some(secs),
                Err(message) => {
                    bad(field, message);
                    None
                }
            },
        }
    };
    let prequeue_start = time("prequeue_start", &e.prequeue_start, false);
    let start = time("start", &e.start, true);
    let end = time("end", &e.end, true);
    let (Some(start), Some(end)) = (start, end) else {
        return None;
    };
    let mut fine = true;
    if start >= end {
        bad("end", format!("must be after start ({})", rfc3339(start)));
        fine = false;
    }
    if prequeue_start.is_some_and(|p| p >= start) {
        bad(
            "prequeue_start",
            format!("must be before start ({})", rfc3339(start)),
        );
        fine = false;
    }
    if e.prequeue_start.is_some() && prequeue_start.is_none() {
        fine = false;
    }
    let shuffle_at_start = e.shuffle_at_start.unwrap_or(false);
    if shuffle_at_start && e.prequeue_start.is_none() {
        bad(
            "shuffle_at_start",
            "needs prequeue_start: the draw orders the visitors who pre-queued".into(),
        );
    }
    let draw = match e.draw.as_deref() {
        None | Some("keyed") => DrawKind::Keyed,
        Some("verifiable") => DrawKind::Verifiable,
        Some(other) => {
            bad(
                "draw",
                format!("must be \"keyed\" or \"verifiable\", got \"{other}\""),
            );
            DrawKind::Keyed
        }
    };
    if draw == DrawKind::Verifiable {
        if !capacity {
            bad(
                "draw",
                "\"verifiable\" needs a random or fifo room: a lottery room draws no order at \
                 the start"
                    .into(),
            );
        } else if !shuffle_at_start || e.prequeue_start.is_none() {
            bad(
                "draw",
                "\"verifiable\" needs prequeue_start and shuffle_at_start = true: it is the \
                 draw that orders the pre-queue at the start"
                    .into(),
            );
        }
    }
    let overrides = event_overrides(e, capacity, &mut bad);
    // Like a room's: a folder that is missing serves the built-in pages, with a warning.
    let pages = e.pages.as_deref().map(resolve);
    if !fine {
        return None;
    }
    Some(EventConfig {
        name,
        prequeue_start,
        start,
        end,
        shuffle_at_start,
        draw,
        pages,
        overrides,
    })
}

/// An event's overrides of its room's settings, each checked against the room's admission
/// (`capacity`, else lottery).
fn event_overrides(
    e: &EventFile,
    capacity: bool,
    bad: &mut dyn FnMut(&str, String),
) -> EventOverrides {
    let method = if capacity {
        "random\" or \"fifo"
    } else {
        "lottery"
    };
    let only_for = |bad: &mut dyn FnMut(&str, String), field: &str, set: bool, ok: bool| {
        if set && !ok {
            bad(
                field,
                format!("does not apply to this room's admission (\"{method}\")"),
            );
        }
    };
    only_for(
        &mut *bad,
        "allow_percentage",
        e.allow_percentage.is_some(),
        !capacity,
    );
    for (field, set) in [
        ("new_users_per_minute", e.new_users_per_minute.is_some()),
        ("total_active_users", e.total_active_users.is_some()),
        ("session_duration", e.session_duration.is_some()),
        ("admission", e.admission.is_some()),
    ] {
        only_for(&mut *bad, field, set, capacity);
    }
    let mut limit = |field: &str, v: Option<i64>| -> Option<u32> {
        let v = v?;
        if (0..=10_000_000).contains(&v) {
            Some(v as u32)
        } else {
            bad(
                field,
                format!("must be between 0 (no limit) and 10000000, got {v}"),
            );
            None
        }
    };
    let new_users_per_minute = limit("new_users_per_minute", e.new_users_per_minute);
    let total_active_users = limit("total_active_users", e.total_active_users);
    let allow_percentage = match e.allow_percentage {
        Some(p) if (0..=100).contains(&p) => Some(p as u8),
        Some(p) => {
            bad(
                "allow_percentage",
                format!("must be between 0 and 100, got {p}"),
            );
            None
        }
        None => None,
    };
    if let Some(d) = e.session_duration {
        if d < Duration::from_secs(60) || d > Duration::from_secs(24 * 3600) {
            bad(
                "session_duration",
                "must be between 1m and 24h (activity is counted per minute)".into(),
            );
        }
    }
    let order = match e.admission.as_deref() {
        None => None,
        Some("random") => Some(QueueOrder::Random),
        Some("fifo") => Some(QueueOrder::Fifo),
        Some(other) => {
            bad(
                "admission",
                format!(
                    "must be \"random\" or \"fifo\" (an event changes the capacity method, \
                     not the kind of room), got \"{other}\""
                ),
            );
            None
        }
    };
    let title = e.title.as_deref().map(str::trim).filter(|t| !t.is_empty());
    if title.is_some_and(|t| t.chars().count() > 200 || t.chars().any(char::is_control)) {
        bad(
            "title",
            "must be at most 200 characters, without control characters".into(),
        );
    }
    EventOverrides {
        new_users_per_minute,
        total_active_users,
        session_duration: e.session_duration,
        allow_percentage,
        order,
        title: title.map(str::to_owned),
    }
}

/// No two events of a room may be in force at once: sorts `out` by opening and adds a problem
/// for each event that opens before the one before it ends.
fn check_overlaps(out: &mut [(usize, EventConfig)], problems: &mut Vec<Problem>) {
    out.sort_by_key(|(_, e)| e.opens());
    for pair in out.windows(2) {
        let ((_, a), (j, b)) = (&pair[0], &pair[1]);
        if b.opens() < a.end {
            let field = if b.prequeue_start.is_some() {
                "prequeue_start"
            } else {
                "start"
            };
            problems.push((
                format!("event[{j}].{field}"),
                format!(
                    "event \"{}\" overlaps event \"{}\" (until {}); a room's events must not \
                 overlap, pre-queue included",
                    b.name,
                    a.name,
                    rfc3339(a.end)
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_need_a_zone() {
        assert_eq!(parse_time("2026-12-01T10:00:00Z"), Ok(1_796_119_200));
        assert_eq!(parse_time("2026-12-01T11:00:00+01:00"), Ok(1_796_119_200));
        assert!(parse_time("2026-12-01T10:00:00").is_err());
        assert!(parse_time("2026-12-01").is_err());
        assert!(parse_time("tomorrow").is_err());
        assert!(parse_time("1969-12-31T23:59:59Z").is_err());
        assert_eq!(rfc3339(1_796_119_200), "2026-12-01T10:00:00Z");
    }
}
