//! A room's live operator overrides, without persistence: the cell the request path reads
//! ([`RoomCell`], [`Held`], [`PaceHandle`]), the overrides as the state file and `/status` show
//! them ([`RoomOverrides`]), the actions ([`Action`], [`check_message`], [`parse_pace`]) and the
//! `admit` grants kept in the room's store ([`grant`], [`grants_left`], [`take_grant`]). No file,
//! no clock but the one handed in: rooms depend on this part only.
//!
//! The pace override (`PUT /rooms/<room>/overrides`) sets a capacity room's
//! `new_users_per_minute` or a lottery room's `allow_percentage`, until it is cleared or, with
//! `for`, until a moment. While in force it beats everything else that sets the pace: the
//! room's configured value, a running event's, and the autopilot's (the operator is in charge).
//! It lapses by itself: every reader compares its end with the `now` it is handed.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use serde::{Deserialize, Serialize};

use crate::store::{CounterKey, CounterKind, CounterStore};
use crate::time::Timestamp;

/// A policy's way to its room's pace override (see [`RoomCell::pace`]); none by default.
#[derive(Clone, Default)]
pub struct PaceHandle(pub Option<Arc<RoomCell>>);

// Policies compare by their settings; the override is state, not a setting.
impl PartialEq for PaceHandle {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PaceHandle {}

impl std::fmt::Debug for PaceHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "overridable"
        } else {
            "fixed"
        })
    }
}

impl PaceHandle {
    /// The operator's pace at `now`, while an override is in force.
    pub fn pace(&self, now: Timestamp) -> Option<f64> {
        self.0.as_ref().and_then(|cell| cell.pace(now))
    }
}

/// Longest notice, in characters.
pub const MAX_MESSAGE_CHARS: usize = 500;
/// Most admissions one `admit` may grant.
pub const MAX_ADMIT: u64 = 100_000;
/// How long an `admit` grant may wait to be taken.
pub const GRANT_TTL_SECS: u64 = 600;
/// How often a room looks for grants in its store, at most.
const GRANT_SCAN_MS: u64 = 1_000;
/// Highest `new_users_per_minute` a pace override may set.
pub const MAX_PACE_PER_MINUTE: u64 = 1_000_000;
/// Shortest and longest `for` of a pace override.
pub const PACE_FOR: (Duration, Duration) =
    (Duration::from_secs(60), Duration::from_secs(7 * 24 * 3600));

/// Who did something, and when (RFC 3339).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub by: String,
    pub at: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoldOut {
    pub value: bool,
    #[serde(flatten)]
    pub stamp: Stamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub text: String,
    #[serde(flatten)]
    pub stamp: Stamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admitted {
    pub count: u64,
    #[serde(flatten)]
    pub stamp: Stamp,
}

/// The operator's pace: exactly one of `new_users_per_minute` (capacity rooms) and
/// `allow_percentage` (lottery rooms), until `until` (RFC 3339, whole seconds) or until cleared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_users_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_percentage: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(flatten)]
    pub stamp: Stamp,
}

// The percentage is checked finite when set, and JSON carries no NaN.
impl Eq for Pace {}

impl Pace {
    /// The value the room admits at: users per minute, or a percentage.
    pub fn value(&self) -> Option<f64> {
        self.new_users_per_minute
            .map(|n| n as f64)
            .or(self.allow_percentage)
    }

    /// When it lapses; `None` = when cleared. An `until` that does not read as a time lapses
    /// at once (it was not written by vestibule).
    pub fn until(&self) -> Option<Timestamp> {
        let until = self.until.as_deref()?;
        Some(
            humantime::parse_rfc3339(until)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(Timestamp::from_millis(0), |d| {
                    Timestamp::from_millis(d.as_millis() as u64)
                }),
        )
    }

    /// Whether it holds at `now`.
    pub fn in_force(&self, now: Timestamp) -> bool {
        self.until().is_none_or(|until| now < until)
    }
}

