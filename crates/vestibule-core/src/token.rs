//! The room cookie's token: parse, format, sign, verify. No HTTP, no clock of its own.
//!
//! The format is byte-compatible with Fastly's VCL waiting-room pattern:
//!
//! ```text
//! dec=<wait|allow>&exp=<unix seconds>&uid=<identity>&kid=<key id>&sig=0x<hex>
//! ```
//!
//! `sig` is `0x` and the lowercase hex of HMAC-SHA512 keyed with the decoded ring key, over
//! `dec=..&exp=..&uid=..&kid=..`. Capacity rooms add fields after `kid` (`arr`, `acc`, `chk`,
//! `ref`); each present field joins the signed message in that fixed order, so a lottery token
//! signs exactly what the VCL signs. Fields may arrive in any order (the VCL reads them with
//! `subfield`), but each must appear once, and a field we do not know is refused: we could not
//! have signed it.
//!
//! Verification order: well-formed, key known, signature (constant time), bound to this user, not
//! expired. Nothing in an unauthenticated token is interpreted before its signature checks out.
//!
//! A browser presents the same cookie on every request, so a [`VerifiedCache`] (one per worker
//! thread) remembers values whose signature already checked out: a hit needs the exact bytes (compared in constant time)
//! and skips only parsing and the HMAC; the binding and expiry are checked every time. The cache
//! belongs to one key ring, so changing the ring starts a new one.

use std::fmt::Write as _;

use hmac::Mac;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::identity::{is_uid_byte, Identity};
use crate::sign::{Keys, SigningKey};
use crate::thread_cache::PerThreadLru;
use crate::time::Timestamp;

/// Cookie values longer than this are refused before any parsing work.
pub(crate) const MAX_TOKEN_LEN: usize = 1024;
const MAX_UID_LEN: usize = 400;
const SIG_BYTES: usize = 64;

/// The decision a token records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dec {
    Wait,
    Allow,
}

impl Dec {
    pub fn as_str(self) -> &'static str {
        match self {
            Dec::Wait => "wait",
            Dec::Allow => "allow",
        }
    }
}

/// Why a presented token was not trusted. Every reason makes the request anonymous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reject {
    Malformed,
    UnknownKey,
    BadSignature,
    WrongUser,
    Expired,
    /// The token belongs to a session the origin ended (`Vestibule-Command: revoke`).
    Revoked,
    /// Issued by another room, and this one asks who may join (or it was issued by a room that
    /// does, and this is another).
    WrongRoom,
}

impl Reject {
    /// Position in [`Reject::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The `reason` label of `vestibule_token_rejected_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::Malformed => "malformed",
            Reject::UnknownKey => "unknown_key",
            Reject::BadSignature => "bad_signature",
            Reject::WrongUser => "wrong_user",
            Reject::Expired => "expired",
            Reject::Revoked => "revoked",
            Reject::WrongRoom => "wrong_room",
        }
    }

    pub const ALL: [Reject; 7] = [
        Reject::Malformed,
        Reject::UnknownKey,
        Reject::BadSignature,
        Reject::WrongUser,
        Reject::Expired,
        Reject::Revoked,
        Reject::WrongRoom,
    ];
}

/// The signed fields of a token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Claims {
    pub dec: Dec,
    /// Unix seconds. Wait tokens become eligible at `exp`; allow tokens stop working at `exp`.
    pub exp: u64,
    /// The identity the token is bound to, percent-encoded.
    pub uid: String,
    pub kid: String,
    /// Capacity rooms only: the minute of first arrival (FIFO order survives method switches).
    pub arr: Option<u64>,
    /// Capacity rooms only: unix milliseconds when the user was admitted (with `uid` and `arr`,
    /// it names the session a revoke ends).
    pub acc: Option<u64>,
    /// Capacity rooms only: the minute this user was last counted (active or waiting).
    pub chk: Option<u64>,
    /// Capacity rooms only: the jittered refresh interval granted with this token, seconds.
    pub refresh: Option<u32>,
    /// Rooms that ask who may join (a `pow` challenge, `access = "invite"`): the room
    /// the token was issued by, so a place got elsewhere without the work or the invitation is
    /// not one here.
    pub room: Option<std::sync::Arc<str>>,
    /// Capacity rooms with priority lanes: the lane a waiting visitor waits in, when
    /// not `public` (an invitation's lane).
    pub lane: Option<std::sync::Arc<str>>,
    /// Rooms with the queue API: the visitor's queue number.
    pub qn: Option<u64>,
}

impl Claims {
    /// A lottery-style token: the four fields the VCL pattern signs.
    pub fn new(dec: Dec, exp: u64, uid: &Identity, kid: &str) -> Claims {
        Claims {
            dec,
            exp,
            uid: uid.as_str().to_owned(),
            kid: kid.to_owned(),
            arr: None,
            acc: None,
            chk: None,
            refresh: None,
            room: None,
            lane: None,
            qn: None,
        }
    }

