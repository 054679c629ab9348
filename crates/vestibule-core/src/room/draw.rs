//! Verifiable draws (`draw = "verifiable"`): a pre-queue's order that anyone can check after
//! the start.
//!
//! The keyed draw ([`super::event::draw`]) orders pre-queued visitors by a hash only the
//! operator can compute: nobody can game it, but nobody can check it either. A verifiable draw
//! commits first and reveals after:
//!
//! - **The seed.** Each event's draw has a 32-byte seed, `HMAC-SHA256(draw secret, "vestibule
//!   draw seed v1" ‖ room ‖ event name ‖ prequeue_start)`. The draw secret is random, made once
//!   and kept: in a cluster it comes from the store's shared key seed (so every node has the
//!   same, from its first sync on, across restarts), on a single node from a file in the state
//!   folder. The seed is therefore fixed before the pre-queue opens and the same on every node;
//!   only its commitment, `sha256(seed)`, is published until the start.
//! - **Receipts.** Each pre-queued identity gets one receipt per event: 16 hex digits in four
//!   groups, `HMAC-SHA256(draw secret, "vestibule draw receipt v1" ‖ room ‖ event ‖ identity)`
//!   cut to 64 bits. The same identity always gets the same receipt (a refresh, a second tab);
//!   the identity is the one its wait token carries. A receipt reveals nothing of the identity:
//!   its key is the draw secret, which is never published (only the seed is, after the start).
//! - **Places.** A receipt's place is `HMAC-SHA256(key = seed, message = receipt)` as 64 hex
//!   digits; lower goes first. The room uses its first 64 bits as the visitor's place in the
//!   pre-queue ([`Draw::fraction`]), exactly where the keyed draw's place would go.
//! - **The reveal.** After the start the seed and every receipt handed out, each with its
//!   place, are published; [`verify`] recomputes them all.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::EventConfig;
use crate::identity::Identity;
use crate::store::CounterStore;
use crate::time::Timestamp;

/// How long after an event's end its receipts are remembered, so its draw is still published.
pub const REVEAL_KEPT_SECS: u64 = 86_400;

type HmacSha256 = Hmac<Sha256>;

/// The random secret every draw's seed and receipts are derived from (never published).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DrawSecret(pub [u8; 32]);

impl std::fmt::Debug for DrawSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DrawSecret(..)")
    }
}

impl DrawSecret {
    /// The cluster's draw secret, from the store's shared key seed (distinct from the seed's
    /// other uses by its label).
    pub fn of_key_seed(seed: [u64; 4]) -> DrawSecret {
        let mut bytes = [0u8; 32];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(seed) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        let mut mac = hmac(&bytes);
        mac.update(b"vestibule draw secret v1");
        DrawSecret(mac.finalize().into_bytes().into())
    }

    fn mac(&self, label: &[u8], room: &str, event: &EventConfig) -> HmacSha256 {
        let mut mac = hmac(&self.0);
        mac.update(label);
        mac.update(&[0]);
        mac.update(room.as_bytes());
        mac.update(&[0]);
        mac.update(event.name.as_bytes());
        mac.update(&[0]);
        mac
    }

    /// The draw of `room`'s `event`. Named by the room, the event's name and its
    /// `prequeue_start`: moving the start or the end keeps the draw, a new pre-queue is a new
    /// draw.
    pub fn draw(&self, room: &str, event: &EventConfig) -> Draw {
        let mut mac = self.mac(b"vestibule draw seed v1", room, event);
        mac.update(&event.prequeue_start.unwrap_or(event.start).to_be_bytes());
        Draw {
            seed: mac.finalize().into_bytes().into(),
        }
    }

    /// `uid`'s receipt in `room`'s `event`.
    pub fn receipt(&self, room: &str, event: &EventConfig, uid: &Identity) -> Receipt {
        let mut mac = self.mac(b"vestibule draw receipt v1", room, event);
        mac.update(&event.prequeue_start.unwrap_or(event.start).to_be_bytes());
        mac.update(uid.as_str().as_bytes());
        let out = mac.finalize().into_bytes();
        Receipt(u64::from_be_bytes(out[..8].try_into().unwrap_or_default()))
    }
}

/// The draw secret `store` knows: the one the process set (a single node), else the cluster's
/// (from the shared key seed, after the first sync). `None` until one is known.
pub fn secret_of(store: &dyn CounterStore) -> Option<DrawSecret> {
    store
        .draw_secret()
        .map(DrawSecret)
        .or_else(|| store.key_seed().map(DrawSecret::of_key_seed))
}

