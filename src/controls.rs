//! Operator actions: runtime overrides on top of the config file.
//!
//! An operator pauses a room, lets a few more people in, posts a notice or declares a sale sold
//! out through the admin endpoint, in seconds and without editing a file. Each room's overrides
//! sit in a [`RoomCell`] that lives as long as the process (rooms rebuilt by a reload find the
//! same cell by name), so the request path reads a few atomics and never a file. The whole set
//! is kept in `[admin] state_file` as JSON, written atomically (a temporary file, fsync, rename),
//! and read back at startup: the overrides survive reloads and restarts.
//!
//! `admit` is different: it is a grant of N admissions, kept as two counters in the room's store
//! (granted and used), so in a cluster every node sees it and takes from it. A grant that nobody
//! takes lapses after [`GRANT_TTL_SECS`]. Grants are not written to the state file: they are a
//! momentary action, and a restart of a single node forgets the ones not used yet.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use serde::{Deserialize, Serialize};

use crate::store::{CounterKey, CounterKind, CounterStore};
use crate::time::Timestamp;

/// Longest notice, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 500;
/// Most admissions one `admit` may grant.
pub(crate) const MAX_ADMIT: u64 = 100_000;
/// How long an `admit` grant may wait to be taken.
pub(crate) const GRANT_TTL_SECS: u64 = 600;
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

