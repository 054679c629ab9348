//! The lottery waiting room through the real proxy: every decision, cookies, JSON, identity
//! binding, Fastly compatibility, and the admission rate over 5,000 users.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::common::*;
use reqwest::blocking::{Client, Response};
use vestibule::identity::Identity;
use vestibule::keys::KeyRing;
use vestibule::time::Timestamp;
use vestibule::token::{Claims, Dec};

fn room(extra: &str) -> String {
    format!("[[room]]\nname = \"shop\"\npages = \"pages\"\n{extra}\n")
}

fn json_get(c: &Client, url: &str, cookie: Option<&str>, xff: Option<&str>) -> Response {
    let mut req = c.get(url).header("Accept", "application/json");
    if let Some(v) = cookie {
        req = req.header("Cookie", format!("waiting_room={v}"));
    }
    if let Some(ip) = xff {
        req = req.header("X-Forwarded-For", ip);
    }
    req.send().unwrap()
}

/// "allow" when the origin answered, else the room's JSON decision.
fn decision_of(resp: Response) -> String {
    decision_in(&resp.json().unwrap())
}

#[test]
fn anon_gets_a_wait_token_and_the_start_page() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).extra(&room("")).start();
    let before = origin.served();
    let resp = client().get(v.url("/products")).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(resp.headers()["cache-control"], "no-store, private");
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((30..=60).contains(&retry), "{retry}");
    // No `Refresh` header: the page reloads once, by its script (or, without script, by its
    // `<noscript>` meta refresh).
    assert!(resp.headers().get("refresh").is_none());
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("waiting_room=dec=wait&exp="), "{set}");
    for attr in ["; Path=/", "; Max-Age=7200", "; HttpOnly", "; SameSite=Lax"] {
        assert!(set.contains(attr), "{set} lacks {attr}");
    }
    assert!(!set.contains("Secure"));
    let length: usize = resp.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = resp.text().unwrap();
    assert_eq!(body.len(), length);
    assert!(body.contains("You are in the queue") && body.contains("shop"));
    // The page came from memory: the origin saw nothing.
    assert_eq!(origin.served(), before);
}

#[test]
fn wait_allow_deny_bypass_and_json() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("allow_percentage = 100\nbypass_paths = [\"/static/\"]"))
        .extra("[[room]]\nname = \"queue\"\npaths = [\"/queue\"]\npages = \"pages\"\ncookie_name = \"wr_queue\"\n")
        .start();
    let c = client();
    let now = vestibule::time::now().secs();
    // wait: a valid wait token not yet eligible; no new cookie.
    let waiting = mint(Dec::Wait, now + 120, &localhost());
    let resp = c
        .get(v.url("/queue/x"))
        .header("Accept", "application/json")
        .header("Cookie", format!("wr_queue={waiting}"))
        .send()
        .unwrap();
    assert!(resp.headers().get("set-cookie").is_none());
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["decision"], "wait");
    assert_eq!(body["in_waiting_room"], true);
    assert_eq!(body["room"], "queue");
    assert_eq!(body["queueing"], "lottery");
    assert_eq!(body["queue_all"], false);
    assert_eq!(body["users_ahead"], serde_json::Value::Null);
    assert_eq!(
        body["wait_estimate_minutes"]["p50"],
        serde_json::Value::Null
    );
    let refresh = body["refresh_seconds"].as_u64().unwrap();
    assert!((118..=120).contains(&refresh), "{refresh}");
    // allow (100 %): in, with an allow token added to the origin's response.
    let resp = c.get(v.url("/__set-cookie")).send().unwrap();
    assert_eq!(resp.status(), 200);
    let cookies = set_cookies(&resp);
    assert_eq!(cookies.len(), 2, "{cookies:?}");
    assert!(cookies
        .iter()
        .any(|c| c.starts_with("origin_session=abc123")));
    assert!(cookies
        .iter()
        .any(|c| c.starts_with("waiting_room=dec=allow&")));
    assert_eq!(resp.headers()["cache-control"], "no-store, private");
    // An allow token whose value would not change is not re-sent.
    let allow = room_cookie(&resp, "waiting_room").unwrap();
    let resp = json_get(&c, &v.url("/__echo"), Some(&allow), None);
    assert!(resp.headers().get("set-cookie").is_none());
    assert_eq!(decision_of(resp), "allow");
    // A waiting user at 100 % is admitted (and counted as such).
    let resp = json_get(&c, &v.url("/__echo"), Some(&waiting), None);
    assert!(room_cookie(&resp, "waiting_room")
        .unwrap()
        .starts_with("dec=allow&"));
    // bypass: never held, no cookie.
    let resp = c.get(v.url("/static/app.css")).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("set-cookie").is_none());
    // The same path disguised still bypasses, and a guarded path disguised as static does not.
    let resp = json_get(&c, &v.url("/static/../__echo"), Some("junk"), None);
    assert!(
        resp.headers().get("set-cookie").is_some(),
        "a dot-segment escaped the room"
    );
    let metrics = v.metrics();
    for (room, decision, at_least) in [
        ("queue", "wait", 1.0),
        ("shop", "allow", 2.0),
        ("shop", "bypass", 1.0),
    ] {
        let series =
            format!("vestibule_room_decisions_total{{decision=\"{decision}\",mode=\"enforce\",room=\"{room}\"}}");
        assert!(
            metric_value(&metrics, &series) >= at_least,
            "{series}\n{metrics}"
        );
    }
    assert_eq!(
        metric_value(&metrics, "vestibule_room_allow_percentage{room=\"shop\"}"),
        100.0
    );
    assert!(metric_value(&metrics, "vestibule_room_admitted_total{room=\"shop\"}") >= 1.0);
}

