//! Enqueue tokens, one place per account: a room with `enqueue` on binds places to the account a
//! site-signed JWT names rather than to the address. The site's side is PyJWT (HS256 and ES256,
//! keys from `cryptography`), started by the test; visitors' addresses come by a trusted
//! `X-Forwarded-For`.

use std::path::Path;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use reqwest::blocking::Response;

use crate::common::*;
use crate::jwt::pyjwt;

/// The test site's HS256 secret file (an editor's final newline included).
pub(crate) const SECRET: &[u8] = b"the test site's enqueue secret, 32 bytes or more\n";

/// Signs claims as the site does: argv = algorithm, key file, claims JSON.
const SIGN: &str = r#"
import json, sys, jwt
alg, path, claims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
key = open(path, "rb").read()
if alg.startswith("HS"):
    key = key.rstrip(b"\n")
print(jwt.encode(claims, key, algorithm=alg))
"#;

/// A P-256 key pair for the site: argv = private key file, public key file.
const KEY_PAIR: &str = r#"
import sys
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives import serialization as s
k = ec.generate_private_key(ec.SECP256R1())
open(sys.argv[1], "wb").write(k.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
open(sys.argv[2], "wb").write(k.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo))
print("ok")
"#;

/// `sale` (`/`): a lottery room that lets few in, an hour from now, tokens optional, the HS256 secret.
/// `vip` (`/vip`): lets everyone in, tokens required, the site's ES256 public key.
const ROOMS: &str = "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nallow_percentage = 1\nwait_period = \"1h\"\n\
                     enqueue = \"optional\"\nenqueue_key = \"site.key\"\n\
                     [[room]]\nname = \"vip\"\npaths = [\"/vip\"]\ncookie_name = \"vip_room\"\nallow_percentage = 100\n\
                     enqueue = \"required\"\nenqueue_key = \"site-es256.pub\"\n";

/// The site's keys, made in `dir`: the ES256 private key file, and the public key PEM.
fn site_keys(dir: &Path) -> Option<(String, Vec<u8>)> {
    let private = dir.join("site.pem");
    let public = dir.join("site.pub");
    pyjwt(KEY_PAIR, &[path(&private), path(&public)])?;
    Some((path(&private).to_owned(), std::fs::read(public).unwrap()))
}

pub(crate) fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A token signed with `alg` by the key in `key_file`, for `claims` (a JSON object).
pub(crate) fn sign(alg: &str, key_file: &str, claims: serde_json::Value) -> String {
    pyjwt(SIGN, &[alg, key_file, &claims.to_string()]).expect("PyJWT was there a moment ago")
}

/// Claims for `account` in `room`, expiring `ttl` seconds from now.
pub(crate) fn claims(account: &str, room: &str, ttl: i64) -> serde_json::Value {
    let exp = unix_now() as i64 + ttl;
    serde_json::json!({"sub": account, "aud": room, "exp": exp})
}

