//! Enqueue tokens: one place per account.
//!
//! A site that knows its visitors (they are logged in) signs a short-lived JWT for each one,
//! naming its account (`sub`) and the room (`aud`), with the room's `enqueue_key`. A visitor
//! who brings one (the `vestibule_enqueue` query parameter, or the `Vestibule-Enqueue` header)
//! is known to the room by an identity derived from the account ([`account_identity`]) rather
//! than by their address: the same account from a second device or address has the same place,
//! and two accounts behind one address have two.
//!
//! The module owns the key ([`EnqueueKey`]), the check of a token ([`verify`]), where a request
//! carries one ([`token_of`], [`strip_from_query`]) and which room cookies are bound to an
//! account ([`is_account`]). It reads no file and no clock: the edge reads the key file, the
//! caller passes `now`.
//!
//! # Crates, not hand-written JOSE
//!
//! `jsonwebtoken` checks the signature (HMAC in constant time, ECDSA and Ed25519 on `ring`) and
//! that the header's `alg` is the key's. The header is peeked first only to say why a token is
//! refused (`alg: none`, or an algorithm that is not the key's, is [`Refusal::BadAlgorithm`]).
//! The claims are checked here against the caller's clock.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::identity::Identity;
use crate::time::Timestamp;

/// The query parameter a visitor brings a token in.
pub const PARAMETER: &str = "vestibule_enqueue";

/// The request header a visitor (or a site's app) brings a token in. It starts with the
/// internal prefix, so the edge never forwards it.
pub const HEADER: http::HeaderName = http::HeaderName::from_static("vestibule-enqueue");

/// The longest a token may live: its `exp` at most this many seconds after `now`.
pub const MAX_LIFETIME_SECS: u64 = 600;

/// The longest account id (`sub`), in bytes.
pub const MAX_SUBJECT_LEN: usize = 256;

/// Tokens longer than this are [`Refusal::Malformed`] before any parsing.
pub const MAX_TOKEN_LEN: usize = 4 * 1024;

/// Shortest HS256 secret, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// How every account identity starts. An address identity is digits, hex letters, `.`, `:` and
/// `/`; a header identity is `h-` and hex, or bytes escaped as `%` and two upper-case hex
/// digits. None of them holds `%_`, so an account identity never equals another kind.
pub const ACCOUNT_PREFIX: &str = "%_acct:";

/// A room's `enqueue` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Tokens are not read; places are bound to addresses.
    #[default]
    Off,
    /// A valid token binds the place to the account; a visitor without one joins by address.
    Optional,
    /// Every new arrival must bring a valid token.
    Required,
}

impl Mode {
    /// The mode of a config value (`off`, `optional`, `required`); `None` for any other.
    pub fn parse(value: &str) -> Option<Mode> {
        match value {
            "off" => Some(Mode::Off),
            "optional" => Some(Mode::Optional),
            "required" => Some(Mode::Required),
            _ => None,
        }
    }

    /// The config value.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Optional => "optional",
            Mode::Required => "required",
        }
    }
}

/// Why a request's enqueue token (or its lack of one) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// A `required` room, and the request brought no token (nor an account's room cookie).
    Missing,
    /// Not a JWT: too long, not three base64url parts, not JSON, claims of the wrong type, or a
    /// `sub` over [`MAX_SUBJECT_LEN`] bytes.
    Malformed,
    /// The signature does not match the room's key (forged or altered).
    BadSignature,
    /// `alg` is `none`, or not the algorithm of the room's key.
    BadAlgorithm,
    /// `now` is at or past `exp`.
    Expired,
    /// No `exp`, or one more than [`MAX_LIFETIME_SECS`] ahead.
    TooLong,
    /// `aud` is not the room's name.
    WrongAudience,
    /// No `sub`, or an empty one.
    NoSubject,
}

impl Refusal {
    /// Every reason, in declaration order (one metric series each).
    pub const ALL: [Refusal; 8] = [
        Refusal::Missing,
        Refusal::Malformed,
        Refusal::BadSignature,
        Refusal::BadAlgorithm,
        Refusal::Expired,
        Refusal::TooLong,
        Refusal::WrongAudience,
        Refusal::NoSubject,
    ];

