//! Signing keys: one key of the ring, the MAC it makes, and how a signed value names its key.
//!
//! The lowest layer of the core: tokens, challenges and invitations sign and check with a
//! [`SigningKey`], and find the key a value names through [`Keys`] (the key ring is one).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};

/// The keys a signed value may name, by id.
pub trait Keys {
    /// The key of id `kid`, if the ring holds it.
    fn key(&self, kid: &str) -> Option<&SigningKey>;
}

pub type HmacSha512 = Hmac<Sha512>;

/// One signing key, ready to use.
#[derive(Clone)]
pub struct SigningKey {
    id: String,
    mac: HmacSha512,
    /// Keyed with a key derived from this one, for the draws of tokens this key signed: nobody
    /// without the ring can compute whether a token wins.
    draw_mac: Hmac<Sha256>,
    /// SHA-256 of the key bytes, to tell "same id, new secret" apart in reload diffs without
    /// keeping or showing the secret itself.
    fingerprint: [u8; 32],
}

impl SigningKey {
    pub fn new(id: &str, secret: &[u8]) -> SigningKey {
        use sha2::Digest;
        let mac = HmacSha512::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
        // A key of its own for draws (domain-separated), so draw seeds reveal nothing about
        // signatures and the other way round.
        let mut derive = mac.clone();
        derive.update(b"vestibule draw key v1");
        let draw_key = derive.finalize().into_bytes();
        SigningKey {
            id: id.to_owned(),
            // HMAC accepts keys of any length.
            mac,
            draw_mac: Hmac::<Sha256>::new_from_slice(&draw_key[..32])
                .unwrap_or_else(|_| unreachable!()),
            fingerprint: Sha256::digest(secret).into(),
        }
    }

    /// The seed of the draws of a token this key signed: HMAC-SHA256 of its signature under the
    /// derived draw key.
    pub(crate) fn draw_seed(&self, signature: &[u8]) -> [u8; 32] {
        let mut mac = self.draw_mac.clone();
        mac.update(signature);
        mac.finalize().into_bytes().into()
    }

    /// A visitor's identity as events out carry it: the lowercase hex of the first 16 bytes of
    /// HMAC-SHA512 under this key over a domain of its own and `identity`. The same visitor
    /// hashes alike on every node while the ring's active key stays; without the ring nobody
    /// can tell whose it is.
    pub fn identity_hash(&self, identity: &str) -> String {
        hex::encode(self.short_mac(b"vestibule event identity v1", &[identity.as_bytes()]))
    }

    /// SHA-256 of the key bytes: tells "same id, new secret" apart without the secret.
    pub fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// A fresh MAC keyed with this key.
    pub(crate) fn mac(&self) -> HmacSha512 {
        self.mac.clone()
    }

    /// The first 16 bytes of HMAC-SHA512 over `domain` and then each of `parts` prefixed with
    /// its length (4 bytes, big-endian): the signature of challenges and invitations,
    /// where every field is a part and no two messages can be spelled alike.
    pub(crate) fn short_mac(&self, domain: &[u8], parts: &[&[u8]]) -> [u8; 16] {
        use hmac::Mac;
        let mut m = self.mac.clone();
        m.update(domain);
        for part in parts {
            m.update(&(part.len() as u32).to_be_bytes());
            m.update(part);
        }
        let full = m.finalize().into_bytes();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        out
    }
}

/// `text` split at every `sep` into exactly `N` parts; `None` for more or fewer.
pub fn split_exact<const N: usize>(text: &str, sep: char) -> Option<[&str; N]> {
    let mut parts = text.split(sep);
    let mut out = [""; N];
    for slot in &mut out {
        *slot = parts.next()?;
    }
    parts.next().is_none().then_some(out)
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.id)
    }
}

/// Key ids appear in cookies (`kid=`), so they stay within a small, cookie-safe alphabet.
pub fn is_valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_hashes_are_keyed_stable_and_apart() {
        let a = SigningKey::new("a", b"a key of thirty-two bytes or so..");
        let b = SigningKey::new("b", b"another key of thirty-two bytes..");
        let h = a.identity_hash("198.51.100.7");
        assert_eq!(h.len(), 32);
        assert!(h
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(
            h,
            a.identity_hash("198.51.100.7"),
            "the same visitor hashes alike"
        );
        assert_ne!(h, a.identity_hash("198.51.100.8"));
        assert_ne!(
            h,
            b.identity_hash("198.51.100.7"),
            "another key, another hash"
        );
    }
}
