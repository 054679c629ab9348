//! Operator actions on the admin endpoint, and the sold-out and queue-full pages,
//! through the real proxy in front of the demo origin.

use std::time::Duration;

use crate::common::*;

const TOKEN: &str = "operator-token-for-tests";

fn with_token(origin: std::net::SocketAddr) -> Setup {
    let mut setup = Setup::new(origin).extra(TRUST_LOCAL);
    setup.admin = Some(format!("listen = \"{}\"\ntoken = \"{TOKEN}\"", free_addr()));
    setup
}

fn room(extra: &str) -> String {
    format!("[[room]]\nname = \"sale\"\npages = \"pages\"\n{extra}")
}

/// An action: (status, JSON answer).
fn act(v: &Vestibule, method: &str, path: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client()
        .request(method, format!("http://{}{path}", v.admin))
        .body(body.to_vec());
    if let Some(t) = &v.admin_token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().expect("admin answers");
    let status = resp.status().as_u16();
    let text = resp.text().unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json)
}

fn page(v: &Vestibule, user: &User) -> (u16, String) {
    let mut req = client()
        .get(v.url("/"))
        .header("X-Forwarded-For", &user.ip)
        .header("Accept", "text/html");
    if let Some(c) = &user.cookie {
        req = req.header("Cookie", format!("waiting_room={c}"));
    }
    let resp = req.send().expect("the proxy answers");
    (resp.status().as_u16(), resp.text().unwrap_or_default())
}

#[test]
fn actions_need_the_token_and_refuse_bad_arguments() {
    let origin = Origin::start();
    let v = with_token(origin.addr)
        .extra(&room("admission = \"fifo\"\nnew_users_per_minute = 5"))
        .start();
    let url = |p: &str| format!("http://{}{p}", v.admin);
    // No token, a wrong one.
    let resp = client().post(url("/rooms/sale/pause")).send().unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = client()
        .post(url("/rooms/sale/pause"))
        .bearer_auth("operator-token-for-testz")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);

    let cases: [(&str, &str, &[u8], u16, &str); 10] = [
        ("POST", "/rooms/nope/pause", b"", 404, "no room is named"),
        ("POST", "/rooms/sale/launch", b"", 404, "no such action"),
        ("GET", "/rooms/sale/pause", b"", 405, "does not apply"),
        ("POST", "/rooms/sale/admit", b"", 400, "count=N"),
        (
            "POST",
            "/rooms/sale/admit?count=0",
            b"",
            400,
            "whole number",
        ),
        (
            "POST",
            "/rooms/sale/admit?count=-3",
            b"",
            400,
            "whole number",
        ),
        (
            "POST",
            "/rooms/sale/admit?count=1e9",
            b"",
            400,
            "whole number",
        ),
        (
            "PUT",
            "/rooms/sale/message",
            b"\xff\xfe bad",
            400,
            "not UTF-8",
        ),
        ("PUT", "/rooms/sale/message", b"   ", 400, "empty"),
        ("POST", "/rooms/sale/pause", b"why", 400, "no body"),
    ];
    for (method, path, body, status, says) in cases {
        let (code, json) = act(&v, method, path, body);
        assert_eq!(code, status, "{method} {path}: {json}");
        assert!(
            json["error"].as_str().unwrap_or("").contains(says),
            "{method} {path}: {json}"
        );
    }
    // 500 characters pass (of 2 bytes each here); 501 do not, nor a huge body.
    let (code, json) = act(&v, "PUT", "/rooms/sale/message", "é".repeat(500).as_bytes());
    assert_eq!(code, 200, "{json}");
    let (code, json) = act(&v, "PUT", "/rooms/sale/message", "é".repeat(501).as_bytes());
    assert_eq!(code, 400, "{json}");
    let (code, _) = act(&v, "PUT", "/rooms/sale/message", &vec![b'a'; 1 << 20]);
    assert_eq!(code, 400);
    // Nothing refused was counted; the one that passed was.
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_admin_actions_total{action=\"message_set\",operator=\"admin\",room=\"sale\"}"
        ),
        1.0
    );
    assert_eq!(
        metric_value(
            &m,
            "vestibule_admin_actions_total{action=\"pause\",operator=\"admin\",room=\"sale\"}"
        ),
        0.0
    );
    assert!(v
        .proc
        .log_text()
        .contains("operator action message_set by admin"));
}

#[test]
fn without_a_token_there_are_no_actions() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(&room("allow_percentage = 50"))
        .start();
    let (code, body) = act(&v, "POST", "/rooms/sale/pause", b"");
    assert_eq!(code, 403, "{body}");
    assert!(body.to_string().contains("[admin] token"), "{body}");
}

