//! Proof-of-work before a place in line. Pure: no HTTP, no clock of its own.
//!
//! A new arrival in a `challenge = "pow"` room gets a challenge value instead of a wait token:
//!
//! ```text
//! p1~<kid>~<exp>~<difficulty>~<salt: 16 hex>~<mac: 32 hex>
//! ```
//!
//! `mac` is the first 16 bytes of HMAC-SHA512 under the ring key `kid`, over the room's name, the
//! identity, `kid`, `exp` (Unix seconds), `difficulty` and `salt`, each length-prefixed. Nothing
//! is stored: the value carries what the check needs, and the signature binds it to one identity
//! and one room until `exp`.
//!
//! The client finds a decimal `nonce` such that SHA-256 of `value ":" nonce` begins with
//! `difficulty` zero bits, and sends `value:nonce` back. Checking it costs one HMAC and one
//! SHA-256: parse, key known, signature (constant time), not expired, then the work.

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::identity::Identity;
use crate::keys::{KeyRing, SigningKey};
use crate::time::Timestamp;

/// Fewest and most leading zero bits a room may ask for (`challenge_difficulty`).
pub const MIN_DIFFICULTY: u8 = 8;
pub(crate) const MAX_DIFFICULTY: u8 = 28;
/// Solutions longer than this are refused before any parsing work. A value is at most
/// `3 + 64 + 20 + 2 + 16 + 32` bytes and separators; a nonce at most 20 digits.
pub(crate) const MAX_SOLUTION_LEN: usize = 200;
const PREFIX: &str = "p1";
const SALT_BYTES: usize = 8;
const MAC_BYTES: usize = 16;

/// Why a solution was not accepted. Each one counts as `result="failed"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// Not `value:nonce` in the format above (too long, a stray separator, not ASCII, ...).
    Malformed,
    /// Signed by a key the ring does not hold (never trusted).
    UnknownKey,
    /// Forged, or issued to another identity or for another room.
    BadSignature,
    /// Issued more than `challenge_ttl` ago.
    Expired,
    /// A genuine challenge, but the hash does not begin with enough zero bits.
    NotSolved,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Malformed => "malformed",
            Failure::UnknownKey => "unknown_key",
            Failure::BadSignature => "bad_signature",
            Failure::Expired => "expired",
            Failure::NotSolved => "not_solved",
        }
    }
}

/// Expiries are rounded up to a multiple of a step, so that within one step an identity asking
/// again is given the same challenge (from the ring's cache, without an HMAC). The step is a
/// tenth of `challenge_ttl`, from 1 s up to this many seconds: a challenge may be answered for
/// `challenge_ttl` and at most a tenth more (`expires_in` is 10 for a 10 s ttl, 300 to 309 for
/// 5 minutes), where one coarse step would let a short ttl live nearly twice as long.
pub(crate) const EXPIRY_STEP: u64 = 10;

/// The rounding step of expiries for `ttl_secs` (see [`EXPIRY_STEP`]).
pub(crate) fn expiry_step(ttl_secs: u64) -> u64 {
    (ttl_secs / 10).clamp(1, EXPIRY_STEP)
}

/// A challenge as sent to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The opaque value the client hashes.
    pub value: std::sync::Arc<str>,
    pub difficulty: u8,
    /// Seconds the value may still be answered.
    pub expires_in: u64,
}

/// Issues a challenge for `uid` in `room`, signed with the ring's active key, answerable for
/// `ttl_secs` and less than [`expiry_step`] more: the expiry is rounded up, and within one step
/// the same identity is given the same challenge again (from the ring's cache, without an HMAC).
pub fn issue(
    ring: &KeyRing,
    room: &str,
    uid: &Identity,
    difficulty: u8,
    ttl_secs: u64,
    now: Timestamp,
) -> Challenge {
    let step = expiry_step(ttl_secs);
    let exp = now
        .secs()
        .saturating_add(ttl_secs)
        .div_ceil(step)
        .saturating_mul(step);
    let value = ring
        .issued_challenges()
        .get_or_issue(room, uid.as_str(), exp, difficulty, || {
            let mut salt = [0u8; SALT_BYTES];
            rand::thread_rng().fill_bytes(&mut salt);
            signed_value(ring.active(), room, uid, difficulty, exp, salt)
        });
    Challenge {
        value,
        difficulty,
        expires_in: exp.saturating_sub(now.secs()),
    }
}

