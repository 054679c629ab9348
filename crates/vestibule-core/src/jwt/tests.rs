//! The JWT module's tests.

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
        let token =
            jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(secret)).unwrap();
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