#[test]
fn pause_holds_newcomers_keeps_everyone_and_survives_reloads_and_restarts() {
    let origin = Origin::start();
    let mut v = with_token(origin.addr)
        .extra(&room(
            "admission = \"fifo\"\nnew_users_per_minute = 100\nrefresh = \"5s\"",
        ))
        .start();
    let mut admitted = User::new(1);
    assert_eq!(admitted.decision(&v).0, "allow");

    let (code, json) = act(&v, "POST", "/rooms/sale/pause", b"");
    assert_eq!(code, 200, "{json}");
    assert_eq!(json["overrides"]["paused"]["by"], "admin");
    assert_eq!(json["persisted"], true);
    let (code, json) = act(
        &v,
        "PUT",
        "/rooms/sale/message",
        b"Doors <b>reopen</b> at 10:00",
    );
    assert_eq!(code, 200, "{json}");

    let mut newcomer = User::new(2);
    let (d, json) = newcomer.decision(&v);
    assert_eq!(d, "anon");
    assert_eq!(json["paused"], true);
    assert_eq!(json["message"], "Doors <b>reopen</b> at 10:00");
    assert_eq!(
        admitted.decision(&v).0,
        "allow",
        "admitted visitors keep access"
    );
    let (status, html) = page(&v, &newcomer);
    assert_eq!(status, 200);
    assert!(html.contains("The line is paused"), "{html}");
    assert!(
        html.contains("Doors &lt;b&gt;reopen&lt;&#x2f;b&gt; at 10:00"),
        "{html}"
    );
    assert!(!html.contains("<b>reopen"), "the notice is escaped");

    let room = &v.status()["rooms"][0];
    assert_eq!(room["paused"], true);
    assert_eq!(
        room["overrides"]["message"]["text"],
        "Doors <b>reopen</b> at 10:00"
    );
    assert_eq!(room["effective_allow_percentage"], 0.0);
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_override{override=\"paused\",room=\"sale\"}"
        ),
        1.0
    );
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_override{override=\"message\",room=\"sale\"}"
        ),
        1.0
    );

    // A reload keeps the overrides.
    let g = v.generation();
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    std::fs::write(v.config_path(), text.replace("= 100", "= 90")).unwrap();
    v.wait_generation_above(g);
    assert_eq!(newcomer.decision(&v).1["paused"], true);

    // So does a restart: they are in the state file.
    let state = v.path("state/overrides.json");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).expect("state file written")).unwrap();
    assert!(
        saved["rooms"]["sale"]["paused"]["at"].is_string(),
        "{saved}"
    );
    v.proc.signal("TERM");
    assert!(v.proc.wait_exit(Duration::from_secs(10)).is_some());
    v.start_again("vestibule.log");
    let room = &v.status()["rooms"][0];
    assert_eq!(room["paused"], true, "{room}");
    assert_eq!(
        room["overrides"]["message"]["text"],
        "Doors <b>reopen</b> at 10:00"
    );
    assert!(v.log_text().contains("operator overrides restored"));

    // Resumed, the one who waited through the pause gets in at their next check-in.
    let (code, json) = act(&v, "POST", "/rooms/sale/resume", b"");
    assert_eq!(code, 200, "{json}");
    assert!(json["overrides"].get("paused").is_none(), "{json}");
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(newcomer.decision(&v).0, "allow");

    // Clearing every override removes the notice too, and the state file says so.
    let (code, json) = act(&v, "DELETE", "/rooms/sale/overrides", b"");
    assert_eq!(code, 200, "{json}");
    let keys: Vec<&String> = json["overrides"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["version"], "{json}");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    let kept: Vec<&String> = saved["rooms"]["sale"].as_object().unwrap().keys().collect();
    assert_eq!(kept, ["version"], "{saved}");
}

#[test]
fn a_broken_state_file_is_logged_and_starts_with_no_overrides() {
    let origin = Origin::start();
    let v = with_token(origin.addr)
        .extra(&room("allow_percentage = 100"))
        .file(
            "state/overrides.json",
            "{\"version\": 1, \"rooms\": {\"sale\": {\"paused\": 7",
        )
        .start();
    assert!(
        v.log_text().contains("cannot read operator overrides"),
        "{}",
        v.log_text()
    );
    assert_eq!(User::new(1).decision(&v).0, "allow");
    // The next action writes a good file.
    let (code, json) = act(&v, "PUT", "/rooms/sale/sold-out", b"");
    assert_eq!(code, 200, "{json}");
    assert_eq!(json["persisted"], true);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v.path("state/overrides.json")).unwrap()).unwrap();
    assert_eq!(saved["rooms"]["sale"]["sold_out"]["value"], true);
}

