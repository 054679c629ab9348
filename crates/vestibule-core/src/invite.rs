//! Invitations: who may join a presale or members' room. Pure: no HTTP, no clock of
//! its own, no memory of uses (that is the counter store's).
//!
//! `vestibule invite` prints codes signed with the ring's active key:
//!
//! ```text
//! i1~<kid>~<id: 16 hex>~<exp>~<uses>~<lane>~<mac: 32 hex>
//! ```
//!
//! - `id` is 64 random bits naming the invitation;
//! - `exp` is when it stops working (Unix seconds);
//! - `uses` is how many identities may join with it (1 to [`MAX_USES`]);
//! - `lane` is the priority lane its holders wait in (`public` unless the operator chose one).
//!
//! `mac` is the first 16 bytes of HMAC-SHA512 under the ring key `kid`, over `vestibule invite
//! v1` and then the room's name, `kid`, `id`, `exp` (8 bytes, big-endian), `uses` (4 bytes,
//! big-endian) and `lane`, each length-prefixed (4 bytes, big-endian). The room is not written in
//! the code: a code for another room fails its signature. Every character is URL-safe, so a code
//! goes in a link as it is.
//!
//! Checking a code costs one HMAC: length and ASCII, format, key known, signature (constant time),
//! expiry. How many identities already joined with it is the store's answer.

pub use crate::token::{is_valid_lane, MAX_LANE_LEN};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::identity::Identity;
use crate::keys::{KeyRing, SigningKey};
use crate::time::Timestamp;

/// Codes longer than this are refused before any parsing: `i1`, a 64-byte key id, 16 + 20 + 7
/// digits, a 32-byte lane, 32 hex digits and six separators make 179.
pub(crate) const MAX_CODE_LEN: usize = 200;
/// Most identities one invitation may admit.
pub const MAX_USES: u32 = 1_000_000;
/// The lane of visitors without an invitation, and of invitations that name none.
pub const PUBLIC_LANE: &str = "public";
/// The link parameter that carries a code (removed before the origin sees the request).
pub const LINK_PARAMETER: &str = "vestibule_invite";
const PREFIX: &str = "i1";
const MAC_BYTES: usize = 16;

/// Why an invitation was refused. Each one counts as `result="refused"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Not a code in the format above (too long, a stray separator, not ASCII, ...).
    Malformed,
    /// Signed by a key the ring does not hold (never trusted).
    UnknownKey,
    /// Forged, altered, or made for another room.
    BadSignature,
    /// Past its expiry.
    Expired,
    /// As many identities as its `uses` already joined with it.
    UsedUp,
    /// The room remembers `max_invitations` in use already: a new one cannot be counted, so it
    /// is refused rather than let a used one be forgotten.
    Full,
    /// Listed in the room's `revoked_invitations`.
    Revoked,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::UnknownKey => "unknown_key",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired => "expired",
            Refusal::UsedUp => "used_up",
            Refusal::Full => "full",
            Refusal::Revoked => "revoked",
        }
    }
}

/// A checked invitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invitation<'a> {
    pub id: u64,
    pub exp: u64,
    pub uses: u32,
    pub lane: &'a str,
}

impl Invitation<'_> {
    /// What names the one who joins with this invitation, the same on every node: a digest of
    /// the invitation and the identity.
    pub fn holder(&self, uid: &Identity) -> u64 {
        let mut h = Sha256::new();
        h.update(b"vestibule invite holder v1");
        h.update(self.id.to_be_bytes());
        h.update(uid.as_str().as_bytes());
        let digest = h.finalize();
        let mut out = [0u8; 8];
        out.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(out)
    }
}

/// What an invitation is made of, before it is signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms {
    pub room: String,
    pub lane: String,
    /// Unix seconds.
    pub exp: u64,
    pub uses: u32,
}

/// Makes one code for `terms`, with a fresh random id, signed with `key`. `terms` must be valid
/// ([`is_valid_lane`], `1..=MAX_USES`): the caller checked them.
pub fn make(key: &SigningKey, terms: &Terms) -> String {
    let mut id = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut id);
    make_with_id(key, terms, u64::from_be_bytes(id))
}

fn make_with_id(key: &SigningKey, terms: &Terms, id: u64) -> String {
    let id = format!("{id:016x}");
    let mac = mac(key, &terms.room, &id, terms.exp, terms.uses, &terms.lane);
    [
        PREFIX,
        key.id(),
        &id,
        &terms.exp.to_string(),
        &terms.uses.to_string(),
        &terms.lane,
        &hex::encode(mac),
    ]
    .join("~")
}