/// One room's overrides, as the state file, `/status` and the action answers show them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomOverrides {
    /// Orders the versions of a room's overrides across a cluster (the newest wins): the
    /// action's time in milliseconds, past the previous version.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Stamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sold_out: Option<SoldOut>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// The last `admit` (for `/status`; the grant itself lives in the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_admit: Option<Admitted>,
    /// The pace override, even once lapsed (see [`RoomOverrides::in_force`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<Pace>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl RoomOverrides {
    /// No override in force (whatever the version).
    pub fn is_empty(&self) -> bool {
        self.paused.is_none()
            && self.sold_out.is_none()
            && self.message.is_none()
            && self.last_admit.is_none()
            && self.pace.is_none()
    }

    /// The overrides as they hold at `now`: without a pace override that has lapsed.
    pub fn in_force(mut self, now: Timestamp) -> RoomOverrides {
        if self.pace.as_ref().is_some_and(|p| !p.in_force(now)) {
            self.pace = None;
        }
        self
    }
}

/// Which key a room's pace override sets, after its admission method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaceKey {
    /// Capacity rooms (`random`, `fifo`).
    NewUsersPerMinute,
    /// Lottery rooms.
    AllowPercentage,
}

impl PaceKey {
    pub fn as_str(self) -> &'static str {
        match self {
            PaceKey::NewUsersPerMinute => "new_users_per_minute",
            PaceKey::AllowPercentage => "allow_percentage",
        }
    }
}

/// A pace override asked for: the value for `key` and how long it holds (`None`: until
/// cleared).
#[derive(Clone, Debug, PartialEq)]
pub struct PaceSet {
    pub key: PaceKey,
    pub value: f64,
    pub lasts: Option<Duration>,
}

// The value is checked finite by `parse_pace`.
impl Eq for PaceSet {}

impl PaceSet {
    /// The override this sets at `now`, stamped.
    pub fn at(&self, stamp: Stamp, now: Timestamp) -> Pace {
        let until = self
            .lasts
            .map(|d| Timestamp::from_secs(now.secs().saturating_add(d.as_secs())).rfc3339());
        let (per_minute, percentage) = match self.key {
            PaceKey::NewUsersPerMinute => (Some(self.value as u64), None),
            PaceKey::AllowPercentage => (None, Some(self.value)),
        };
        Pace {
            new_users_per_minute: per_minute,
            allow_percentage: percentage,
            until,
            stamp,
        }
    }
}

/// Reads the body of `PUT /rooms/<room>/overrides`: a JSON object with exactly one of
/// `new_users_per_minute` (1 to [`MAX_PACE_PER_MINUTE`], whole) and `allow_percentage` (0 to
/// 100), the one `key` names, and optionally `for` (a duration such as `"30m"`, within
/// [`PACE_FOR`]). Anything else is refused with a message for the operator.
pub fn parse_pace(body: &[u8], key: PaceKey) -> Result<PaceSet, String> {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice::<serde_json::Value>(body)
    else {
        return Err(format!(
            "the body must be a JSON object such as {{\"{}\": 50, \"for\": \"30m\"}}",
            key.as_str()
        ));
    };
    if let Some(unknown) = fields.keys().find(|k| {
        !matches!(
            k.as_str(),
            "new_users_per_minute" | "allow_percentage" | "for"
        )
    }) {
        return Err(format!(
            "unknown key \"{}\"; a pace override takes new_users_per_minute or allow_percentage, and for",
            unknown.escape_default()
        ));
    }
    let other = match key {
        PaceKey::NewUsersPerMinute => PaceKey::AllowPercentage,
        PaceKey::AllowPercentage => PaceKey::NewUsersPerMinute,
    };
    if fields.contains_key(other.as_str()) {
        let method = match key {
            PaceKey::NewUsersPerMinute => "a capacity room (random or fifo)",
            PaceKey::AllowPercentage => "a lottery room",
        };
        return Err(format!(
            "{} does not apply to this room: it is {method}; set {}",
            other.as_str(),
            key.as_str()
        ));
    }
    let Some(given) = fields.get(key.as_str()) else {
        return Err(format!("the body needs {}", key.as_str()));
    };
    let value = match key {
        PaceKey::NewUsersPerMinute => given
            .as_u64()
            .filter(|n| (1..=MAX_PACE_PER_MINUTE).contains(n))
            .map(|n| n as f64)
            .ok_or_else(|| {
                format!(
                    "new_users_per_minute must be a whole number from 1 to {MAX_PACE_PER_MINUTE} \
                     (pause stops admitting)"
                )
            })?,
        PaceKey::AllowPercentage => given
            .as_f64()
            .filter(|p| p.is_finite() && (0.0..=100.0).contains(p))
            .ok_or("allow_percentage must be a number from 0 to 100")?,
    };
    let lasts = match fields.get("for") {
        None => None,
        Some(serde_json::Value::String(text)) => {
            let d = humantime::parse_duration(text.trim()).map_err(|e| {
                format!(
                    "for \"{}\" is not a duration ({e}); try \"30m\"",
                    text.escape_default()
                )
            })?;
            if d < PACE_FOR.0 || d > PACE_FOR.1 {
                return Err(format!(
                    "for must be from 1m to 7d, not {}",
                    humantime::format_duration(d)
                ));
            }
            Some(d)
        }
        Some(_) => return Err("for must be a duration in a string, such as \"30m\"".into()),
    };
    Ok(PaceSet { key, value, lasts })
}