/// The state file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateDoc {
    pub version: u32,
    #[serde(default)]
    pub rooms: BTreeMap<String, RoomOverrides>,
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

    pub(crate) const LABELS: [&'static str; 8] = [
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

    fn set(&self, o: &RoomOverrides) {
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
    fn grant_made(&self) {
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
pub(crate) fn grants_left(store: &dyn CounterStore, scope: &str, now: Timestamp) -> u64 {
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
fn withdraw_grants(store: &dyn CounterStore, scope: &str, now: Timestamp) {
    for (slot, _, granted) in store.scan(scope, CounterKind::Granted, now) {
        let used_key = grant_key(scope, CounterKind::GrantUsed, slot);
        let used = store.get(&used_key, now);
        if used < granted {
            store.add(&used_key, granted - used, now, grant_expiry(slot));
        }
    }
}

/// Every room's overrides, and where they are kept.
#[derive(Default)]
pub struct Controls {
    cells: Mutex<HashMap<String, Arc<RoomCell>>>,
    doc: Mutex<StateDoc>,
    file: Mutex<Option<PathBuf>>,
}

impl Controls {
    /// The cell of room `name` (the same one for every snapshot).
    pub fn cell(&self, name: &str) -> Arc<RoomCell> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.entry(name.to_owned()).or_default().clone()
    }

    /// Reads the state file at startup, and offers what it holds to the cluster (where a newer
    /// version of a room's overrides wins). A missing file is no override; an unreadable or
    /// invalid one is logged and ignored (vestibule starts with no overrides, and the next action
    /// writes a good file).
    pub fn load(&self, path: &Path, store: &dyn CounterStore) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Some(path.to_path_buf());
        let doc = match std::fs::read(path) {
            Ok(bytes) => match serde_json::from_slice::<StateDoc>(&bytes) {
                Ok(doc) => doc,
                Err(e) => {
                    log::error!(
                        "admin.state_file {}: cannot read operator overrides ({e}); starting with none",
                        path.display()
                    );
                    return;
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                log::error!(
                    "admin.state_file {}: cannot read operator overrides ({e}); starting with none",
                    path.display()
                );
                return;
            }
        };
        for (room, o) in &doc.rooms {
            self.cell(room).set(o);
            publish(store, room, o);
            if !o.is_empty() {
                log::info!(
                    "room {room}: operator overrides restored from {}: {}",
                    path.display(),
                    describe(o)
                );
            }
        }
        *self.doc.lock().unwrap_or_else(|p| p.into_inner()) = doc;
    }

    /// Room `name`'s overrides now.
    pub fn overrides(&self, name: &str) -> RoomOverrides {
        let doc = self.doc.lock().unwrap_or_else(|p| p.into_inner());
        doc.rooms.get(name).cloned().unwrap_or_default()
    }

    /// Applies `action` to room `name` and keeps the result. Returns the room's overrides, and
    /// whether they were written to the state file (the action applies even when they could
    /// not be: pausing a sale must not wait for a disk).
    pub fn apply(
        &self,
        name: &str,
        action: &Action,
        by: &str,
        store: &dyn CounterStore,
        now: Timestamp,
    ) -> (RoomOverrides, Result<(), String>) {
        let stamp = Stamp {
            by: by.to_owned(),
            at: now.rfc3339(),
        };
        let mut doc = self.doc.lock().unwrap_or_else(|p| p.into_inner());
        doc.version = 1;
        let o = doc.rooms.entry(name.to_owned()).or_default();
        o.version = now.millis().max(o.version + 1);
        match action {
            Action::Pause => {
                if o.paused.is_none() {
                    o.paused = Some(stamp);
                }
            }
            Action::Resume => o.paused = None,
            Action::Admit(n) => {
                grant(store, name, *n, now);
                self.cell(name).grant_made();
                o.last_admit = Some(Admitted { count: *n, stamp });
            }
            Action::SetMessage(text) => {
                o.message = Some(Message {
                    text: text.clone(),
                    stamp,
                })
            }
            Action::ClearMessage => o.message = None,
            Action::SetSoldOut => o.sold_out = Some(SoldOut { value: true, stamp }),
            Action::ClearSoldOut => o.sold_out = None,
            Action::ClearOverrides => {
                withdraw_grants(store, name, now);
                *o = RoomOverrides {
                    version: o.version,
                    ..RoomOverrides::default()
                };
            }
        }
        // A room without overrides stays as its version, so that clearing them reaches every
        // node of a cluster too.
        let o = o.clone();
        self.cell(name).set(&o);
        publish(store, name, &o);
        // Without a file opened by `load`, nothing is kept: say so, rather than claim the
        // overrides survive a restart that would forget them.
        let written = match &*self.file.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(path) => write_atomically(path, &doc),
            None => Err("no state file is open ([admin] state_file is read at startup)".into()),
        };
        (o, written)
    }

    /// Takes in the overrides other nodes published (actions reach every node within
    /// one sync interval): a room's newer version replaces this node's, and is kept in the
    /// state file as if it had been taken here.
    pub(crate) fn adopt(&self, incoming: Vec<(String, u64, String)>) {
        if incoming.is_empty() {
            return;
        }
        let mut doc = self.doc.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = false;
        for (room, version, json) in incoming {
            let o = match serde_json::from_str::<RoomOverrides>(&json) {
                Ok(o) if o.version == version => o,
                Ok(_) | Err(_) => {
                    log::warn!(
                        "room {room}: overrides from the cluster store are not readable; ignored"
                    );
                    continue;
                }
            };
            if doc
                .rooms
                .get(&room)
                .is_some_and(|mine| mine.version >= version)
            {
                continue;
            }
            log::info!(
                "room {room}: operator overrides from another node: {}",
                describe(&o)
            );
            self.cell(&room).set(&o);
            doc.rooms.insert(room, o);
            changed = true;
        }
        if !changed {
            return;
        }
        doc.version = 1;
        if let Some(path) = &*self.file.lock().unwrap_or_else(|p| p.into_inner()) {
            if let Err(e) = write_atomically(path, &doc) {
                log::error!(
                    "operator overrides from the cluster are not kept across a restart: {e}"
                );
            }
        }
    }
}

/// Offers a room's overrides to the other nodes of a cluster.
fn publish(store: &dyn CounterStore, room: &str, o: &RoomOverrides) {
    if let Ok(json) = serde_json::to_string(o) {
        store.publish_overrides(room, o.version, &json);
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

/// Writes `doc` to `path` so that a reader (or a crash) sees the old file or the new one, never
/// a part: a temporary file beside it, synced, then renamed over it.
fn write_atomically(path: &Path, doc: &StateDoc) -> Result<(), String> {
    use std::io::Write;
    let fail = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| fail("cannot create the folder of", e))?;
    }
    let body = serde_json::to_vec_pretty(doc).map_err(|e| format!("cannot encode: {e}"))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail("cannot write", e)
    })
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
    fn actions_change_the_cell_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/overrides.json");
        let store = LocalStore::new();
        let controls = Controls::default();
        controls.load(&path, &store);
        let cell = controls.cell("sale");
        let (o, written) = controls.apply("sale", &Action::Pause, "admin", &store, at(0));
        assert!(written.is_ok());
        assert!(o.paused.is_some() && cell.held().paused);
        let message = Action::SetMessage("Back soon".into());
        controls
            .apply("sale", &message, "admin", &store, at(1))
            .1
            .unwrap();
        controls
            .apply("sale", &Action::SetSoldOut, "admin", &store, at(2))
            .1
            .unwrap();
        assert_eq!(cell.held().sold_out, Some(true));
        assert_eq!(
            cell.message().as_deref().map(String::as_str),
            Some("Back soon")
        );

        // Another process reads the same overrides back.
        let again = Controls::default();
        again.load(&path, &store);
        assert_eq!(again.overrides("sale"), controls.overrides("sale"));
        let held = again.cell("sale").held();
        assert!(held.paused && held.sold_out == Some(true));

        controls
            .apply("sale", &Action::Admit(5), "admin", &store, at(3))
            .1
            .unwrap();
        let (o, _) = controls.apply("sale", &Action::ClearOverrides, "admin", &store, at(4));
        assert!(o.is_empty());
        assert_eq!(cell.held(), Held::default());
        assert!(cell.message().is_none());
        assert_eq!(grants_left(&store, "sale", at(5)), 0);
        let saved: StateDoc = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(saved.rooms["sale"].is_empty() && saved.rooms["sale"].version > 0);
    }

    #[test]
    fn without_a_state_file_nothing_is_said_to_be_kept() {
        let store = LocalStore::new();
        let controls = Controls::default();
        let (o, written) = controls.apply("sale", &Action::Pause, "admin", &store, at(0));
        // The action applies, but it would not survive a restart, and the answer says so.
        assert!(o.paused.is_some() && controls.cell("sale").held().paused);
        assert!(written.unwrap_err().contains("no state file"));
    }

    #[test]
    fn a_broken_state_file_means_no_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        std::fs::write(&path, b"{not json").unwrap();
        let store = LocalStore::new();
        let controls = Controls::default();
        controls.load(&path, &store);
        assert_eq!(controls.cell("sale").held(), Held::default());
        // The next action writes a good file over it.
        let (_, written) = controls.apply("sale", &Action::Pause, "admin", &store, at(0));
        assert!(written.is_ok());
        let doc: StateDoc = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(doc.rooms["sale"].paused.is_some());
    }
}