/// The store scope of `room`'s `event`'s receipts: the draw's name (room, event, pre-queue).
pub fn scope(room: &str, event: &EventConfig) -> String {
    format!("{room}:draw:{}:{}", event.name, event.opens())
}

/// Hands `uid` their receipt in `room`'s verifiable `event`, remembering it for the reveal, and
/// gives their place as a fraction in [0, 1). `None` while no draw secret is known (a cluster
/// node before its first sync): the visitor gets no receipt yet, and their place is drawn when
/// they come back.
pub(crate) fn hand_out(
    store: &dyn CounterStore,
    room: &str,
    event: &EventConfig,
    uid: &Identity,
    now: Timestamp,
) -> Option<(Receipt, f64)> {
    let secret = secret_of(store)?;
    let receipt = secret.receipt(room, event, uid);
    let until = Timestamp::from_secs(event.end.saturating_add(REVEAL_KEPT_SECS));
    store.note_receipt(&scope(room, event), receipt.0, until, now);
    Some((receipt, secret.draw(room, event).fraction(receipt)))
}

/// Every receipt handed out in `room`'s `event` that `store` knows (a cluster's, once synced),
/// and how many were handed out past the store's bound and are not remembered.
pub fn receipts(
    store: &dyn CounterStore,
    room: &str,
    event: &EventConfig,
    now: Timestamp,
) -> (Vec<Receipt>, u64) {
    let list = store.receipts(&scope(room, event), 0, now);
    (list.ids.into_iter().map(Receipt).collect(), list.left_out)
}

fn hmac(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!())
}

/// A receipt: 64 bits, written as `xxxx-xxxx-xxxx-xxxx` (lowercase hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Receipt(pub u64);

impl Receipt {
    /// The receipt as visitors see it, and as its place's message.
    pub fn text(self) -> String {
        let h = format!("{:016x}", self.0);
        format!("{}-{}-{}-{}", &h[..4], &h[4..8], &h[8..12], &h[12..])
    }

    /// A receipt's text back to the receipt (exactly the form [`Receipt::text`] writes).
    pub fn parse(text: &str) -> Option<Receipt> {
        let b = text.as_bytes();
        if b.len() != 19 {
            return None;
        }
        let mut id = 0u64;
        for (i, &c) in b.iter().enumerate() {
            let digit = match c {
                b'-' if i % 5 == 4 => continue,
                b'0'..=b'9' if i % 5 != 4 => c - b'0',
                b'a'..=b'f' if i % 5 != 4 => c - b'a' + 10,
                _ => return None,
            };
            id = id << 4 | u64::from(digit);
        }
        Some(Receipt(id))
    }
}

/// One event's draw: its seed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    seed: [u8; 32],
}

impl std::fmt::Debug for Draw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Draw({})", self.commitment())
    }
}

impl Draw {
    /// `sha256(seed)` as 64 lowercase hex digits: published from the moment the pre-queue
    /// opens.
    pub fn commitment(&self) -> String {
        hex::encode(Sha256::digest(self.seed))
    }

    /// The seed as 64 lowercase hex digits: published only from the start.
    pub fn seed_hex(&self) -> String {
        hex::encode(self.seed)
    }

    fn place_bytes(&self, receipt: Receipt) -> [u8; 32] {
        let mut mac = hmac(&self.seed);
        mac.update(receipt.text().as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// `receipt`'s place: `HMAC-SHA256(seed, receipt)` as 64 lowercase hex digits.
    pub fn place(&self, receipt: Receipt) -> String {
        hex::encode(self.place_bytes(receipt))
    }

    /// `receipt`'s place as a fraction in [0, 1): its first 64 bits over 2⁶⁴, so lower places
    /// (in hex order) go first.
    pub fn fraction(&self, receipt: Receipt) -> f64 {
        let b = self.place_bytes(receipt);
        let top = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
        // 53 bits keep the order of all but places equal to 53 bits, and stay below 1.
        (top >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The published reveal of `receipts` (sorted by place, lowest first).
    pub fn reveal(&self, receipts: impl IntoIterator<Item = Receipt>) -> Reveal {
        let mut receipts: Vec<Revealed> = receipts
            .into_iter()
            .map(|r| Revealed {
                receipt: r.text(),
                place: self.place(r),
            })
            .collect();
        receipts.sort_by(|a, b| a.place.cmp(&b.place).then(a.receipt.cmp(&b.receipt)));
        receipts.dedup();
        Reveal {
            commitment: self.commitment(),
            seed: self.seed_hex(),
            receipts,
        }
    }
}

/// One receipt and its place, as revealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revealed {
    pub receipt: String,
    pub place: String,
}

/// What a draw publishes after the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reveal {
    pub commitment: String,
    pub seed: String,
    pub receipts: Vec<Revealed>,
}

/// Why a draw does not check out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unverified {
    /// It cannot be read: not JSON, a field missing, or no seed yet (before the start).
    Unreadable(String),
    /// It reads, and the first thing that does not match.
    Mismatch(String),
}

impl std::fmt::Display for Unverified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unverified::Unreadable(why) | Unverified::Mismatch(why) => f.write_str(why),
        }
    }
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    (text.len() == 64 && text.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| hex::decode_to_slice(text, &mut out).ok())
        .flatten()
        .map(|()| out)
}

