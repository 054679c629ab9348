//! Operator actions: runtime overrides on top of the config file.
//!
//! An operator pauses a room, lets a few more people in, posts a notice or declares a sale sold
//! out through the admin endpoint, in seconds and without editing a file. Each room's overrides
//! sit in a [`RoomCell`] that lives as long as the process (rooms rebuilt by a reload find the
//! same cell by name), so the request path reads a few atomics and never a file. The whole set
//! is kept in `[admin] state_file` as JSON, written atomically (a temporary file, fsync, rename),
//! and read back at startup: the overrides survive reloads and restarts.
//!
//! The pace override is kept like the others, with its end (`until`) as a time: once that has
//! passed, the cell stops applying it by itself, and `/status` leaves it out.
//!
//! `admit` is different: it is a grant of N admissions, kept as two counters in the room's store
//! (granted and used), so in a cluster every node sees it and takes from it. A grant that nobody
//! takes lapses after [`cell::GRANT_TTL_SECS`]. Grants are not written to the state file: they are a
//! momentary action, and a restart of a single node forgets the ones not used yet.
//!
//! The pure part (the cell, the overrides, the actions and the grants) is [`cell`]; this module
//! adds [`Controls`], which keeps every room's cell and persists the overrides.

pub use vestibule_core::controls as cell;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use cell::withdraw_grants;
pub use cell::{
    check_message, describe, grant, parse_pace, Action, Admitted, Held, Message, Pace, PaceKey,
    PaceSet, RoomCell, RoomOverrides, SoldOut, Stamp,
};
pub(crate) use cell::{grants_left, MAX_ADMIT};

use crate::store::CounterStore;
use crate::time::Timestamp;

/// The state file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateDoc {
    pub version: u32,
    #[serde(default)]
    pub rooms: BTreeMap<String, RoomOverrides>,
}

/// Every room's overrides, and where they are kept.
#[derive(Default)]
pub struct Controls {
    cells: Mutex<HashMap<String, Arc<RoomCell>>>,
    doc: Mutex<StateDoc>,
    file: Mutex<Option<PathBuf>>,
    /// The newest overrides taken in from other nodes, newest last (for the console).
    adopted: Mutex<std::collections::VecDeque<serde_json::Value>>,
}

/// How many overrides from other nodes the console is shown.
const ADOPTED_KEPT: usize = 50;

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
            Action::SetPace(set) => o.pace = Some(set.at(stamp, now)),
            Action::ClearOverrides => {
                withdraw_grants(store, name, now);
                *o = RoomOverrides {
                    version: o.version,
                    ..RoomOverrides::default()
                };
            }
        }
        // A pace override that has lapsed goes with the next action.
        *o = std::mem::take(o).in_force(now);
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
            {
                let mut adopted = self.adopted.lock().unwrap_or_else(|p| p.into_inner());
                if adopted.len() >= ADOPTED_KEPT {
                    adopted.pop_front();
                }
                let newest = newest_stamp(&o);
                adopted.push_back(serde_json::json!({
                    "room": room,
                    "by": newest.map(|s| s.by.clone()),
                    "at": newest.map(|s| s.at.clone()),
                    "summary": describe(&o),
                }));
            }
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

/// The overrides taken in from other nodes of a cluster, newest first: what reached this
/// node through the override sync rather than by an action here.
impl Controls {
    pub fn adopted(&self) -> Vec<serde_json::Value> {
        let adopted = self.adopted.lock().unwrap_or_else(|p| p.into_inner());
        adopted.iter().rev().cloned().collect()
    }
}

/// The newest stamp of `o` (who acted last, and when).
fn newest_stamp(o: &RoomOverrides) -> Option<&crate::controls::Stamp> {
    [
        o.paused.as_ref(),
        o.sold_out.as_ref().map(|s| &s.stamp),
        o.message.as_ref().map(|m| &m.stamp),
        o.last_admit.as_ref().map(|a| &a.stamp),
        o.pace.as_ref().map(|p| &p.stamp),
    ]
    .into_iter()
    .flatten()
    .max_by(|a, b| a.at.cmp(&b.at))
}

/// Offers a room's overrides to the other nodes of a cluster.
fn publish(store: &dyn CounterStore, room: &str, o: &RoomOverrides) {
    if let Ok(json) = serde_json::to_string(o) {
        store.publish_overrides(room, o.version, &json);
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

    #[test]
    fn a_pace_override_is_kept_reaches_other_nodes_and_is_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        let store = LocalStore::new();
        let controls = Controls::default();
        controls.load(&path, &store);
        let set = parse_pace(
            br#"{"new_users_per_minute": 40, "for": "30m"}"#,
            PaceKey::NewUsersPerMinute,
        )
        .unwrap();
        let (o, written) = controls.apply("sale", &Action::SetPace(set), "admin", &store, at(0));
        assert!(written.is_ok());
        let pace = o.pace.as_ref().unwrap();
        assert_eq!(pace.new_users_per_minute, Some(40));
        assert_eq!(pace.until(), Some(at(1800)));
        assert_eq!(controls.cell("sale").pace(at(1)), Some(40.0));

        // A restart reads it back.
        let again = Controls::default();
        again.load(&path, &store);
        assert_eq!(again.cell("sale").pace(at(1)), Some(40.0));
        assert_eq!(again.cell("sale").pace(at(1800)), None);

        // Another node takes it in as published.
        let other = Controls::default();
        let json = serde_json::to_string(&o).unwrap();
        other.adopt(vec![("sale".into(), o.version, json)]);
        assert_eq!(other.cell("sale").pace(at(1)), Some(40.0));

        // Another action after it lapsed leaves it out.
        let (o, _) = controls.apply("sale", &Action::Pause, "admin", &store, at(1800));
        assert!(o.pace.is_none() && o.paused.is_some());
        let set = parse_pace(br#"{"allow_percentage": 5}"#, PaceKey::AllowPercentage).unwrap();
        let (o, _) = controls.apply("sale", &Action::SetPace(set), "admin", &store, at(1801));
        assert_eq!(o.pace.and_then(|p| p.allow_percentage), Some(5.0));
        let (o, _) = controls.apply("sale", &Action::ClearOverrides, "admin", &store, at(1802));
        assert!(o.pace.is_none() && o.is_empty());
        assert_eq!(controls.cell("sale").pace(at(1803)), None);
    }
}