/// A GET from `ip` asking for JSON, with extra headers.
fn get_from(v: &Vestibule, target: &str, ip: &str, headers: &[(&str, &str)]) -> Response {
    let mut req = client()
        .get(v.url(target))
        .header("X-Forwarded-For", ip)
        .header("Accept", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().expect("the proxy answers")
}

fn uid(cookie: &str) -> &str {
    cookie
        .split('&')
        .find_map(|f| f.strip_prefix("uid="))
        .expect("a uid")
}

fn start(origin: &Origin, es256_public: Vec<u8>) -> Vestibule {
    Setup::new(origin.addr)
        .file("site.key", SECRET)
        .file("site-es256.pub", es256_public)
        .extra(TRUST_LOCAL)
        .extra(ROOMS)
        .start()
}

/// The same account from two addresses has one place; two accounts behind one address have
/// two; the account's cookie keeps its place from a third address without the token.
#[test]
fn places_follow_the_account_not_the_address() {
    let keys = tempfile::tempdir().unwrap();
    let Some((_, public)) = site_keys(keys.path()) else {
        return;
    };
    let origin = Origin::start();
    let v = start(&origin, public);
    let secret = path(&v.path("site.key")).to_owned();
    let alice = sign("HS256", &secret, claims("alice@example.com", "sale", 300));
    let bob = sign("HS256", &secret, claims("bob@example.com", "sale", 300));

    let first = get_from(
        &v,
        &format!("/?vestibule_enqueue={alice}"),
        "203.0.113.1",
        &[],
    );
    assert_eq!(first.status(), 200);
    let a1 = room_cookie(&first, "waiting_room").expect("a place");
    assert!(uid(&a1).starts_with("%_acct:"), "{a1}");
    assert!(
        !a1.contains("alice"),
        "the account id stays out of the cookie: {a1}"
    );
    assert_eq!(decision_in(&first.json().unwrap()), "anon");
    // Alice again, from a phone on another network, with the header: the same place.
    let second = get_from(&v, "/", "198.51.100.7", &[("Vestibule-Enqueue", &alice)]);
    assert_eq!(room_cookie(&second, "waiting_room").as_deref(), Some(&*a1));
    // Bob, behind Alice's first address: a place of his own.
    let third = get_from(
        &v,
        &format!("/?vestibule_enqueue={bob}"),
        "203.0.113.1",
        &[],
    );
    let b = room_cookie(&third, "waiting_room").expect("a place");
    assert_ne!(uid(&b), uid(&a1));
    // Alice's cookie alone keeps her place from anywhere.
    let cookie = format!("waiting_room={a1}");
    let back = get_from(&v, "/", "192.0.2.55", &[("Cookie", &cookie)]);
    assert_eq!(decision_in(&back.json().unwrap()), "wait");
    // A visitor without a token, in an optional room, joins by address.
    let plain = get_from(&v, "/", "203.0.113.1", &[]);
    let p = room_cookie(&plain, "waiting_room").expect("a place");
    assert_eq!(uid(&p), "203.0.113.1");
    // An address's cookie stays bound to its address.
    let moved = get_from(
        &v,
        "/",
        "198.51.100.7",
        &[("Cookie", &format!("waiting_room={p}"))],
    );
    assert_eq!(decision_in(&moved.json().unwrap()), "anon");

    let accepted = v.metric("vestibule_enqueue_accepted_total{room=\"sale\"}");
    assert_eq!(accepted, 3.0);
}

/// A `required` room refuses a visitor without a token (page or JSON), and every kind of bad
/// token, with 403; a good one reaches the origin, which never sees the token.
#[test]
fn bad_or_missing_tokens_are_refused_and_good_ones_never_reach_the_origin() {
    let keys = tempfile::tempdir().unwrap();
    let Some((private, public)) = site_keys(keys.path()) else {
        return;
    };
    let other = tempfile::tempdir().unwrap();
    let (forger, _) = site_keys(other.path()).expect("PyJWT");
    let origin = Origin::start();
    let v = start(&origin, public);

    // No token: the page, in the visitor's language, or JSON.
    let page = client()
        .get(v.url("/vip/"))
        .header("Accept", "text/html")
        .header("Accept-Language", "de")
        .send()
        .unwrap();
    assert_eq!(page.status(), 403);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(page.headers()["content-language"], "de");
    let html = page.text().unwrap();
    assert!(html.contains("einen Platz pro Konto"), "{html}");
    let json = get_from(&v, "/vip/", "203.0.113.1", &[]);
    assert_eq!(json.status(), 403);
    let body: serde_json::Value = json.json().unwrap();
    assert_eq!(body["error"], "enqueue_required");
    assert_eq!(body["reason"], "missing");
    assert_eq!(body["room"], "vip");

    let none = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("mallory", "vip", 300).to_string())
    );
    let secret = path(&v.path("site.key")).to_owned();
    let bad = [
        (
            sign("ES256", &forger, claims("mallory", "vip", 300)),
            "bad_signature",
        ),
        (
            sign("ES256", &private, claims("alice", "vip", -10)),
            "expired",
        ),
        (
            sign("ES256", &private, claims("alice", "sale", 300)),
            "wrong_audience",
        ),
        (
            sign("ES256", &private, claims("alice", "vip", 3600)),
            "too_long",
        ),
        (
            sign(
                "ES256",
                &private,
                serde_json::json!({"aud": "vip", "exp": unix_now() as i64 + 60}),
            ),
            "no_subject",
        ),
        (
            sign("HS256", &secret, claims("alice", "vip", 300)),
            "bad_algorithm",
        ),
        (none, "bad_algorithm"),
        ("not-a-jwt".to_owned(), "malformed"),
    ];
    for (token, reason) in &bad {
        let resp = get_from(
            &v,
            &format!("/vip/?vestibule_enqueue={token}"),
            "203.0.113.1",
            &[],
        );
        assert_eq!(resp.status(), 403, "{reason}");
        let body: serde_json::Value = resp.json().unwrap();
        assert_eq!(
            (body["error"].as_str(), body["reason"].as_str()),
            (Some("enqueue_invalid"), Some(*reason))
        );
    }
    // Browsers get the page, saying the link was not accepted.
    let page = client()
        .get(v.url(&format!("/vip/?vestibule_enqueue={}", bad[1].0)))
        .header("Accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(page.status(), 403);
    assert!(page.text().unwrap().contains("was not accepted"));

    // A good token, by parameter and header: through to the origin, which sees neither, nor
    // the room cookie.
    let good = sign("ES256", &private, claims("alice", "vip", 300));
    let resp = get_from(
        &v,
        &format!("/vip/__echo?x=1&vestibule_enqueue={good}&y=2"),
        "203.0.113.1",
        &[
            ("Vestibule-Enqueue", &good),
            ("Cookie", "vip_room=junk; other=1"),
        ],
    );
    assert_eq!(resp.status(), 200);
    let echo: serde_json::Value = resp.json().unwrap();
    assert_eq!(echo["query"], "x=1&y=2");
    let text = echo.to_string();
    assert!(
        !text.contains(&good),
        "the token reached the origin: {text}"
    );
    assert!(
        !text.to_ascii_lowercase().contains("vestibule-enqueue"),
        "{text}"
    );
    assert!(!text.contains("vip_room"), "{text}");

    let metrics = v.metrics();
    for (reason, n) in [
        ("missing", 2.0),
        ("bad_algorithm", 2.0),
        ("expired", 2.0),
        ("too_long", 1.0),
    ] {
        let series =
            format!("vestibule_enqueue_rejected_total{{reason=\"{reason}\",room=\"vip\"}}");
        assert_eq!(metric_value(&metrics, &series), n, "{series}");
    }
    assert_eq!(
        metric_value(&metrics, "vestibule_enqueue_accepted_total{room=\"vip\"}"),
        1.0
    );
}

