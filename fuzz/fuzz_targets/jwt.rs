//! The JWT verifier: any bytes as a token (when they are UTF-8), against a ring of an ES256 and
//! an EdDSA key, never panic; the cached answer (a second call) is the first one; whatever
//! verifies carries the claims the ring expects, and is refused after its expiry.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vestibule::jwt::testing::{claims, expect, ED25519_PEM, ES256_PEM, NOW};
use vestibule::jwt::{Algorithm, JwtKey, JwtKeys, Refusal};
use vestibule::time::Timestamp;

/// `es1` (signs) and `ed1`. The seeds in `fuzz/seeds/jwt/` are signed with it.
fn ring() -> &'static JwtKeys {
    static RING: OnceLock<JwtKeys> = OnceLock::new();
    RING.get_or_init(|| {
        JwtKeys::new(vec![
            JwtKey::from_pem("es1", Algorithm::Es256, ES256_PEM).expect("es1"),
            JwtKey::from_pem("ed1", Algorithm::EdDsa, ED25519_PEM).expect("ed1"),
        ])
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let ring = ring();
    let now = Timestamp::from_secs(NOW);
    let first = ring.verify(token, &expect(), now);
    let again = ring.verify(token, &expect(), now);
    assert_eq!(first, again, "the cached answer differs");
    if let Ok(got) = first {
        assert_eq!(got.iss, claims().iss);
        assert_eq!(got.room, claims().room);
        assert_eq!(
            ring.verify(token, &expect(), Timestamp::from_secs(got.exp)),
            Err(Refusal::Expired)
        );
    }
});
