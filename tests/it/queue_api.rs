//! The queue API end to end: apps get in line, learn their number and the serving counter,
//! and get a JWT that PyJWT verifies with the published keys; the private API on the admin
//! listener moves the counter, issues and counts tokens, ends sessions and resets the room.

use serde_json::{json, Value};

use crate::common::*;
use crate::jwt::{pyjwt, ring_with, VERIFY};
use vestibule::jwt::{generate, Algorithm};

const ADMIN_TOKEN: &str = "queue-api-operator-token";

/// A fifo room with the queue API letting `per_minute` in a minute; `extra` room keys.
fn queue_proxy(origin: &Origin, per_minute: u32, extra: &str) -> Vestibule {
    let room = format!(
        "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nadmission = \"fifo\"\n\
         new_users_per_minute = {per_minute}\nrefresh = \"5s\"\napi = true\njwt = true\n{extra}"
    );
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .extra(TRUST_LOCAL)
        .extra(&room);
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    setup.admin = Some(format!(
        "listen = \"{}\"\ntoken = \"{ADMIN_TOKEN}\"",
        free_addr()
    ));
    setup.start()
}

/// A public API call from client address `ip`: (status, JSON, headers).
fn call(
    v: &Vestibule,
    method: &str,
    path: &str,
    ip: &str,
    body: Option<&str>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client()
        .request(method, v.url(&format!("/.vestibule/rooms/sale{path}")))
        .header("X-Forwarded-For", ip);
    if let Some(b) = body {
        req = req
            .header("Content-Type", "application/json")
            .body(b.to_owned());
    }
    let resp = req.send().expect("the proxy answers");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, json, headers)
}