/// At 0 % the room is closed: newcomers get the deny page and a place in line, admitted users
/// keep access, and nobody's cookie is deleted.
#[test]
fn a_closed_room_keeps_visitors_in_line() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room(
            "allow_percentage = 0
wait_status = 503
closed_refresh = \"45s\"",
        ))
        .start();
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 503);
    assert!(
        resp.headers().get("refresh").is_none(),
        "pages reload by script"
    );
    assert_eq!(resp.headers()["retry-after"], "45");
    let wait = room_cookie(&resp, "waiting_room").expect("a place in line");
    assert!(wait.starts_with("dec=wait&"), "{wait}");
    assert!(resp.text().unwrap().contains("closed"));
    // Coming back with it: still closed, the cookie stands.
    let resp = client()
        .get(v.url("/"))
        .header("Cookie", format!("waiting_room={wait}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(set_cookies(&resp).is_empty(), "{:?}", set_cookies(&resp));
    // Admitted users keep access.
    let allow = mint(
        Dec::Allow,
        vestibule::time::now().secs() + 3600,
        &localhost(),
    );
    let resp = client()
        .get(v.url("/__echo"))
        .header("Cookie", format!("waiting_room={allow}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().unwrap().contains("\"headers\""));
}

#[test]
fn forged_and_malformed_cookies_are_anon_and_counted() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("allow_percentage = 100\nwait_status = 503"))
        .start();
    let c = client();
    let now = vestibule::time::now().secs();
    let good = mint(Dec::Allow, now + 3600, &localhost());
    let other_ring = KeyRing::from_entries("key9", &[("key9", KEY2)]).unwrap();
    let unknown =
        Claims::new(Dec::Allow, now + 3600, &localhost(), "key9").sign(other_ring.active());
    let someone_else = mint(
        Dec::Allow,
        now + 3600,
        &Identity::of_ip("198.51.100.1".parse().unwrap(), 64),
    );
    let cases = [
        ("malformed", "dec=allow&exp=-1".to_owned()),
        ("malformed", "x".repeat(10_000)),
        ("malformed", format!("{good}&dec=allow")),
        ("bad_signature", good.replace("dec=allow", "dec=wait")),
        ("unknown_key", unknown),
        ("wrong_user", someone_else),
        ("expired", mint(Dec::Allow, now - 10, &localhost())),
    ];
    for (reason, value) in &cases {
        // At 100 % everyone is let in anyway; the point is the token is not trusted.
        let resp = c
            .get(v.url("/"))
            .header("Cookie", format!("waiting_room={value}"))
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200, "{reason}");
        let new = room_cookie(&resp, "waiting_room").expect("a fresh token");
        assert_ne!(&new, value);
    }
    // Non-UTF-8 bytes in the cookie.
    let resp = c
        .get(v.url("/"))
        .header(
            "Cookie",
            reqwest::header::HeaderValue::from_bytes(b"waiting_room=\xff\xfe").unwrap(),
        )
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let metrics = v.metrics();
    for (reason, n) in [
        ("malformed", 4.0),
        ("bad_signature", 1.0),
        ("unknown_key", 1.0),
        ("wrong_user", 1.0),
        ("expired", 1.0),
    ] {
        let series = format!("vestibule_token_rejected_total{{reason=\"{reason}\",room=\"shop\"}}");
        assert_eq!(metric_value(&metrics, &series), n, "{series}\n{metrics}");
    }
}