    /// The reason as a metric label and JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::BadSignature => "bad_signature",
            Refusal::BadAlgorithm => "bad_algorithm",
            Refusal::Expired => "expired",
            Refusal::TooLong => "too_long",
            Refusal::WrongAudience => "wrong_audience",
            Refusal::NoSubject => "no_subject",
        }
    }

    /// The `error` of the JSON answer: `enqueue_required` when no token came, else
    /// `enqueue_invalid`.
    pub fn error(self) -> &'static str {
        match self {
            Refusal::Missing => "enqueue_required",
            _ => "enqueue_invalid",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A room's `enqueue_key`: an HS256 secret, or a site's P-256 (ES256) or Ed25519 (EdDSA) public
/// key. Two keys are equal when they were read from the same bytes. `Debug` prints the
/// algorithm only.
#[derive(Clone)]
pub struct EnqueueKey {
    algorithm: Algorithm,
    decoding: DecodingKey,
    /// `jsonwebtoken`'s checks: the signature and the header's `alg`; no clock, no claims.
    validation: Validation,
    /// SHA-256 of the file's bytes, for equality (a reload that changes the key is a change).
    fingerprint: [u8; 32],
}

impl fmt::Debug for EnqueueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnqueueKey")
            .field("algorithm", &self.algorithm)
            .finish()
    }
}

impl PartialEq for EnqueueKey {
    fn eq(&self, other: &EnqueueKey) -> bool {
        self.fingerprint == other.fingerprint
    }
}

impl Eq for EnqueueKey {}

impl EnqueueKey {
    /// The key in an `enqueue_key` file's bytes: a PEM public key (`-----BEGIN PUBLIC KEY-----`,
    /// P-256 for ES256 or Ed25519 for EdDSA), else the raw bytes of an HS256 secret (a final
    /// newline is not part of it), at least [`MIN_SECRET_LEN`] bytes. Called when the config is
    /// checked (and on reload). The error says what is wrong, never the key.
    pub fn from_bytes(bytes: &[u8]) -> Result<EnqueueKey, String> {
        let fingerprint = Sha256::digest(bytes).into();
        let (algorithm, decoding) = if memchr::memmem::find(bytes, b"-----BEGIN").is_some() {
            public_key(bytes)?
        } else {
            let secret = without_final_newline(bytes);
            if secret.len() < MIN_SECRET_LEN {
                return Err(format!(
                    "an HS256 secret of {} bytes; use at least {MIN_SECRET_LEN} random bytes",
                    secret.len()
                ));
            }
            (Algorithm::HS256, DecodingKey::from_secret(secret))
        };
        Ok(EnqueueKey {
            algorithm,
            decoding,
            validation: validation(algorithm),
            fingerprint,
        })
    }

    /// The JOSE name of the algorithm tokens must be signed with: `HS256`, `ES256` or `EdDSA`.
    pub fn algorithm(&self) -> &'static str {
        match self.algorithm {
            Algorithm::ES256 => "ES256",
            Algorithm::EdDSA => "EdDSA",
            _ => "HS256",
        }
    }
}

/// A PEM public key: P-256 or Ed25519, nothing else.
fn public_key(bytes: &[u8]) -> Result<(Algorithm, DecodingKey), String> {
    let wrong = || {
        "a PEM that is not a P-256 (ES256) or Ed25519 (EdDSA) public key \
         (-----BEGIN PUBLIC KEY-----; give the site's public key, never its private key)"
            .to_owned()
    };
    let pem = std::str::from_utf8(bytes).map_err(|_| wrong())?;
    {
        use p256::elliptic_curve::sec1::ToEncodedPoint as _;
        use p256::pkcs8::DecodePublicKey as _;
        if let Ok(key) = p256::PublicKey::from_public_key_pem(pem.trim()) {
            let point = key.to_encoded_point(false);
            let (Some(x), Some(y)) = (point.x(), point.y()) else {
                return Err(wrong());
            };
            let (x, y) = (URL_SAFE_NO_PAD.encode(x), URL_SAFE_NO_PAD.encode(y));
            let decoding = DecodingKey::from_ec_components(&x, &y).map_err(|_| wrong())?;
            return Ok((Algorithm::ES256, decoding));
        }
    }
    use ed25519_dalek::pkcs8::DecodePublicKey as _;
    let key = ed25519_dalek::VerifyingKey::from_public_key_pem(pem.trim()).map_err(|_| wrong())?;
    let x = URL_SAFE_NO_PAD.encode(key.as_bytes());
    let decoding = DecodingKey::from_ed_components(&x).map_err(|_| wrong())?;
    Ok((Algorithm::EdDSA, decoding))
}

