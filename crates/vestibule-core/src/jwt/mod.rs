//! JWTs for an API gateway: the waiting room signs one when it lets a visitor through, and a
//! gateway in front of the origin verifies it against the keys the edge publishes (a JWKS), as
//! in AWS's Virtual Waiting Room. The edge verifies its own tokens here too.
//!
//! Keys are asymmetric, so a gateway holds only public keys: ES256 (ECDSA on P-256 with
//! SHA-256) and EdDSA (Ed25519). A [`JwtKeys`] ring is ordered: its first key signs, every key
//! is published and verifies, so a new key is added second, published for a while, then moved
//! first, and the old one removed once its tokens have expired.
//!
//! # Crates, not hand-written JOSE
//!
//! - `jsonwebtoken` (v9) encodes, decodes and checks signatures, on `ring` (which rustls already
//!   brings into the edge). It is the most used JWT crate in Rust and checks the header's `alg`
//!   against the one the key is for.
//! - `p256` and `ed25519-dalek` (RustCrypto, dalek) only read a PKCS#8 PEM private key to derive
//!   its public key (the JWKS entry and the [`jsonwebtoken::DecodingKey`]), and generate new
//!   keys ([`generate`]): `ring` signs with a PKCS#8 key but will not hand out a public key's
//!   coordinates or write a PEM.
//!
//! The only JOSE read here by hand is the header's `alg` and `kid`, to say why a token is
//! refused ([`Refusal`]) before any key is tried; `jsonwebtoken` then checks the token again in
//! full.
//!
//! # Time
//!
//! `jsonwebtoken`'s own `exp`/`nbf` checks read the system clock, so they are off: [`verify`]
//! checks the claims against the `now` it is given. `exp` is strict (a token is expired from its
//! `exp` second on); `nbf` allows [`CLOCK_SKEW_SECS`], for a token signed by another node whose
//! clock runs a little ahead.
//!
//! # Cache
//!
//! A visitor presents the same token on every request. Checking its signature costs tens of
//! microseconds (an ECDSA or Ed25519 verification, plus base64 and JSON), so each ring keeps, per
//! worker thread, a small LRU of token values whose signature checked out (keyed hash of the
//! bytes, then the bytes compared in constant time): a repeat costs a hash and a compare. Only
//! the signature check is skipped: expiry, `nbf`, issuer, audience, room and the room's reset are
//! checked on every call. The cache belongs to one ring (and its clones): a ring built on reload
//! starts empty, so a key removed from the ring stops verifying at once.
//!
//! [`verify`]: JwtKeys::verify

use std::fmt;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::sign::is_valid_key_id;
use crate::thread_cache::PerThreadLru;
use crate::time::Timestamp;
use crate::token::constant_time_eq;

/// Tokens longer than this are refused as [`Refusal::Malformed`] before any parsing.
pub const MAX_JWT_LEN: usize = 8 * 1024;

/// How far `nbf` may be ahead of `now`, seconds: clocks of the nodes that sign and verify may
/// differ by this much. `exp` gets no leeway.
pub const CLOCK_SKEW_SECS: u64 = 5;

/// Token values remembered as verified, per ring and worker thread (each entry is the token and
/// its claims, about 1 KiB).
const VERIFIED_CACHE: usize = 4096;

/// A signature algorithm a [`JwtKey`] signs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// Ed25519.
    EdDsa,
}

impl Algorithm {
    /// The algorithm of a JOSE name (`ES256`, `EdDSA`, exactly), as a config names it; `None`
    /// for any other name.
    pub fn parse(name: &str) -> Option<Algorithm> {
        match name {
            "ES256" => Some(Algorithm::Es256),
            "EdDSA" => Some(Algorithm::EdDsa),
            _ => None,
        }
    }

    /// The JOSE name: the `alg` of headers and JWKS entries.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Es256 => "ES256",
            Algorithm::EdDsa => "EdDSA",
        }
    }

    fn jose(self) -> jsonwebtoken::Algorithm {
        match self {
            Algorithm::Es256 => jsonwebtoken::Algorithm::ES256,
            Algorithm::EdDsa => jsonwebtoken::Algorithm::EdDSA,
        }
    }

    fn key_kind(self) -> &'static str {
        match self {
            Algorithm::Es256 => "P-256",
            Algorithm::EdDsa => "Ed25519",
        }
    }
}