    /// These claims, bound to `room` when it is `Some`.
    pub(crate) fn in_room(mut self, room: Option<&std::sync::Arc<str>>) -> Claims {
        self.room = room.cloned();
        self
    }

    /// Whether no capacity room's field is present: the four fields of the VCL pattern, and
    /// perhaps the room that issued it.
    pub fn is_lottery(&self) -> bool {
        self.arr.is_none() && self.acc.is_none() && self.chk.is_none() && self.refresh.is_none()
    }

    /// The exact bytes the signature covers.
    pub fn message(&self) -> String {
        let mut m = String::with_capacity(64 + self.uid.len() + self.kid.len());
        self.write_message(&mut m);
        m
    }

    fn write_message(&self, m: &mut String) {
        // Writing to a String cannot fail.
        let _ = write!(
            m,
            "dec={}&exp={}&uid={}&kid={}",
            self.dec.as_str(),
            self.exp,
            self.uid,
            self.kid
        );
        if let Some(v) = self.arr {
            let _ = write!(m, "&arr={v}");
        }
        if let Some(v) = self.acc {
            let _ = write!(m, "&acc={v}");
        }
        if let Some(v) = self.chk {
            let _ = write!(m, "&chk={v}");
        }
        if let Some(v) = self.refresh {
            let _ = write!(m, "&ref={v}");
        }
        if let Some(v) = &self.room {
            let _ = write!(m, "&rm={v}");
        }
        if let Some(v) = &self.lane {
            let _ = write!(m, "&ln={v}");
        }
        if let Some(v) = self.qn {
            let _ = write!(m, "&qn={v}");
        }
    }

    /// Signs with `key` (whose id must be `self.kid`) and returns the whole cookie value.
    pub fn sign(&self, key: &SigningKey) -> String {
        debug_assert_eq!(key.id(), self.kid);
        let mut value = String::with_capacity(200 + self.uid.len());
        self.write_message(&mut value);
        let mut mac = key.mac();
        mac.update(value.as_bytes());
        let sig = mac.finalize().into_bytes();
        value.push_str("&sig=0x");
        let mut hex_buf = [0u8; SIG_BYTES * 2];
        // The buffer is exactly twice the signature's length, so encoding cannot fail.
        let _ = hex::encode_to_slice(sig, &mut hex_buf);
        value.push_str(std::str::from_utf8(&hex_buf).unwrap_or_default());
        value
    }
}

/// A token as presented: well-formed, not yet trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub claims: Claims,
    sig: [u8; SIG_BYTES],
}

impl Token {
    /// Parses a cookie value. Any deviation from the format is [`Reject::Malformed`].
    pub fn parse(value: &[u8]) -> Result<Token, Reject> {
        if value.len() > MAX_TOKEN_LEN {
            return Err(Reject::Malformed);
        }
        let value = std::str::from_utf8(value).map_err(|_| Reject::Malformed)?;
        let mut fields = Fields::default();
        for part in value.split('&') {
            let (name, v) = part.split_once('=').ok_or(Reject::Malformed)?;
            let slot = match name {
                "dec" => &mut fields.dec,
                "exp" => &mut fields.exp,
                "uid" => &mut fields.uid,
                "kid" => &mut fields.kid,
                "sig" => &mut fields.sig,
                "arr" => &mut fields.arr,
                "acc" => &mut fields.acc,
                "chk" => &mut fields.chk,
                "ref" => &mut fields.refresh,
                "rm" => &mut fields.room,
                "ln" => &mut fields.lane,
                "qn" => &mut fields.qn,
                _ => return Err(Reject::Malformed),
            };
            if slot.replace(v).is_some() {
                return Err(Reject::Malformed);
            }
        }
        let dec = match fields.dec.ok_or(Reject::Malformed)? {
            "wait" => Dec::Wait,
            "allow" => Dec::Allow,
            _ => return Err(Reject::Malformed),
        };
        let exp = parse_number(fields.exp.ok_or(Reject::Malformed)?)?;
        let uid = fields.uid.ok_or(Reject::Malformed)?;
        if uid.is_empty() || uid.len() > MAX_UID_LEN || !uid.bytes().all(is_uid_byte_or_escape) {
            return Err(Reject::Malformed);
        }
        let kid = fields.kid.ok_or(Reject::Malformed)?;
        if !crate::sign::is_valid_key_id(kid) {
            return Err(Reject::Malformed);
        }
        let sig = parse_sig(fields.sig.ok_or(Reject::Malformed)?)?;
        let optional = |v: Option<&str>| v.map(parse_number).transpose();
        let refresh = match optional(fields.refresh)? {
            Some(r) => Some(u32::try_from(r).map_err(|_| Reject::Malformed)?),
            None => None,
        };
        let room = match fields.room {
            Some(r) if crate::sign::is_valid_key_id(r) => Some(std::sync::Arc::from(r)),
            Some(_) => return Err(Reject::Malformed),
            None => None,
        };
        let lane = match fields.lane {
            Some(l) if is_valid_lane(l) => Some(std::sync::Arc::from(l)),
            Some(_) => return Err(Reject::Malformed),
            None => None,
        };
        Ok(Token {
            claims: Claims {
                dec,
                exp,
                uid: uid.to_owned(),
                kid: kid.to_owned(),
                arr: optional(fields.arr)?,
                acc: optional(fields.acc)?,
                chk: optional(fields.chk)?,
                refresh,
                room,
                lane,
                qn: optional(fields.qn)?,
            },
            sig,
        })
    }

