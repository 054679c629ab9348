//! The enqueue token verifier: any bytes as a token (when they are UTF-8), against a room's
//! HS256 secret and a site's ES256 public key, never panic and answer the same twice; whatever
//! verifies is an account identity, and is another room's refusal. Any bytes as a query string
//! lose every `vestibule_enqueue` pair and nothing else.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vestibule::enqueue::testing::{ES256_PUBLIC_PEM, NOW, SECRET};
use vestibule::enqueue::{is_account, strip_from_query, token_of, verify, EnqueueKey, Refusal};
use vestibule::time::Timestamp;

/// The HS256 secret and the ES256 public key the seeds in `fuzz/seeds/enqueue/` are signed for.
fn keys() -> &'static [EnqueueKey; 2] {
    static KEYS: OnceLock<[EnqueueKey; 2]> = OnceLock::new();
    KEYS.get_or_init(|| {
        [
            EnqueueKey::from_bytes(SECRET).expect("the secret"),
            EnqueueKey::from_bytes(ES256_PUBLIC_PEM.as_bytes()).expect("the public key"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = Timestamp::from_secs(NOW);
    for key in keys() {
        let first = verify(text, key, "sale", now);
        assert_eq!(first, verify(text, key, "sale", now), "not the same answer twice");
        if let Ok(identity) = first {
            assert!(is_account(identity.as_str()), "{identity}");
            assert_eq!(verify(text, key, "other", now), Err(Refusal::WrongAudience));
        }
    }
    if let Some(kept) = strip_from_query(text) {
        let headers = http::HeaderMap::new();
        assert_eq!(token_of(&headers, Some(&kept)), None, "{kept:?}");
        assert!(kept.len() < text.len());
    }
});
