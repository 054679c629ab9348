//! The audit log (`[admin] audit_file`): one JSON line per operator action, appended and
//! fsynced before the action's answer is sent, never rewritten.
//!
//! A record is `{"time", "operator", "source", "via", "room", "action", "args", "before",
//! "after"}`. It never holds a secret: tokens are neither arguments nor overrides.
//!
//! Rotation: the file is opened for appending by path, and before each record the open file is
//! compared with what the path names now (device and inode). When logrotate (or anyone) has
//! renamed it away, the next record goes to a fresh file at the path. So rotate by renaming
//! (logrotate's default `create` mode); `copytruncate` would lose records written between its
//! copy and its truncation, and is wrong for this file.
//!
//! `GET /audit` reads the newest records back from the end of the current file (at most the last
//! [`TAIL_BYTES`]), so a long file costs a bounded read.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

/// The most of the file's end `GET /audit` reads.
pub(crate) const TAIL_BYTES: u64 = 4 << 20;
/// The most records `GET /audit` answers with.
pub(crate) const MAX_LIMIT: usize = 1000;

/// One operator action, as the audit log keeps it.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub operator: String,
    /// The address the request came from.
    pub source: String,
    /// `console`, `ctl` or `api`.
    pub via: &'static str,
    pub room: String,
    pub action: String,
    pub args: Value,
    pub before: Value,
    pub after: Value,
}

impl Record {
    /// The record as the audit log writes it (and the `operator.action` event carries it).
    pub fn line(&self, time: &str) -> Value {
        json!({
            "time": time,
            "operator": self.operator,
            "source": self.source,
            "via": self.via,
            "room": self.room,
            "action": self.action,
            "args": self.args,
            "before": self.before,
            "after": self.after,
        })
    }
}

struct Open {
    path: PathBuf,
    file: File,
    id: (u64, u64),
}

/// The audit log's writer, and the newest records it wrote or read (for the console).
#[derive(Default)]
pub(crate) struct Audit {
    open: Mutex<Option<Open>>,
    /// The file they came from, and the newest records, newest last.
    recent: Mutex<Option<(PathBuf, std::collections::VecDeque<Value>)>>,
}

/// How many of the newest records are kept in memory.
const RECENT: usize = 50;

#[cfg(unix)]
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn file_id(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl Audit {
    /// Appends `record` at `time` (RFC 3339) to the file at `path`, and fsyncs it. The line as
    /// written comes back.
    pub fn append(&self, path: &Path, time: &str, record: &Record) -> Result<Value, String> {
        let line = record.line(time);
        let mut text = serde_json::to_vec(&line).map_err(|e| e.to_string())?;
        text.push(b'\n');
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let current = std::fs::metadata(path).ok().map(|m| file_id(&m));
        let reopen = match &*open {
            Some(o) => o.path != path || current != Some(o.id),
            None => true,
        };
        if reopen {
            *open = None;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            // A new file's name survives a crash only once its folder is synced too.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
            }
            // A crash mid-record left a torn line: end it, so this record starts a line.
            if torn(&mut file) {
                file.write_all(b"\n")
                    .map_err(|e| format!("cannot append to {}: {e}", path.display()))?;
            }
            let id = file
                .metadata()
                .map(|m| file_id(&m))
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            *open = Some(Open {
                path: path.to_owned(),
                file,
                id,
            });
        }
        let Some(o) = open.as_mut() else {
            return Err("the audit file is not open".into());
        };
        let written = o.file.write_all(&text).and_then(|()| o.file.sync_data());
        if let Err(e) = written {
            // Opened afresh next time: a disk that filled up may have room again.
            *open = None;
            return Err(format!("cannot append to {}: {e}", path.display()));
        }
        drop(open);
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, records)) = recent.as_mut().filter(|(p, _)| p == path) {
            if records.len() >= RECENT {
                records.pop_front();
            }
            records.push_back(line.clone());
        }
        Ok(line)
    }

    /// The newest `n` records (at most [`RECENT`]) of the file at `path`, newest first: read
    /// from the file once, then kept as they are appended.
    pub fn recent(&self, path: &Path, n: usize) -> Vec<Value> {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.as_ref().is_none_or(|(p, _)| p != path) {
            let mut records = newest(path, None, RECENT).unwrap_or_default();
            records.reverse();
            *recent = Some((path.to_owned(), records.into()));
        }
        recent
            .as_ref()
            .map(|(_, r)| r.iter().rev().take(n).cloned().collect())
            .unwrap_or_default()
    }
}

