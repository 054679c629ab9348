use super::testing::{hs256, NOW, SECRET};
use super::*;
use crate::jwt::testing::{ED25519_PEM, ES256_PEM, ES256_PEM_2};
use serde_json::json;

fn now() -> Timestamp {
    Timestamp::from_secs(NOW)
}

fn claims() -> serde_json::Value {
    json!({"sub": "alice", "aud": "sale", "exp": NOW + 300})
}

fn secret_key() -> EnqueueKey {
    EnqueueKey::from_bytes(SECRET).unwrap()
}

/// The public key PEM of a P-256 private key PEM, and a signer with the private key.
fn es256(private: &str) -> (EnqueueKey, jsonwebtoken::EncodingKey) {
    use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, EncodePublicKey as _};
    let secret = p256::SecretKey::from_pkcs8_pem(private).unwrap();
    let public = secret
        .public_key()
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .unwrap();
    let der = secret.to_pkcs8_der().unwrap();
    let key = EnqueueKey::from_bytes(public.as_bytes()).unwrap();
    (key, jsonwebtoken::EncodingKey::from_ec_der(der.as_bytes()))
}

/// The public key PEM of a P-256 private key PEM, as `p256` writes it.
fn written_pem(private: &str) -> String {
    use p256::pkcs8::{DecodePrivateKey as _, EncodePublicKey as _};
    let secret = p256::SecretKey::from_pkcs8_pem(private).unwrap();
    let pem = secret
        .public_key()
        .to_public_key_pem(p256::pkcs8::LineEnding::LF);
    assert_eq!(pem.as_deref().unwrap(), super::testing::ES256_PUBLIC_PEM);
    pem.unwrap()
}

fn ed25519() -> (EnqueueKey, jsonwebtoken::EncodingKey) {
    use ed25519_dalek::pkcs8::{
        DecodePrivateKey as _, EncodePrivateKey as _, EncodePublicKey as _,
    };
    let secret = ed25519_dalek::SigningKey::from_pkcs8_pem(ED25519_PEM).unwrap();
    let public = secret
        .verifying_key()
        .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .unwrap();
    let der = secret.to_pkcs8_der().unwrap();
    let key = EnqueueKey::from_bytes(public.as_bytes()).unwrap();
    (key, jsonwebtoken::EncodingKey::from_ed_der(der.as_bytes()))
}

fn sign(alg: Algorithm, key: &jsonwebtoken::EncodingKey, claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), claims, key).unwrap()
}

/// A token with this header and claims, and a signature of garbage.
fn unsigned(header: &str, claims: &serde_json::Value) -> String {
    let h = URL_SAFE_NO_PAD.encode(header);
    let c = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{h}.{c}.{}", URL_SAFE_NO_PAD.encode(b"not a signature"))
}

#[test]
fn hs256_es256_and_eddsa_tokens_are_accepted_as_the_account() {
    let alice = account_identity("sale", "alice");
    assert_eq!(
        verify(&hs256(&claims()), &secret_key(), "sale", now()),
        Ok(alice.clone())
    );
    let (key, signer) = es256(ES256_PEM);
    assert_eq!(key.algorithm(), "ES256");
    let written = EnqueueKey::from_bytes(super::testing::ES256_PUBLIC_PEM.as_bytes()).unwrap();
    assert_eq!(
        key,
        EnqueueKey::from_bytes(written_pem(ES256_PEM).as_bytes()).unwrap()
    );
    assert_eq!(written.algorithm(), "ES256");
    let token = sign(Algorithm::ES256, &signer, &claims());
    assert_eq!(verify(&token, &key, "sale", now()), Ok(alice.clone()));
    let (key, signer) = ed25519();
    assert_eq!(key.algorithm(), "EdDSA");
    let token = sign(Algorithm::EdDSA, &signer, &claims());
    assert_eq!(verify(&token, &key, "sale", now()), Ok(alice));
    // `aud` as a list naming the room.
    let listed = json!({"sub": "alice", "aud": ["shop", "sale"], "exp": NOW + 1});
    assert!(verify(&hs256(&listed), &secret_key(), "sale", now()).is_ok());
}