/// One operator action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Admit(u64),
    SetMessage(String),
    ClearMessage,
    SetSoldOut,
    ClearSoldOut,
    ClearOverrides,
    SetPace(PaceSet),
}

impl Action {
    /// The `action` label of `vestibule_admin_actions_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Admit(_) => "admit",
            Action::SetMessage(_) => "message_set",
            Action::ClearMessage => "message_clear",
            Action::SetSoldOut => "sold_out_set",
            Action::ClearSoldOut => "sold_out_clear",
            Action::ClearOverrides => "overrides_clear",
            Action::SetPace(_) => "pace",
        }
    }

    pub const LABELS: [&'static str; 9] = [
        "pause",
        "resume",
        "admit",
        "message_set",
        "message_clear",
        "sold_out_set",
        "sold_out_clear",
        "overrides_clear",
        "pace",
    ];
}

/// Checks a notice: at most [`MAX_MESSAGE_CHARS`] characters, no control characters but line
/// breaks and tabs, not blank. Returns it trimmed.
pub fn check_message(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the message is empty (DELETE removes it)".into());
    }
    let chars = text.chars().count();
    if chars > MAX_MESSAGE_CHARS {
        return Err(format!(
            "the message has {chars} characters; at most {MAX_MESSAGE_CHARS}"
        ));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err("the message has control characters".into());
    }
    Ok(text.to_owned())
}

/// What a room decides under right now, read on the request path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub paused: bool,
    /// The `sold_out` override: `None` = the config key decides.
    pub sold_out: Option<bool>,
}

/// A room's live overrides.
#[derive(Debug, Default)]
pub struct RoomCell {
    paused: AtomicBool,
    /// 0 none, 1 sold out, 2 not sold out.
    sold_out: AtomicU8,
    message: ArcSwapOption<String>,
    /// Whether `message` is set: held pages without a notice (nearly all) skip loading it.
    has_message: AtomicBool,
    /// When the store was last scanned for grants, and whether one had admissions left.
    grants_scanned_ms: AtomicU64,
    grants_left: AtomicBool,
    /// The pace override's end in milliseconds (0: none; `u64::MAX`: until cleared), and its
    /// value (`f64` bits). The end is written last and read first, so a reader that sees an
    /// override sees its value.
    pace_until_ms: AtomicU64,
    pace: AtomicU64,
}