    /// Checks key, signature, owner and (for allow tokens) expiry, in that order.
    pub fn verify(
        &self,
        ring: &(impl Keys + ?Sized),
        uid: &Identity,
        now: Timestamp,
    ) -> Result<(), Reject> {
        self.verify_signature(ring)?;
        self.check_binding(uid, now)
    }

    /// Checks only that a known key signed exactly these fields (`token inspect` uses it to
    /// explain a token belonging to someone else).
    pub fn verify_signature(&self, ring: &(impl Keys + ?Sized)) -> Result<(), Reject> {
        let key = ring.key(&self.claims.kid).ok_or(Reject::UnknownKey)?;
        let mut mac = key.mac();
        mac.update(self.claims.message().as_bytes());
        // `verify_slice` compares in constant time.
        mac.verify_slice(&self.sig)
            .map_err(|_| Reject::BadSignature)
    }

    pub fn signature(&self) -> &[u8; SIG_BYTES] {
        &self.sig
    }

    /// A generator seeded by a keyed hash of this token's signature (the key derived from the
    /// ring key that signed it): the same token always draws the same numbers, so presenting it
    /// again cannot re-roll anything, and nobody without the key can tell what it will draw.
    /// `None` when the signing key is not in `ring` (such a token is never trusted).
    pub fn rng(&self, ring: &(impl Keys + ?Sized)) -> Option<ChaCha20Rng> {
        let key = ring.key(&self.claims.kid)?;
        Some(ChaCha20Rng::from_seed(key.draw_seed(&self.sig)))
    }

    /// A uniform draw in [0, 1) fixed for this token (see [`Token::rng`]).
    pub fn draw(&self, ring: &(impl Keys + ?Sized)) -> Option<f64> {
        self.rng(ring).map(|mut rng| unit_interval(rng.next_u64()))
    }
}

/// A bounded LRU map per thread (`PerThreadLru`), looked up by a hash keyed with random keys,
/// so nobody can aim entries at each other. A shared map behind locks made every request of
/// every worker thread lock, reorder and reference-count the same entries when clients repeat
/// their cookie, a cost that grew with the threads. Per thread there is nothing to share: with
/// work stealing off a connection stays on its thread, so its cookie's repeats hit that thread's
/// cache, and a miss costs one HMAC. The maps belong to their cache (a key ring's), so two rings
/// alive at once (requests in flight across a reload) keep their own entries.
struct KeyedLru<V: Send> {
    hasher: ahash::RandomState,
    maps: PerThreadLru<u64, V>,
}

type Verified = (Box<[u8]>, std::sync::Arc<Token>);

/// What an issued challenge is for: room, identity, expiry, difficulty.
type IssuedKey = (Box<str>, Box<str>, u64, u8);

impl<V: Send> KeyedLru<V> {
    /// Room for `capacity` entries per thread.
    fn new(capacity: usize) -> Self {
        KeyedLru {
            hasher: ahash::RandomState::new(),
            maps: PerThreadLru::new(capacity),
        }
    }

    fn hash<T: std::hash::Hash + ?Sized>(&self, item: &T) -> u64 {
        self.hasher.hash_one(item)
    }

    /// Runs `f` on this thread's map (`None` if the thread is already inside it: a miss).
    fn with<R>(&self, f: impl FnOnce(&mut lru::LruCache<u64, V>) -> R) -> Option<R> {
        self.maps.with(f)
    }
}

/// Recently signed lottery tokens, by their claims. One identity gets the same token for a whole
/// bucket by design, so a client that keeps asking without its cookie (a refresh storm, a bot)
/// is answered without another HMAC.
pub(crate) struct SignedCache(KeyedLru<(Claims, std::sync::Arc<str>)>);

impl SignedCache {
    /// Up to `capacity` values per thread.
    pub fn new(capacity: usize) -> SignedCache {
        SignedCache(KeyedLru::new(capacity))
    }