#[test]
fn room_cookies_never_reach_the_origin() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("allow_percentage = 100"))
        .extra("[[room]]\nname = \"api\"\npaths = [\"/api\"]\ncookie_name = \"wr_api\"\npages = \"pages\"\nallow_percentage = 100\n")
        .start();
    let allow = mint(
        Dec::Allow,
        vestibule::time::now().secs() + 3600,
        &localhost(),
    );
    let resp = client()
        .get(v.url("/__echo"))
        .header(
            "Cookie",
            format!("a=1;  b=\"x y\"; waiting_room={allow}; wr_api=zzz; c=3"),
        )
        .header("Cookie", "d=4")
        .header("Cookie", format!("waiting_room={allow}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let headers = echo_headers(&resp.text().unwrap());
    // Several Cookie fields reach the origin as one (RFC 6265 §5.4 allows one Cookie header),
    // joined with "; " as HTTP/2's split cookies are.
    assert_eq!(
        header_values(&headers, "cookie"),
        ["a=1;  b=\"x y\"; c=3; d=4"]
    );
    // A request with no room cookie passes its cookies untouched.
    let body = client()
        .get(v.url("/__echo"))
        .header("Cookie", "odd=1 ;x=2;;y")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(
        header_values(&echo_headers(&body), "cookie"),
        ["odd=1 ;x=2;;y"]
    );
}

#[test]
fn tokens_are_bound_to_the_identity_and_aligned_to_buckets() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("wait_period = \"1h\""))
        .extra("[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]")
        .start();
    let c = client();
    let get =
        |ip: &str| room_cookie(&json_get(&c, &v.url("/"), None, Some(ip)), "waiting_room").unwrap();
    let a1 = get("203.0.113.1");
    let a2 = get("203.0.113.1");
    let b = get("203.0.113.2");
    assert_eq!(a1, a2, "one identity in one bucket gets one token");
    assert_ne!(a1, b);
    assert!(a1.contains("uid=203.0.113.1&"));
    // IPv6 users are one identity per /64.
    let x = get("2001:db8:1:2::1");
    let y = get("2001:db8:1:2:ffff::9");
    assert_eq!(x, y);
    assert!(x.contains("uid=2001:db8:1:2::/64&"));
    // Alice's token does not work for Bob.
    let resp = json_get(&c, &v.url("/"), Some(&a1), Some("203.0.113.2"));
    assert_eq!(decision_of(resp), "anon");
    let resp = json_get(&c, &v.url("/"), Some(&a1), Some("203.0.113.1"));
    assert_eq!(decision_of(resp), "wait");
}

#[test]
fn bypass_cidrs_through_trusted_proxies() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room(
            "allow_percentage = 0\nbypass_cidrs = [\"10.0.0.0/8\"]",
        ))
        .extra("[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]")
        .start();
    let c = client();
    assert_eq!(
        json_get(&c, &v.url("/__echo"), None, Some("10.1.2.3")).status(),
        200
    );
    assert_eq!(
        decision_of(json_get(&c, &v.url("/__echo"), None, Some("10.1.2.3"))),
        "allow"
    );
    assert_eq!(
        decision_of(json_get(&c, &v.url("/__echo"), None, Some("192.0.2.1"))),
        "deny"
    );
}

#[test]
fn fastly_minted_tokens_are_accepted_and_ours_match_theirs() {
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/python_tokens.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let key_id = fixture["key_id"].as_str().unwrap();
    let ring =
        KeyRing::from_entries(key_id, &[(key_id, fixture["key"].as_str().unwrap())]).unwrap();
    let now = Timestamp::from_secs(1_700_000_000);
    for case in fixture["tokens"].as_array().unwrap() {
        let cookie = case["cookie"].as_str().unwrap();
        let uid = Identity::from_encoded(case["uid"].as_str().unwrap());
        let token = vestibule::token::Token::parse(cookie.as_bytes()).unwrap();
        assert_eq!(token.verify(&ring, &uid, now), Ok(()), "{cookie}");
        let dec = if case["dec"] == "allow" {
            Dec::Allow
        } else {
            Dec::Wait
        };
        let ours =
            Claims::new(dec, case["exp"].as_u64().unwrap(), &uid, key_id).sign(ring.active());
        assert_eq!(ours, cookie, "byte-for-byte the same token");
    }
    // Through the proxy too: a Fastly allow cookie for this client lets it in.
    let origin = Origin::start();
    let mut setup = Setup::new(origin.addr).extra(&room("allow_percentage = 1"));
    setup.keys = format!(
        "active = \"{key_id}\"\n[ring]\n{key_id} = \"{}\"\n",
        fixture["key"].as_str().unwrap()
    );
    let v = setup.start();
    let allow =
        Claims::new(Dec::Allow, 4_102_444_800, &localhost(), key_id).sign(&ring.active().clone());
    assert_eq!(
        decision_of(json_get(&client(), &v.url("/__echo"), Some(&allow), None)),
        "allow"
    );
}

