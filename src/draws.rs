//! Verifiable draws at the edge (the draw itself is [`vestibule_core::room::draw`]): the
//! single node's draw secret, kept in the state folder; the published draw at
//! `{api_prefix}/rooms/<room>/draws/<event>`; and what the pre-queue page shows of it.
//!
//! A cluster's draw secret comes from the store (its shared key seed), so only a node without
//! a shared store keeps a file: `draw-secret` next to `[admin] state_file`, 64 hex digits
//! written once (mode 0600) and read at every start and reload. Losing it changes the
//! commitment of a pre-queue that is open: the docs say to keep the state folder.
//!
//! A single node's receipts live in its in-process store, so [`Kept`] also writes them down:
//! `draws/<room>.<event>.<prequeue start>.receipts` next to the state file, one receipt per
//! line, appended and synced every second, read back at the next start. A crash loses at most
//! the last second's new receipts, and those come back when their holders next ask.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::{json, Value};

use crate::config::{Config, EventConfig};
use crate::pages::PageContext;
use crate::room::event::EventState;
use crate::room::{Outcome, Room};
use crate::store::CounterStore;
use crate::time::Timestamp;
use vestibule_core::room::draw::{Draw, REVEAL_KEPT_SECS};

/// Where a single node keeps its draw secret: next to the state file.
pub fn secret_path(config: &Config) -> PathBuf {
    let state = &config.admin.state_file;
    state.parent().unwrap_or(Path::new(".")).join("draw-secret")
}

/// Reads the draw secret at `path`, or makes one there if there is none.
pub fn load_or_create(path: &Path) -> Result<[u8; 32], String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mut secret = [0u8; 32];
            hex::decode_to_slice(text.trim(), &mut secret).map_err(|_| {
                format!(
                    "{}: not 64 hex digits (a draw secret); remove it only if no pre-queue with \
                     a verifiable draw is open",
                    path.display()
                )
            })?;
            Ok(secret)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use rand::RngCore;
            let mut secret = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut secret);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            match write_new(path, &hex::encode(secret)) {
                Ok(()) => Ok(secret),
                // Another process made it first: theirs is the secret.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create(path),
                Err(e) => Err(format!("{}: {e}", path.display())),
            }
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `text` to a new file at `path`, readable by its owner only: whole or not at all (a
/// synced file beside it, linked in place). `AlreadyExists` when another process made it first.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("new.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&tmp).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    linked?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all())?;
    }
    Ok(())
}

/// Gives an in-process store its draw secret, once a room has a verifiable draw: read from the
/// state folder, made there the first time. When the folder cannot be used, the secret lives
/// in memory (logged: a restart then changes the commitment of an open pre-queue).
pub fn keep_secret(config: &Config, store: &dyn CounterStore, shared: bool) {
    let wanted = config
        .rooms
        .iter()
        .any(|r| r.events.iter().any(EventConfig::verifiable));
    if shared || !wanted || store.draw_secret().is_some() {
        return;
    }
    let path = secret_path(config);
    let secret = load_or_create(&path).unwrap_or_else(|e| {
        log::error!(
            "draw secret: {e}; verifiable draws use a secret in memory until the next start, \
             which changes the commitment of any open pre-queue"
        );
        use rand::RngCore;
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        secret
    });
    store.set_draw_secret(secret);
}

/// A single node's receipts, written down in the state folder (see the module doc).
#[derive(Default)]
pub struct Kept {
    /// Per draw: how many of its receipts the file holds, and whether the last write failed.
    written: Mutex<HashMap<String, (usize, bool)>>,
}

impl Kept {
    /// Reads back the files of draws not read yet, and appends the receipts handed out since
    /// the last call. Only for a store of this process (`shared`: nothing to do).
    pub fn sync(&self, config: &Config, store: &dyn CounterStore, shared: bool, now: Timestamp) {
        if shared {
            return;
        }
        let dir = secret_path(config).with_file_name("draws");
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        for room in &config.rooms {
            for e in room.events.iter().filter(|e| e.verifiable()) {
                if now.secs() >= e.end.saturating_add(REVEAL_KEPT_SECS) {
                    continue;
                }
                let scope = vestibule_core::room::draw::scope(&room.name, e);
                let path = dir.join(file_name(&room.name, e));
                let until = Timestamp::from_secs(e.end.saturating_add(REVEAL_KEPT_SECS));
                let entry = written.entry(scope.clone()).or_insert_with(|| {
                    read_back(&path, store, &scope, until, now);
                    (store.receipts(&scope, 0, now).total, false)
                });
                let new = store.receipts(&scope, entry.0, now).ids;
                if new.is_empty() {
                    continue;
                }
                match append(&path, &new) {
                    Ok(()) => {
                        if entry.1 {
                            log::info!("draw receipts: {} is written again", path.display());
                        }
                        *entry = (entry.0 + new.len(), false);
                    }
                    Err(e) => {
                        if !entry.1 {
                            log::error!(
                                "draw receipts: {}: {e}; they are kept in memory and written \
                                 once the folder can be",
                                path.display()
                            );
                        }
                        entry.1 = true;
                    }
                }
            }
        }
    }
}

