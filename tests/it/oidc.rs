//! The OpenID Provider end to end, driven by a relying party that is not ours: authlib (PyPI),
//! as oauth2-proxy or mod_auth_openidc would drive it. Discovery, an authorization request that
//! waits in the room, the code traded for tokens with PKCE and either client authentication,
//! the ID token verified with the published keys; and the refusals (an unregistered redirect
//! URI, a replayed code, a wrong verifier, a wrong secret).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::*;
use crate::jwt::ring_with;
use vestibule::jwt::{generate, Algorithm};

const SECRET: &str = "oidc-client-secret-0123456789";

/// The fifo room `sale` with the queue API (`extra`: more of its keys) and the provider for it.
fn provider(origin: &Origin, extra: &str) -> Vestibule {
    let config = format!(
        "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nadmission = \"fifo\"\n\
         new_users_per_minute = 100\nrefresh = \"5s\"\napi = true\n{extra}\n\
         [oidc]\nenabled = true\nissuer = \"http://@PROXY@/.vestibule/oidc\"\nroom = \"sale\"\n\
         clients = [{{ id = \"app\", secret = \"{SECRET}\", \
         redirect_uris = [\"https://app.example/oauth2/callback\"] }}]\n"
    );
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .extra(&config);
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    setup.start()
}

/// The relying party: argv = base URL, client secret, token endpoint auth method, mode
/// (`flow`, or `held`: say `held` after the first waiting page and wait for a line on stdin).
/// Prints a JSON summary of what it saw; any assertion failing fails the program.
const RP: &str = r#"
import json, os, sys, time
os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # the test's provider is on loopback http
import requests
from authlib.integrations.requests_client import OAuth2Session
from authlib.common.security import generate_token
from authlib.jose import jwt, JsonWebKey

base, secret, method, mode = sys.argv[1:5]
issuer = base + "/.vestibule/oidc"
REDIRECT = "https://app.example/oauth2/callback"
conf = requests.get(issuer + "/.well-known/openid-configuration", timeout=10).json()
assert conf["issuer"] == issuer, conf
jwks = requests.get(conf["jwks_uri"], timeout=10).json()
out = {"discovery": conf}

def session(secret=secret):
    return OAuth2Session("app", secret, scope="openid", redirect_uri=REDIRECT,
                         code_challenge_method="S256", token_endpoint_auth_method=method)

def sign_in(held=False):
    """A browser follows the authorization URL until the 302 back to the client."""
    client, browser = session(), requests.Session()
    verifier, nonce = generate_token(48), generate_token(20)
    url, _state = client.create_authorization_url(
        conf["authorization_endpoint"], nonce=nonce, code_verifier=verifier)
    pages = 0
    for _ in range(60):
        r = browser.get(url, allow_redirects=False, headers={"Accept": "text/html"}, timeout=10)
        if r.status_code == 302:
            return client, verifier, nonce, r.headers["Location"], pages
        assert "Location" not in r.headers, r.headers
        assert "<html" in r.text.lower(), r.text[:200]
        pages += 1
        if held and pages == 1:
            print("held", flush=True)
            sys.stdin.readline()
        time.sleep(0.5)
    raise AssertionError("never sent back to the client")

def error_of(call):
    try:
        call()
    except Exception as e:  # authlib's OAuthError carries the RFC 6749 error code
        return getattr(e, "error", repr(e))
    return None

client, verifier, nonce, location, pages = sign_in(held=(mode == "held"))
out["pages"] = pages
assert location.startswith(REDIRECT + "?code="), location
token = client.fetch_token(conf["token_endpoint"], authorization_response=location,
                           code_verifier=verifier)
claims = jwt.decode(token["id_token"], JsonWebKey.import_key_set(jwks), claims_options={
    "iss": {"essential": True, "value": issuer},
    "aud": {"essential": True, "value": "app"},
    "nonce": {"essential": True, "value": nonce},
    "sub": {"essential": True},
})
claims.validate()
out["claims"] = dict(claims)
out["token_type"] = token["token_type"]
out["expires_in"] = token["expires_in"]
out["access_claims"] = dict(jwt.decode(token["access_token"], JsonWebKey.import_key_set(jwks)))