/// The bytes without one final `\n` (or `\r\n`), as `echo` and editors leave it.
fn without_final_newline(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

/// `jsonwebtoken`'s checks for a key of `algorithm`: signature and `alg` only. The claims are
/// checked by [`check_claims`] against the caller's clock.
fn validation(algorithm: Algorithm) -> Validation {
    let mut v = Validation::new(algorithm);
    v.validate_exp = false;
    v.validate_nbf = false;
    v.validate_aud = false;
    v.leeway = 0;
    v.required_spec_claims.clear();
    v
}

/// The part of a header read before the signature is checked.
#[derive(Deserialize)]
struct Peek {
    alg: String,
}

/// `aud`: one name, or a list of names (RFC 7519 allows both).
#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn names(&self, room: &str) -> bool {
        match self {
            Audience::One(a) => a == room,
            Audience::Many(list) => list.iter().any(|a| a == room),
        }
    }
}

/// The claims read; others are ignored.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    aud: Option<Audience>,
    #[serde(default)]
    exp: Option<u64>,
}

/// The account identity of `token` if it is the room's: signed by `key`, `aud` naming `room`,
/// with a `sub`, and `exp` after `now` and at most [`MAX_LIFETIME_SECS`] ahead. Called for
/// each request that brings a token to a room whose `enqueue` is on.
///
/// Order: length, header (`alg: none` or another algorithm than the key's is
/// [`Refusal::BadAlgorithm`]), signature, then the claims: subject, audience, expiry, lifetime.
pub fn verify(
    token: &str,
    key: &EnqueueKey,
    room: &str,
    now: Timestamp,
) -> Result<Identity, Refusal> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(Refusal::Malformed);
    }
    let claims = check_signature(token, key)?;
    let sub = check_claims(&claims, room, now)?;
    Ok(account_identity(room, sub))
}

/// Header, algorithm and signature (by `jsonwebtoken`); the claims decoded.
fn check_signature(token: &str, key: &EnqueueKey) -> Result<Claims, Refusal> {
    let (head, _) = token.split_once('.').ok_or(Refusal::Malformed)?;
    let head = URL_SAFE_NO_PAD
        .decode(head)
        .map_err(|_| Refusal::Malformed)?;
    let peek: Peek = serde_json::from_slice(&head).map_err(|_| Refusal::Malformed)?;
    if peek.alg != key.algorithm() {
        return Err(Refusal::BadAlgorithm);
    }
    match jsonwebtoken::decode::<Claims>(token, &key.decoding, &key.validation) {
        Ok(data) => Ok(data.claims),
        Err(e) => Err(match e.kind() {
            ErrorKind::InvalidSignature | ErrorKind::Crypto(_) => Refusal::BadSignature,
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => Refusal::BadAlgorithm,
            _ => Refusal::Malformed,
        }),
    }
}

/// The claims of a token whose signature checked out, against the room and `now`: its `sub`.
fn check_claims<'c>(claims: &'c Claims, room: &str, now: Timestamp) -> Result<&'c str, Refusal> {
    let sub = claims
        .sub
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or(Refusal::NoSubject)?;
    if sub.len() > MAX_SUBJECT_LEN {
        return Err(Refusal::Malformed);
    }
    if !claims.aud.as_ref().is_some_and(|a| a.names(room)) {
        return Err(Refusal::WrongAudience);
    }
    let exp = claims.exp.ok_or(Refusal::TooLong)?;
    if now.millis() >= exp.saturating_mul(1000) {
        return Err(Refusal::Expired);
    }
    if exp > now.secs().saturating_add(MAX_LIFETIME_SECS) {
        return Err(Refusal::TooLong);
    }
    Ok(sub)
}

/// The identity an account has in `room`: [`room_prefix`] (the room's tag), then 128 bits of
/// HMAC-SHA256(room, `sub`) in hex. The account id never appears in a cookie or a log, and the
/// same account has one identity on every node (nothing random goes in).
pub fn account_identity(room: &str, sub: &str) -> Identity {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(room.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(b"vestibule enqueue account\0");
    mac.update(sub.as_bytes());
    let digest = mac.finalize().into_bytes();
    let hex = hex::encode(&digest[..16]);
    Identity::from_encoded(&format!("{}{hex}", room_prefix(room)))
}

/// How the account identities of `room` start: [`ACCOUNT_PREFIX`], 32 bits of SHA-256 of the
/// room's name in hex, and `.`. A cookie copied from another room's account does not stand for
/// an account here.
pub fn room_prefix(room: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"vestibule enqueue room\0")
        .chain_update(room.as_bytes())
        .finalize();
    format!("{ACCOUNT_PREFIX}{}.", hex::encode(&digest[..4]))
}