fn mac(key: &SigningKey, room: &str, id: &str, exp: u64, uses: u32, lane: &str) -> [u8; MAC_BYTES] {
    key.short_mac(
        b"vestibule invite v1",
        &[
            room.as_bytes(),
            key.id().as_bytes(),
            id.as_bytes(),
            &exp.to_be_bytes(),
            &uses.to_be_bytes(),
            lane.as_bytes(),
        ],
    )
}

/// The invitation id an operator names: its 16 hex digits, or a whole code (whose third field
/// it is). Nothing is checked but the form: a revocation needs no signature.
pub(crate) fn id_of(entry: &str) -> Option<u64> {
    let entry = entry.trim();
    let hex = match crate::keys::split_exact::<7>(entry, '~') {
        Some([PREFIX, _, id, ..]) => id,
        Some(_) => return None,
        None => entry,
    };
    if hex.len() != 16 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A code taken apart, nothing yet trusted.
struct Parsed<'a> {
    kid: &'a str,
    id_hex: &'a str,
    id: u64,
    exp: u64,
    uses: u32,
    lane: &'a str,
    mac: [u8; MAC_BYTES],
}

fn parse(code: &[u8]) -> Option<Parsed<'_>> {
    if code.len() > MAX_CODE_LEN || !code.is_ascii() {
        return None;
    }
    let text = std::str::from_utf8(code).ok()?;
    let [PREFIX, kid, id, exp, uses, lane, mac] = crate::keys::split_exact(text, '~')? else {
        return None;
    };
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !crate::keys::is_valid_key_id(kid)
        || id.len() != 16
        || !lower_hex(id)
        || !digits(exp, 20)
        || !digits(uses, 7)
        || !is_valid_lane(lane)
    {
        return None;
    }
    let uses: u32 = uses.parse().ok()?;
    if !(1..=MAX_USES).contains(&uses) {
        return None;
    }
    let mut mac_bytes = [0u8; MAC_BYTES];
    hex::decode_to_slice(mac, &mut mac_bytes).ok()?;
    Some(Parsed {
        kid,
        id_hex: id,
        id: u64::from_str_radix(id, 16).ok()?,
        exp: exp.parse().ok()?,
        uses,
        lane,
        mac: mac_bytes,
    })
}

/// Checks `code` for `room` at `now`: one HMAC. Whether it still has a use left is the store's
/// answer.
pub fn check<'a>(
    ring: &KeyRing,
    room: &str,
    code: &'a [u8],
    now: Timestamp,
) -> Result<Invitation<'a>, Refusal> {
    let p = parse(code).ok_or(Refusal::Malformed)?;
    let key = ring.get(p.kid).ok_or(Refusal::UnknownKey)?;
    let expected = mac(key, room, p.id_hex, p.exp, p.uses, p.lane);
    if !crate::token::constant_time_eq(&expected, &p.mac) {
        return Err(Refusal::BadSignature);
    }
    if now.secs() >= p.exp {
        return Err(Refusal::Expired);
    }
    Ok(Invitation {
        id: p.id,
        exp: p.exp,
        uses: p.uses,
        lane: p.lane,
    })
}

/// The value of the link parameter [`LINK_PARAMETER`] in a query string, percent-decoded (a
/// client may have escaped `~`). The first one counts.
pub fn from_query(query: &str) -> Option<std::borrow::Cow<'_, str>> {
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix(LINK_PARAMETER)?.strip_prefix('='))?;
    if !value.contains('%') {
        return Some(std::borrow::Cow::Borrowed(value));
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    // Not UTF-8 after decoding: kept as it came, and refused as malformed.
    Some(match String::from_utf8(out) {
        Ok(s) => std::borrow::Cow::Owned(s),
        Err(_) => std::borrow::Cow::Borrowed(value),
    })
}

