//! Verifiable draws at the edge (the draw itself is [`vestibule_core::room::draw`]): the
//! single node's draw secret, kept in the state folder; the published draw at
//! `{api_prefix}/rooms/<room>/draws/<event>`; and what the pre-queue page shows of it.
//!
//! A cluster's draw secret comes from the store (its shared key seed), so only a node without
//! a shared store keeps a file: `draw-secret` next to `[admin] state_file`, 64 hex digits
//! written once (mode 0600) and read at every start and reload. Losing it changes the
//! commitment of a pre-queue that is open: the docs say to keep the state folder.

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
use vestibule_core::room::draw::Draw;

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
            write_new(path, &hex::encode(secret))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(secret)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `text` to a new file at `path`, readable by its owner only, and syncs it. Another
/// process that made the file first wins: its secret is read instead.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
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
    let Some(phase) = room.event_now(now) else {
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
    let finder = memchr::memmem::Finder::new(RECEIPT_MARK);
    let mut out = Vec::with_capacity(page.len() + 2 * receipt.len());
    let mut rest = &page[..];
    while let Some(at) = finder.find(rest) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(receipt.as_bytes());
        rest = &rest[at + RECEIPT_MARK.len()..];
    }
    out.extend_from_slice(rest);
    Bytes::from(out)
}

/// How long a published reveal is served from memory before it is made again (receipts of
/// visitors who check in late still join it).
const REVEAL_TTL_MS: u64 = 5_000;

/// Reveals made lately, by room, event and pre-queue start: the receipts' places are
/// computed once per [`REVEAL_TTL_MS`], however many ask.
static REVEALS: Mutex<Option<Reveals>> = Mutex::new(None);

/// (room, event, pre-queue start) → (when made, Unix ms; the JSON).
type Reveals = HashMap<(String, String, u64), (u64, Bytes)>;

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
    if revealed {
        let mut cache = REVEALS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, body)) = cache.get_or_insert_with(HashMap::new).get(&key) {
            if now.millis().saturating_sub(*at) < REVEAL_TTL_MS {
                return (200, body.clone());
            }
        }
    }
    let body = Bytes::from(document(r, e, &draw, state, now).to_string());
    if revealed {
        let mut cache = REVEALS.lock().unwrap_or_else(|p| p.into_inner());
        let cache = cache.get_or_insert_with(HashMap::new);
        cache.retain(|_, (at, _)| now.millis().saturating_sub(*at) < REVEAL_TTL_MS);
        cache.insert(key, (now.millis(), body.clone()));
    }
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
            let reveal = draw.reveal(room.receipts(e, now));
            doc["commitment"] = json!(reveal.commitment);
            doc["seed"] = json!(reveal.seed);
            doc["receipts"] = json!(reveal.receipts);
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