impl RoomCell {
    /// Whether an operator's `admit` has admissions left in `scope` (a visitor's stream asks;
    /// their request takes). Read, never taken: the store is looked at again at most once a
    /// [`GRANT_SCAN_MS`], so a grant made on another node of a cluster is seen too.
    pub fn grants_pending(&self, store: &dyn CounterStore, scope: &str, now: Timestamp) -> bool {
        let scanned = self.grants_scanned_ms.load(Ordering::Relaxed);
        if now.millis().saturating_sub(scanned) < GRANT_SCAN_MS && scanned != 0 {
            return self.grants_left.load(Ordering::Relaxed);
        }
        self.grants_scanned_ms
            .store(now.millis().max(1), Ordering::Relaxed);
        let left = grants_left(store, scope, now) > 0;
        self.grants_left.store(left, Ordering::Relaxed);
        left
    }

    pub fn held(&self) -> Held {
        Held {
            paused: self.paused.load(Ordering::Relaxed),
            sold_out: match self.sold_out.load(Ordering::Relaxed) {
                1 => Some(true),
                2 => Some(false),
                _ => None,
            },
        }
    }

    pub fn message(&self) -> Option<Arc<String>> {
        if !self.has_message.load(Ordering::Acquire) {
            return None;
        }
        self.message.load_full()
    }

    /// Puts `o` in force.
    pub fn set(&self, o: &RoomOverrides) {
        self.paused.store(o.paused.is_some(), Ordering::Relaxed);
        let sold_out = match &o.sold_out {
            None => 0,
            Some(s) if s.value => 1,
            Some(_) => 2,
        };
        self.sold_out.store(sold_out, Ordering::Relaxed);
        self.message
            .store(o.message.as_ref().map(|m| Arc::new(m.text.clone())));
        self.has_message
            .store(o.message.is_some(), Ordering::Release);
        let pace = o.pace.as_ref().and_then(|p| Some((p.value()?, p.until())));
        match pace {
            Some((value, until)) => {
                self.pace.store(value.to_bits(), Ordering::Relaxed);
                let until = until.map_or(u64::MAX, |t| t.millis().max(1));
                self.pace_until_ms.store(until, Ordering::Release);
            }
            None => self.pace_until_ms.store(0, Ordering::Release),
        }
    }

    /// The pace override in force at `now`: users per minute or a percentage, after the room's
    /// admission method. One atomic load for a room without one.
    pub fn pace(&self, now: Timestamp) -> Option<f64> {
        let until = self.pace_until_ms.load(Ordering::Acquire);
        if until == 0 || now.millis() >= until {
            return None;
        }
        Some(f64::from_bits(self.pace.load(Ordering::Relaxed)))
    }

    /// Takes one admission from an `admit` grant of `scope`, if one has any left. The store is
    /// scanned at most once a second while there is nothing to take, so a room without grants
    /// pays one atomic load.
    pub(crate) fn take_grant(&self, store: &dyn CounterStore, scope: &str, now: Timestamp) -> bool {
        let scanned = self.grants_scanned_ms.load(Ordering::Relaxed);
        if !self.grants_left.load(Ordering::Relaxed)
            && now.millis().saturating_sub(scanned) < GRANT_SCAN_MS
            && scanned != 0
        {
            return false;
        }
        self.grants_scanned_ms
            .store(now.millis().max(1), Ordering::Relaxed);
        let taken = take_grant(store, scope, now);
        self.grants_left.store(taken, Ordering::Relaxed);
        taken
    }

    /// A new grant was made here: look at once.
    pub fn grant_made(&self) {
        self.grants_left.store(true, Ordering::Relaxed);
    }
}

fn grant_key(scope: &str, kind: CounterKind, slot: u64) -> CounterKey {
    CounterKey {
        scope: scope.into(),
        kind,
        slot,
        id: 0,
    }
}

fn grant_expiry(slot_ms: u64) -> Timestamp {
    Timestamp::from_millis(slot_ms + GRANT_TTL_SECS * 1000)
}