/// A query string without its [`LINK_PARAMETER`] pairs; `None` when it had none. An emptied
/// query becomes `Some("")`.
pub fn strip_from_query(query: &str) -> Option<String> {
    let is_ours = |pair: &str| {
        pair.strip_prefix(LINK_PARAMETER)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
    };
    if !query.split('&').any(is_ours) {
        return None;
    }
    Some(
        query
            .split('&')
            .filter(|pair| !is_ours(pair))
            .collect::<Vec<_>>()
            .join("&"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::Mac;
    use proptest::prelude::*;

    fn ring() -> KeyRing {
        KeyRing::from_entries(
            "k1",
            &[
                ("k1", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="),
                ("k0", "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="),
            ],
        )
        .unwrap()
    }

    fn terms(lane: &str, uses: u32) -> Terms {
        Terms {
            room: "presale".into(),
            lane: lane.into(),
            exp: 2_000,
            uses,
        }
    }

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    #[test]
    fn a_code_checks_for_its_room_until_it_expires() {
        let ring = ring();
        let code = make(ring.active(), &terms("members", 3));
        let inv = check(&ring, "presale", code.as_bytes(), at(1_000)).unwrap();
        assert_eq!((inv.exp, inv.uses, inv.lane), (2_000, 3, "members"));
        assert_eq!(
            check(&ring, "other", code.as_bytes(), at(1_000)),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            check(&ring, "presale", code.as_bytes(), at(2_000)),
            Err(Refusal::Expired)
        );
        // Two codes of the same terms are two invitations.
        let again = make(ring.active(), &terms("members", 3));
        assert_ne!(
            check(&ring, "presale", again.as_bytes(), at(1)).unwrap().id,
            inv.id
        );
    }

    #[test]
    fn every_field_is_signed() {
        let ring = ring();
        let code = make(ring.active(), &terms("public", 1));
        let parts: Vec<&str> = code.split('~').collect();
        for (i, altered) in [
            (2, "0000000000000000"),
            (3, "2001"),
            (4, "2"),
            (5, "members"),
            (6, "00000000000000000000000000000000"),
        ] {
            let mut p = parts.clone();
            p[i] = altered;
            assert_eq!(
                check(&ring, "presale", p.join("~").as_bytes(), at(1)),
                Err(Refusal::BadSignature),
                "field {i}"
            );
        }
        // Signed by the other key of the ring: checks. By a key the ring lacks: never trusted.
        let old = KeyRing::from_entries(
            "k0",
            &[("k0", "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=")],
        )
        .unwrap();
        let by_k0 = make(old.active(), &terms("public", 1));
        assert!(check(&ring, "presale", by_k0.as_bytes(), at(1)).is_ok());
        let mut p = parts.clone();
        p[1] = "k9";
        assert_eq!(
            check(&ring, "presale", p.join("~").as_bytes(), at(1)),
            Err(Refusal::UnknownKey)
        );
    }

    #[test]
    fn odd_codes_are_malformed() {
        let ring = ring();
        let code = make(ring.active(), &terms("public", 1));
        let huge = format!("{code}{}", "~".repeat(MAX_CODE_LEN));
        let non_ascii = code.replacen("public", "públic", 1);
        let zero_uses = code.replacen("~1~public", "~0~public", 1);
        let many_uses = code.replacen("~1~public", "~1000001~public", 1);
        let upper_lane = code.replacen("public", "PUBLIC", 1);
        for bad in [
            "",
            "~~~~~~",
            "i1",
            &code[..code.len() - 1],
            &code[1..],
            &format!("{code}~"),
            &huge,
            &non_ascii,
            &zero_uses,
            &many_uses,
            &upper_lane,
            "i1~k1~zzzzzzzzzzzzzzzz~2000~1~public~00000000000000000000000000000000",
            "i1~k1~0000000000000000~-1~1~public~00000000000000000000000000000000",
        ] {
            assert_eq!(
                check(&ring, "presale", bad.as_bytes(), at(1)),
                Err(Refusal::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_documented_format_is_what_is_checked() {
        // Built here from the module documentation alone, not with `make`.
        let ring = ring();
        let key = ring.get("k1").unwrap();
        let mut m = key.mac();
        m.update(b"vestibule invite v1");
        let id = "00112233aabbccdd";
        for part in [
            &b"presale"[..],
            b"k1",
            id.as_bytes(),
            &2_000u64.to_be_bytes(),
            &5u32.to_be_bytes(),
            b"vip",
        ] {
            m.update(&(part.len() as u32).to_be_bytes());
            m.update(part);
        }
        let mac = hex::encode(&m.finalize().into_bytes()[..16]);
        let code = format!("i1~k1~{id}~2000~5~vip~{mac}");
        let inv = check(&ring, "presale", code.as_bytes(), at(1)).unwrap();
        assert_eq!((inv.id, inv.uses, inv.lane), (0x00112233aabbccdd, 5, "vip"));
        assert_eq!(
            code,
            make_with_id(
                key,
                &Terms {
                    room: "presale".into(),
                    lane: "vip".into(),
                    exp: 2_000,
                    uses: 5
                },
                inv.id
            )
        );
    }

    #[test]
    fn the_fuzz_seeds_made_from_the_documentation_check() {
        // Made by a Python script from the module documentation, signed with the fuzz ring.
        let fuzz = KeyRing::from_entries(
            "key1",
            &[(
                "key1",
                "ZnV6ei1rZXktb25lLWZ1enota2V5LW9uZS1mdXp6LWtleS1vbmUtMDAwMDA=",
            )],
        )
        .unwrap();
        let at = Timestamp::from_secs(1_700_000_000);
        let valid = include_str!("../../../fuzz/seeds/invite/valid");
        let inv = check(&fuzz, "presale", valid.as_bytes(), at).unwrap();
        assert_eq!((inv.uses, inv.lane), (3, "members"));
        let expired = include_str!("../../../fuzz/seeds/invite/expired");
        assert_eq!(
            check(&fuzz, "presale", expired.as_bytes(), at),
            Err(Refusal::Expired)
        );
        let other = include_str!("../../../fuzz/seeds/invite/other_room");
        assert!(check(&fuzz, "shop", other.as_bytes(), at).is_ok());
        let link = include_str!("../../../fuzz/seeds/invite/link");
        let code = from_query(link).unwrap();
        assert!(check(&fuzz, "presale", code.as_bytes(), at).is_ok());
    }

    #[test]
    fn an_operator_names_an_invitation_by_id_or_code() {
        let ring = ring();
        let code = make(ring.active(), &terms("public", 1));
        let id = check(&ring, "presale", code.as_bytes(), at(1)).unwrap().id;
        assert_eq!(id_of(&code), Some(id));
        assert_eq!(id_of(&format!(" {id:016x} ")), Some(id));
        for bad in [
            "",
            "xyz",
            "00112233AABBCCDD",
            "0011223344",
            "p1~a~b~c~d~e~f",
            "i1~a~b",
        ] {
            assert_eq!(id_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn holders_differ_by_identity_and_invitation() {
        let ring = ring();
        let a = make(ring.active(), &terms("public", 2));
        let b = make(ring.active(), &terms("public", 2));
        let a = check(&ring, "presale", a.as_bytes(), at(1)).unwrap();
        let b = check(&ring, "presale", b.as_bytes(), at(1)).unwrap();
        let alice = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
        let bob = Identity::of_ip("192.0.2.2".parse().unwrap(), 64);
        assert_eq!(a.holder(&alice), a.holder(&alice));
        assert_ne!(a.holder(&alice), a.holder(&bob));
        assert_ne!(a.holder(&alice), b.holder(&alice));
    }

    #[test]
    fn the_link_parameter_is_found_decoded_and_stripped() {
        assert_eq!(
            from_query("a=1&vestibule_invite=i1~x&b=2").as_deref(),
            Some("i1~x")
        );
        assert_eq!(
            from_query("vestibule_invite=i1%7Ex%7e").as_deref(),
            Some("i1~x~")
        );
        assert_eq!(from_query("vestibule_invite=%zz").as_deref(), Some("%zz"));
        assert_eq!(from_query("vestibule_invite=%ff").as_deref(), Some("%ff"));
        assert_eq!(from_query("xvestibule_invite=1&vestibule_invites=2"), None);
        assert_eq!(from_query(""), None);
        assert_eq!(
            strip_from_query("a=1&vestibule_invite=x&b=2").as_deref(),
            Some("a=1&b=2")
        );
        assert_eq!(strip_from_query("vestibule_invite=x").as_deref(), Some(""));
        assert_eq!(strip_from_query("vestibule_invite&a").as_deref(), Some("a"));
        assert_eq!(
            strip_from_query("vestibule_invite=x&vestibule_invite=y&c").as_deref(),
            Some("c")
        );
        assert_eq!(strip_from_query("a=vestibule_invite=x"), None);
        assert_eq!(strip_from_query("vestibule_invites=1"), None);
    }

    proptest! {
        #[test]
        fn any_bytes_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let ring = ring();
            prop_assert!(check(&ring, "presale", &bytes, at(1)).is_err());
        }

        #[test]
        fn any_terms_round_trip(room in "[a-z0-9_-]{1,20}", lane in "[a-z0-9_-]{1,32}", uses in 1u32..=MAX_USES, exp in 2u64..u64::MAX) {
            let ring = ring();
            let t = Terms { room: room.clone(), lane: lane.clone(), exp, uses };
            let code = make(ring.active(), &t);
            prop_assert!(code.len() <= MAX_CODE_LEN - 20);
            let inv = check(&ring, &room, code.as_bytes(), at(1)).unwrap();
            prop_assert_eq!((inv.exp, inv.uses, inv.lane), (exp, uses, lane.as_str()));
            let query = format!("q=1&{LINK_PARAMETER}={code}");
            let found = from_query(&query);
            prop_assert_eq!(found.as_deref(), Some(code.as_str()));
        }

        #[test]
        fn any_query_parses_without_panic(q in "[ -~]{0,200}") {
            let _ = from_query(&q);
            if let Some(s) = strip_from_query(&q) {
                prop_assert!(from_query(&s).is_none());
            }
        }
    }
}