#[test]
fn sold_out_and_a_full_line() {
    let origin = Origin::start();
    let v = with_token(origin.addr)
        .extra(&room(
            "admission = \"fifo\"\nnew_users_per_minute = 1\nrefresh = \"5s\"\nmax_waiting_users = 2",
        ))
        .extra("[[room]]\nname = \"closed\"\npaths = [\"/closed\"]\npages = \"pages\"\ncookie_name = \"closed_room\"\nsold_out = true")
        .start();
    let mut users: Vec<User> = (0..4).map(User::new).collect();
    let decisions: Vec<String> = users.iter_mut().map(|u| u.decision(&v).0).collect();
    assert_eq!(decisions, ["allow", "anon", "anon", "queue_full"]);
    assert!(
        users[3].cookie.is_none(),
        "a full line gives no place in it"
    );
    let (status, html) = page(&v, &users[3]);
    assert_eq!(status, 200);
    assert!(html.contains("is full"), "{html}");

    let (code, json) = act(&v, "PUT", "/rooms/sale/sold-out", b"");
    assert_eq!(code, 200, "{json}");
    assert_eq!(json["sold_out"], true);
    let (d, json) = users[1].decision(&v);
    assert_eq!(d, "sold_out", "{json}");
    assert_eq!(json["in_waiting_room"], true);
    assert!(
        users[1].cookie.is_some(),
        "the waiting visitor keeps their wait token"
    );
    assert_eq!(
        users[0].decision(&v).0,
        "allow",
        "admitted visitors keep access"
    );
    let (_, html) = page(&v, &users[2]);
    assert!(html.contains("is sold out"), "{html}");
    assert_eq!(
        v.metric(
            "vestibule_room_decisions_total{decision=\"sold_out\",mode=\"enforce\",room=\"sale\"}"
        ),
        2.0
    );

    // Back on sale: the waiting visitors kept their places.
    let (code, _) = act(&v, "DELETE", "/rooms/sale/sold-out", b"");
    assert_eq!(code, 200);
    assert_eq!(users[1].decision(&v).0, "wait");

    // The `sold_out` key: a lottery room that admits nobody new.
    let mut u = User::new(9).with_cookie_name("closed_room");
    let body: serde_json::Value = u.get(&v, "/closed/x").json().unwrap();
    assert_eq!(body["decision"], "sold_out", "{body}");
    let (_, json) = act(&v, "GET", "/status", b"");
    assert_eq!(json["rooms"][1]["sold_out"], true);
}

/// The decision of the `/draw` room: its JSON's, or "allow" when the origin answered.
fn draw(u: &mut User, v: &Vestibule) -> String {
    let text = u.get(v, "/draw/x").text().unwrap();
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(json) if json["decision"].is_string() => json["decision"].as_str().unwrap().to_owned(),
        _ => "allow".into(),
    }
}

#[test]
fn admit_lets_the_next_visitors_in_beyond_the_cap() {
    let origin = Origin::start();
    // A cap on active users, not per minute: no slot frees up while the test runs.
    let v = with_token(origin.addr)
        .extra(&room(
            "admission = \"fifo\"\ntotal_active_users = 1\nrefresh = \"5s\"",
        ))
        .extra("[[room]]\nname = \"draw\"\npaths = [\"/draw\"]\npages = \"pages\"\ncookie_name = \"draw_room\"\nallow_percentage = 0\nwait_period = \"1s\"")
        .start();
    let mut users: Vec<User> = (0..5).map(User::new).collect();
    let decisions: Vec<String> = users.iter_mut().map(|u| u.decision(&v).0).collect();
    assert_eq!(decisions, ["allow", "anon", "anon", "anon", "anon"]);
    let (code, json) = act(&v, "POST", "/rooms/sale/admit?count=2", b"");
    assert_eq!(code, 200, "{json}");
    assert_eq!(json["admit_grants_left"], 2);
    assert_eq!(json["overrides"]["last_admit"]["count"], 2);
    std::thread::sleep(Duration::from_secs(7));
    let decisions: Vec<String> = users[1..].iter_mut().map(|u| u.decision(&v).0).collect();
    assert_eq!(
        decisions.iter().filter(|d| *d == "allow").count(),
        2,
        "exactly the two granted: {decisions:?}"
    );
    assert_eq!(v.status()["rooms"][0]["admit_grants_left"], 0);
    assert_eq!(v.metric("vestibule_room_admit_grants{room=\"sale\"}"), 0.0);

    // A closed lottery room: those whose wait is over get the grant, nobody else.
    let mut drawn: Vec<User> = (20..23)
        .map(|i| User::new(i).with_cookie_name("draw_room"))
        .collect();
    for u in &mut drawn {
        assert_eq!(draw(u, &v), "deny");
    }
    let (code, _) = act(&v, "POST", "/rooms/draw/admit?count=1", b"");
    assert_eq!(code, 200);
    // A wait token is drawn within one wait period after its `exp` (1-2 s from now): ask
    // until the first visitor's is (asking early changes nothing), for at most 10 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut first = draw(&mut drawn[0], &v);
    while first != "allow" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        first = draw(&mut drawn[0], &v);
    }
    assert_eq!(
        first, "allow",
        "the grant let the first eligible visitor in"
    );
    let rest: Vec<String> = drawn[1..].iter_mut().map(|u| draw(u, &v)).collect();
    assert_eq!(rest, ["deny", "deny"], "one grant, one visitor");
}