/// Grants `count` admissions in `scope` now.
pub fn grant(store: &dyn CounterStore, scope: &str, count: u64, now: Timestamp) {
    let slot = now.millis();
    let key = grant_key(scope, CounterKind::Granted, slot);
    store.add(&key, count.min(MAX_ADMIT) as i64, now, grant_expiry(slot));
}

/// Admissions granted and not taken yet in `scope`.
pub fn grants_left(store: &dyn CounterStore, scope: &str, now: Timestamp) -> u64 {
    store
        .scan(scope, CounterKind::Granted, now)
        .into_iter()
        .map(|(slot, _, granted)| {
            let used = store.get(&grant_key(scope, CounterKind::GrantUsed, slot), now);
            (granted - used).max(0) as u64
        })
        .sum()
}

/// Takes one admission from the oldest grant with some left. The use is counted first and undone
/// if it went past the grant, so concurrent takers can only under-use a grant, never overrun it
/// (in a cluster, by at most what other nodes took since the last sync).
pub(crate) fn take_grant(store: &dyn CounterStore, scope: &str, now: Timestamp) -> bool {
    for (slot, _, granted) in store.scan(scope, CounterKind::Granted, now) {
        let used_key = grant_key(scope, CounterKind::GrantUsed, slot);
        if store.get(&used_key, now) >= granted {
            continue;
        }
        if store.add(&used_key, 1, now, grant_expiry(slot)) <= granted {
            return true;
        }
        store.add(&used_key, -1, now, grant_expiry(slot));
    }
    false
}

/// Uses up every grant of `scope` (`DELETE /rooms/<room>/overrides`).
pub fn withdraw_grants(store: &dyn CounterStore, scope: &str, now: Timestamp) {
    for (slot, _, granted) in store.scan(scope, CounterKind::Granted, now) {
        let used_key = grant_key(scope, CounterKind::GrantUsed, slot);
        let used = store.get(&used_key, now);
        if used < granted {
            store.add(&used_key, granted - used, now, grant_expiry(slot));
        }
    }
}