/// One key pair: its id, algorithm, the keys `jsonwebtoken` signs and verifies with, and its
/// public JWK. `Debug` prints the id and algorithm only.
#[derive(Clone)]
pub struct JwtKey {
    kid: String,
    algorithm: Algorithm,
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// `jsonwebtoken`'s checks for this key: its algorithm only, no clock.
    validation: Validation,
    jwk: serde_json::Value,
}

impl fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtKey")
            .field("kid", &self.kid)
            .field("algorithm", &self.algorithm)
            .finish()
    }
}

impl JwtKey {
    /// Reads a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`, as [`generate`] and
    /// `openssl genpkey` write it) for `algorithm`, and derives its public key. Called when the
    /// edge loads its JWT keys. The error names the key id, never the key: a key id outside
    /// `[A-Za-z0-9._-]{1,64}`, or a PEM that is not a private key of the algorithm's kind (a P-256
    /// key for ES256, an Ed25519 key for EdDSA).
    pub fn from_pem(kid: &str, algorithm: Algorithm, pem: &str) -> Result<JwtKey, String> {
        if !is_valid_key_id(kid) {
            return Err(format!(
                "jwt key id {kid:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', '-'"
            ));
        }
        let wrong = || {
            format!(
                "jwt key {kid}: not a PKCS#8 PEM {} private key (for {})",
                algorithm.key_kind(),
                algorithm.as_str()
            )
        };
        let (encoding, decoding, mut jwk) = match algorithm {
            Algorithm::Es256 => {
                use p256::elliptic_curve::sec1::ToEncodedPoint as _;
                use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
                let secret = p256::SecretKey::from_pkcs8_pem(pem).map_err(|_| wrong())?;
                // Re-encoded, so `ring` gets the form it needs (with the public key) whatever
                // tool wrote the PEM.
                let der = secret.to_pkcs8_der().map_err(|_| wrong())?;
                let encoding = EncodingKey::from_ec_der(der.as_bytes());
                let point = secret.public_key().to_encoded_point(false);
                let (Some(x), Some(y)) = (point.x(), point.y()) else {
                    return Err(wrong());
                };
                let (x, y) = (URL_SAFE_NO_PAD.encode(x), URL_SAFE_NO_PAD.encode(y));
                let decoding = DecodingKey::from_ec_components(&x, &y).map_err(|_| wrong())?;
                let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "x": x, "y": y});
                (encoding, decoding, jwk)
            }
            Algorithm::EdDsa => {
                use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
                let secret = ed25519_dalek::SigningKey::from_pkcs8_pem(pem).map_err(|_| wrong())?;
                let der = secret.to_pkcs8_der().map_err(|_| wrong())?;
                let encoding = EncodingKey::from_ed_der(der.as_bytes());
                let x = URL_SAFE_NO_PAD.encode(secret.verifying_key().as_bytes());
                let decoding = DecodingKey::from_ed_components(&x).map_err(|_| wrong())?;
                let jwk = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": x});
                (encoding, decoding, jwk)
            }
        };
        jwk["kid"] = kid.into();
        jwk["alg"] = algorithm.as_str().into();
        jwk["use"] = "sig".into();
        Ok(JwtKey {
            kid: kid.to_owned(),
            algorithm,
            encoding,
            decoding,
            validation: validation(algorithm),
            jwk,
        })
    }

    /// The key id (`kid` of headers and of the JWKS).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The algorithm this key signs with.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The public key as an RFC 7517 JWK (`kty`, `crv`, `x`, `y` for P-256, `kid`, `alg`,
    /// `use: "sig"`): what [`JwtKeys::jwks`] publishes.
    pub fn jwk(&self) -> &serde_json::Value {
        &self.jwk
    }
}

/// `jsonwebtoken`'s checks for a key of `algorithm`: the signature and the header's `alg`. The
/// claims are checked by [`check_claims`] against the caller's clock.
fn validation(algorithm: Algorithm) -> Validation {
    let mut v = Validation::new(algorithm.jose());
    v.validate_exp = false;
    v.validate_nbf = false;
    v.validate_aud = false;
    v.leeway = 0;
    v.required_spec_claims.clear();
    v
}