fn signed_value(
    key: &SigningKey,
    room: &str,
    uid: &Identity,
    difficulty: u8,
    exp: u64,
    salt: [u8; SALT_BYTES],
) -> String {
    let salt = hex::encode(salt);
    let mac = mac(key, room, uid, exp, difficulty, &salt);
    let mut value = String::with_capacity(80 + key.id().len());
    for part in [PREFIX, key.id()] {
        value.push_str(part);
        value.push('~');
    }
    value.push_str(itoa::Buffer::new().format(exp));
    value.push('~');
    value.push_str(itoa::Buffer::new().format(difficulty));
    value.push('~');
    value.push_str(&salt);
    value.push('~');
    value.push_str(&hex::encode(mac));
    value
}

fn mac(
    key: &SigningKey,
    room: &str,
    uid: &Identity,
    exp: u64,
    difficulty: u8,
    salt: &str,
) -> [u8; MAC_BYTES] {
    key.short_mac(
        b"vestibule pow v1",
        &[
            room.as_bytes(),
            uid.as_str().as_bytes(),
            key.id().as_bytes(),
            &exp.to_be_bytes(),
            &[difficulty],
            salt.as_bytes(),
        ],
    )
}

/// A solution taken apart, nothing yet trusted.
struct Parsed<'a> {
    value: &'a [u8],
    kid: &'a str,
    exp: u64,
    difficulty: u8,
    salt: &'a str,
    mac: [u8; MAC_BYTES],
}

fn parse(solution: &[u8]) -> Option<Parsed<'_>> {
    if solution.len() > MAX_SOLUTION_LEN || !solution.is_ascii() {
        return None;
    }
    let colon = memchr::memrchr(b':', solution)?;
    let (value, nonce) = (&solution[..colon], &solution[colon + 1..]);
    if nonce.is_empty() || nonce.len() > 20 || !nonce.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    let [PREFIX, kid, exp, difficulty, salt, mac] = crate::keys::split_exact(text, '~')? else {
        return None;
    };
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    if !crate::keys::is_valid_key_id(kid)
        || !digits(exp, 20)
        || !digits(difficulty, 2)
        || salt.len() != SALT_BYTES * 2
        || !salt.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let mut mac_bytes = [0u8; MAC_BYTES];
    hex::decode_to_slice(mac, &mut mac_bytes).ok()?;
    Some(Parsed {
        value,
        kid,
        exp: exp.parse().ok()?,
        difficulty: difficulty.parse().ok()?,
        salt,
        mac: mac_bytes,
    })
}

/// Checks a solution `value:nonce` from `uid` for `room`: one HMAC, one SHA-256.
pub fn check(
    ring: &KeyRing,
    room: &str,
    uid: &Identity,
    solution: &[u8],
    now: Timestamp,
) -> Result<(), Failure> {
    let p = parse(solution).ok_or(Failure::Malformed)?;
    if !(MIN_DIFFICULTY..=MAX_DIFFICULTY).contains(&p.difficulty) {
        return Err(Failure::Malformed);
    }
    let key = ring.get(p.kid).ok_or(Failure::UnknownKey)?;
    let expected = mac(key, room, uid, p.exp, p.difficulty, p.salt);
    if !crate::token::constant_time_eq(&expected, &p.mac) {
        return Err(Failure::BadSignature);
    }
    if now.secs() >= p.exp {
        return Err(Failure::Expired);
    }
    // `solution` is `value:nonce` byte for byte: the hash the client computed.
    debug_assert!(solution.starts_with(p.value));
    if check_work(solution) < u32::from(p.difficulty) {
        return Err(Failure::NotSolved);
    }
    Ok(())
}

/// The work a solution `value:nonce` shows: the leading zero bits of its SHA-256.
pub fn check_work(solution: &[u8]) -> u32 {
    leading_zero_bits(&Sha256::digest(solution))
}

/// Leading zero bits of a hash.
pub fn leading_zero_bits(hash: &[u8]) -> u32 {
    let mut bits = 0;
    for &b in hash {
        if b == 0 {
            bits += 8;
        } else {
            return bits + b.leading_zeros();
        }
    }
    bits
}

