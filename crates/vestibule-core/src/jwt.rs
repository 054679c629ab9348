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
    /// lets a visitor through. Panics on an empty ring; the edge signs only with keys loaded.
    pub fn sign(&self, claims: &Claims) -> String {
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
mod tests {
    use super::testing::{claims, expect, ring, ED25519_PEM, ES256_PEM, ES256_PEM_2, NOW};
    use super::*;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// A token with this header and claims and a signature of garbage.
    fn crafted(header: &serde_json::Value, claims: &Claims, sig: &[u8]) -> String {
        format!(
            "{}.{}.{}",
            b64(header.to_string().as_bytes()),
            b64(serde_json::to_string(claims).unwrap().as_bytes()),
            b64(sig)
        )
    }

    #[test]
    fn round_trip_both_algorithms() {
        for alg in [Algorithm::Es256, Algorithm::EdDsa] {
            let keys = ring(alg);
            let token = keys.sign(&claims());
            let header = jsonwebtoken::decode_header(&token).unwrap();
            assert_eq!(header.alg, alg.jose());
            assert_eq!(header.kid.as_deref(), Some(keys.keys()[0].kid()));
            let got = keys.verify(&token, &expect(), at(NOW)).unwrap();
            assert_eq!(*got, claims());
            // No `event` in the token when there is none.
            let payload = token.split('.').nth(1).unwrap();
            let payload = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
            assert!(!payload.contains("event"), "{payload}");
            assert!(payload.contains("\"queue_number\":42"), "{payload}");
        }
    }

    #[test]
    fn tokens_signed_by_another_implementation_verify() {
        // Signed with the test keys by Python's `cryptography` (the seeds of the fuzz target).
        let keys = JwtKeys::new(vec![
            JwtKey::from_pem("es1", Algorithm::Es256, ES256_PEM).unwrap(),
            JwtKey::from_pem("ed1", Algorithm::EdDsa, ED25519_PEM).unwrap(),
        ]);
        for token in [
            "eyJ0eXAiOiJKV1QiLCJhbGciOiJFUzI1NiIsImtpZCI6ImVzMSJ9.eyJpc3MiOiJodHRwczovL2VkZ2UuZXhhbXBsZSIsImF1ZCI6ImFwaS5leGFtcGxlIiwic3ViIjoiMjAzLjAuMTEzLjAvMjQiLCJpYXQiOjE3MDAwMDAwMDAsIm5iZiI6MTcwMDAwMDAwMCwiZXhwIjoxNzAwMDAzNjAwLCJqdGkiOiIwMTIzNDU2Nzg5YWJjZGVmIiwicm9vbSI6InNhbGUiLCJxdWV1ZV9udW1iZXIiOjQyfQ.8HeYi9DCAyi0-9dJNos4srx6kkQbtBZC4z5pNLpOSf1nfyAU8IQ9m9t8bCuoFlXwDCiiE8ZWery-NuEVYAyPqw",
            "eyJ0eXAiOiJKV1QiLCJhbGciOiJFZERTQSIsImtpZCI6ImVkMSJ9.eyJpc3MiOiJodHRwczovL2VkZ2UuZXhhbXBsZSIsImF1ZCI6ImFwaS5leGFtcGxlIiwic3ViIjoiMjAzLjAuMTEzLjAvMjQiLCJpYXQiOjE3MDAwMDAwMDAsIm5iZiI6MTcwMDAwMDAwMCwiZXhwIjoxNzAwMDAzNjAwLCJqdGkiOiIwMTIzNDU2Nzg5YWJjZGVmIiwicm9vbSI6InNhbGUiLCJxdWV1ZV9udW1iZXIiOjQyfQ.h-X_x3NGXzODtWJV3beyMi4stCCbBIQelGDh1Fqc2aHiOEaSNWZFrfTQLsecYnJWnoX0whBaB4xm2btCpBuZBw",
        ] {
            assert_eq!(*keys.verify(token, &expect(), at(NOW)).unwrap(), claims());
        }
    }

    #[test]
    fn algorithm_names() {
        for alg in [Algorithm::Es256, Algorithm::EdDsa] {
            assert_eq!(Algorithm::parse(alg.as_str()), Some(alg));
        }
        assert_eq!(Algorithm::parse("es256"), None);
        assert_eq!(Algorithm::parse("HS256"), None);
        assert_eq!(Algorithm::parse("none"), None);
    }

    #[test]
    fn the_jwks_verifies_tokens_independently() {
        let keys = JwtKeys::new(vec![
            JwtKey::from_pem("es1", Algorithm::Es256, ES256_PEM).unwrap(),
            JwtKey::from_pem("ed1", Algorithm::EdDsa, ED25519_PEM).unwrap(),
        ]);
        let jwks: serde_json::Value = serde_json::from_str(&keys.jwks()).unwrap();
        let entries = jwks["keys"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        for (entry, (kty, crv, alg)) in entries
            .iter()
            .zip([("EC", "P-256", "ES256"), ("OKP", "Ed25519", "EdDSA")])
        {
            assert_eq!(entry["kty"], kty);
            assert_eq!(entry["crv"], crv);
            assert_eq!(entry["alg"], alg);
            assert_eq!(entry["use"], "sig");
            assert_eq!(entry["y"].is_string(), kty == "EC");
            assert!(entry.get("d").is_none(), "no private part: {entry}");
        }
        // Signed by the first key, then by the second (as a ring with it first).
        let second = JwtKeys::new(vec![keys.keys()[1].clone()]);
        for (token, kid, alg) in [
            (keys.sign(&claims()), "es1", jsonwebtoken::Algorithm::ES256),
            (
                second.sign(&claims()),
                "ed1",
                jsonwebtoken::Algorithm::EdDSA,
            ),
        ] {
            // From the components of the JWKS entry, as a gateway does.
            let entry = entries.iter().find(|e| e["kid"] == kid).unwrap();
            let s = |f: &str| entry[f].as_str().unwrap().to_owned();
            let key = match alg {
                jsonwebtoken::Algorithm::ES256 => {
                    DecodingKey::from_ec_components(&s("x"), &s("y")).unwrap()
                }
                _ => DecodingKey::from_ed_components(&s("x")).unwrap(),
            };
            let mut v = Validation::new(alg);
            v.set_audience(&["api.example"]);
            v.set_issuer(&["https://edge.example"]);
            v.validate_exp = false;
            let got = jsonwebtoken::decode::<Claims>(&token, &key, &v).unwrap();
            assert_eq!(got.claims, claims());
            // And through jsonwebtoken's own JWK parsing.
            let set: jsonwebtoken::jwk::JwkSet = serde_json::from_value(jwks.clone()).unwrap();
            let jwk = set.find(kid).unwrap();
            let key = DecodingKey::from_jwk(jwk).unwrap();
            jsonwebtoken::decode::<Claims>(&token, &key, &v).unwrap();
        }
    }

    #[test]
    fn from_pem_refuses_the_wrong_kind_and_never_shows_the_key() {
        let e = JwtKey::from_pem("k1", Algorithm::Es256, ED25519_PEM).unwrap_err();
        assert!(e.contains("k1") && e.contains("P-256"), "{e}");
        let e = JwtKey::from_pem("k1", Algorithm::EdDsa, ES256_PEM).unwrap_err();
        assert!(e.contains("k1") && e.contains("Ed25519"), "{e}");
        assert!(JwtKey::from_pem("k1", Algorithm::Es256, "not a pem").is_err());
        assert!(JwtKey::from_pem("", Algorithm::Es256, ES256_PEM).is_err());
        assert!(JwtKey::from_pem("a b", Algorithm::Es256, ES256_PEM).is_err());
        for pem in [ES256_PEM, ED25519_PEM] {
            let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
            for alg in [Algorithm::Es256, Algorithm::EdDsa] {
                let shown = match JwtKey::from_pem("k1", alg, pem) {
                    Ok(key) => format!("{key:?} {:?}", JwtKeys::new(vec![key.clone()])),
                    Err(e) => e,
                };
                assert!(!shown.contains(&body[..20]), "{shown}");
                assert!(!shown.contains("PRIVATE"), "{shown}");
            }
        }
        let key = JwtKey::from_pem("k1", Algorithm::Es256, ES256_PEM).unwrap();
        assert_eq!(
            format!("{key:?}"),
            "JwtKey { kid: \"k1\", algorithm: Es256 }"
        );
    }

    #[test]
    fn generated_keys_load_sign_and_differ() {
        for alg in [Algorithm::Es256, Algorithm::EdDsa] {
            let pem = generate(alg);
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{alg:?}");
            assert_ne!(pem, generate(alg));
            let keys = JwtKeys::new(vec![JwtKey::from_pem("new", alg, &pem).unwrap()]);
            let token = keys.sign(&claims());
            assert!(keys.verify(&token, &expect(), at(NOW)).is_ok());
        }
    }

    #[test]
    fn each_refusal_from_a_crafted_token() {
        let keys = ring(Algorithm::Es256);
        let good = keys.sign(&claims());
        let refused = |token: &str| keys.verify(token, &expect(), at(NOW)).unwrap_err();

        // alg none, with and without a signature, with a known kid.
        for alg in ["none", "None", "NONE"] {
            let header = serde_json::json!({"alg": alg, "kid": "es1", "typ": "JWT"});
            assert_eq!(
                refused(&crafted(&header, &claims(), b"")),
                Refusal::BadAlgorithm
            );
            assert_eq!(
                refused(&crafted(&header, &claims(), b"x")),
                Refusal::BadAlgorithm
            );
        }
        // HS256 keyed with the public key's bytes (the classic confusion attack), and every HS*.
        let public = keys.jwks();
        let entry: serde_json::Value = serde_json::from_str(&public).unwrap();
        let x = entry["keys"][0]["x"].as_str().unwrap();
        for (alg, secret) in [
            (jsonwebtoken::Algorithm::HS256, public.as_bytes()),
            (jsonwebtoken::Algorithm::HS384, x.as_bytes()),
            (jsonwebtoken::Algorithm::HS512, ES256_PEM.as_bytes()),
        ] {
            let mut header = Header::new(alg);
            header.kid = Some("es1".into());
            let token = jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(secret))
                .unwrap();
            assert_eq!(refused(&token), Refusal::BadAlgorithm);
        }
        // Refused before any key is looked up: with no kid, or one the ring does not hold.
        for header in [
            serde_json::json!({"alg": "none"}),
            serde_json::json!({"alg": "none", "kid": "nobody"}),
            serde_json::json!({"alg": "HS256"}),
            serde_json::json!({"alg": "hs512", "kid": "nobody"}),
        ] {
            assert_eq!(
                refused(&crafted(&header, &claims(), b"sig")),
                Refusal::BadAlgorithm,
                "{header}"
            );
        }
        // An algorithm other than the kid's key's: EdDSA under an ES256 kid.
        let ed = JwtKey::from_pem("es1", Algorithm::EdDsa, ED25519_PEM).unwrap();
        let token = JwtKeys::new(vec![ed]).sign(&claims());
        assert_eq!(refused(&token), Refusal::BadAlgorithm);
        let header = serde_json::json!({"alg": "RS256", "kid": "es1"});
        assert_eq!(
            refused(&crafted(&header, &claims(), b"sig")),
            Refusal::BadAlgorithm
        );

        // Unknown and missing kid.
        let other = JwtKeys::new(vec![
            JwtKey::from_pem("es2", Algorithm::Es256, ES256_PEM_2).unwrap()
        ]);
        assert_eq!(refused(&other.sign(&claims())), Refusal::UnknownKey);
        let header = serde_json::json!({"alg": "ES256"});
        assert_eq!(
            refused(&crafted(&header, &claims(), &[0; 64])),
            Refusal::UnknownKey
        );

        // The right kid, another key's signature.
        let impostor = JwtKeys::new(vec![
            JwtKey::from_pem("es1", Algorithm::Es256, ES256_PEM_2).unwrap()
        ]);
        assert_eq!(refused(&impostor.sign(&claims())), Refusal::BadSignature);

        // A tampered payload under the original signature.
        let parts: Vec<&str> = good.split('.').collect();
        let mut more = claims();
        more.exp += 86_400;
        let tampered = format!(
            "{}.{}.{}",
            parts[0],
            b64(serde_json::to_string(&more).unwrap().as_bytes()),
            parts[2]
        );
        assert_eq!(refused(&tampered), Refusal::BadSignature);

        // Claims: each changed alone, signed by the ring's key.
        let with = |f: &dyn Fn(&mut Claims)| {
            let mut c = claims();
            f(&mut c);
            keys.sign(&c)
        };
        assert_eq!(refused(&with(&|c| c.exp = NOW)), Refusal::Expired);
        assert_eq!(refused(&with(&|c| c.exp = NOW - 1)), Refusal::Expired);
        assert_eq!(
            refused(&with(&|c| c.nbf = NOW + CLOCK_SKEW_SECS + 1)),
            Refusal::NotYetValid
        );
        assert!(keys
            .verify(
                &with(&|c| c.nbf = NOW + CLOCK_SKEW_SECS),
                &expect(),
                at(NOW)
            )
            .is_ok());
        assert_eq!(
            refused(&with(&|c| c.iss = "https://other.example".into())),
            Refusal::WrongIssuer
        );
        assert_eq!(
            refused(&with(&|c| c.aud = "other.example".into())),
            Refusal::WrongAudience
        );
        assert_eq!(
            refused(&with(&|c| c.room = "other-room".into())),
            Refusal::WrongAudience
        );
        let reset = Expect {
            issued_after: NOW + 1,
            ..expect()
        };
        assert_eq!(
            keys.verify(&good, &reset, at(NOW + 10)),
            Err(Refusal::Reset)
        );
        let same_second = Expect {
            issued_after: NOW,
            ..expect()
        };
        assert!(keys.verify(&good, &same_second, at(NOW)).is_ok());

        // Garbage.
        for token in [
            "",
            ".",
            "..",
            "garbage",
            "a.b.c",
            "eyJhbGciOiJFUzI1NiJ9",
            "!!!.???.***",
            &good[..good.len() / 2],
            &format!("{good}.extra"),
        ] {
            assert_eq!(refused(token), Refusal::Malformed, "{token:?}");
        }
        // A valid header with a payload that is not our claims, correctly signed.
        let header = Header {
            kid: Some("es1".into()),
            ..Header::new(jsonwebtoken::Algorithm::ES256)
        };
        let key = &keys.keys()[0].encoding;
        let token = jsonwebtoken::encode(&header, &serde_json::json!({"sub": "x"}), key).unwrap();
        assert_eq!(refused(&token), Refusal::Malformed);
        // Too long, whatever it holds.
        let long = format!("{good}{}", "A".repeat(MAX_JWT_LEN));
        assert_eq!(refused(&long), Refusal::Malformed);

        // Every reason has its label.
        let labels: Vec<&str> = Refusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            labels,
            [
                "malformed",
                "unknown_key",
                "bad_signature",
                "bad_algorithm",
                "expired",
                "not_yet_valid",
                "wrong_issuer",
                "wrong_audience",
                "reset"
            ]
        );
    }

    #[test]
    fn a_second_key_verifies_while_the_first_signs() {
        let old = JwtKey::from_pem("old", Algorithm::EdDsa, ED25519_PEM).unwrap();
        let new = JwtKey::from_pem("new", Algorithm::Es256, ES256_PEM).unwrap();
        let before = JwtKeys::new(vec![old.clone()]);
        let issued_before = before.sign(&claims());
        // Rotated: the new key signs, the old still verifies (and is published).
        let after = JwtKeys::new(vec![new, old]);
        let issued_after = after.sign(&claims());
        assert_eq!(
            jsonwebtoken::decode_header(&issued_after)
                .unwrap()
                .kid
                .as_deref(),
            Some("new")
        );
        for token in [&issued_before, &issued_after] {
            assert_eq!(*after.verify(token, &expect(), at(NOW)).unwrap(), claims());
        }
        assert!(after.jwks().contains("\"kid\":\"old\""));
        // The old ring does not know the new key.
        assert_eq!(
            before.verify(&issued_after, &expect(), at(NOW)),
            Err(Refusal::UnknownKey)
        );
        assert!(JwtKeys::new(Vec::new()).is_empty());
        assert_eq!(
            JwtKeys::new(Vec::new()).verify(&issued_after, &expect(), at(NOW)),
            Err(Refusal::UnknownKey)
        );
    }

    #[test]
    fn the_cache_gives_the_same_answers() {
        for alg in [Algorithm::Es256, Algorithm::EdDsa] {
            let keys = ring(alg);
            let token = keys.sign(&claims());
            let first = keys.verify(&token, &expect(), at(NOW)).unwrap();
            let again = keys.verify(&token, &expect(), at(NOW + 1)).unwrap();
            assert!(Arc::ptr_eq(&first, &again), "the second verify is a hit");
            // Claims are still checked on a hit: expiry, nbf, issuer, audience, room, reset.
            let exp = claims().exp;
            assert_eq!(
                keys.verify(&token, &expect(), at(exp)),
                Err(Refusal::Expired)
            );
            assert_eq!(
                keys.verify(&token, &expect(), Timestamp::from_millis(exp * 1000 - 1))
                    .map(|c| c.exp),
                Ok(exp)
            );
            assert_eq!(
                keys.verify(&token, &expect(), at(NOW - CLOCK_SKEW_SECS - 1)),
                Err(Refusal::NotYetValid)
            );
            let cases = [
                (
                    Expect {
                        issuer: "x",
                        ..expect()
                    },
                    Refusal::WrongIssuer,
                ),
                (
                    Expect {
                        audience: "x",
                        ..expect()
                    },
                    Refusal::WrongAudience,
                ),
                (
                    Expect {
                        room: "x",
                        ..expect()
                    },
                    Refusal::WrongAudience,
                ),
                (
                    Expect {
                        issued_after: NOW + 1,
                        ..expect()
                    },
                    Refusal::Reset,
                ),
            ];
            for (e, refusal) in cases {
                assert_eq!(keys.verify(&token, &e, at(NOW)), Err(refusal));
            }
            // A cached value does not make its neighbours valid.
            let bytes = token.as_bytes();
            for i in (0..bytes.len()).step_by(7) {
                let mut mutated = bytes.to_vec();
                mutated[i] ^= 0x01;
                let Ok(mutated) = String::from_utf8(mutated) else {
                    continue;
                };
                assert!(
                    keys.verify(&mutated, &expect(), at(NOW)).is_err(),
                    "mutation at {i} accepted after a cache hit"
                );
            }
            // Another ring with the same key id but another key has its own cache.
            let pem = match alg {
                Algorithm::Es256 => ES256_PEM_2,
                Algorithm::EdDsa => &generate(Algorithm::EdDsa),
            };
            let other = JwtKeys::new(vec![
                JwtKey::from_pem(keys.keys()[0].kid(), alg, pem).unwrap()
            ]);
            assert_eq!(
                other.verify(&token, &expect(), at(NOW)),
                Err(Refusal::BadSignature)
            );
            // A clone shares the cache.
            let clone = keys.clone();
            assert!(Arc::ptr_eq(
                &first,
                &clone.verify(&token, &expect(), at(NOW)).unwrap()
            ));
        }
    }
}