/// The overrides in words, for the log.
pub fn describe(o: &RoomOverrides) -> String {
    let mut parts = Vec::new();
    if o.paused.is_some() {
        parts.push("paused".to_owned());
    }
    if let Some(s) = &o.sold_out {
        parts.push(format!("sold_out={}", s.value));
    }
    if let Some(m) = &o.message {
        parts.push(format!("message of {} characters", m.text.chars().count()));
    }
    if let Some(p) = &o.pace {
        let value = match (p.new_users_per_minute, p.allow_percentage) {
            (Some(n), _) => format!("new_users_per_minute={n}"),
            (_, Some(pct)) => format!("allow_percentage={pct}"),
            _ => "none".to_owned(),
        };
        let until = p.until.as_deref().unwrap_or("cleared");
        parts.push(format!("pace {value} until {until}"));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::local::LocalStore;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_secs(1_700_000_000 + s)
    }

    #[test]
    fn messages_are_checked() {
        assert_eq!(check_message("  Back at 3pm \n").unwrap(), "Back at 3pm");
        assert!(check_message("   ").is_err());
        assert!(check_message(&"é".repeat(500)).is_ok());
        assert!(check_message(&"é".repeat(501)).unwrap_err().contains("501"));
        assert!(check_message("a\u{7}b").is_err());
        assert!(check_message("two\nlines").is_ok());
    }

    #[test]
    fn grants_are_taken_once_each_and_lapse() {
        let store = LocalStore::new();
        assert!(!take_grant(&store, "r", at(0)));
        grant(&store, "r", 3, at(0));
        grant(&store, "other", 1, at(0));
        assert_eq!(grants_left(&store, "r", at(1)), 3);
        assert!((0..3).all(|_| take_grant(&store, "r", at(1))));
        assert!(!take_grant(&store, "r", at(1)));
        assert_eq!(grants_left(&store, "r", at(1)), 0);
        assert_eq!(grants_left(&store, "other", at(1)), 1);
        // Unused grants lapse.
        assert!(!take_grant(&store, "other", at(GRANT_TTL_SECS + 1)));
    }

    #[test]
    fn pace_bodies_are_checked() {
        use PaceKey::*;
        let ok = |body: &str, key| parse_pace(body.as_bytes(), key);
        let set = ok(
            r#"{"new_users_per_minute": 40, "for": "30m"}"#,
            NewUsersPerMinute,
        )
        .unwrap();
        assert_eq!(
            (set.value, set.lasts),
            (40.0, Some(Duration::from_secs(1800)))
        );
        let set = ok(r#"{"allow_percentage": 12.5}"#, AllowPercentage).unwrap();
        assert_eq!((set.value, set.lasts), (12.5, None));
        assert!(ok(r#"{"allow_percentage": 0}"#, AllowPercentage).is_ok());
        for (body, key, says) in [
            (
                r#"{"allow_percentage": 5}"#,
                NewUsersPerMinute,
                "does not apply",
            ),
            (
                r#"{"new_users_per_minute": 5}"#,
                AllowPercentage,
                "does not apply",
            ),
            (
                r#"{"new_users_per_minute": 5, "allow_percentage": 5}"#,
                NewUsersPerMinute,
                "does not apply",
            ),
            (r#"{}"#, NewUsersPerMinute, "needs new_users_per_minute"),
            (
                r#"{"new_users_per_minute": 5, "fro": "1m"}"#,
                NewUsersPerMinute,
                "unknown key \"fro\"",
            ),
            (
                r#"{"new_users_per_minute": 0}"#,
                NewUsersPerMinute,
                "from 1",
            ),
            (
                r#"{"new_users_per_minute": 2.5}"#,
                NewUsersPerMinute,
                "whole number",
            ),
            (
                r#"{"new_users_per_minute": "5"}"#,
                NewUsersPerMinute,
                "whole number",
            ),
            (
                r#"{"allow_percentage": 100.5}"#,
                AllowPercentage,
                "from 0 to 100",
            ),
            (
                r#"{"allow_percentage": -1}"#,
                AllowPercentage,
                "from 0 to 100",
            ),
            (
                r#"{"allow_percentage": 5, "for": "30s"}"#,
                AllowPercentage,
                "from 1m to 7d",
            ),
            (
                r#"{"allow_percentage": 5, "for": "8d"}"#,
                AllowPercentage,
                "from 1m to 7d",
            ),
            (
                r#"{"allow_percentage": 5, "for": "soon"}"#,
                AllowPercentage,
                "not a duration",
            ),
            (
                r#"{"allow_percentage": 5, "for": 60}"#,
                AllowPercentage,
                "in a string",
            ),
            (r#"[1]"#, AllowPercentage, "JSON object"),
            ("", AllowPercentage, "JSON object"),
        ] {
            let e = ok(body, key).unwrap_err();
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn a_pace_override_lapses_by_itself() {
        let cell = RoomCell::default();
        assert_eq!(cell.pace(at(0)), None);
        let set = parse_pace(
            br#"{"allow_percentage": 30, "for": "1m"}"#,
            PaceKey::AllowPercentage,
        )
        .unwrap();
        let o = RoomOverrides {
            pace: Some(set.at(Stamp::default(), at(0))),
            ..RoomOverrides::default()
        };
        assert_eq!(o.pace.as_ref().unwrap().until(), Some(at(60)));
        cell.set(&o);
        assert_eq!(cell.pace(at(59)), Some(30.0));
        assert_eq!(cell.pace(at(60)), None);
        // `/status` shows it while it holds, and not after.
        assert!(o.clone().in_force(at(59)).pace.is_some());
        assert!(o.clone().in_force(at(60)).is_empty());
        // The state file's form reads back the same.
        let back: RoomOverrides =
            serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(back, o);
        cell.set(&RoomOverrides::default());
        assert_eq!(cell.pace(at(1)), None);
    }
}