/// What a checker expects of a published draw besides its own consistency.
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// The commitment published before the start (from the page, `/status` or the draw's URL,
    /// noted then): the revealed one must be it.
    pub commitment: Option<String>,
    /// Receipts that must be listed (a visitor's own).
    pub receipts: Vec<String>,
}

/// A draw that checked out: how many receipts it lists, and where each expected receipt
/// stands (its place and its rank, 0 first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub receipts: usize,
    pub found: Vec<(String, String, usize)>,
}

/// `s` as it may be printed: control characters escaped, at most 80 characters.
fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).flat_map(char::escape_debug).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

/// Checks a published draw (the JSON of its URL after the start): the commitment is the
/// seed's SHA-256 (and the one expected, if given), every receipt is written in its one form
/// and listed once, every place is `HMAC-SHA256(seed, receipt)`, the list is in the order of
/// the places, and every expected receipt is in it.
pub fn verify_with(json: &[u8], expect: &Expect) -> Result<Checked, Unverified> {
    let doc: serde_json::Value = serde_json::from_slice(json)
        .map_err(|e| Unverified::Unreadable(format!("not JSON: {e}")))?;
    let text = |key: &str| -> Result<&str, Unverified> {
        doc.get(key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| Unverified::Unreadable(format!("no \"{key}\" (a string) in the draw")))
    };
    let commitment = text("commitment")?;
    if doc.get("seed").is_none_or(|s| s.is_null()) {
        return Err(Unverified::Unreadable(
            "the draw has no seed yet: it is revealed at the event's start".into(),
        ));
    }
    let seed_text = text("seed")?;
    let seed = hex32(seed_text)
        .ok_or_else(|| Unverified::Unreadable("\"seed\" is not 64 lowercase hex digits".into()))?;
    let receipts = doc
        .get("receipts")
        .and_then(|r| r.as_array())
        .ok_or_else(|| Unverified::Unreadable("no \"receipts\" (a list) in the draw".into()))?;
    let draw = Draw { seed };
    if draw.commitment() != commitment {
        return Err(Unverified::Mismatch(format!(
            "the commitment {} is not sha256(seed) = {}",
            shown(commitment),
            draw.commitment()
        )));
    }
    if let Some(expected) = &expect.commitment {
        if expected.trim() != commitment {
            return Err(Unverified::Mismatch(format!(
                "the revealed commitment {commitment} is not the one published before the start \
                 ({})",
                shown(expected.trim())
            )));
        }
    }
    let mut last: Option<String> = None;
    let mut seen = std::collections::HashSet::with_capacity(receipts.len());
    let mut found = Vec::new();
    for (i, entry) in receipts.iter().enumerate() {
        let field = |key: &str| {
            entry.get(key).and_then(|v| v.as_str()).ok_or_else(|| {
                Unverified::Unreadable(format!("receipts[{i}] has no \"{key}\" (a string)"))
            })
        };
        let receipt_text = field("receipt")?;
        let place = field("place")?;
        let Some(receipt) = Receipt::parse(receipt_text) else {
            return Err(Unverified::Mismatch(format!(
                "receipts[{i}] ({}) is not a receipt (xxxx-xxxx-xxxx-xxxx, lowercase hex)",
                shown(receipt_text)
            )));
        };
        if !seen.insert(receipt) {
            return Err(Unverified::Mismatch(format!(
                "receipts[{i}] ({receipt_text}) is listed twice"
            )));
        }
        let expected = draw.place(receipt);
        if place != expected {
            return Err(Unverified::Mismatch(format!(
                "receipts[{i}] ({receipt_text}): the place {} is not HMAC-SHA256(seed, receipt) \
                 = {expected}",
                shown(place)
            )));
        }
        if last.as_deref().is_some_and(|l| l > place) {
            return Err(Unverified::Mismatch(format!(
                "receipts[{i}] ({receipt_text}) is listed after a higher place: the list is not \
                 in the draw's order"
            )));
        }
        if expect.receipts.iter().any(|r| r.trim() == receipt_text) {
            found.push((receipt_text.to_owned(), expected.clone(), i));
        }
        last = Some(expected);
    }
    if let Some(missing) = expect
        .receipts
        .iter()
        .find(|r| !found.iter().any(|f| f.0 == r.trim()))
    {
        return Err(Unverified::Mismatch(format!(
            "the receipt {} is not in the draw",
            shown(missing.trim())
        )));
    }
    Ok(Checked {
        receipts: receipts.len(),
        found,
    })
}