/// Finds the first nonce from 0 that solves `value` at `difficulty`, trying at most `limit`
/// nonces: the reference solver (`examples/pow_solve.rs`, the tests). About `2^difficulty`
/// hashes on average.
pub fn solve(value: &str, difficulty: u8, limit: u64) -> Option<String> {
    let mut prefix = Sha256::new();
    prefix.update(value.as_bytes());
    prefix.update(b":");
    let mut digits = itoa::Buffer::new();
    for nonce in 0..limit {
        let mut h = prefix.clone();
        let n = digits.format(nonce);
        h.update(n.as_bytes());
        if leading_zero_bits(&h.finalize()) >= u32::from(difficulty) {
            return Some(format!("{value}:{n}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ring() -> KeyRing {
        KeyRing::from_entries(
            "k1",
            &[
                ("k1", "c2VjcmV0LW9uZS1zZWNyZXQtb25lLXNlY3JldC1vbmU="),
                ("k2", "c2VjcmV0LXR3by1zZWNyZXQtdHdvLXNlY3JldC10d28="),
            ],
        )
        .unwrap()
    }

    fn uid(s: &str) -> Identity {
        Identity::from_encoded(s)
    }

    fn now() -> Timestamp {
        Timestamp::from_secs(1_800_000_000)
    }

    fn solved(difficulty: u8) -> (KeyRing, String) {
        let ring = ring();
        let c = issue(&ring, "sale", &uid("198.51.100.7"), difficulty, 300, now());
        let s = solve(&c.value, c.difficulty, 1 << 24).unwrap();
        (ring, s)
    }

    #[test]
    fn a_solution_checks_for_its_identity_room_and_time_only() {
        let (ring, s) = solved(10);
        let me = uid("198.51.100.7");
        assert_eq!(check(&ring, "sale", &me, s.as_bytes(), now()), Ok(()));
        assert_eq!(
            check(&ring, "sale", &uid("198.51.100.8"), s.as_bytes(), now()),
            Err(Failure::BadSignature)
        );
        assert_eq!(
            check(&ring, "other", &me, s.as_bytes(), now()),
            Err(Failure::BadSignature)
        );
        let later = Timestamp::from_secs(now().secs() + 300 + EXPIRY_STEP);
        assert_eq!(
            check(&ring, "sale", &me, s.as_bytes(), later),
            Err(Failure::Expired)
        );
        // A ring without the signing key never trusts it.
        let rotated = KeyRing::from_entries(
            "k2",
            &[("k2", "c2VjcmV0LXR3by1zZWNyZXQtdHdvLXNlY3JldC10d28=")],
        )
        .unwrap();
        assert_eq!(
            check(&rotated, "sale", &me, s.as_bytes(), now()),
            Err(Failure::UnknownKey)
        );
    }

    #[test]
    fn one_identity_is_given_the_same_challenge_within_a_step() {
        let ring = ring();
        let me = uid("198.51.100.7");
        let at = |delta: i64| Timestamp::from_secs(now().secs().saturating_add_signed(delta));
        // Expiries are rounded up to the step: these two share 1_800_000_300.
        let a = issue(&ring, "sale", &me, 12, 300, at(-9));
        let again = issue(&ring, "sale", &me, 12, 300, now());
        assert_eq!(a.value, again.value);
        assert_eq!((a.expires_in, again.expires_in), (309, 300));
        let later = issue(&ring, "sale", &me, 12, 300, at(1));
        assert_ne!(a.value, later.value, "a new step, a new challenge");
        assert_ne!(
            a.value,
            issue(&ring, "sale", &uid("198.51.100.8"), 12, 300, now()).value
        );
        assert_ne!(a.value, issue(&ring, "other", &me, 12, 300, now()).value);
        assert_ne!(a.value, issue(&ring, "sale", &me, 13, 300, now()).value);
    }

    #[test]
    fn a_challenge_lives_its_ttl_and_at_most_a_tenth_more() {
        let ring = ring();
        let me = uid("198.51.100.7");
        for ttl in [10, 11, 19, 20, 45, 99, 100, 101, 300, 3600] {
            let mut longest = 0;
            for offset in 0..40 {
                let at = Timestamp::from_secs(now().secs() + offset);
                let c = issue(&ring, "sale", &me, 12, ttl, at);
                assert!(
                    c.expires_in >= ttl,
                    "ttl {ttl} at +{offset}: {}",
                    c.expires_in
                );
                assert!(
                    c.expires_in < ttl + expiry_step(ttl) && c.expires_in <= ttl + ttl / 10,
                    "ttl {ttl} at +{offset}: {}",
                    c.expires_in
                );
                longest = longest.max(c.expires_in);
            }
            // The rounding is used: some issue lives longer than the ttl, when the step allows.
            assert_eq!(longest, ttl + expiry_step(ttl) - 1, "ttl {ttl}");
        }
        assert_eq!(issue(&ring, "sale", &me, 12, 10, now()).expires_in, 10);
    }

    #[test]
    fn the_work_must_be_done() {
        let ring = ring();
        let me = uid("198.51.100.7");
        let c = issue(&ring, "sale", &me, 20, 300, now());
        // Find a nonce whose hash falls short: almost every one does at 20 bits.
        let short = (0..100)
            .map(|n| format!("{}:{n}", c.value))
            .find(|s| leading_zero_bits(&Sha256::digest(s.as_bytes())) < 20)
            .unwrap();
        assert_eq!(
            check(&ring, "sale", &me, short.as_bytes(), now()),
            Err(Failure::NotSolved)
        );
        // Raising the difficulty in the value breaks its signature.
        let (ring, s) = solved(8);
        let raised = s.replacen("~8~", "~9~", 1);
        assert_eq!(
            check(&ring, "sale", &me, raised.as_bytes(), now()),
            Err(Failure::BadSignature)
        );
    }

    #[test]
    fn odd_solutions_are_malformed() {
        let (ring, s) = solved(8);
        let me = uid("198.51.100.7");
        let (value, nonce) = s.rsplit_once(':').unwrap();
        let cases = [
            String::new(),
            ":".into(),
            value.to_owned(),
            format!("{value}:"),
            format!("{value}:-1"),
            format!("{value}:{nonce}x"),
            format!("{value}:{}", "9".repeat(21)),
            format!("{value}~:{nonce}"),
            format!("~{value}:{nonce}"),
            format!("{}:{nonce}", &value[..value.len() - 1]),
            format!("{value}:{nonce}é"),
            format!("{value}é:{nonce}"),
            format!("{}:{nonce}", value.replace("p1~", "p2~")),
            format!("{}:{nonce}", "~".repeat(150)),
            "x".repeat(100_000),
        ];
        for case in cases {
            assert_eq!(
                check(&ring, "sale", &me, case.as_bytes(), now()),
                Err(Failure::Malformed),
                "{case:?}"
            );
        }
    }

    /// The format in the module's documentation, made by another implementation (the fuzz
    /// seed was written by a Python script from that description alone).
    #[test]
    fn the_documented_format_is_what_is_checked() {
        let ring = KeyRing::from_entries(
            "key1",
            &[(
                "key1",
                "ZnV6ei1rZXktb25lLWZ1enota2V5LW9uZS1mdXp6LWtleS1vbmUtMDAwMDA=",
            )],
        )
        .unwrap();
        let uid = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
        let at = Timestamp::from_secs(1_700_000_000);
        let solved = include_str!("../../../fuzz/seeds/challenge/solved");
        assert_eq!(check(&ring, "sale", &uid, solved.as_bytes(), at), Ok(()));
        let unsolved = include_str!("../../../fuzz/seeds/challenge/unsolved");
        assert_eq!(
            check(&ring, "sale", &uid, unsolved.as_bytes(), at),
            Err(Failure::NotSolved)
        );
    }

    #[test]
    fn leading_zero_bits_counts_bits() {
        assert_eq!(leading_zero_bits(&[0, 0, 0x80]), 16);
        assert_eq!(leading_zero_bits(&[0, 0x01]), 15);
        assert_eq!(leading_zero_bits(&[0xff]), 0);
        assert_eq!(leading_zero_bits(&[0, 0]), 16);
    }

    proptest! {
        #[test]
        fn any_bytes_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let ring = ring();
            prop_assert!(check(&ring, "sale", &uid("a"), &bytes, now()).is_err());
        }

        #[test]
        fn any_identity_and_room_round_trip(who in "[ -~]{1,60}", room in "[a-z0-9_-]{1,20}") {
            let ring = ring();
            let c = issue(&ring, &room, &uid(&who), 8, 60, now());
            let s = solve(&c.value, 8, 1 << 20).unwrap();
            prop_assert_eq!(check(&ring, &room, &uid(&who), s.as_bytes(), now()), Ok(()));
        }
    }
}
