//! Authorization codes: what the authorization endpoint hands the visitor's browser and the
//! token endpoint takes back.
//!
//! A code is `payload.mac.kid`: the [`Grant`] as base64url JSON, a MAC over it under a key of
//! the ring (`kid`, the active key when issued), so nobody can make one up or change what it
//! says. It is not encrypted: what it carries (the client, the redirect URI, the PKCE challenge,
//! the nonce and the visitor's subject) is no secret from the browser that carries it, and the
//! tokens it is traded for need the client's secret and the PKCE verifier too.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::CODE_LIFETIME;
use crate::keys::KeyRing;
use crate::store::{Mark, MarkKind};
use crate::time::Timestamp;

/// The domain of a code's MAC.
const DOMAIN: &[u8] = b"vestibule oidc code";
/// Codes longer than this are refused unread.
pub const MAX_CODE_LEN: usize = 4096;

/// What a code grants: sign-in of one visitor to one client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The client it was issued to.
    #[serde(rename = "c")]
    pub client_id: String,
    /// The redirect URI of the authorization request (the token request must name it again).
    #[serde(rename = "r")]
    pub redirect_uri: String,
    /// PKCE: base64url(SHA-256(verifier)).
    #[serde(rename = "p")]
    pub code_challenge: String,
    /// The authorization request's `nonce`, echoed in the ID token.
    #[serde(rename = "n", default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// The visitor's subject: a fresh random id per sign-in.
    #[serde(rename = "s")]
    pub sub: String,
    /// When the room let the visitor in and the code was issued (Unix seconds): `auth_time`.
    #[serde(rename = "t")]
    pub issued_at: u64,
}

/// Why a code was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeRefusal {
    /// Not a code: too long, not three parts, not base64url JSON.
    Malformed,
    /// A key the ring does not hold, or a MAC it did not make.
    Forged,
    /// Older than [`CODE_LIFETIME`] (or from the future).
    Expired,
}

impl Grant {
    /// A grant for the visitor the room just let in, with a fresh random subject.
    pub fn new(
        client_id: String,
        redirect_uri: String,
        code_challenge: String,
        nonce: Option<String>,
        now: Timestamp,
    ) -> Grant {
        use rand::RngCore;
        let mut sub = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut sub);
        Grant {
            client_id,
            redirect_uri,
            code_challenge,
            nonce,
            sub: hex::encode(sub),
            issued_at: now.secs(),
        }
    }

    /// The code for this grant, MACed with the ring's active key: called by the authorization
    /// endpoint once the room has let the visitor in.
    pub fn seal(&self, ring: &KeyRing) -> String {
        let json = serde_json::to_vec(self).expect("a grant serializes");
        let payload = URL_SAFE_NO_PAD.encode(json);
        let key = ring.active();
        let mac = hex::encode(key.short_mac(DOMAIN, &[payload.as_bytes()]));
        format!("{payload}.{mac}.{}", key.id())
    }

    /// The grant `code` carries, if a key of `ring` MACed it and it is younger than
    /// [`CODE_LIFETIME`] at `now`. Called by the token endpoint; says nothing of whether the
    /// code was used before (see [`mark`]).
    pub fn open(code: &str, ring: &KeyRing, now: Timestamp) -> Result<Grant, CodeRefusal> {
        if code.len() > MAX_CODE_LEN {
            return Err(CodeRefusal::Malformed);
        }
        let mut parts = code.splitn(3, '.');
        let (Some(payload), Some(mac), Some(kid)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(CodeRefusal::Malformed);
        };
        if mac.len() != 32 || !mac.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CodeRefusal::Malformed);
        }
        let key = ring.get(kid).ok_or(CodeRefusal::Forged)?;
        let expected = hex::encode(key.short_mac(DOMAIN, &[payload.as_bytes()]));
        use subtle::ConstantTimeEq;
        let same: bool = expected
            .as_bytes()
            .ct_eq(mac.to_ascii_lowercase().as_bytes())
            .into();
        if !same {
            return Err(CodeRefusal::Forged);
        }
        let json = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| CodeRefusal::Malformed)?;
        let grant: Grant = serde_json::from_slice(&json).map_err(|_| CodeRefusal::Malformed)?;
        let age = now.secs().checked_sub(grant.issued_at);
        match age {
            Some(age) if age < CODE_LIFETIME.as_secs() => Ok(grant),
            _ => Err(CodeRefusal::Expired),
        }
    }
}