    /// The cookie value for `claims` signed by `key`, from the cache when it was signed before.
    pub fn sign(&self, claims: Claims, key: &SigningKey) -> std::sync::Arc<str> {
        let hash = self.0.hash(&claims);
        let hit = self.0.with(|c| {
            c.get(&hash)
                .filter(|(cached, _)| *cached == claims)
                .map(|(_, v)| v.clone())
        });
        if let Some(Some(v)) = hit {
            return v;
        }
        let value: std::sync::Arc<str> = claims.sign(key).into();
        self.0.with(|c| c.put(hash, (claims, value.clone())));
        value
    }
}

/// Recently issued proof-of-work challenges, by room, identity, expiry and
/// difficulty. Expiries are rounded (see `challenge::issue`), so one identity gets the same
/// challenge for a few seconds, like the same lottery token for a bucket: a client that keeps
/// asking without solving is answered without another HMAC. A solution works for its identity
/// and room either way, so answering with the same value gives nothing away.
pub(crate) struct IssuedCache(KeyedLru<(IssuedKey, std::sync::Arc<str>)>);

impl IssuedCache {
    pub fn new(capacity: usize) -> IssuedCache {
        IssuedCache(KeyedLru::new(capacity))
    }

    /// The challenge issued for this room, identity, expiry and difficulty, or a new one from
    /// `issue`.
    pub(crate) fn get_or_issue(
        &self,
        room: &str,
        uid: &str,
        exp: u64,
        difficulty: u8,
        issue: impl FnOnce() -> String,
    ) -> std::sync::Arc<str> {
        let hash = self.0.hash(&(room, uid, exp, difficulty));
        let hit = self.0.with(|c| {
            c.get(&hash)
                .filter(|((r, u, e, d), _)| {
                    **r == *room && **u == *uid && *e == exp && *d == difficulty
                })
                .map(|(_, v)| v.clone())
        });
        if let Some(Some(v)) = hit {
            return v;
        }
        let value: std::sync::Arc<str> = issue().into();
        let key = (room.into(), uid.into(), exp, difficulty);
        self.0.with(|c| c.put(hash, (key, value.clone())));
        value
    }
}

/// Presented values whose signature checked out: keyed hash of the bytes -> (those bytes, the
/// parsed token).
pub(crate) struct VerifiedCache(KeyedLru<Verified>);

impl VerifiedCache {
    /// A cache of up to `capacity` values per thread (each holds the value and its parsed
    /// token, about 600 bytes).
    pub fn new(capacity: usize) -> VerifiedCache {
        VerifiedCache(KeyedLru::new(capacity))
    }

    /// Parses `value` and checks its signature with `ring`, or finds it already checked.
    pub fn check(
        &self,
        ring: &(impl Keys + ?Sized),
        value: &[u8],
    ) -> Result<std::sync::Arc<Token>, Reject> {
        if value.len() > MAX_TOKEN_LEN {
            return Err(Reject::Malformed);
        }
        let hash = self.0.hash(value);
        let hit = self.0.with(|c| {
            c.get(&hash)
                .filter(|(bytes, _)| constant_time_eq(bytes, value))
                .map(|(_, token)| token.clone())
        });
        if let Some(Some(token)) = hit {
            return Ok(token);
        }
        let token = Token::parse(value)?;
        token.verify_signature(ring)?;
        let token = std::sync::Arc::new(token);
        self.0.with(|c| c.put(hash, (value.into(), token.clone())));
        Ok(token)
    }
}

impl Token {
    /// The checks after the signature: bound to `uid`, and (allow tokens) not expired.
    pub fn check_binding(&self, uid: &Identity, now: Timestamp) -> Result<(), Reject> {
        if self.claims.uid != uid.as_str() {
            return Err(Reject::WrongUser);
        }
        if self.claims.dec == Dec::Allow && now.secs() >= self.claims.exp {
            return Err(Reject::Expired);
        }
        Ok(())
    }
}

/// Whether two byte strings are equal, taking the same time wherever they differ (only the
/// lengths, which are public, are compared early). The comparison is `subtle`'s, the one the
/// admin token uses too, made 8 bytes at a time: its byte-wise slice compare pays an optimiser
/// barrier per byte, about five times the cost on a 140-byte token, on every cached check.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    if a.len() != b.len() {
        return false;
    }
    let (mut a_words, mut b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut equal = subtle::Choice::from(1);
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        let x = u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
        let y = u64::from_le_bytes([y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]]);
        equal &= x.ct_eq(&y);
    }
    equal &= a_words.remainder().ct_eq(b_words.remainder());
    bool::from(equal)
}

