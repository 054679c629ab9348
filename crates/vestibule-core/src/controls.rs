//! A room's live operator overrides, without persistence: the cell the request path reads
//! ([`RoomCell`], [`Held`]), the overrides as the state file and `/status` show them
//! ([`RoomOverrides`]), the actions ([`Action`], [`check_message`]) and the `admit` grants kept
//! in the room's store ([`grant`], [`grants_left`], [`take_grant`]). No file, no clock but the
//! one handed in: rooms depend on this part only.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use serde::{Deserialize, Serialize};

use crate::store::{CounterKey, CounterKind, CounterStore};
use crate::time::Timestamp;

/// Longest notice, in characters.
pub const MAX_MESSAGE_CHARS: usize = 500;
/// Most admissions one `admit` may grant.
pub const MAX_ADMIT: u64 = 100_000;
/// How long an `admit` grant may wait to be taken.
pub const GRANT_TTL_SECS: u64 = 600;
/// How often a room looks for grants in its store, at most.
const GRANT_SCAN_MS: u64 = 1_000;

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
    }
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
        }
    }

    pub const LABELS: [&'static str; 8] = [
        "pause",
        "resume",
        "admit",
        "message_set",
        "message_clear",
        "sold_out_set",
        "sold_out_clear",
        "overrides_clear",
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
}

impl RoomCell {
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
}