/// [`verify_with`], expecting nothing more: how many receipts it checked.
pub fn verify(json: &[u8]) -> Result<usize, Unverified> {
    verify_with(json, &Expect::default()).map(|c| c.receipts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EventOverrides;

    fn event(name: &str, prequeue: u64) -> EventConfig {
        EventConfig {
            name: name.into(),
            prequeue_start: Some(prequeue),
            start: prequeue + 600,
            end: prequeue + 3600,
            shuffle_at_start: true,
            draw: crate::config::DrawKind::Verifiable,
            pages: None,
            overrides: EventOverrides::default(),
        }
    }

    fn uid(i: u32) -> Identity {
        Identity::of_ip(std::net::Ipv4Addr::from(0x0a00_0000 + i).into(), 64)
    }

    #[test]
    fn a_draw_is_fixed_by_its_secret_room_event_and_prequeue() {
        let s = DrawSecret([7; 32]);
        let e = event("launch", 1_000);
        assert_eq!(s.draw("shop", &e), s.draw("shop", &e));
        assert_ne!(s.draw("shop", &e), s.draw("other", &e));
        assert_ne!(s.draw("shop", &e), s.draw("shop", &event("launch", 2_000)));
        assert_ne!(s.draw("shop", &e), DrawSecret([8; 32]).draw("shop", &e));
        let mut moved = e.clone();
        moved.start += 60;
        moved.end += 60;
        assert_eq!(
            s.draw("shop", &e),
            s.draw("shop", &moved),
            "a moved start keeps it"
        );
        assert_ne!(
            DrawSecret::of_key_seed([1, 2, 3, 4]),
            DrawSecret::of_key_seed([1, 2, 3, 5])
        );
    }

    #[test]
    fn receipts_are_stable_per_identity_and_read_back() {
        let s = DrawSecret([7; 32]);
        let e = event("launch", 1_000);
        let a = s.receipt("shop", &e, &uid(1));
        assert_eq!(a, s.receipt("shop", &e, &uid(1)));
        assert_ne!(a, s.receipt("shop", &e, &uid(2)));
        assert_ne!(a, s.receipt("shop", &event("launch", 2_000), &uid(1)));
        let text = a.text();
        assert_eq!(text.len(), 19);
        assert!(text
            .bytes()
            .all(|c| c == b'-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(Receipt::parse(&text), Some(a));
        for bad in [
            "",
            "0123-4567-89ab-cdeF",
            "0123-4567-89ab-cde",
            "0123456789abcdef000",
            // Found by fuzzing: a dash where a digit goes.
            "ab-c-4567-89ab-cdef",
            "0123-4567-89ab--def",
        ] {
            assert_eq!(Receipt::parse(bad), None, "{bad}");
        }
    }

    /// The documented computation, spelled out with the primitives.
    #[test]
    fn places_are_the_hmac_of_the_receipt_under_the_seed() {
        let d = DrawSecret([9; 32]).draw("shop", &event("launch", 1_000));
        let r = Receipt(0x0123_4567_89ab_cdef);
        let seed = hex::decode(d.seed_hex()).unwrap();
        let mut mac = HmacSha256::new_from_slice(&seed).unwrap();
        mac.update(b"0123-4567-89ab-cdef");
        assert_eq!(d.place(r), hex::encode(mac.finalize().into_bytes()));
        assert_eq!(d.commitment(), hex::encode(Sha256::digest(&seed)));
        // Fractions follow the hex order, and spread over [0, 1).
        let mut all: Vec<(String, f64)> = (0..2_000)
            .map(|i| (d.place(Receipt(i)), d.fraction(Receipt(i))))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(all.windows(2).all(|w| w[0].1 <= w[1].1));
        let mean = all.iter().map(|p| p.1).sum::<f64>() / all.len() as f64;
        assert!((mean - 0.5).abs() < 0.03, "{mean}");
        assert!(all.iter().all(|p| (0.0..1.0).contains(&p.1)));
    }

    #[test]
    fn a_reveal_verifies_and_any_tampering_is_named() {
        let d = DrawSecret([3; 32]).draw("shop", &event("launch", 1_000));
        let reveal = d.reveal((0..50).map(Receipt));
        assert_eq!(reveal.receipts.len(), 50);
        let json = serde_json::to_vec(&reveal).unwrap();
        assert_eq!(verify(&json), Ok(50));

        let mut wrong_place = reveal.clone();
        wrong_place.receipts[7].place = d.place(Receipt(999));
        let e = verify(&serde_json::to_vec(&wrong_place).unwrap()).unwrap_err();
        assert!(
            matches!(&e, Unverified::Mismatch(m) if m.starts_with("receipts[7]")),
            "{e}"
        );

        let mut wrong_seed = reveal.clone();
        wrong_seed.seed = DrawSecret([4; 32])
            .draw("shop", &event("launch", 1_000))
            .seed_hex();
        assert!(matches!(
            verify(&serde_json::to_vec(&wrong_seed).unwrap()),
            Err(Unverified::Mismatch(m)) if m.starts_with("the commitment")
        ));

        let mut reordered = reveal.clone();
        reordered.receipts.swap(0, 1);
        assert!(matches!(
            verify(&serde_json::to_vec(&reordered).unwrap()),
            Err(Unverified::Mismatch(m)) if m.contains("order")
        ));

        // Against what was noted before the start: the commitment, and one's own receipt.
        let json = serde_json::to_vec(&reveal).unwrap();
        let mine = reveal.receipts[9].receipt.clone();
        let noted = Expect {
            commitment: Some(d.commitment()),
            receipts: vec![mine.clone()],
        };
        let checked = verify_with(&json, &noted).unwrap();
        assert_eq!(
            checked.found,
            vec![(mine, reveal.receipts[9].place.clone(), 9)]
        );
        let other = DrawSecret([5; 32]).draw("shop", &event("launch", 1_000));
        let swapped = Expect {
            commitment: Some(other.commitment()),
            receipts: vec![],
        };
        assert!(matches!(
            verify_with(&json, &swapped),
            Err(Unverified::Mismatch(m)) if m.contains("published before the start")
        ));
        let absent = Expect {
            commitment: None,
            receipts: vec![Receipt(999_999).text()],
        };
        assert!(matches!(
            verify_with(&json, &absent),
            Err(Unverified::Mismatch(m)) if m.contains("is not in the draw")
        ));
        // A receipt listed twice, or not in its one form, is refused.
        let mut twice = reveal.clone();
        twice.receipts.insert(1, twice.receipts[0].clone());
        assert!(matches!(
            verify(&serde_json::to_vec(&twice).unwrap()),
            Err(Unverified::Mismatch(m)) if m.contains("twice")
        ));
        let mut odd = reveal.clone();
        let name = "alice@example.com";
        let mut mac = HmacSha256::new_from_slice(&hex::decode(d.seed_hex()).unwrap()).unwrap();
        mac.update(name.as_bytes());
        odd.receipts = vec![Revealed {
            receipt: name.into(),
            place: hex::encode(mac.finalize().into_bytes()),
        }];
        assert!(matches!(
            verify(&serde_json::to_vec(&odd).unwrap()),
            Err(Unverified::Mismatch(m)) if m.contains("is not a receipt")
        ));

        let before_start = serde_json::json!({ "commitment": d.commitment(), "seed": null });
        assert!(matches!(
            verify(before_start.to_string().as_bytes()),
            Err(Unverified::Unreadable(_))
        ));
        for junk in [&b""[..], b"[]", b"{\"commitment\":1}", b"\xff"] {
            assert!(matches!(verify(junk), Err(Unverified::Unreadable(_))));
        }
    }
}
