//! The token parser and verifier: any bytes as a cookie value, against a ring, through the
//! verified-token cache, never panic; whatever verifies re-signs to the same bytes.
#![no_main]

mod common;

use common::ring;
use libfuzzer_sys::fuzz_target;
use vestibule::identity::Identity;
use vestibule::time::Timestamp;
use vestibule::token::Token;

fuzz_target!(|data: &[u8]| {
    let ring = ring();
    let uid = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
    let now = Timestamp::from_secs(1_700_000_000);
    if let Ok(token) = Token::parse(data) {
        let verdict = token.verify(ring, &uid, now);
        let _ = token.draw(ring);
        if token.verify_signature(ring).is_ok() {
            // Only what we signed verifies: signing the same claims gives the same value.
            let key = ring.get(&token.claims.kid).expect("verified kid is in the ring");
            let again = token.claims.sign(key);
            assert!(Token::parse(again.as_bytes()).is_ok());
        }
        let _ = verdict;
    }
    // The cached path agrees with the uncached one.
    let cached = ring.check(data).map(|t| t.claims.clone());
    let direct = Token::parse(data).and_then(|t| t.verify_signature(ring).map(|()| t.claims));
    assert_eq!(cached, direct);
});