/// Whether a room cookie's `uid` is an account's (made by [`account_identity`], in any room).
pub fn is_account(uid: &str) -> bool {
    uid.starts_with(ACCOUNT_PREFIX)
}

/// The account a request is known by in a room whose `enqueue` is on; `Ok(None)` when it is
/// known by its address (an `optional` room, and no token nor account cookie came). Called once
/// per request that reaches such a room, before the room decides.
///
/// - A token brought (`token`) must be valid: its account, else why not. It is never ignored,
///   even beside a room cookie.
/// - Without one, a room cookie (`cookies`, the room cookie's values) signed by `ring` whose
///   `uid` is an account's of this room stands for that account, from any address: it was issued to whoever
///   brought that account's token, and it can only ever hold that account's one place. The
///   room checks it again in full. An address-bound cookie stays bound to its address (this
///   returns `Ok(None)` for it), and a cookie whose signature fails stands for nobody.
/// - Otherwise `required` rooms refuse ([`Refusal::Missing`]).
pub fn identify(
    (mode, key): (Mode, &EnqueueKey),
    room: &str,
    token: Option<&str>,
    cookies: &[&[u8]],
    ring: &(impl crate::sign::Keys + ?Sized),
    now: Timestamp,
) -> Result<Option<Identity>, Refusal> {
    if let Some(token) = token {
        return verify(token, key, room, now).map(Some);
    }
    let prefix = room_prefix(room);
    if let Some(account) = cookies
        .iter()
        .find_map(|v| account_of_cookie(v, &prefix, ring))
    {
        return Ok(Some(account));
    }
    match mode {
        Mode::Required => Err(Refusal::Missing),
        Mode::Optional | Mode::Off => Ok(None),
    }
}

/// The account a room cookie is bound to, if its `uid` is an account's of this room (its
/// identities start with `prefix`) and `ring` signed it.
fn account_of_cookie(
    value: &[u8],
    prefix: &str,
    ring: &(impl crate::sign::Keys + ?Sized),
) -> Option<Identity> {
    let token = crate::token::Token::parse(value).ok()?;
    if !token.claims.uid.starts_with(prefix) {
        return None;
    }
    token.verify_signature(ring).ok()?;
    Some(Identity::from_encoded(&token.claims.uid))
}

/// The token a request brings: the [`HEADER`], else the first [`PARAMETER`] of the query. A
/// header that is not text is kept as `"\u{fffd}"`, so it is refused as malformed rather than
/// ignored.
pub fn token_of<'r>(headers: &'r http::HeaderMap, query: Option<&'r str>) -> Option<&'r str> {
    if let Some(v) = headers.get(HEADER) {
        return Some(v.to_str().unwrap_or("\u{fffd}"));
    }
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(PARAMETER)?.strip_prefix('='))
}

/// A query string without its [`PARAMETER`] pairs; `None` when it had none. An emptied query
/// becomes `Some("")`.
pub fn strip_from_query(query: &str) -> Option<String> {
    let is_ours = |pair: &str| {
        pair.strip_prefix(PARAMETER)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
    };
    if !query.split('&').any(is_ours) {
        return None;
    }
    let kept: Vec<&str> = query.split('&').filter(|pair| !is_ours(pair)).collect();
    Some(kept.join("&"))
}

/// Keys and tokens for tests, benchmarks and fuzzing (never for a real room).
#[doc(hidden)]
pub mod testing {
    /// An HS256 secret file (with the final newline an editor adds).
    pub const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-test-secret\n";

    /// The public key of `jwt::testing::ES256_PEM`: a site's ES256 key as `enqueue_key` holds it.
    pub const ES256_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE5+X9v8VjDGHltnPTemOQ2C0xCaiv
gNpzpWMx0IeGSbROkgQ34xeI3ACoIb18oAPTa7/t6EsVZ364pHtrWBV+Ow==
-----END PUBLIC KEY-----
";

    /// `now` of the tests: 2023-11-14T22:13:20Z.
    pub const NOW: u64 = 1_700_000_000;

    /// `claims` signed with HS256 by [`SECRET`] (without its newline).
    pub fn hs256(claims: &serde_json::Value) -> String {
        let key = jsonwebtoken::EncodingKey::from_secret(super::without_final_newline(SECRET));
        let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        jsonwebtoken::encode(&header, claims, &key).expect("claims sign")
    }
}

#[cfg(test)]
mod tests;
