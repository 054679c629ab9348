//! JWTs a gateway verifies: a `jwt` room's admitted visitors get one, any JWT library verifies
//! it with the published keys, and a valid one (bearer or cookie) is admission. The third-party
//! side is PyJWT, started by the test.

use std::process::Command;

use crate::common::*;
use vestibule::jwt::{generate, Algorithm};

/// A key ring with the test HMAC key and `jwt` keys (kid, algorithm, file name).
pub(crate) fn ring_with(jwt: &[(&str, &str, &str)]) -> String {
    let mut ring = format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n");
    for (kid, alg, file) in jwt {
        ring.push_str(&format!(
            "[[jwt_key]]\nkid = \"{kid}\"\nalgorithm = \"{alg}\"\nprivate_key = \"{file}\"\n"
        ));
    }
    ring
}

/// Runs a Python program with PyJWT and returns its stdout, or None (said loudly, a failure
/// under CI=true) when PyJWT is missing.
pub(crate) fn pyjwt(program: &str, args: &[&str]) -> Option<String> {
    let probe = Command::new("python3")
        .args(["-c", "import jwt, cryptography"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        missing_tool("PyJWT (pip install 'pyjwt[crypto]')", "not installed");
        return None;
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(program)
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Verifies `token` the way a gateway does: the signing key from the JWKS at `url` by the
/// token's `kid`, then the signature, `aud`, `iss` and `exp`. Prints the header and claims.
pub(crate) const VERIFY: &str = r#"
import json, sys, jwt
url, token, audience = sys.argv[1], sys.argv[2], sys.argv[3]
key = jwt.PyJWKClient(url).get_signing_key_from_jwt(token)
claims = jwt.decode(token, key.key, algorithms=["ES256", "EdDSA"], audience=audience, issuer="vestibule")
print(json.dumps({"header": jwt.get_unverified_header(token), "claims": claims}))
"#;

/// Signs claims with a PEM private key (a site or app that holds vestibule's key, or forges):
/// argv = pem file, algorithm, kid, claims JSON.
const SIGN: &str = r#"
import json, sys, jwt
pem, alg, kid, claims = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
print(jwt.encode(claims, pem, algorithm=alg, headers={"kid": kid}))
"#;

const ROOMS: &str = "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nallow_percentage = 100\njwt = true\n\
                     [[room]]\nname = \"app\"\npaths = [\"/app\"]\ncookie_name = \"app_room\"\nqueue_all = true\njwt = true\njwt_validity = \"30m\"\n";

fn jwt_proxy(origin: &Origin) -> Vestibule {
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .file("jwt-2.pem", generate(Algorithm::EdDsa))
        .extra(ROOMS);
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem"), ("k2", "EdDSA", "jwt-2.pem")]);
    setup.start()
}

/// A visitor let in gets a JWT in a cookie and the origin gets it in `Vestibule-Admission`;
/// PyJWT verifies it with the JWKS, which lists every key of the ring.
#[test]
fn an_admitted_visitors_jwt_verifies_with_the_published_keys() {
    let origin = Origin::start();
    let v = jwt_proxy(&origin);
    let resp = client().get(v.url("/__echo")).send().unwrap();
    assert_eq!(resp.status(), 200);
    let jwt = room_cookie(&resp, "waiting_room_jwt").expect("a JWT cookie");
    let set = set_cookies(&resp).join("\n");
    assert!(
        set.contains("waiting_room_jwt=") && set.contains("Max-Age=3600; HttpOnly"),
        "{set}"
    );
    let echoed = echo_headers(&resp.text().unwrap());
    assert_eq!(
        header_values(&echoed, "vestibule-admission"),
        std::slice::from_ref(&jwt)
    );

    // The keys, at both addresses.
    let (a, b) = (
        client()
            .get(v.url("/.well-known/jwks.json"))
            .send()
            .unwrap(),
        client().get(v.url("/.vestibule/jwks.json")).send().unwrap(),
    );
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    assert_eq!(a.headers()["content-type"], "application/json");
    assert!(a.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("max-age"));
    let (a, b): (serde_json::Value, serde_json::Value) = (a.json().unwrap(), b.json().unwrap());
    assert_eq!(a, b);
    let kids: Vec<&str> = a["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["k1", "k2"]);
    assert!(!a.to_string().contains("\"d\""), "no private part: {a}");

    let Some(out) = pyjwt(VERIFY, &[&v.url("/.well-known/jwks.json"), &jwt, "sale"]) else {
        return;
    };
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["header"]["kid"], "k1");
    assert_eq!(out["header"]["alg"], "ES256");
    let c = &out["claims"];
    assert_eq!(
        (c["room"].as_str(), c["iss"].as_str()),
        (Some("sale"), Some("vestibule"))
    );
    assert_eq!(
        c["exp"].as_u64().unwrap() - c["iat"].as_u64().unwrap(),
        3600
    );
    assert_eq!(c["sub"].as_str().unwrap().len(), 32);

    // The visitor's next request brings the JWT: no new one is signed, the origin gets the same.
    let resp = client()
        .get(v.url("/__echo"))
        .header("Cookie", format!("waiting_room_jwt={jwt}"))
        .send()
        .unwrap();
    assert!(room_cookie(&resp, "waiting_room_jwt").is_none());
    let echoed = echo_headers(&resp.text().unwrap());
    assert_eq!(
        header_values(&echoed, "vestibule-admission"),
        std::slice::from_ref(&jwt)
    );
    // The JWT cookie never reaches the origin.
    assert!(
        header_values(&echoed, "cookie")
            .iter()
            .all(|c| !c.contains("_jwt")),
        "{echoed:?}"
    );
    // A browser brings both cookies: the room decides on its own cookie (its session counted),
    // and the JWT it already holds is passed on, not signed again.
    let newcomer = client().get(v.url("/")).send().unwrap();
    let room = room_cookie(&newcomer, "waiting_room").expect("a room cookie");
    let both = format!("waiting_room={room}; waiting_room_jwt={jwt}");
    let resp = client()
        .get(v.url("/__echo"))
        .header("Cookie", &both)
        .send()
        .unwrap();
    assert!(room_cookie(&resp, "waiting_room_jwt").is_none());
    let echoed = echo_headers(&resp.text().unwrap());
    assert_eq!(
        header_values(&echoed, "vestibule-admission"),
        std::slice::from_ref(&jwt)
    );
    // The origin ends the session: both cookies are deleted.
    let resp = client()
        .get(v.url("/__revoke"))
        .header("Cookie", &both)
        .send()
        .unwrap();
    let set = set_cookies(&resp).join("\n");
    assert!(
        set.contains("waiting_room=deleted; Path=/; Max-Age=0"),
        "{set}"
    );
    assert!(
        set.contains("waiting_room_jwt=deleted; Path=/; Max-Age=0"),
        "{set}"
    );
    let m = v.metrics();
    // The first visitor's JWT and the one of the visitor whose room cookie this is.
    assert_eq!(
        metric_value(&m, "vestibule_jwt_issued_total{room=\"sale\"}"),
        2.0
    );
}

/// Without JWT keys the well-known path is the origin's; the API's prefix stays reserved.
#[test]
fn without_jwt_keys_the_well_known_path_is_the_origins() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[[room]]\nname = \"sale\"\nallow_percentage = 100\n")
        .start();
    let resp = client()
        .get(v.url("/.well-known/jwks.json"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().unwrap().contains("You are in."));
    let resp = client().get(v.url("/.vestibule/jwks.json")).send().unwrap();
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["message"], "no JWT keys are published");
}

/// A capacity room's JWT never outlives the session it stands for.
#[test]
fn a_capacity_rooms_jwt_lasts_no_longer_than_its_session() {
    let origin = Origin::start();
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .extra("[[room]]\nname = \"cap\"\nadmission = \"fifo\"\nnew_users_per_minute = 100\nsession_duration = \"10m\"\njwt = true\n");
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    let v = setup.start();
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 200);
    let set = set_cookies(&resp).join("\n");
    assert!(
        set.contains("waiting_room_jwt=") && set.contains("Max-Age=600;"),
        "{set}"
    );
}