/// A private API call on the admin listener.
fn private(v: &Vestibule, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client()
        .request(method, format!("http://{}/rooms/sale{path}", v.admin))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().expect("admin answers");
    let status = resp.status().as_u16();
    let text = resp.text().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn token_for(v: &Vestibule, id: &str) -> (u16, Value) {
    let (status, json, _) = call(
        v,
        "POST",
        "/token",
        "10.9.9.9",
        Some(&json!({ "request_id": id }).to_string()),
    );
    (status, json)
}

/// An app holds a stream instead of polling its request: `estimate`, then `turn` the moment the
/// operator's move of the serving counter reaches it; then its token comes.
#[test]
fn an_app_streams_its_turn_by_request_id() {
    use crate::push::Stream;
    let origin = Origin::start();
    let v = queue_proxy(&origin, 1, "");
    let (_, first, _) = call(&v, "POST", "/queue", "10.0.0.1", None);
    assert_eq!(first["serving_number"], 1, "{first}");
    let (_, waiting, _) = call(&v, "POST", "/queue", "10.0.0.2", None);
    let id = waiting["request_id"].as_str().unwrap().to_owned();
    let path = format!("/.vestibule/rooms/sale/stream?request_id={id}");
    let mut stream = Stream::open(&v, &path, "10.0.0.2", None);
    assert_eq!(stream.status, 200, "{}", stream.head);
    let (name, data) = stream
        .next(std::time::Duration::from_secs(3))
        .expect("an estimate");
    assert_eq!(name, "estimate", "{data}");
    // A made-up request id has nothing to watch.
    let made_up = Stream::open(
        &v,
        "/.vestibule/rooms/sale/stream?request_id=nope",
        "10.0.0.2",
        None,
    );
    assert_eq!(made_up.status, 204);

    let (s, _) = private(&v, "POST", "/serving", Some(json!({ "increment_by": 1 })));
    assert_eq!(s, 200);
    let turn = loop {
        match stream.next(std::time::Duration::from_secs(5)) {
            Some((name, _)) if name == "estimate" => continue,
            other => break other.map(|(n, _)| n),
        }
    };
    assert_eq!(turn.as_deref(), Some("turn"), "{}", v.log_text());
    let (s, t) = token_for(&v, &id);
    assert_eq!(s, 200, "{t}");
    // Let in already: a stream opened now says `turn` at once.
    let mut again = Stream::open(&v, &path, "10.0.0.2", None);
    assert_eq!(again.status, 200);
    assert_eq!(
        again
            .next(std::time::Duration::from_secs(3))
            .map(|e| e.0)
            .as_deref(),
        Some("turn")
    );
}

#[test]
fn apps_get_numbers_wait_for_the_serving_counter_and_get_a_jwt_pyjwt_verifies() {
    let origin = Origin::start();
    let v = queue_proxy(&origin, 2, "");

    // Two straight in (the minute has two places and nobody waits), the third waits.
    let (s, a, _) = call(&v, "POST", "/queue", "10.0.0.1", None);
    assert_eq!(s, 200, "{a}");
    assert_eq!(
        (a["queue_number"].as_u64(), a["serving_number"].as_u64()),
        (Some(1), Some(1)),
        "{a}"
    );
    let (_, again, _) = call(&v, "POST", "/queue", "10.0.0.1", Some("{}"));
    assert_eq!(
        again["request_id"], a["request_id"],
        "the same identity, the same place"
    );
    let (_, b, _) = call(&v, "POST", "/queue", "10.0.0.2", None);
    assert_eq!(b["queue_number"], 2, "{b}");
    let (_, c, _) = call(&v, "POST", "/queue", "10.0.0.3", None);
    assert_eq!(
        (c["queue_number"].as_u64(), c["serving_number"].as_u64()),
        (Some(3), Some(2)),
        "{c}"
    );
    assert!(c["estimate_seconds"].as_u64().is_some(), "{c}");
    let c_id = c["request_id"].as_str().unwrap().to_owned();

    // The first's token, verified by PyJWT with the JWKS.
    let (s, t) = token_for(&v, a["request_id"].as_str().unwrap());
    assert_eq!(s, 200, "{t}");
    assert_eq!(t["token_type"], "Bearer");
    let jwt = t["access_token"].as_str().unwrap().to_owned();
    let (_, t2) = token_for(&v, a["request_id"].as_str().unwrap());
    assert_eq!(
        t2["access_token"], t["access_token"],
        "the same token again"
    );
    if let Some(out) = pyjwt(VERIFY, &[&v.url("/.well-known/jwks.json"), &jwt, "sale"]) {
        let verified: Value = serde_json::from_str(&out).unwrap();
        let claims = &verified["claims"];
        assert_eq!(claims["sub"], a["request_id"], "{claims}");
        assert_eq!(claims["queue_number"], 1, "{claims}");
        assert_eq!(claims["room"], "sale");
        assert_eq!(verified["header"]["kid"], "k1");
    }

    // The third waits: 409 with the numbers, and where it stands.
    let (s, not_yet) = token_for(&v, &c_id);
    assert_eq!(s, 409, "{not_yet}");
    assert_eq!(not_yet["error"], "not_yet");
    assert_eq!(
        (
            not_yet["queue_number"].as_u64(),
            not_yet["serving_number"].as_u64()
        ),
        (Some(3), Some(2))
    );
    let (s, standing, _) = call(&v, "GET", &format!("/queue/{c_id}"), "10.0.0.3", None);
    assert_eq!(s, 200, "{standing}");
    assert_eq!(standing["queue_number"], 3);
    assert_eq!(standing["expires_at"], Value::Null);
    let (s, serving, headers) = call(&v, "GET", "/serving", "10.0.0.4", None);
    assert_eq!((s, serving["serving_number"].as_u64()), (200, Some(2)));
    assert_eq!(headers["cache-control"], "max-age=1");
    let (s, waiting, _) = call(&v, "GET", "/waiting", "10.0.0.4", None);
    assert!(s == 200 && waiting["waiting"].is_u64(), "{waiting}");

    // The operator moves the counter past it: its token comes at once.
    let (s, moved) = private(&v, "POST", "/serving", Some(json!({ "increment_by": 1 })));
    assert_eq!(
        (s, moved["serving_number"].as_u64()),
        (200, Some(3)),
        "{moved}"
    );
    let (s, t) = token_for(&v, &c_id);
    assert_eq!(s, 200, "{t}");

    // Status and metrics show the numbers.
    let status = v.status();
    let room = &status["rooms"][0]["api"];
    assert_eq!(
        (
            room["queue_number"].as_u64(),
            room["serving_number"].as_u64()
        ),
        (Some(3), Some(3)),
        "{room}"
    );
    let metrics = v.metrics();
    assert!(
        metrics.contains("vestibule_room_queue_number{room=\"sale\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("vestibule_room_serving_number{room=\"sale\"} 3"));
    assert!(metrics.contains(
        "vestibule_api_requests_total{endpoint=\"token\",room=\"sale\",status_class=\"4xx\"} 1"
    ));

    // The private API counts the tokens, issues one, ends a session.
    let (s, active) = private(&v, "GET", "/tokens?state=active", None);
    assert_eq!((s, active["count"].as_u64()), (200, Some(2)), "{active}");
    let b_id = b["request_id"].as_str().unwrap();
    let (s, made) = private(
        &v,
        "POST",
        "/tokens",
        Some(json!({ "request_id": b_id, "validity": "5m", "issuer": "https://other.example" })),
    );
    assert_eq!((s, made["expires_in"].as_u64()), (200, Some(300)), "{made}");
    let (s, _) = private(
        &v,
        "PUT",
        &format!("/sessions/{b_id}"),
        Some(json!({ "status": "completed" })),
    );
    assert_eq!(s, 200);
    let (_, active) = private(&v, "GET", "/tokens?state=active", None);
    assert_eq!(
        active["count"], 2,
        "B's session ended: A and C stay: {active}"
    );
    let (s, e) = private(
        &v,
        "PUT",
        &format!("/sessions/{b_id}"),
        Some(json!({ "status": "done" })),
    );
    assert_eq!((s, e["error"].as_str()), (400, Some("bad_request")));

    // A reset needs its confirmation; after it, the old ids and JWTs are void.
    let (s, _) = private(&v, "POST", "/reset", Some(json!({ "confirm": "other" })));
    assert_eq!(s, 400);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (s, _) = private(&v, "POST", "/reset", Some(json!({ "confirm": "sale" })));
    assert_eq!(s, 200);
    let (s, gone, _) = call(&v, "GET", &format!("/queue/{c_id}"), "10.0.0.3", None);
    assert_eq!((s, gone["error"].as_str()), (404, Some("unknown_request")));
    let resp = client()
        .get(v.url("/"))
        .header("X-Forwarded-For", "10.0.0.1")
        .header("Authorization", format!("Bearer {jwt}"))
        .header("Accept", "application/json")
        .send()
        .unwrap();
    assert!(resp.headers().get("vestibule-admission").is_none());
    // That browser was let in afresh, number 1: its new JWT says so.
    let fresh_jwt = room_cookie(&resp, "waiting_room_jwt").expect("a new JWT");
    let payload = fresh_jwt.split('.').nth(1).unwrap();
    use base64::Engine as _;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["queue_number"], 1, "{claims}");
    let metrics = v.metrics();
    assert!(
        metrics.contains("vestibule_jwt_rejected_total{reason=\"reset\",room=\"sale\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("jwt_rejected"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (_, fresh, _) = call(&v, "POST", "/queue", "10.0.0.7", None);
    // Numbers start over: the browser above (its JWT refused) was the first arrival since.
    assert_eq!(fresh["queue_number"], 2, "{fresh}");
}

#[test]
fn every_bad_request_gets_a_json_4xx() {
    let origin = Origin::start();
    let v = queue_proxy(&origin, 1, "");
    let (_, a, _) = call(&v, "POST", "/queue", "10.0.0.1", None);
    let id = a["request_id"].as_str().unwrap().to_owned();
    let mut forged: Vec<&str> = id.split('.').collect();
    forged[0] = "7";
    let forged = forged.join(".");
    let huge = format!("{{\"request_id\": \"{}\"}}", "x".repeat(9000));
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        ("GET", "/queue".into(), None, 405, "method_not_allowed"),
        ("DELETE", "/token".into(), None, 405, "method_not_allowed"),
        ("POST", "/serving".into(), None, 405, "method_not_allowed"),
        (
            "POST",
            "/queue".into(),
            Some("[1,2".into()),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/queue".into(),
            Some("[1,2]".into()),
            400,
            "bad_request",
        ),
        ("POST", "/token".into(), None, 400, "bad_request"),
        (
            "POST",
            "/token".into(),
            Some("{\"request_id\": 5}".into()),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/token".into(),
            Some(huge),
            413,
            "payload_too_large",
        ),
        (
            "POST",
            "/token".into(),
            Some(json!({"request_id": forged}).to_string()),
            404,
            "unknown_request",
        ),
        (
            "POST",
            "/token".into(),
            Some(json!({"request_id": "1.2.3"}).to_string()),
            404,
            "unknown_request",
        ),
        (
            "GET",
            format!("/queue/{forged}"),
            None,
            404,
            "unknown_request",
        ),
        (
            "GET",
            "/queue/1.2.zz.%ff.key1".into(),
            None,
            404,
            "unknown_request",
        ),
        ("GET", "/nothing".into(), None, 404, "not_found"),
    ];
    for (method, path, body, status, code) in cases {
        let (s, j, headers) = call(&v, method, &path, "10.0.0.2", body.as_deref());
        assert_eq!(
            (s, j["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {j}"
        );
        assert_eq!(headers["content-type"], "application/json");
    }
    let resp = client()
        .post(v.url("/.vestibule/rooms/other/queue"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.json::<Value>().unwrap()["error"], "unknown_room");
    // Nothing under the prefix reaches the origin.
    assert_eq!(origin.served(), 0);
}

/// A number the room reached but nobody redeemed expires, and frees its place.
#[test]
fn a_reached_number_not_redeemed_in_time_expires() {
    let origin = Origin::start();
    let v = queue_proxy(&origin, 5, "queue_position_expiry = \"10s\"\n");
    let (_, a, _) = call(&v, "POST", "/queue", "10.0.0.1", None);
    let id = a["request_id"].as_str().unwrap().to_owned();
    let (s, standing, _) = call(&v, "GET", &format!("/queue/{id}"), "10.0.0.1", None);
    assert_eq!(s, 200);
    assert!(standing["expires_at"].is_string(), "{standing}");
    std::thread::sleep(std::time::Duration::from_secs(11));
    let (s, t) = token_for(&v, &id);
    assert_eq!((s, t["error"].as_str()), (410, Some("expired")), "{t}");
    let (s, _, _) = call(&v, "GET", &format!("/queue/{id}"), "10.0.0.1", None);
    assert_eq!(s, 404);
}

/// Three nodes on a real Redis: numbers are unique across the nodes and grow with the order of
/// arrival (within a sync interval), the serving counter one node moves is seen by the others,
/// and a request queued on one node is known on another.
#[test]
fn three_nodes_on_redis_give_unique_numbers_and_share_the_serving_counter() {
    let Some(redis) = Redis::start() else { return };
    let origin = Origin::start();
    let room = "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nadmission = \"fifo\"\n\
                new_users_per_minute = 1\nrefresh = \"5s\"\napi = true\n";
    let nodes: Vec<Vestibule> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let mut setup = Setup::new(origin.addr)
                .file("jwt-1.pem", generate(Algorithm::Es256))
                .extra(TRUST_LOCAL)
                .extra(room)
                .extra(&format!(
                    "[cluster]\nstore = \"redis\"\nredis = [\"{}\"]\nnode = \"{name}\"\nsync_interval = \"250ms\"\n",
                    redis.url()
                ));
            setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
            setup.admin = Some(format!("listen = \"{}\"\ntoken = \"{ADMIN_TOKEN}\"", free_addr()));
            setup.start()
        })
        .collect();
    for v in &nodes {
        assert!(
            eventually(std::time::Duration::from_secs(10), || v.status()["cluster"]
                ["nodes"]
                == 3),
            "{}",
            v.status()["cluster"]
        );
    }
    // 30 arrivals through the nodes in turn, a sync interval apart every third.
    let mut got = Vec::new();
    for i in 0..30 {
        let (s, q, _) = call(
            &nodes[i % 3],
            "POST",
            "/queue",
            &format!("10.1.0.{i}"),
            None,
        );
        assert_eq!(s, 200, "{q}");
        got.push((
            i,
            q["queue_number"].as_u64().unwrap(),
            q["request_id"].as_str().unwrap().to_owned(),
        ));
        if i % 3 == 2 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
    let mut numbers: Vec<u64> = got.iter().map(|(_, n, _)| *n).collect();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), 30, "unique across the nodes: {got:?}");
    // Arrivals more than a sync interval apart are numbered in their order.
    for (i, n, _) in &got {
        for (j, m, _) in &got {
            if j / 3 > i / 3 + 1 {
                assert!(m > n, "arrival {j} ({m}) after {i} ({n})");
            }
        }
    }
    // The third node's request, asked about on the first: known there.
    let (_, last, id) = got.last().unwrap().clone();
    let (s, standing, _) = call(&nodes[0], "GET", &format!("/queue/{id}"), "10.1.0.29", None);
    assert_eq!(s, 200, "{standing}");
    // One node moves the counter past it; the others see it within a sync.
    let (s, _) = private(
        &nodes[1],
        "POST",
        "/serving",
        Some(json!({ "increment_by": last })),
    );
    assert_eq!(s, 200);
    for v in &nodes {
        assert!(
            eventually(std::time::Duration::from_secs(5), || {
                call(v, "GET", "/serving", "10.1.1.1", None).1["serving_number"]
                    .as_u64()
                    .is_some_and(|s| s >= last)
            }),
            "the serving counter reaches every node"
        );
    }
    let (s, t) = token_for(&nodes[2], &id);
    assert_eq!(s, 200, "{t}");
}

/// Enqueue tokens through the API: one place per account, whatever the address; two
/// accounts behind one address have two; a `required` room refuses a missing or bad token.
#[test]
fn an_account_keeps_one_place_through_the_api_and_bad_enqueue_tokens_are_refused() {
    use crate::enqueue::{claims, path, sign, SECRET};
    if crate::jwt::pyjwt("print(1)", &[]).is_none() {
        return;
    }
    let origin = Origin::start();
    let room = "[[room]]\nname = \"sale\"\npaths = [\"/\"]\nadmission = \"fifo\"\n\
                new_users_per_minute = 1\nrefresh = \"5s\"\napi = true\n\
                enqueue = \"required\"\nenqueue_key = \"site.key\"\n";
    let mut setup = Setup::new(origin.addr)
        .file("jwt-1.pem", generate(Algorithm::Es256))
        .file("site.key", SECRET)
        .extra(TRUST_LOCAL)
        .extra(room);
    setup.keys = ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    let v = setup.start();
    let secret = path(&v.path("site.key")).to_owned();
    let token = |account: &str| sign("HS256", &secret, claims(account, "sale", 300));
    let queue = |ip: &str, body: Value| call(&v, "POST", "/queue", ip, Some(&body.to_string()));
    let alice = token("alice");
    let (s, a1, _) = queue("10.2.0.1", json!({ "enqueue_token": alice }));
    assert_eq!(s, 200, "{a1}");
    // Alice again from her phone (another address, a fresh token): the same place.
    let (_, a2, _) = queue("10.2.0.99", json!({ "enqueue_token": token("alice") }));
    assert_eq!(a2["request_id"], a1["request_id"], "{a2}");
    // Bob behind Alice's first address: a place of his own.
    let (_, b, _) = queue("10.2.0.1", json!({ "enqueue_token": token("bob") }));
    assert_ne!(b["queue_number"], a1["queue_number"], "{b}");
    // The header works as the body does.
    let resp = client()
        .post(v.url("/.vestibule/rooms/sale/queue"))
        .header("X-Forwarded-For", "10.2.0.50")
        .header("Vestibule-Enqueue", token("alice"))
        .send()
        .unwrap();
    assert_eq!(
        resp.json::<Value>().unwrap()["request_id"],
        a1["request_id"]
    );
    // Refusals.
    let (s, e, _) = queue("10.2.0.2", json!({}));
    assert_eq!(
        (s, e["error"].as_str()),
        (403, Some("enqueue_required")),
        "{e}"
    );
    let other_room = sign("HS256", &secret, claims("carol", "elsewhere", 300));
    let too_long = sign("HS256", &secret, claims("carol", "sale", 3600));
    let expired = sign("HS256", &secret, claims("carol", "sale", -10));
    for (bad, reason) in [
        (other_room.as_str(), "wrong_audience"),
        (too_long.as_str(), "too_long"),
        (expired.as_str(), "expired"),
        ("forged.token.here", "malformed"),
    ] {
        let (s, e, _) = queue("10.2.0.3", json!({ "enqueue_token": bad }));
        assert_eq!(
            (s, e["error"].as_str(), e["reason"].as_str()),
            (403, Some("enqueue_invalid"), Some(reason)),
            "{e}"
        );
    }
    let (s, e, _) = queue("10.2.0.3", json!({ "enqueue_token": 7 }));
    assert_eq!((s, e["error"].as_str()), (400, Some("bad_request")));
    let metrics = v.metrics();
    assert!(
        metrics.contains("vestibule_enqueue_rejected_total{reason=\"missing\",room=\"sale\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("vestibule_enqueue_accepted_total{room=\"sale\"} 4"));
}