/// Maps 64 random bits to [0, 1) using the top 53 bits (exactly representable).
pub(crate) fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Default)]
struct Fields<'a> {
    dec: Option<&'a str>,
    exp: Option<&'a str>,
    uid: Option<&'a str>,
    kid: Option<&'a str>,
    sig: Option<&'a str>,
    arr: Option<&'a str>,
    acc: Option<&'a str>,
    chk: Option<&'a str>,
    refresh: Option<&'a str>,
    room: Option<&'a str>,
    lane: Option<&'a str>,
    qn: Option<&'a str>,
}

/// Decimal digits only: no sign, no spaces, no overflow.
fn parse_number(s: &str) -> Result<u64, Reject> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reject::Malformed);
    }
    s.parse().map_err(|_| Reject::Malformed)
}

/// `0x` and exactly 128 lowercase hex digits, as the VCL writes them; decoded in one pass.
fn parse_sig(s: &str) -> Result<[u8; SIG_BYTES], Reject> {
    let hex_part = s.strip_prefix("0x").ok_or(Reject::Malformed)?.as_bytes();
    if hex_part.len() != SIG_BYTES * 2 {
        return Err(Reject::Malformed);
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(Reject::Malformed),
    };
    let mut sig = [0u8; SIG_BYTES];
    for (out, pair) in sig.iter_mut().zip(hex_part.chunks_exact(2)) {
        *out = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(sig)
}

fn is_uid_byte_or_escape(b: u8) -> bool {
    is_uid_byte(b) || b == b'%'
}

/// Longest lane name.
pub const MAX_LANE_LEN: usize = 32;

/// Whether `lane` may name a lane: 1 to 32 of `a-z`, `0-9`, `_` and `-`.
pub fn is_valid_lane(lane: &str) -> bool {
    !lane.is_empty()
        && lane.len() <= MAX_LANE_LEN
        && lane
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::encode_uid;
    use crate::keys::KeyRing;
    use hmac::Hmac;
    use proptest::prelude::*;
    use sha2::Sha512;

    use crate::keys::testing::{ring, KEY1};

    fn alice() -> Identity {
        Identity::of_ip("192.0.2.10".parse().unwrap(), 64)
    }

    #[test]
    fn published_hmac_sha512_vector() {
        // HMAC-SHA512(key = "key", message = "input").
        let mut mac = Hmac::<Sha512>::new_from_slice(b"key").unwrap();
        mac.update(b"input");
        let sig = format!("0x{}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(
            sig,
            "0x03ad77c817f32669cccf38dac915d4e55a16833b1ca685979a9df521a05235978090043c3da402dad365ed39ac05af4864a804451861f4b4df7680834c6d4f95"
        );
    }

    #[test]
    fn sign_parse_verify_round_trip() {
        let ring = ring();
        let claims = Claims::new(Dec::Wait, 1_700_000_060, &alice(), "key1");
        let value = claims.sign(ring.active());
        assert!(value.starts_with("dec=wait&exp=1700000060&uid=192.0.2.10&kid=key1&sig=0x"));
        let token = Token::parse(value.as_bytes()).unwrap();
        assert_eq!(token.claims, claims);
        assert_eq!(
            token.verify(&ring, &alice(), Timestamp::from_secs(0)),
            Ok(())
        );
    }

    #[test]
    fn a_room_bound_token_signs_its_room() {
        let ring = ring();
        let room: std::sync::Arc<str> = "presale".into();
        let claims = Claims::new(Dec::Wait, 1_700_000_060, &alice(), "key1").in_room(Some(&room));
        assert!(claims.is_lottery(), "still a lottery token");
        let value = claims.sign(ring.active());
        assert!(value.contains("&kid=key1&rm=presale&sig=0x"), "{value}");
        let token = Token::parse(value.as_bytes()).unwrap();
        assert_eq!(token.claims.room.as_deref(), Some("presale"));
        assert_eq!(
            token.verify(&ring, &alice(), Timestamp::from_secs(0)),
            Ok(())
        );
        // Moved to another room, or stripped of its room: the signature fails.
        let moved = value.replace("rm=presale", "rm=shop");
        assert_eq!(
            Token::parse(moved.as_bytes()).unwrap().verify(
                &ring,
                &alice(),
                Timestamp::from_secs(0)
            ),
            Err(Reject::BadSignature)
        );
        let stripped = value.replace("&rm=presale", "");
        assert_eq!(
            Token::parse(stripped.as_bytes()).unwrap().verify(
                &ring,
                &alice(),
                Timestamp::from_secs(0)
            ),
            Err(Reject::BadSignature)
        );
        for bad in ["rm=", "rm=a~b", "rm=pré"] {
            let odd = value.replace("rm=presale", bad);
            assert_eq!(
                Token::parse(odd.as_bytes()),
                Err(Reject::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_token_signs_its_lane() {
        let ring = ring();
        let mut claims = Claims::new(Dec::Wait, 1_700_000_060, &alice(), "key1");
        claims.arr = Some(1_700_000_000);
        claims.lane = Some("members".into());
        let value = claims.sign(ring.active());
        assert!(
            value.contains("&arr=1700000000&ln=members&sig=0x"),
            "{value}"
        );
        let token = Token::parse(value.as_bytes()).unwrap();
        assert_eq!(token.claims.lane.as_deref(), Some("members"));
        let now = Timestamp::from_secs(0);
        assert_eq!(token.verify(&ring, &alice(), now), Ok(()));
        // Moved to another lane, or out of it: the signature fails.
        for forged in [
            value.replace("ln=members", "ln=vip"),
            value.replace("&ln=members", ""),
        ] {
            let t = Token::parse(forged.as_bytes()).unwrap();
            assert_eq!(t.verify(&ring, &alice(), now), Err(Reject::BadSignature));
        }
        for bad in ["ln=", "ln=VIP", "ln=a b", "ln=members&ln=members"] {
            let odd = value.replace("ln=members", bad);
            assert_eq!(
                Token::parse(odd.as_bytes()),
                Err(Reject::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn field_order_does_not_matter_but_duplicates_do() {
        let ring = ring();
        let value = Claims::new(Dec::Allow, 2_000_000_000, &alice(), "key1").sign(ring.active());
        let sig = value.split("&sig=").nth(1).unwrap();
        // The VCL pattern's own parse order: dec, exp, kid, uid.
        let reordered = format!("sig={sig}&kid=key1&uid=192.0.2.10&exp=2000000000&dec=allow");
        let token = Token::parse(reordered.as_bytes()).unwrap();
        assert_eq!(
            token.verify(&ring, &alice(), Timestamp::from_secs(0)),
            Ok(())
        );
        let dup = format!("{value}&dec=allow");
        assert_eq!(Token::parse(dup.as_bytes()), Err(Reject::Malformed));
    }

    #[test]
    fn rejections() {
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let allow = Claims::new(Dec::Allow, 2_000, &alice(), "key1").sign(ring.active());
        let t = Token::parse(allow.as_bytes()).unwrap();
        let bob = Identity::of_ip("192.0.2.11".parse().unwrap(), 64);
        assert_eq!(t.verify(&ring, &bob, now), Err(Reject::WrongUser));
        assert_eq!(
            t.verify(&ring, &alice(), Timestamp::from_secs(2_000)),
            Err(Reject::Expired)
        );
        // A wait token past exp is eligible, not expired.
        let wait = Claims::new(Dec::Wait, 2_000, &alice(), "key1").sign(ring.active());
        let t = Token::parse(wait.as_bytes()).unwrap();
        assert_eq!(
            t.verify(&ring, &alice(), Timestamp::from_secs(5_000)),
            Ok(())
        );
        // Forged decision with the original signature.
        let forged = wait.replace("dec=wait", "dec=allow");
        let t = Token::parse(forged.as_bytes()).unwrap();
        assert_eq!(t.verify(&ring, &alice(), now), Err(Reject::BadSignature));
        // Unknown key id: never trusted, even with a well-formed signature.
        let other = KeyRing::from_entries("k9", &[("k9", KEY1)]).unwrap();
        let foreign = Claims::new(Dec::Allow, 2_000, &alice(), "k9").sign(other.active());
        let t = Token::parse(foreign.as_bytes()).unwrap();
        assert_eq!(t.verify(&ring, &alice(), now), Err(Reject::UnknownKey));
    }

    #[test]
    fn malformed_shapes() {
        let ring = ring();
        let good = Claims::new(Dec::Wait, 2_000, &alice(), "key1").sign(ring.active());
        let cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"garbage".to_vec(),
            b"dec=wait".to_vec(),
            good.replace("exp=2000", "exp=-2000").into_bytes(),
            good.replace("exp=2000", "exp=99999999999999999999999")
                .into_bytes(),
            good.replace("exp=2000", "exp=").into_bytes(),
            good.replace("exp=2000", "exp=+2000").into_bytes(),
            good.replace("dec=wait", "dec=maybe").into_bytes(),
            good.replace("&kid=key1", "").into_bytes(),
            good.replace("sig=0x", "sig=").into_bytes(),
            good.replace("sig=0x", "sig=0X").into_bytes(),
            format!("{}zz", &good[..good.len() - 2]).into_bytes(),
            format!("{}AB", &good[..good.len() - 2]).into_bytes(),
            format!("{good}0").into_bytes(),
            format!("{good}&extra=1").into_bytes(),
            format!("{good}&").into_bytes(),
            good.replace("uid=192.0.2.10", "uid=a b").into_bytes(),
            vec![b'a'; 10 * 1024],
            b"dec=wait&exp=1&uid=\xff\xfe&kid=key1&sig=0x00".to_vec(),
        ];
        for case in cases {
            assert_eq!(
                Token::parse(&case),
                Err(Reject::Malformed),
                "{:?}",
                String::from_utf8_lossy(&case)
            );
        }
    }

    #[test]
    fn capacity_fields_are_signed() {
        let ring = ring();
        let mut claims = Claims::new(Dec::Wait, 2_000, &alice(), "key1");
        claims.arr = Some(28_000_000);
        claims.chk = Some(28_000_001);
        claims.refresh = Some(19);
        let value = claims.sign(ring.active());
        assert!(value.contains("&arr=28000000&chk=28000001&ref=19&sig=0x"));
        let t = Token::parse(value.as_bytes()).unwrap();
        assert_eq!(t.claims, claims);
        assert_eq!(t.verify(&ring, &alice(), Timestamp::from_secs(0)), Ok(()));
        let moved = value.replace("arr=28000000", "arr=27000000");
        let t = Token::parse(moved.as_bytes()).unwrap();
        assert_eq!(
            t.verify(&ring, &alice(), Timestamp::from_secs(0)),
            Err(Reject::BadSignature)
        );
        // Dropping a field changes the message too.
        let dropped = value.replace("&chk=28000001", "");
        let t = Token::parse(dropped.as_bytes()).unwrap();
        assert_eq!(
            t.verify(&ring, &alice(), Timestamp::from_secs(0)),
            Err(Reject::BadSignature)
        );
    }

    #[test]
    fn uid_encoding() {
        assert_eq!(encode_uid(b"192.0.2.1"), "192.0.2.1");
        assert_eq!(encode_uid(b"2001:db8::/64"), "2001:db8::/64");
        assert_eq!(encode_uid(b"a&b=c d%"), "a%26b%3Dc%20d%25");
        assert_eq!(encode_uid("é".as_bytes()), "%C3%A9");
    }

    #[test]
    fn draws_are_fixed_per_token_and_need_the_key() {
        let ring = ring();
        let value = Claims::new(Dec::Wait, 2_000, &alice(), "key1").sign(ring.active());
        let t = Token::parse(value.as_bytes()).unwrap();
        let d = t.draw(&ring).unwrap();
        assert!((0.0..1.0).contains(&d));
        assert_eq!(Token::parse(value.as_bytes()).unwrap().draw(&ring), Some(d));
        // The draw is not the signature's own bits (what anyone could read off the cookie).
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&t.signature()[..32]);
        let public = unit_interval(rand_chacha::rand_core::RngCore::next_u64(
            &mut ChaCha20Rng::from_seed(seed),
        ));
        assert_ne!(public, d);
        // Another ring with the same key id draws differently; a ring without it cannot draw.
        let other = KeyRing::from_entries(
            "key1",
            &[("key1", "b3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXI=")],
        )
        .unwrap();
        assert_ne!(t.draw(&other), Some(d));
        let elsewhere = KeyRing::from_entries(
            "key9",
            &[("key9", "b3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXItb3RoZXI=")],
        )
        .unwrap();
        assert_eq!(t.draw(&elsewhere), None);
    }

    #[test]
    fn constant_time_eq_is_equality() {
        let a = b"dec=allow&exp=1&uid=1.2.3.4&kid=k&sig=0xabcdef0123";
        assert!(constant_time_eq(a, a));
        for i in 0..a.len() {
            let mut b = a.to_vec();
            b[i] ^= 0x80;
            assert!(!constant_time_eq(a, &b), "{i}");
        }
        assert!(!constant_time_eq(a, &a[..a.len() - 1]));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn the_verified_cache_needs_the_exact_bytes_and_the_same_ring() {
        let ring = ring();
        let value = Claims::new(Dec::Allow, 5_000, &alice(), "key1").sign(ring.active());
        let first = ring.check(value.as_bytes()).unwrap();
        let again = ring.check(value.as_bytes()).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "the second check is a cache hit"
        );
        // A cached value does not make its neighbours valid.
        for i in 0..value.len() {
            let mut mutated = value.clone().into_bytes();
            mutated[i] ^= 0x01;
            assert!(
                ring.check(&mutated).is_err(),
                "mutation at {i} accepted after a cache hit"
            );
        }
        let mut longer = value.clone().into_bytes();
        longer.push(b'0');
        assert!(ring.check(&longer).is_err());
        // Another ring (a reload that dropped the key) has its own cache.
        let other = KeyRing::from_entries("k2", &[("k2", KEY1)]).unwrap();
        assert_eq!(other.check(value.as_bytes()), Err(Reject::UnknownKey));
        // Binding and expiry are still checked on hits.
        assert_eq!(
            first.check_binding(&alice(), Timestamp::from_secs(5_000)),
            Err(Reject::Expired)
        );
        let bob = Identity::of_ip("192.0.2.99".parse().unwrap(), 64);
        assert_eq!(
            again.check_binding(&bob, Timestamp::from_secs(0)),
            Err(Reject::WrongUser)
        );
    }

    #[test]
    fn two_live_rings_keep_their_own_entries() {
        // A reload builds a new ring while requests still hold the old one: alternating between
        // them on one thread must not empty either's cache.
        let old = ring();
        let new = KeyRing::from_entries("k2", &[("k2", KEY1)]).unwrap();
        let old_value = Claims::new(Dec::Allow, 5_000, &alice(), "key1").sign(old.active());
        let new_value = Claims::new(Dec::Allow, 5_000, &alice(), "k2").sign(new.active());
        let old_first = old.check(old_value.as_bytes()).unwrap();
        let new_first = new.check(new_value.as_bytes()).unwrap();
        let old_again = old.check(old_value.as_bytes()).unwrap();
        let new_again = new.check(new_value.as_bytes()).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&old_first, &old_again),
            "old ring's hit"
        );
        assert!(
            std::sync::Arc::ptr_eq(&new_first, &new_again),
            "new ring's hit"
        );
        let claims = Claims::new(Dec::Wait, 60, &alice(), "key1");
        let signed_old = old.sign_cached(claims.clone());
        let _ = new.sign_cached(Claims::new(Dec::Wait, 60, &alice(), "k2"));
        assert!(std::sync::Arc::ptr_eq(
            &signed_old,
            &old.sign_cached(claims)
        ));
    }

    #[test]
    fn the_signed_cache_answers_equal_claims_with_the_same_value() {
        let ring = ring();
        let claims = Claims::new(Dec::Wait, 60, &alice(), "key1");
        let first = ring.sign_cached(claims.clone());
        let again = ring.sign_cached(claims.clone());
        assert!(std::sync::Arc::ptr_eq(&first, &again), "a cache hit");
        assert_eq!(
            &*first,
            claims.sign(ring.active()),
            "the value signing gives"
        );
        let later = ring.sign_cached(Claims::new(Dec::Wait, 120, &alice(), "key1"));
        assert_ne!(first, later);
    }

    proptest! {
        // Each case tries every byte of a token with 11 replacements (about 2,000 checks).
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_single_byte_mutation_is_rejected(
            exp in 1u64..4_000_000_000,
            allow in any::<bool>(),
            octet in 0u8..=255,
        ) {
            let ring = ring();
            let uid = Identity::of_ip(std::net::IpAddr::from([10, 1, 2, octet]), 64);
            let dec = if allow { Dec::Allow } else { Dec::Wait };
            let value = Claims::new(dec, exp, &uid, "key1").sign(ring.active());
            let now = Timestamp::from_secs(0);
            prop_assert!(Token::parse(value.as_bytes()).unwrap().verify(&ring, &uid, now).is_ok());
            let bytes = value.as_bytes();
            for i in 0..bytes.len() {
                for replacement in [b'0', b'1', b'a', b'f', b'&', b'=', b'%', b'x', 0xff, bytes[i] ^ 0x01, bytes[i] ^ 0x20] {
                    if replacement == bytes[i] {
                        continue;
                    }
                    let mut mutated = bytes.to_vec();
                    mutated[i] = replacement;
                    let verdict = Token::parse(&mutated).and_then(|t| t.verify(&ring, &uid, now));
                    prop_assert!(verdict.is_err(), "mutation at {} to {:?} accepted: {}", i, replacement as char, String::from_utf8_lossy(&mutated));
                }
            }
        }

    }

    proptest! {
        // The no-panic properties: cheap cases, many of them (and the `token` fuzz target runs
        // the same property for millions of inputs).
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn random_bytes_never_panic_and_never_verify(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let ring = ring();
            let verdict = Token::parse(&bytes).and_then(|t| t.verify(&ring, &alice(), Timestamp::from_secs(0)));
            prop_assert!(verdict.is_err());
        }

        #[test]
        fn structured_garbage_never_verifies(
            dec in "(wait|allow|x)",
            exp in "[0-9+-]{0,22}",
            uid in "[a-z0-9.%&=]{0,20}",
            kid in "[a-z0-9]{0,6}",
            sig in "(0x)?[0-9a-fA-F]{0,130}",
        ) {
            let ring = ring();
            let value = format!("dec={dec}&exp={exp}&uid={uid}&kid={kid}&sig={sig}");
            let verdict = Token::parse(value.as_bytes()).and_then(|t| t.verify(&ring, &alice(), Timestamp::from_secs(0)));
            prop_assert!(verdict.is_err());
        }
    }
}