/// A fresh private key for `algorithm`, PKCS#8 PEM, from the OS's random source (for
/// `vestibule keygen --jwt`). [`JwtKey::from_pem`] reads it.
pub fn generate(algorithm: Algorithm) -> String {
    use rand::rngs::OsRng;
    let line = p256::pkcs8::LineEnding::LF;
    match algorithm {
        Algorithm::Es256 => {
            use p256::pkcs8::EncodePrivateKey as _;
            p256::SecretKey::random(&mut OsRng)
                .to_pkcs8_pem(line)
                .expect("a P-256 key encodes as PKCS#8")
                .to_string()
        }
        Algorithm::EdDsa => {
            use ed25519_dalek::pkcs8::EncodePrivateKey as _;
            ed25519_dalek::SigningKey::generate(&mut OsRng)
                .to_pkcs8_pem(line)
                .expect("an Ed25519 key encodes as PKCS#8")
                .to_string()
        }
    }
}

/// The claims of a token. Times are Unix seconds; `queue_number` and `event` are left out of
/// the token when `None`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Who issued it (the edge's configured issuer).
    pub iss: String,
    /// Who it is for (the gateway's configured audience).
    pub aud: String,
    /// The visitor it was issued to (their identity in the room).
    pub sub: String,
    /// When it was issued.
    pub iat: u64,
    /// Not valid before.
    pub nbf: u64,
    /// Not valid from this second on.
    pub exp: u64,
    /// This token's unique id.
    pub jti: String,
    /// The room that let the visitor through.
    pub room: String,
    /// The visitor's place in line, where the room counts one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_number: Option<u64>,
    /// The room's event, when one is scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
}

/// What a verified token must say, besides its signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect<'a> {
    /// `iss` must be this.
    pub issuer: &'a str,
    /// `aud` must be this.
    pub audience: &'a str,
    /// `room` must be this (another room's token is [`Refusal::WrongAudience`]).
    pub room: &'a str,
    /// Tokens with `iat` before this (Unix seconds) are [`Refusal::Reset`]: the room was reset
    /// then, and everything issued before is void. 0 refuses none.
    pub issued_after: u64,
}

/// Why a token was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Not a JWT: too long, not three base64url parts, not JSON, or claims missing.
    Malformed,
    /// No `kid`, or one the ring does not hold.
    UnknownKey,
    /// The signature does not match the key (a tampered or forged token).
    BadSignature,
    /// `alg` is `none`, an HMAC (`HS*`), or not the algorithm of the `kid`'s key.
    BadAlgorithm,
    /// `now` is at or past `exp`.
    Expired,
    /// `now` is before `nbf` (beyond [`CLOCK_SKEW_SECS`]).
    NotYetValid,
    /// `iss` is not the expected issuer.
    WrongIssuer,
    /// `aud` is not the expected audience, or `room` not the expected room.
    WrongAudience,
    /// Issued before the room's reset ([`Expect::issued_after`]).
    Reset,
}

impl Refusal {
    /// Every reason, in declaration order (one metric series each).
    pub const ALL: [Refusal; 9] = [
        Refusal::Malformed,
        Refusal::UnknownKey,
        Refusal::BadSignature,
        Refusal::BadAlgorithm,
        Refusal::Expired,
        Refusal::NotYetValid,
        Refusal::WrongIssuer,
        Refusal::WrongAudience,
        Refusal::Reset,
    ];

    /// The reason as a metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::UnknownKey => "unknown_key",
            Refusal::BadSignature => "bad_signature",
            Refusal::BadAlgorithm => "bad_algorithm",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::WrongIssuer => "wrong_issuer",
            Refusal::WrongAudience => "wrong_audience",
            Refusal::Reset => "reset",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token values whose signature checked out, per thread: keyed hash of the value -> (the value,
/// its claims).
struct VerifiedJwts {
    hasher: ahash::RandomState,
    maps: PerThreadLru<u64, (Box<[u8]>, Arc<Claims>)>,
}

/// The JWT key ring: the first key signs, every key verifies and is published. Clones share
/// one cache of verified tokens; a ring built anew has its own.
#[derive(Clone)]
pub struct JwtKeys {
    keys: Arc<[JwtKey]>,
    verified: Arc<VerifiedJwts>,
}

impl fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtKeys").field("keys", &self.keys).finish()
    }
}

