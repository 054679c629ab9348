//! The OpenID Provider's inputs: an authorization request's query, a token request's form body
//! and `Authorization` header, and a code. None of them ever panics; a code that opens is one
//! the ring sealed, and sealing its grant again gives a code that opens to the same grant.
//!
//! The input is `query \0 body \0 authorization`, each part also tried as a code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vestibule::config::{OidcClient, OidcConfig};
use vestibule::keys::testing::ring;
use vestibule::oidc::{authorize, code, token};
use vestibule::time::Timestamp;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == 0);
    let (query, body, authorization) = (parts.next(), parts.next(), parts.next());
    let oidc = OidcConfig {
        issuer: "https://q.example/.vestibule/oidc".into(),
        room: "sale".into(),
        clients: vec![OidcClient {
            id: "app".into(),
            secret: "s3cret-s3cret-s3cret".into(),
            redirect_uris: vec!["https://app.example/cb".into()],
        }],
    };
    let query = query.and_then(|q| std::str::from_utf8(q).ok());
    match authorize::check(query, &oidc) {
        Ok(request) => {
            assert_eq!(request.redirect_uri, "https://app.example/cb");
            let _ = authorize::success_location(&request, "c");
        }
        Err(refusal) => {
            if let Some(location) = refusal.location() {
                assert!(
                    location.starts_with("https://app.example/cb?"),
                    "{location}"
                );
            }
        }
    }
    if let Ok(request) = token::read(body.unwrap_or_default(), authorization) {
        let _ = token::authenticate(&oidc, request.credentials.as_ref());
    }
    let ring = ring();
    let now = Timestamp::from_secs(1_800_000_000);
    for part in [query.map(str::as_bytes), body, authorization]
        .into_iter()
        .flatten()
    {
        let Ok(text) = std::str::from_utf8(part) else {
            continue;
        };
        let _ = code::mark(text);
        if let Ok(grant) = code::Grant::open(text, &ring, now) {
            let again = grant.seal(&ring);
            assert_eq!(code::Grant::open(&again, &ring, now), Ok(grant));
        }
    }
});
