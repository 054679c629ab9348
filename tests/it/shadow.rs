//! Rooms in shadow mode: decide, set cookies and count as usual, forward everything.

use crate::common::*;

/// Whether the demo origin answered (its echo), and the JSON.
fn forwarded(resp: reqwest::blocking::Response) -> (bool, serde_json::Value) {
    let body: serde_json::Value = resp.json().expect("JSON");
    (body.get("headers").is_some(), body)
}

#[test]
fn a_shadow_room_at_zero_forwards_everything_and_counts_it_held() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(
            "[[room]]\nname = \"sale\"\npages = \"pages\"\nallow_percentage = 0\nmode = \"shadow\"",
        )
        .start();
    for i in 0..5 {
        let mut u = User::new(i);
        let resp = u.get(&v, "/__echo");
        assert_eq!(resp.status(), 200);
        let set_cookie = set_cookies(&resp).join("; ");
        assert!(
            set_cookie.contains("waiting_room="),
            "the wait token is set: {set_cookie}"
        );
        let (reached, body) = forwarded(resp);
        assert!(reached, "forwarded: {body}");
        // Back with its cookie: forwarded again, and the cookie never reaches the origin.
        let (reached, body) = forwarded(u.get(&v, "/__echo"));
        assert!(reached, "{body}");
        assert!(!body.to_string().contains("waiting_room"), "{body}");
    }
    // A subresource (an image) is forwarded too.
    let resp = client()
        .get(v.url("/__echo"))
        .header("X-Forwarded-For", "10.9.0.1")
        .header("Accept", "image/avif,image/*")
        .header("Sec-Fetch-Mode", "no-cors")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let m = v.metrics();
    let held = metric_value(
        &m,
        "vestibule_room_decisions_total{decision=\"deny\",mode=\"shadow\",room=\"sale\"}",
    ) + metric_value(
        &m,
        "vestibule_room_decisions_total{decision=\"anon\",mode=\"shadow\",room=\"sale\"}",
    );
    assert_eq!(held, 11.0, "every request counted as held:\n{m}");
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_decisions_total{decision=\"allow\",mode=\"shadow\",room=\"sale\"}"
        ),
        0.0
    );
    assert_eq!(v.status()["rooms"][0]["mode"], "shadow");
}

#[test]
fn a_shadow_capacity_room_counts_what_it_would_have_done() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra("[[room]]\nname = \"sale\"\npages = \"pages\"\nadmission = \"fifo\"\ntotal_active_users = 1\nmode = \"shadow\"")
        .start();
    let mut users: Vec<User> = (0..3).map(User::new).collect();
    for u in &mut users {
        let (reached, body) = forwarded(u.get(&v, "/__echo"));
        assert!(reached, "{body}");
    }
    let m = v.metrics();
    let count = |d: &str| {
        metric_value(
            &m,
            &format!(
                "vestibule_room_decisions_total{{decision=\"{d}\",mode=\"shadow\",room=\"sale\"}}"
            ),
        )
    };
    assert_eq!((count("allow"), count("anon")), (1.0, 2.0));
    // The room counted them as it would have: one active, two waiting.
    let room = &v.status()["rooms"][0];
    assert_eq!(room["active_users"], 1, "{room}");
    assert_eq!(room["waiting_users"], 2, "{room}");
    // A mistyped mode is a config error naming the key.
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    std::fs::write(v.path("bad.toml"), text.replace("\"shadow\"", "\"shdow\"")).unwrap();
    let (code, _, err) = run_cli(&["--config", v.path("bad.toml").to_str().unwrap(), "--check"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("room[0].mode") && err.contains("\"enforce\" or \"shadow\""),
        "{err}"
    );
}