#[test]
fn token_inspect_reads_a_cookie_from_the_proxy() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).extra(&room("")).start();
    let resp = client().get(v.url("/")).send().unwrap();
    let value = room_cookie(&resp, "waiting_room").unwrap();
    let config = v.config_path();
    let config = config.to_str().unwrap();
    let (code, out, err) = run_cli(&[
        "token",
        "inspect",
        "--config",
        config,
        "--uid",
        "127.0.0.1",
        &value,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("dec      wait") && out.contains("verdict: valid"),
        "{out}"
    );
    let (code, out, _) = run_cli(&[
        "token",
        "inspect",
        "--config",
        config,
        "--uid",
        "127.0.0.2",
        &value,
    ]);
    assert_eq!(code, 1);
    assert!(out.contains("wrong_user"), "{out}");
    let tampered = value.replace("dec=wait", "dec=allow");
    let (code, out, _) = run_cli(&["token", "inspect", "--config", config, &tampered]);
    assert_eq!(code, 1);
    assert!(out.contains("bad_signature"), "{out}");
}

/// 5,000 users through trusted X-Forwarded-For at 30 %, each holding a wait token that has
/// just come due: the admitted share is within 4σ of 0.30, and presenting a token again within
/// its window never changes its outcome.
#[test]
fn admission_rate_matches_the_percentage() {
    const USERS: usize = 5_000;
    const WORKERS: usize = 8;
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("allow_percentage = 30\nwait_period = \"60s\""))
        .extra(TRUST_LOCAL)
        .start();
    let url = v.url("/__echo");
    let ip = |i: usize| format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255);
    // Tokens as the proxy issues them (signed with the ring's key), due a second ago: each is
    // drawn for a whole wait period from now.
    let due = vestibule::time::now().secs() - 1;
    let token = |i: usize| {
        let uid = Identity::of_ip(ip(i).parse().unwrap(), 64);
        mint(Dec::Wait, due, &uid)
    };
    let outcomes = Arc::new(Mutex::new(HashMap::new()));
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (outcomes, url) = (outcomes.clone(), &url);
            s.spawn(move || {
                let c = client();
                for i in (w..USERS).step_by(WORKERS) {
                    let t = token(i);
                    let first = decision_of(json_get(&c, url, Some(&t), Some(&ip(i))));
                    let again = decision_of(json_get(&c, url, Some(&t), Some(&ip(i))));
                    assert_eq!(again, first, "user {i}: re-sending changed the outcome");
                    outcomes.lock().unwrap().insert(i, first);
                }
            });
        }
    });
    let outcomes = outcomes.lock().unwrap();
    let admitted = outcomes.values().filter(|d| *d == "allow").count();
    assert!(
        outcomes.values().all(|d| d == "allow" || d == "lost"),
        "only allow or a lost draw"
    );
    let rate = admitted as f64 / USERS as f64;
    let sigma = (0.3f64 * 0.7 / USERS as f64).sqrt();
    eprintln!(
        "admitted {admitted}/{USERS} = {rate:.4} (4 sigma = {:.4})",
        4.0 * sigma
    );
    assert!((rate - 0.30).abs() <= 4.0 * sigma, "rate {rate}");
    assert_eq!(
        v.metric("vestibule_room_admitted_total{room=\"shop\"}"),
        admitted as f64
    );
}

#[test]
fn check_warns_about_pages_that_reach_the_origin_and_rejects_broken_ones() {
    let dir = tempfile::tempdir().unwrap();
    copy_pages(&dir.path().join("pages"));
    std::fs::write(
        dir.path().join("keys.toml"),
        format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
    )
    .unwrap();
    let config = dir.path().join("v.toml");
    std::fs::write(
        &config,
        format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{}", room("")),
    )
    .unwrap();
    let page = dir.path().join("pages/keepwaiting.html");
    let original = std::fs::read_to_string(&page).unwrap();
    std::fs::write(
        &page,
        original.replace(
            "{% block main %}",
            "{% block main %}<link rel=\"stylesheet\" href=\"/assets/site.css\">",
        ),
    )
    .unwrap();
    let (code, out, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    assert!(
        err.contains("warning:")
            && err.contains("keepwaiting.html:")
            && err.contains("\"/assets/site.css\""),
        "{err}"
    );
    // A template error is an error, with file and line.
    std::fs::write(&page, "<p>\n{{ room }\n").unwrap();
    let (code, _, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("keepwaiting.html:2: room[0].pages: template error"),
        "{err}"
    );
}