/// The key file reloads like the config: a new secret takes over at once, and a file that does
/// not load leaves the last good key serving.
#[test]
fn a_new_key_file_takes_over_and_a_bad_one_changes_nothing() {
    let keys = tempfile::tempdir().unwrap();
    let Some((_, public)) = site_keys(keys.path()) else {
        return;
    };
    let origin = Origin::start();
    let v = start(&origin, public);
    let key = v.path("site.key");
    let old = sign("HS256", path(&key), claims("alice", "sale", 300));

    let before = v.generation();
    std::fs::write(&key, b"a brand new secret for the test site, 32+ bytes\n").unwrap();
    let after = v.wait_generation_above(before);
    let new = sign("HS256", path(&key), claims("alice", "sale", 300));
    let refused = get_from(
        &v,
        &format!("/?vestibule_enqueue={old}"),
        "203.0.113.1",
        &[],
    );
    assert_eq!(refused.status(), 403);
    let body: serde_json::Value = refused.json().unwrap();
    assert_eq!(body["reason"], "bad_signature");
    let ok = get_from(
        &v,
        &format!("/?vestibule_enqueue={new}"),
        "203.0.113.1",
        &[],
    );
    assert_eq!(ok.status(), 200);

    std::fs::write(&key, b"too short\n").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(v.generation(), after, "a bad key file must not load");
    assert!(v.log_text().contains("site.key"), "{}", v.log_text());
    let still = get_from(
        &v,
        &format!("/?vestibule_enqueue={new}"),
        "203.0.113.1",
        &[],
    );
    assert_eq!(still.status(), 200);
}