/// An app that holds a valid JWT gets through a room that holds everyone else; every kind of bad
/// JWT is refused, counted by reason, and leaves the request to the room (which holds it).
#[test]
fn a_valid_bearer_jwt_is_admission_and_bad_ones_are_refused_by_reason() {
    let origin = Origin::start();
    let v = jwt_proxy(&origin);
    let pem = v.path("jwt-1.pem");
    let pem = pem.to_str().unwrap();
    let now = vestibule::time::now().secs();
    let claims = |aud: &str, iat: u64, exp: u64| {
        serde_json::json!({"iss": "vestibule", "aud": aud, "sub": "app-1", "iat": iat, "nbf": iat,
                           "exp": exp, "jti": "j1", "room": aud})
        .to_string()
    };
    let Some(good) = pyjwt(SIGN, &[pem, "ES256", "k1", &claims("app", now, now + 600)]) else {
        return;
    };
    let get = |auth: &str| {
        client()
            .get(v.url("/app/__echo"))
            .header("Accept", "application/json")
            .header("Authorization", auth)
            .header("Vestibule-Admission", "forged")
            .send()
            .unwrap()
    };
    let resp = get(&format!("Bearer {good}"));
    assert_eq!(resp.status(), 200);
    let echoed = echo_headers(&resp.text().unwrap());
    assert_eq!(
        header_values(&echoed, "vestibule-admission"),
        std::slice::from_ref(&good)
    );
    // `Authorization` passes through unchanged: the API behind may verify it itself.
    assert_eq!(
        header_values(&echoed, "authorization"),
        [format!("Bearer {good}")]
    );

    let sign = |alg: &str, kid: &str, c: String| pyjwt(SIGN, &[pem, alg, kid, &c]).unwrap();
    // One character of the signature changed.
    let tampered = {
        let at = good.rfind('.').unwrap() + 10;
        let c = if &good[at..=at] == "A" { "B" } else { "A" };
        format!("{}{c}{}", &good[..at], &good[at + 1..])
    };
    let none = pyjwt(
        "import sys, jwt; print(jwt.encode({'aud': 'app'}, None, algorithm='none', headers={'kid': 'k1'}))",
        &[],
    )
    .unwrap();
    // HS256 with the public key's bytes as its secret: the classic algorithm confusion.
    let jwks: serde_json::Value = client()
        .get(v.url("/.well-known/jwks.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let public_x = jwks["keys"][0]["x"].as_str().unwrap().to_owned();
    let hs = pyjwt(
        "import sys, json, jwt; print(jwt.encode(json.loads(sys.argv[2]), sys.argv[1], algorithm='HS256', headers={'kid': 'k1'}))",
        &[&public_x, &claims("app", now, now + 600)],
    )
    .unwrap();
    let cases = [
        (
            "expired",
            sign("ES256", "k1", claims("app", now - 7200, now - 3600)),
        ),
        ("not_yet_valid", {
            let c = serde_json::json!({"iss": "vestibule", "aud": "app", "sub": "a", "iat": now,
                                       "nbf": now + 3600, "exp": now + 7200, "jti": "j", "room": "app"});
            sign("ES256", "k1", c.to_string())
        }),
        (
            "wrong_audience",
            sign("ES256", "k1", claims("sale", now, now + 600)),
        ),
        (
            "unknown_key",
            sign("ES256", "k9", claims("app", now, now + 600)),
        ),
        ("bad_signature", tampered),
        ("malformed", "not.a.jwt".to_owned()),
        ("bad_algorithm", none),
        ("bad_algorithm", hs),
    ];
    for (reason, token) in &cases {
        let resp = get(&format!("Bearer {token}"));
        assert_eq!(resp.status(), 200, "{reason}");
        let body: serde_json::Value = resp.json().unwrap();
        assert_eq!(body["in_waiting_room"], true, "{reason}: held by the room");
    }
    let m = v.metrics();
    for (reason, _) in &cases {
        let series = format!("vestibule_jwt_rejected_total{{reason=\"{reason}\",room=\"app\"}}");
        let want = cases.iter().filter(|(r, _)| r == reason).count() as f64;
        assert_eq!(metric_value(&m, &series), want, "{reason}");
    }
    // The same refusals hold for the cookie.
    let resp = client()
        .get(v.url("/app/x"))
        .header("Accept", "application/json")
        .header("Cookie", format!("app_room_jwt={}", cases[0].1))
        .send()
        .unwrap();
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["in_waiting_room"], true);
    let resp = client()
        .get(v.url("/app/x"))
        .header("Cookie", format!("app_room_jwt={good}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().unwrap().contains("You are in."));
}

/// The reserved path is never proxied: JSON errors for what no endpoint serves, for a wrong
/// method, and CORS only for the listed origins.
#[test]
fn the_api_path_is_reserved_and_answers_json() {
    let origin = Origin::start();
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .server("api_cors_origins = [\"https://shop.example\"]")
        .extra("[[room]]\nname = \"sale\"\nallow_percentage = 100\njwt = true\n");
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    let v = setup.start();
    let before = origin.served();
    for (path, code) in [
        ("/.vestibule", "not_found"),
        ("/.vestibule/", "not_found"),
        // A room without the queue API (api = true).
        ("/.vestibule/rooms/sale/waiting", "unknown_room"),
        ("//.vestibule//x", "not_found"),
    ] {
        let resp = client().get(v.url(path)).send().unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body: serde_json::Value = resp.json().unwrap();
        assert_eq!(body["error"], code, "{path}");
    }
    let resp = client()
        .post(v.url("/.vestibule/jwks.json"))
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET, HEAD, OPTIONS");
    let cors = |origin: &str| {
        client()
            .get(v.url("/.vestibule/jwks.json"))
            .header("Origin", origin)
            .send()
            .unwrap()
    };
    let ok = cors("https://shop.example");
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "https://shop.example"
    );
    assert_eq!(ok.headers()["vary"], "Origin");
    assert!(cors("https://evil.example")
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let pre = client()
        .request(reqwest::Method::OPTIONS, v.url("/.vestibule/jwks.json"))
        .header("Origin", "https://shop.example")
        .header("Access-Control-Request-Method", "GET")
        .send()
        .unwrap();
    assert_eq!(pre.status(), 204);
    assert!(pre.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("GET"));
    assert_eq!(
        origin.served(),
        before,
        "nothing under the prefix reached the origin"
    );
    let m = v.metrics();
    assert!(
        metric_value(
            &m,
            "vestibule_api_requests_total{endpoint=\"unknown\",room=\"\",status_class=\"4xx\"}"
        ) >= 3.0
            && metric_value(
                &m,
                "vestibule_api_requests_total{endpoint=\"waiting\",room=\"sale\",status_class=\"4xx\"}"
            ) == 1.0
    );
}

/// A rotation: a new key is published by a reload of the ring, and signs once it is first; a
/// room with `jwt = true` and no JWT key is a config error naming the key.
#[test]
fn jwt_keys_rotate_with_the_ring_and_are_required() {
    let origin = Origin::start();
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .file("jwt-2.pem", generate(Algorithm::EdDsa))
        .extra("[[room]]\nname = \"sale\"\nallow_percentage = 100\njwt = true\n");
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    let v = setup.start();
    let kids = || -> Vec<String> {
        let jwks: serde_json::Value = client()
            .get(v.url("/.well-known/jwks.json"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kid"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kids(), ["k1"]);
    let g = v.generation();
    std::fs::write(
        v.path("keys.toml"),
        ring_with(&[("k2", "EdDSA", "jwt-2.pem"), ("k1", "ES256", "jwt-1.pem")]),
    )
    .unwrap();
    v.wait_generation_above(g);
    assert_eq!(kids(), ["k2", "k1"]);
    let resp = client().get(v.url("/")).send().unwrap();
    let jwt = room_cookie(&resp, "waiting_room_jwt").expect("a JWT");
    let header: serde_json::Value = {
        use base64::Engine as _;
        let head = jwt.split('.').next().unwrap();
        serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(head)
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        (header["kid"].as_str(), header["alg"].as_str()),
        (Some("k2"), Some("EdDSA"))
    );

    // Without a JWT key, `jwt = true` does not load.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keys.toml"), ring_with(&[])).unwrap();
    let path = dir.path().join("vestibule.toml");
    std::fs::write(
        &path,
        "[upstream]\npeers = [\"127.0.0.1:9\"]\n[[room]]\nname = \"sale\"\njwt = true\n",
    )
    .unwrap();
    let (code, out, err) = run_cli(&["--config", path.to_str().unwrap(), "--check"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("vestibule.toml:5: room[0].jwt: needs a [[jwt_key]]"),
        "{err}"
    );
}

/// `vestibule keygen --jwt` writes a key the ring takes, 0600, and never overwrites one.
#[test]
fn keygen_writes_a_jwt_key_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("jwt-2026.pem");
    let out_s = out.to_str().unwrap();
    let (code, stdout, err) = run_cli(&["keygen", "--jwt", "EdDSA", "--out", out_s]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("kid = \"jwt-2026\"") && stdout.contains("algorithm = \"EdDSA\""),
        "{stdout}"
    );
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let pem = std::fs::read_to_string(&out).unwrap();
    assert!(vestibule::jwt::JwtKey::from_pem("jwt-2026", Algorithm::EdDsa, &pem).is_ok());
    let (code, _, err) = run_cli(&["keygen", "--jwt", "EdDSA", "--out", out_s]);
    assert_ne!(code, 0);
    assert!(err.contains("exists"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        pem,
        "the key is kept"
    );
    let (code, _, _) = run_cli(&[
        "keygen",
        "--jwt",
        "HS256",
        "--out",
        dir.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
}