/// The file of `room`'s `event`'s receipts (names are letters, digits, `_`, `-` and `.`).
fn file_name(room: &str, e: &EventConfig) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{}.{}.{}.receipts", clean(room), clean(&e.name), e.opens())
}

/// Notes every whole receipt line of `path` in `store` (a torn last line is skipped).
fn read_back(path: &Path, store: &dyn CounterStore, scope: &str, until: Timestamp, now: Timestamp) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let mut skipped = 0;
    for line in text.lines() {
        match vestibule_core::room::draw::Receipt::parse(line) {
            Some(r) => {
                store.note_receipt(scope, r.0, until, now);
            }
            None => skipped += 1,
        }
    }
    if skipped > 0 {
        log::warn!(
            "draw receipts: {}: skipped {skipped} unreadable lines",
            path.display()
        );
    }
}

/// Appends `ids` to `path`, one receipt per line, and syncs the file.
fn append(path: &Path, ids: &[u64]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = String::with_capacity(ids.len() * 20);
    for id in ids {
        text.push_str(&vestibule_core::room::draw::Receipt(*id).text());
        text.push('\n');
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_data()
}

/// What a reload does to verifiable draws whose pre-queue is open (or whose event runs): a
/// draw is named by its room, its event's name and `prequeue_start`, so renaming the event,
/// moving its pre-queue or turning the draw off leaves a published commitment behind. Each is
/// logged as a warning (the reload still applies: the file is the operator's).
pub fn changes(old: &Config, new: &Config, now: Timestamp) -> Vec<String> {
    let mut out = Vec::new();
    for room in &old.rooms {
        for e in room.events.iter().filter(|e| e.verifiable()) {
            if !matches!(
                EventState::of(e, now),
                EventState::PreQueue | EventState::Running
            ) {
                continue;
            }
            let kept = new
                .rooms
                .iter()
                .find(|r| r.name == room.name)
                .and_then(|r| r.events.iter().find(|n| n.name == e.name))
                .is_some_and(|n| n.verifiable() && n.prequeue_start == e.prequeue_start);
            if !kept {
                out.push(format!(
                    "room {} event {}: this edit ends the verifiable draw whose commitment was \
                     published when its pre-queue opened (renamed, its prequeue_start moved, or \
                     the draw turned off); a new draw, if any, has a new commitment",
                    room.name, e.name
                ));
            }
        }
    }
    out
}

/// The URL a room's event's draw is published at.
pub fn url(api_prefix: &str, room: &str, event: &str) -> String {
    format!("{api_prefix}/rooms/{room}/draws/{event}")
}

/// Puts the draw on a pre-queue page: the commitment, where to check it, and the visitor's
/// receipt (as [`RECEIPT_MARK`], which [`splice_receipt`] replaces with theirs).
pub(crate) fn on_page(
    page: &mut PageContext<'_>,
    room: &Room,
    outcome: &Outcome,
    api_prefix: &str,
    now: Timestamp,
) {
    let Some(phase) = room
        .event_now(now)
        .filter(|p| p.state == EventState::PreQueue)
    else {
        return;
    };
    let Some(draw) = room.draw(phase.event) else {
        return;
    };
    page.draw_commitment = Some(draw.commitment());
    page.draw_url = Some(url(api_prefix, room.name(), &phase.event.name));
    if outcome.receipt.is_some() {
        page.receipt = RECEIPT_MARK;
    }
}

/// What a cached pre-queue page holds where the visitor's receipt goes.
pub const RECEIPT_MARK: &str = "@@vestibule-receipt@@";

/// `page` with the visitor's receipt in place of [`RECEIPT_MARK`].
pub(crate) fn splice_receipt(page: &Bytes, receipt: &str) -> Bytes {
    crate::pages::splice(page, RECEIPT_MARK, receipt)
}

/// How long a published reveal is served from memory before it is made again (receipts of
/// visitors who check in late still join it).
const REVEAL_TTL_MS: u64 = 5_000;

/// Reveals made lately, by room, event and pre-queue start: the receipts' places are
/// computed once per [`REVEAL_TTL_MS`], by one request at a time, however many ask.
static REVEALS: Mutex<Option<HashMap<DrawKey, Made>>> = Mutex::new(None);

/// A draw: its room, its event and its pre-queue's start.
type DrawKey = (String, String, u64);

/// One draw's reveal: the last made, and whether a request is making the next.
#[derive(Default)]
struct Made {
    /// When it was made (Unix ms), and the JSON.
    last: Option<(u64, Bytes)>,
    making: bool,
}

/// The answer to `GET {api_prefix}/rooms/<room>/draws/<event>`: status and JSON body.
pub(crate) fn published(
    rooms: &crate::room::RoomSet,
    room: &str,
    event: &str,
    now: Timestamp,
) -> (u16, Bytes) {
    let error = |status: u16, code: &str, message: &str| {
        (
            status,
            Bytes::from(json!({ "error": code, "message": message }).to_string()),
        )
    };
    let Some(r) = rooms.iter().find(|r| r.name() == room) else {
        return error(404, "unknown_room", "no room of that name");
    };
    let Some(e) = r.config.events.iter().find(|e| e.name == event) else {
        return error(404, "unknown_event", "this room has no event of that name");
    };
    if !e.verifiable() {
        return error(
            404,
            "no_verifiable_draw",
            "this event's draw is not verifiable (draw = \"verifiable\")",
        );
    }
    let Some(draw) = r.draw(e) else {
        return error(
            503,
            "unavailable",
            "the draw is not fixed yet (a cluster node before its first sync)",
        );
    };
    let state = EventState::of(e, now);
    let key = (room.to_owned(), event.to_owned(), e.opens());
    let revealed = matches!(state, EventState::Running | EventState::Ended);
    if !revealed {
        return (
            200,
            Bytes::from(document(r, e, &draw, state, now).to_string()),
        );
    }
    {
        let mut cache = REVEALS.lock().unwrap_or_else(|p| p.into_inner());
        let made = cache
            .get_or_insert_with(HashMap::new)
            .entry(key.clone())
            .or_default();
        match &made.last {
            Some((at, body)) if now.millis().saturating_sub(*at) < REVEAL_TTL_MS => {
                return (200, body.clone());
            }
            // Another request is making the next: the last one meanwhile.
            Some((_, body)) if made.making => return (200, body.clone()),
            None if made.making => {
                return error(
                    503,
                    "unavailable",
                    "the reveal is being made; ask again in a second",
                )
            }
            _ => made.making = true,
        }
    }
    let body = Bytes::from(document(r, e, &draw, state, now).to_string());
    let mut cache = REVEALS.lock().unwrap_or_else(|p| p.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    // Draws whose event left the config are forgotten.
    cache.retain(|(room, event, _), _| {
        rooms
            .iter()
            .any(|r| r.name() == room && r.config.events.iter().any(|e| e.name == *event))
    });
    cache.insert(
        key,
        Made {
            last: Some((now.millis(), body.clone())),
            making: false,
        },
    );
    (200, body)
}

/// The published draw: before the pre-queue opens, only what it will be; from then on the
/// commitment; from the start the seed and every receipt with its place.
fn document(room: &Room, e: &EventConfig, draw: &Draw, state: EventState, now: Timestamp) -> Value {
    let rfc3339 = crate::config::event::rfc3339;
    let mut doc = json!({
        "room": room.name(),
        "event": e.name,
        "state": state.as_str(),
        "prequeue_starts_at": e.prequeue_start.map(rfc3339),
        "starts_at": rfc3339(e.start),
        "commitment": null,
        "seed": null,
        "how_to_check": "commitment = SHA-256(seed bytes) as hex; each receipt's place = \
                         HMAC-SHA256(key = seed bytes, message = the receipt's UTF-8) as hex; \
                         lower places go first",
    });
    match state {
        EventState::Scheduled => {}
        EventState::PreQueue => doc["commitment"] = json!(draw.commitment()),
        EventState::Running | EventState::Ended => {
            let (receipts, left_out) = room.receipts(e, now);
            let reveal = draw.reveal(receipts);
            doc["commitment"] = json!(reveal.commitment);
            doc["seed"] = json!(reveal.seed);
            doc["receipts"] = json!(reveal.receipts);
            doc["receipts_left_out"] = json!(left_out);
        }
    }
    doc
}

/// The draw of `room`'s event in force for `/status`: its kind and, once the pre-queue is
/// open, its commitment.
pub(crate) fn status(room: &Room, e: &EventConfig, api_prefix: &str, now: Timestamp) -> Value {
    if !e.verifiable() {
        return json!({ "kind": "keyed" });
    }
    let open = !matches!(EventState::of(e, now), EventState::Scheduled);
    json!({
        "kind": "verifiable",
        "commitment": room.draw(e).filter(|_| open).map(|d| d.commitment()),
        "url": url(api_prefix, room.name(), &e.name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_made_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/draw-secret");
        let a = load_or_create(&path).unwrap();
        assert_eq!(load_or_create(&path).unwrap(), a);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not hex").unwrap();
        let e = load_or_create(&path).unwrap_err();
        assert!(e.contains("not 64 hex digits"), "{e}");
    }

    #[test]
    fn receipts_are_spliced_into_a_cached_page() {
        let page = Bytes::from(format!("<p>{RECEIPT_MARK}</p><i>{RECEIPT_MARK}</i>"));
        assert_eq!(
            splice_receipt(&page, "0123-4567-89ab-cdef"),
            Bytes::from("<p>0123-4567-89ab-cdef</p><i>0123-4567-89ab-cdef</i>")
        );
    }
}