/// The store mark that says `code` was traded for tokens: named by the code's MAC, the same on
/// every node. `None` for what is not shaped like a code.
pub fn mark(code: &str) -> Option<Mark> {
    let mac = code.split('.').nth(1)?;
    let bytes = hex::decode(mac.get(..16)?).ok()?;
    let id = u64::from_be_bytes(bytes.try_into().ok()?);
    Some(Mark {
        kind: MarkKind::CodeUsed,
        id,
    })
}

/// Until when a code's mark must be kept: past its lifetime, nobody can use it anyway.
pub fn mark_until(grant: &Grant) -> Timestamp {
    Timestamp::from_secs(grant.issued_at + CODE_LIFETIME.as_secs() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oidc::testing::ring;

    fn now() -> Timestamp {
        Timestamp::from_secs(1_800_000_000)
    }

    fn grant() -> Grant {
        Grant::new(
            "app".into(),
            "https://app.example/cb".into(),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
            Some("n-0S6_WzA2Mj".into()),
            now(),
        )
    }

    #[test]
    fn a_code_opens_to_its_grant_until_it_expires() {
        let g = grant();
        let code = g.seal(&ring());
        assert_eq!(Grant::open(&code, &ring(), now()), Ok(g.clone()));
        let last = Timestamp::from_secs(now().secs() + 59);
        assert_eq!(Grant::open(&code, &ring(), last), Ok(g));
        let expired = Timestamp::from_secs(now().secs() + 60);
        assert_eq!(
            Grant::open(&code, &ring(), expired),
            Err(CodeRefusal::Expired)
        );
        let before = Timestamp::from_secs(now().secs() - 1);
        assert_eq!(
            Grant::open(&code, &ring(), before),
            Err(CodeRefusal::Expired)
        );
    }

    #[test]
    fn a_changed_or_made_up_code_is_refused() {
        let code = grant().seal(&ring());
        let (payload, rest) = code.split_once('.').unwrap();
        // Another client, redirect URI or challenge: the MAC no longer matches.
        let mut other = grant();
        other.client_id = "evil".into();
        let json = serde_json::to_vec(&other).unwrap();
        let forged = format!("{}.{rest}", URL_SAFE_NO_PAD.encode(json));
        assert_eq!(
            Grant::open(&forged, &ring(), now()),
            Err(CodeRefusal::Forged)
        );
        let flipped = format!("{payload}.{}", rest.replacen(&rest[..1], "0", 1));
        if flipped != code {
            assert_eq!(
                Grant::open(&flipped, &ring(), now()),
                Err(CodeRefusal::Forged)
            );
        }
        let unknown_kid = format!("{}.other", &code[..code.rfind('.').unwrap()]);
        assert_eq!(
            Grant::open(&unknown_kid, &ring(), now()),
            Err(CodeRefusal::Forged)
        );
        for junk in ["", "a", "a.b", "a.b.c", &"x".repeat(MAX_CODE_LEN + 1)] {
            assert!(Grant::open(junk, &ring(), now()).is_err(), "{junk}");
        }
    }

    /// The fuzz seed, made outside (HMAC-SHA512 in Python): the same code.
    #[test]
    fn the_fuzz_seed_is_a_code_of_the_test_ring() {
        let grant = Grant {
            client_id: "app".into(),
            redirect_uri: "https://app.example/cb".into(),
            code_challenge: "GzvTOs9KrAsb2JgyJA1RSaH5OuAKgJJi-K-8XM8CVLo".into(),
            nonce: Some("n1".into()),
            sub: "00112233445566778899aabbccddeeff".into(),
            issued_at: now().secs(),
        };
        let ring = crate::keys::testing::ring();
        let seed = include_str!("../../../../fuzz/seeds/oidc/valid_code");
        assert_eq!(grant.seal(&ring), seed);
        assert_eq!(Grant::open(seed, &ring, now()), Ok(grant));
    }

    #[test]
    fn each_code_has_its_own_mark() {
        let a = grant().seal(&ring());
        let b = grant().seal(&ring());
        assert_ne!(a, b, "a fresh subject each time");
        assert_ne!(mark(&a), mark(&b));
        assert_eq!(mark(&a).unwrap().kind, MarkKind::CodeUsed);
        assert_eq!(mark("junk"), None);
    }
}