#[test]
fn a_pace_override_sets_the_pace_until_cleared_and_bad_ones_change_nothing() {
    let origin = Origin::start();
    let v = with_token(origin.addr)
        .extra(&room("admission = \"fifo\"\nnew_users_per_minute = 5"))
        .extra(
            "[[room]]\nname = \"draw\"\npaths = [\"/draw\"]\ncookie_name = \"wr_draw\"\nallow_percentage = 10\n",
        )
        .start();
    let room_of = |name: &str| {
        let status = v.status();
        status["rooms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(room_of("sale")["effective_new_users_per_minute"], 5);

    let (code, json) = act(
        &v,
        "PUT",
        "/rooms/sale/overrides",
        br#"{"new_users_per_minute": 40, "for": "30m"}"#,
    );
    assert_eq!(code, 200, "{json}");
    assert_eq!(json["action"], "pace");
    assert_eq!(json["overrides"]["pace"]["new_users_per_minute"], 40);
    let sale = room_of("sale");
    assert_eq!(sale["effective_new_users_per_minute"], 40, "{sale}");
    let pace = &sale["overrides"]["pace"];
    assert_eq!(pace["by"], "admin", "{sale}");
    assert!(
        pace["at"].is_string() && pace["until"].is_string(),
        "{sale}"
    );
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(v.path("state/overrides.json")).unwrap()).unwrap();
    assert_eq!(saved["rooms"]["sale"]["pace"]["new_users_per_minute"], 40);

    // Refused, each with a reason, and nothing changes.
    let cases: [(&str, &[u8], &str); 7] = [
        ("sale", br#"{"allow_percentage": 50}"#, "does not apply"),
        (
            "sale",
            br#"{"new_users_per_minute": 40, "until": "noon"}"#,
            "unknown key",
        ),
        ("sale", br#"{"new_users_per_minute": 0}"#, "whole number"),
        (
            "sale",
            br#"{"new_users_per_minute": 9, "for": "10s"}"#,
            "from 1m to 7d",
        ),
        ("sale", b"fast please", "JSON object"),
        ("draw", br#"{"new_users_per_minute": 9}"#, "does not apply"),
        ("draw", br#"{"allow_percentage": 101}"#, "from 0 to 100"),
    ];
    for (room, body, says) in cases {
        let path = format!("/rooms/{room}/overrides");
        let (code, json) = act(&v, "PUT", &path, body);
        assert_eq!(
            code,
            400,
            "{room} {}: {json}",
            String::from_utf8_lossy(body)
        );
        assert!(
            json["error"].as_str().unwrap_or("").contains(says),
            "{room}: {json}"
        );
    }
    assert_eq!(room_of("sale")["effective_new_users_per_minute"], 40);
    assert_eq!(room_of("draw")["effective_allow_percentage"], 10.0);
    let m = v.metrics();
    assert_eq!(
        metric_value(
            &m,
            "vestibule_admin_actions_total{action=\"pace\",operator=\"admin\",room=\"sale\"}"
        ),
        1.0
    );
    assert_eq!(
        metric_value(
            &m,
            "vestibule_room_override{override=\"pace\",room=\"sale\"}"
        ),
        1.0
    );

    // A lottery room's percentage, fractional, until cleared.
    let (code, json) = act(
        &v,
        "PUT",
        "/rooms/draw/overrides",
        br#"{"allow_percentage": 12.5}"#,
    );
    assert_eq!(code, 200, "{json}");
    let draw = room_of("draw");
    assert_eq!(draw["effective_allow_percentage"], 12.5, "{draw}");
    assert!(draw["overrides"]["pace"]["until"].is_null(), "{draw}");

    // Cleared: the room's own pace again.
    let (code, json) = act(&v, "DELETE", "/rooms/sale/overrides", b"");
    assert_eq!(code, 200, "{json}");
    let sale = room_of("sale");
    assert_eq!(sale["effective_new_users_per_minute"], 5, "{sale}");
    assert!(sale["overrides"].get("pace").is_none(), "{sale}");
    assert_eq!(room_of("draw")["effective_allow_percentage"], 12.5);
}