/// Whether the file does not end with a line break.
fn torn(file: &mut File) -> bool {
    let mut last = [0u8; 1];
    match file.metadata() {
        Ok(m) if m.len() > 0 => {
            file.seek(SeekFrom::End(-1)).is_ok()
                && file.read_exact(&mut last).is_ok()
                && last[0] != b'\n'
        }
        _ => false,
    }
}

/// The newest records of the file at `path`, newest first: at most `limit`, of `room` when
/// given. Lines that are not records (a torn last line after a crash) are skipped.
pub(crate) fn newest(path: &Path, room: Option<&str>, limit: usize) -> Result<Vec<Value>, String> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
    };
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut tail = Vec::with_capacity((len - start) as usize);
    file.take(TAIL_BYTES)
        .read_to_end(&mut tail)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // Reading from the middle of the file: the first line may be a part.
    let lines = tail.split(|b| *b == b'\n');
    let mut out: Vec<Value> = lines
        .skip(usize::from(start > 0))
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .filter(|v| v.is_object())
        .filter(|v| room.is_none_or(|r| v.get("room").and_then(Value::as_str) == Some(r)))
        .collect();
    out.reverse();
    out.truncate(limit);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(room: &str, action: &str) -> Record {
        Record {
            operator: "alice".into(),
            source: "127.0.0.1".into(),
            via: "console",
            room: room.into(),
            action: action.into(),
            args: json!({}),
            before: json!({}),
            after: json!({"paused": true}),
        }
    }

    #[test]
    fn records_are_appended_and_read_back_newest_first_by_room() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/audit.jsonl");
        let audit = Audit::default();
        audit
            .append(&path, "2026-11-27T10:00:00Z", &record("sale", "pause"))
            .unwrap();
        audit
            .append(&path, "2026-11-27T10:01:00Z", &record("other", "pause"))
            .unwrap();
        audit
            .append(&path, "2026-11-27T10:02:00Z", &record("sale", "resume"))
            .unwrap();
        let all = newest(&path, None, 100).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0]["action"], "resume");
        let sale = newest(&path, Some("sale"), 1).unwrap();
        assert_eq!(sale.len(), 1);
        assert_eq!(sale[0]["action"], "resume");
        assert_eq!(sale[0]["operator"], "alice");
        assert_eq!(sale[0]["after"]["paused"], true);
    }

    #[test]
    fn a_rotated_file_is_followed_by_a_fresh_one_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = Audit::default();
        audit
            .append(&path, "2026-11-27T10:00:00Z", &record("sale", "pause"))
            .unwrap();
        std::fs::rename(&path, dir.path().join("audit.jsonl.1")).unwrap();
        audit
            .append(&path, "2026-11-27T10:01:00Z", &record("sale", "resume"))
            .unwrap();
        let now = newest(&path, None, 100).unwrap();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0]["action"], "resume");
        let old = newest(&dir.path().join("audit.jsonl.1"), None, 100).unwrap();
        assert_eq!(old[0]["action"], "pause");

        // A crash mid-line leaves a torn record: it is skipped, the next one is whole.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"time\":\"2026-11-27T10:0").unwrap();
        drop(f);
        let read = newest(&path, None, 100).unwrap();
        assert_eq!(read.len(), 1);
        let audit = Audit::default();
        audit
            .append(&path, "2026-11-27T10:02:00Z", &record("sale", "pause"))
            .unwrap();
        let read = newest(&path, None, 100).unwrap();
        assert_eq!(read.len(), 2, "the record after a torn line is whole");
        assert_eq!(read[0]["action"], "pause");
        // The newest records, read once, then kept as appended.
        assert_eq!(audit.recent(&path, 10).len(), 2);
        audit
            .append(&path, "2026-11-27T10:03:00Z", &record("sale", "resume"))
            .unwrap();
        let recent = audit.recent(&path, 2);
        assert_eq!(recent.len(), 2);
        assert_eq!(recent[0]["action"], "resume");
        assert_eq!(recent[1]["action"], "pause");
        assert!(newest(&dir.path().join("missing"), None, 10)
            .unwrap()
            .is_empty());
    }
}