#[test]
fn forged_tokens_are_bad_signatures() {
    let token = hs256(&claims());
    let (head, rest) = token.split_once('.').unwrap();
    let (_, sig) = rest.split_once('.').unwrap();
    let bob =
        URL_SAFE_NO_PAD.encode(json!({"sub": "bob", "aud": "sale", "exp": NOW + 300}).to_string());
    let forged = format!("{head}.{bob}.{sig}");
    assert_eq!(
        verify(&forged, &secret_key(), "sale", now()),
        Err(Refusal::BadSignature)
    );
    let other = EnqueueKey::from_bytes(b"another secret of thirty-two bytes or more").unwrap();
    assert_eq!(
        verify(&token, &other, "sale", now()),
        Err(Refusal::BadSignature)
    );
    let (key, _) = es256(ES256_PEM);
    let (_, other_signer) = es256(ES256_PEM_2);
    let token = sign(Algorithm::ES256, &other_signer, &claims());
    assert_eq!(
        verify(&token, &key, "sale", now()),
        Err(Refusal::BadSignature)
    );
}

#[test]
fn none_and_algorithms_other_than_the_keys_are_refused() {
    let none = unsigned(r#"{"alg":"none","typ":"JWT"}"#, &claims());
    let none = format!("{}.", none.rsplit_once('.').unwrap().0);
    assert_eq!(
        verify(&none, &secret_key(), "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
    let (es_key, es_signer) = es256(ES256_PEM);
    let (ed_key, ed_signer) = ed25519();
    // HS256 signed with the public key's text as the secret: the classic confusion.
    let hs = hs256(&claims());
    assert_eq!(
        verify(&hs, &es_key, "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
    assert_eq!(
        verify(&hs, &ed_key, "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
    let es = sign(Algorithm::ES256, &es_signer, &claims());
    assert_eq!(
        verify(&es, &ed_key, "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
    assert_eq!(
        verify(&es, &secret_key(), "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
    let ed = sign(Algorithm::EdDSA, &ed_signer, &claims());
    assert_eq!(
        verify(&ed, &es_key, "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
    let hs384 = unsigned(r#"{"alg":"HS384"}"#, &claims());
    assert_eq!(
        verify(&hs384, &secret_key(), "sale", now()),
        Err(Refusal::BadAlgorithm)
    );
}

#[test]
fn claims_are_checked_against_the_room_and_the_clock() {
    let key = secret_key();
    let check = |c: serde_json::Value| verify(&hs256(&c), &key, "sale", now());
    assert_eq!(
        check(json!({"aud": "sale", "exp": NOW + 60})),
        Err(Refusal::NoSubject)
    );
    assert_eq!(
        check(json!({"sub": "", "aud": "sale", "exp": NOW + 60})),
        Err(Refusal::NoSubject)
    );
    let long = "a".repeat(MAX_SUBJECT_LEN + 1);
    assert_eq!(
        check(json!({"sub": long, "aud": "sale", "exp": NOW + 60})),
        Err(Refusal::Malformed)
    );
    let longest = "a".repeat(MAX_SUBJECT_LEN);
    assert!(check(json!({"sub": longest, "aud": "sale", "exp": NOW + 60})).is_ok());
    assert_eq!(
        check(json!({"sub": "a", "aud": "other", "exp": NOW + 60})),
        Err(Refusal::WrongAudience)
    );
    assert_eq!(
        check(json!({"sub": "a", "exp": NOW + 60})),
        Err(Refusal::WrongAudience)
    );
    assert_eq!(
        check(json!({"sub": "a", "aud": "sale", "exp": NOW})),
        Err(Refusal::Expired)
    );
    assert_eq!(
        check(json!({"sub": "a", "aud": "sale", "exp": NOW - 1})),
        Err(Refusal::Expired)
    );
    assert_eq!(
        check(json!({"sub": "a", "aud": "sale"})),
        Err(Refusal::TooLong)
    );
    let at_most = NOW + MAX_LIFETIME_SECS;
    assert!(check(json!({"sub": "a", "aud": "sale", "exp": at_most})).is_ok());
    assert_eq!(
        check(json!({"sub": "a", "aud": "sale", "exp": at_most + 1})),
        Err(Refusal::TooLong)
    );
    assert_eq!(
        check(json!({"sub": 7, "aud": "sale", "exp": NOW + 60})),
        Err(Refusal::Malformed)
    );
    assert_eq!(
        check(json!({"sub": "a", "aud": "sale", "exp": "soon"})),
        Err(Refusal::Malformed)
    );
}

#[test]
fn what_is_not_a_jwt_is_malformed() {
    let key = secret_key();
    let long = "a".repeat(MAX_TOKEN_LEN + 1);
    for token in ["", "abc", "a.b.c", "\u{fffd}", "e30.e30.e30", &long] {
        assert_eq!(
            verify(token, &key, "sale", now()),
            Err(Refusal::Malformed),
            "{token:?}"
        );
    }
}

#[test]
fn keys_are_secrets_or_public_keys() {
    // The final newline is no part of the secret.
    let bare = EnqueueKey::from_bytes(&SECRET[..SECRET.len() - 1]).unwrap();
    assert_eq!(
        verify(&hs256(&claims()), &bare, "sale", now()).map(|_| ()),
        Ok(())
    );
    assert_eq!(bare.algorithm(), "HS256");
    let short = EnqueueKey::from_bytes(b"short\n").unwrap_err();
    assert!(short.contains("at least 32"), "{short}");
    // A private key is refused: a room verifies with the site's public key.
    let private = EnqueueKey::from_bytes(ES256_PEM.as_bytes()).unwrap_err();
    assert!(private.contains("public key"), "{private}");
    assert!(
        !private.contains("MIGHAgEA"),
        "the error never shows the key"
    );
    assert!(EnqueueKey::from_bytes(
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    )
    .is_err());
    assert_eq!(EnqueueKey::from_bytes(SECRET).unwrap(), secret_key());
    assert_ne!(bare, secret_key());
}

#[test]
fn account_identities_never_equal_address_or_header_identities() {
    let alice = account_identity("sale", "alice");
    assert!(is_account(alice.as_str()));
    assert_eq!(alice.as_str().len(), ACCOUNT_PREFIX.len() + 8 + 1 + 32);
    assert!(alice.as_str().starts_with(&room_prefix("sale")));
    assert_ne!(room_prefix("sale"), room_prefix("other"));
    assert_eq!(alice, account_identity("sale", "alice"));
    assert_ne!(alice, account_identity("sale", "bob"));
    assert_ne!(alice, account_identity("other", "alice"));
    assert!(!is_account(
        Identity::of_ip("192.0.2.1".parse().unwrap(), 64).as_str()
    ));
    // What a header layer writes is escaped: `%` becomes `%25`.
    let header = crate::identity::encode_uid(alice.as_str().as_bytes());
    assert!(!is_account(&header));
    // A cookie can carry it.
    let value = crate::token::Claims::new(crate::token::Dec::Wait, 1, &alice, "key1")
        .sign(crate::keys::testing::ring().active());
    let parsed = crate::token::Token::parse(value.as_bytes()).unwrap();
    assert_eq!(parsed.claims.uid, alice.as_str());
}

#[test]
fn tokens_come_by_header_or_parameter_and_the_parameter_is_stripped() {
    let mut headers = http::HeaderMap::new();
    assert_eq!(
        token_of(&headers, Some("a=1&vestibule_enqueue=x.y.z")),
        Some("x.y.z")
    );
    assert_eq!(token_of(&headers, Some("vestibule_enqueue_not=1")), None);
    assert_eq!(token_of(&headers, None), None);
    headers.insert(HEADER, http::HeaderValue::from_static("h.e.ad"));
    assert_eq!(
        token_of(&headers, Some("vestibule_enqueue=x.y.z")),
        Some("h.e.ad")
    );
    headers.insert(HEADER, http::HeaderValue::from_bytes(b"\xff").unwrap());
    assert_eq!(token_of(&headers, None), Some("\u{fffd}"));

    assert_eq!(strip_from_query("a=1"), None);
    assert_eq!(strip_from_query("vestibule_enqueue=t").as_deref(), Some(""));
    assert_eq!(
        strip_from_query("a=1&vestibule_enqueue=t&b=2&vestibule_enqueue").as_deref(),
        Some("a=1&b=2")
    );
    assert_eq!(strip_from_query("vestibule_enqueuex=1"), None);
}

#[test]
fn modes_parse() {
    for mode in [Mode::Off, Mode::Optional, Mode::Required] {
        assert_eq!(Mode::parse(mode.as_str()), Some(mode));
    }
    assert_eq!(Mode::parse("on"), None);
    assert_eq!(Mode::default(), Mode::Off);
    for r in Refusal::ALL {
        assert_eq!(r.error() == "enqueue_required", r == Refusal::Missing);
    }
}

#[test]
fn a_room_knows_a_request_by_its_token_else_by_an_account_cookie() {
    use crate::config::RoomEnqueue;
    use crate::keys::testing::ring;
    use crate::token::{Claims as Cookie, Dec};
    let ring = ring();
    let settings = |mode| RoomEnqueue {
        mode,
        key: secret_key(),
        key_file: "site.key".into(),
    };
    let (optional, required) = (settings(Mode::Optional), settings(Mode::Required));
    let alice = account_identity("sale", "alice");
    let token = hs256(&claims());
    let id = |s: &RoomEnqueue, token: Option<&str>, cookies: &[&[u8]]| {
        identify((s.mode, &s.key), "sale", token, cookies, &ring, now())
    };
    assert_eq!(id(&required, Some(&token), &[]), Ok(Some(alice.clone())));
    assert_eq!(id(&optional, None, &[]), Ok(None));
    assert_eq!(id(&required, None, &[]), Err(Refusal::Missing));
    // A bad token is refused even in an optional room, and even beside a good cookie.
    let account_cookie = Cookie::new(Dec::Wait, NOW + 60, &alice, "key1").sign(ring.active());
    let bad = Some("a.b.c");
    assert_eq!(
        id(&optional, bad, &[account_cookie.as_bytes()]),
        Err(Refusal::Malformed)
    );
    // The account's cookie stands for it, from any address.
    assert_eq!(
        id(&required, None, &[b"junk", account_cookie.as_bytes()]),
        Ok(Some(alice.clone()))
    );
    // Nor does another room's account cookie.
    let elsewhere = account_identity("other", "alice");
    let copied = Cookie::new(Dec::Wait, NOW + 60, &elsewhere, "key1").sign(ring.active());
    assert_eq!(
        id(&required, None, &[copied.as_bytes()]),
        Err(Refusal::Missing)
    );
    // An address's cookie does not: the room checks it against the address as ever.
    let ip = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
    let address_cookie = Cookie::new(Dec::Wait, NOW + 60, &ip, "key1").sign(ring.active());
    assert_eq!(id(&optional, None, &[address_cookie.as_bytes()]), Ok(None));
    assert_eq!(
        id(&required, None, &[address_cookie.as_bytes()]),
        Err(Refusal::Missing)
    );
    // An account cookie whose signature fails stands for nobody.
    let forged = account_cookie.replace("dec=wait", "dec=allow");
    assert_eq!(
        id(&required, None, &[forged.as_bytes()]),
        Err(Refusal::Missing)
    );
    let other_ring = crate::keys::KeyRing::from_entries(
        "key1",
        &[("key1", "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=")],
    )
    .unwrap();
    let foreign = Cookie::new(Dec::Wait, NOW + 60, &alice, "key1").sign(other_ring.active());
    assert_eq!(
        id(&required, None, &[foreign.as_bytes()]),
        Err(Refusal::Missing)
    );
}