/// The part of a header read before any key is tried.
#[derive(Deserialize)]
struct Peek {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

impl JwtKeys {
    /// A ring of `keys`, in order: the first signs. When two keys share a `kid`, the first is
    /// used. Built when the edge loads its JWT keys (and anew on reload).
    pub fn new(keys: Vec<JwtKey>) -> JwtKeys {
        JwtKeys {
            keys: keys.into(),
            verified: Arc::new(VerifiedJwts {
                hasher: ahash::RandomState::new(),
                maps: PerThreadLru::new(VERIFIED_CACHE),
            }),
        }
    }

    /// Whether the ring holds no key: it then signs nothing and verifies nothing.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, in order (the first signs).
    pub fn keys(&self) -> &[JwtKey] {
        &self.keys
    }

    fn key(&self, kid: &str) -> Option<&JwtKey> {
        self.keys.iter().find(|k| k.kid == kid)
    }

    /// The public keys as an RFC 7517 JWK Set, `{"keys":[...]}`, every key in ring order: what
    /// the edge serves for gateways to verify with.
    pub fn jwks(&self) -> String {
        let keys: Vec<&serde_json::Value> = self.keys.iter().map(|k| &k.jwk).collect();
        serde_json::json!({ "keys": keys }).to_string()
    }

    /// `claims` signed by the first key (header `alg`, `kid`, `typ: JWT`): called when a room
    /// lets a visitor through ([`Claims`]) and for OpenID Connect ID tokens. Panics on an empty ring; the edge signs only with keys loaded.
    pub fn sign<C: Serialize>(&self, claims: &C) -> String {
        let key = self.keys.first().expect("a JWT ring that signs has a key");
        let mut header = Header::new(key.algorithm.jose());
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, claims, &key.encoding).expect("claims sign with a JWT key")
    }

    /// The claims of `token` if one of the ring's keys signed it and it says what `expect`
    /// asks, at `now`; else why not. Called for every request that presents a token.
    ///
    /// Order: length, then the header (`alg: none` and `HS*` are [`Refusal::BadAlgorithm`]
    /// before any key is tried; no or an unknown `kid` is [`Refusal::UnknownKey`]; an `alg`
    /// other than the key's is `BadAlgorithm`), the signature, then the claims: issuer,
    /// audience and room, reset, expiry, `nbf`. A token seen before on this thread skips
    /// everything up to the claims (see the module's doc).
    pub fn verify(
        &self,
        token: &str,
        expect: &Expect,
        now: Timestamp,
    ) -> Result<Arc<Claims>, Refusal> {
        if token.len() > MAX_JWT_LEN {
            return Err(Refusal::Malformed);
        }
        let claims = self.verified_signature(token)?;
        check_claims(&claims, expect, now)?;
        Ok(claims)
    }

    /// The claims of `token` if its signature checks out, from this thread's cache when it did
    /// before.
    fn verified_signature(&self, token: &str) -> Result<Arc<Claims>, Refusal> {
        let cache = &self.verified;
        let hash = cache.hasher.hash_one(token.as_bytes());
        let hit = cache.maps.with(|c| {
            c.get(&hash)
                .filter(|(bytes, _)| constant_time_eq(bytes, token.as_bytes()))
                .map(|(_, claims)| claims.clone())
        });
        if let Some(Some(claims)) = hit {
            return Ok(claims);
        }
        let claims = Arc::new(self.check_signature(token)?);
        cache
            .maps
            .with(|c| c.put(hash, (token.as_bytes().into(), claims.clone())));
        Ok(claims)
    }