if mode == "flow":
    out["replayed"] = error_of(lambda: client.fetch_token(
        conf["token_endpoint"], authorization_response=location, code_verifier=verifier))
    c2, v2, _, loc2, _ = sign_in()
    out["wrong_verifier"] = error_of(lambda: c2.fetch_token(
        conf["token_endpoint"], authorization_response=loc2, code_verifier=generate_token(48)))
    out["wrong_secret"] = error_of(lambda: session("not-the-secret-at-all").fetch_token(
        conf["token_endpoint"], authorization_response=loc2, code_verifier=v2))
    # After both refusals, the code is still good for its own client and verifier.
    out["then_right"] = "id_token" in c2.fetch_token(
        conf["token_endpoint"], authorization_response=loc2, code_verifier=v2)
    r = requests.post(conf["token_endpoint"], auth=("app", "not-the-secret-at-all"),
                      data={"grant_type": "authorization_code", "code": "x"}, timeout=10)
    out["basic_refusal"] = [r.status_code, r.headers.get("WWW-Authenticate"), r.json()["error"]]
    evil, _ = session().create_authorization_url(
        conf["authorization_endpoint"].replace("/authorize", "/authorize"),
        nonce="n", code_verifier=generate_token(48),
        redirect_uri="https://evil.example/cb")
    r = requests.get(evil, allow_redirects=False, timeout=10)
    out["unregistered"] = [r.status_code, r.headers.get("Location")]
print(json.dumps(out), flush=True)
"#;

/// authlib and requests, or `None` (said loudly; a failure under CI=true).
fn have_authlib() -> bool {
    let probe = Command::new("python3")
        .args(["-c", "import authlib, requests"])
        .output();
    let ok = probe.is_ok_and(|o| o.status.success());
    if !ok {
        missing_tool("authlib (pip install authlib requests)", "not installed");
    }
    ok
}

/// Starts the relying party against `v`.
fn relying_party(v: &Vestibule, method: &str, mode: &str) -> std::process::Child {
    Command::new("python3")
        .arg("-c")
        .arg(RP)
        .args([&format!("http://{}", v.proxy), SECRET, method, mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// The relying party's summary, once it is done.
fn summary(child: std::process::Child) -> Value {
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "relying party: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn authlib_signs_in_through_the_room_with_either_client_authentication() {
    if !have_authlib() {
        return;
    }
    let origin = Origin::start();
    let v = provider(&origin, "");
    for method in ["client_secret_basic", "client_secret_post"] {
        let out = summary(relying_party(&v, method, "flow"));
        let issuer = format!("http://{}/.vestibule/oidc", v.proxy);
        assert_eq!(
            out["discovery"]["token_endpoint"],
            format!("{issuer}/token")
        );
        assert_eq!(out["pages"], 0, "the room let the visitor straight in");
        let claims = &out["claims"];
        assert_eq!(
            (&claims["iss"], &claims["aud"]),
            (&Value::from(issuer), &Value::from("app"))
        );
        assert_eq!(claims["sub"].as_str().map(str::len), Some(32), "{claims}");
        assert!(claims["auth_time"].as_u64().is_some(), "{claims}");
        assert_eq!(out["token_type"], "Bearer");
        assert_eq!(out["access_claims"]["room"], "sale");
        assert_eq!(out["access_claims"]["sub"], claims["sub"]);
        assert_eq!(out["replayed"], "invalid_grant", "{method}");
        assert_eq!(out["wrong_verifier"], "invalid_grant", "{method}");
        assert_eq!(out["wrong_secret"], "invalid_client", "{method}");
        assert_eq!(out["then_right"], true);
        assert_eq!(
            out["basic_refusal"],
            serde_json::json!([401, "Basic realm=\"vestibule\"", "invalid_client"])
        );
        assert_eq!(out["unregistered"], serde_json::json!([400, null]));
    }
    assert!(
        v.metric("vestibule_api_requests_total{endpoint=\"oidc\",room=\"\",status_class=\"2xx\"}")
            >= 8.0
    );
    let log = std::fs::read_to_string(v.path("vestibule.log")).unwrap_or_default();
    assert!(!log.contains(SECRET), "the client secret reached the log");
}

#[test]
fn a_held_visitor_sees_the_waiting_page_then_goes_back_with_a_code() {
    if !have_authlib() {
        return;
    }
    let origin = Origin::start();
    let v = provider(&origin, "queue_all = true");
    let mut rp = relying_party(&v, "client_secret_basic", "held");
    let mut line = String::new();
    BufReader::new(rp.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("the relying party speaks");
    assert_eq!(line.trim(), "held", "the waiting page comes first");
    // The operator opens the room: the next check-in is let in.
    let g = v.generation();
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    std::fs::write(v.config_path(), text.replace("queue_all = true\n", "")).unwrap();
    v.wait_generation_above(g);
    rp.stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("the relying party listens");
    let out = summary(rp);
    assert!(out["pages"].as_u64() >= Some(1), "{out}");
    assert_eq!(out["claims"]["aud"], "app");
}