    /// The uncached check: header, key, signature (by `jsonwebtoken`), claims decoded.
    fn check_signature(&self, token: &str) -> Result<Claims, Refusal> {
        let (head, _) = token.split_once('.').ok_or(Refusal::Malformed)?;
        let head = URL_SAFE_NO_PAD
            .decode(head)
            .map_err(|_| Refusal::Malformed)?;
        let peek: Peek = serde_json::from_slice(&head).map_err(|_| Refusal::Malformed)?;
        let alg = peek.alg.as_bytes();
        if peek.alg.eq_ignore_ascii_case("none")
            || alg.get(..2).is_some_and(|p| p.eq_ignore_ascii_case(b"HS"))
        {
            return Err(Refusal::BadAlgorithm);
        }
        let key = peek
            .kid
            .as_deref()
            .and_then(|kid| self.key(kid))
            .ok_or(Refusal::UnknownKey)?;
        if peek.alg != key.algorithm.as_str() {
            return Err(Refusal::BadAlgorithm);
        }
        match jsonwebtoken::decode::<Claims>(token, &key.decoding, &key.validation) {
            Ok(data) => Ok(data.claims),
            Err(e) => Err(match e.kind() {
                ErrorKind::InvalidSignature | ErrorKind::Crypto(_) => Refusal::BadSignature,
                ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                    Refusal::BadAlgorithm
                }
                _ => Refusal::Malformed,
            }),
        }
    }
}

/// The checks of a verified token's claims against `expect` at `now`, cached or not.
fn check_claims(claims: &Claims, expect: &Expect, now: Timestamp) -> Result<(), Refusal> {
    if claims.iss != expect.issuer {
        return Err(Refusal::WrongIssuer);
    }
    if claims.aud != expect.audience || claims.room != expect.room {
        return Err(Refusal::WrongAudience);
    }
    if claims.iat < expect.issued_after {
        return Err(Refusal::Reset);
    }
    if now.millis() >= claims.exp.saturating_mul(1000) {
        return Err(Refusal::Expired);
    }
    if now.secs().saturating_add(CLOCK_SKEW_SECS) < claims.nbf {
        return Err(Refusal::NotYetValid);
    }
    Ok(())
}

/// Fixed keys for tests, benchmarks and fuzzing (never for a real ring).
#[doc(hidden)]
pub mod testing {
    use super::{Algorithm, Claims, Expect, JwtKey, JwtKeys};

    /// A P-256 key (written by `openssl genpkey`).
    pub const ES256_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgaukQI2/SRxTqJZSj
dudIn3mf5LnnjkPgMbJfWPnkvtihRANCAATn5f2/xWMMYeW2c9N6Y5DYLTEJqK+A
2nOlYzHQh4ZJtE6SBDfjF4jcAKghvXygA9Nrv+3oSxVnfrike2tYFX47
-----END PRIVATE KEY-----
";

    /// Another P-256 key.
    pub const ES256_PEM_2: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgFDF4WgXoiC3LzviU
IWjAFGghR7puG8+e9nVBsk4lp3mhRANCAAQwkm5gbuvIRFgUnInvEh2hfTLCLDCB
26om+84mua+TMBLHp/ukhZsoFGWjuSz+zDGKchoZNFgTb2lQfSc6+6vx
-----END PRIVATE KEY-----
";

    /// An Ed25519 key (written by `openssl genpkey`: PKCS#8 v1, no public key inside).
    pub const ED25519_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIHJw+Di3gHiDpcbhcPw6cB8qgp1Oog9C8/dYNz/JEYO8
-----END PRIVATE KEY-----
";

    /// `now` of the test claims: 2023-11-14T22:13:20Z.
    pub const NOW: u64 = 1_700_000_000;

    /// A ring of one key: `es1` (ES256) or `ed1` (EdDSA).
    pub fn ring(algorithm: Algorithm) -> JwtKeys {
        let key = match algorithm {
            Algorithm::Es256 => JwtKey::from_pem("es1", algorithm, ES256_PEM),
            Algorithm::EdDsa => JwtKey::from_pem("ed1", algorithm, ED25519_PEM),
        };
        JwtKeys::new(vec![key.unwrap_or_else(|e| panic!("{e}"))])
    }

    /// What [`claims`] is issued for.
    pub fn expect() -> Expect<'static> {
        Expect {
            issuer: "https://edge.example",
            audience: "api.example",
            room: "sale",
            issued_after: 0,
        }
    }

    /// Claims [`expect`] accepts from [`NOW`] for an hour.
    pub fn claims() -> Claims {
        Claims {
            iss: "https://edge.example".into(),
            aud: "api.example".into(),
            sub: "203.0.113.0/24".into(),
            iat: NOW,
            nbf: NOW,
            exp: NOW + 3600,
            jti: "0123456789abcdef".into(),
            room: "sale".into(),
            queue_number: Some(42),
            event: None,
        }
    }
}

#[cfg(test)]
mod tests;
