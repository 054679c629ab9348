//! Invitations, end to end: codes printed by `vestibule invite`, presented by link
//! or header to the real server in front of the demo origin.

use crate::common::*;

const ROOMS: &str = "[[room]]
name = \"presale\"
paths = [\"/presale\"]
cookie_name = \"presale_room\"
pages = \"pages\"
allow_percentage = 100
access = \"invite\"

[[room]]
name = \"shop\"
paths = [\"/shop\"]
pages = \"pages\"
allow_percentage = 100";

fn start() -> (Origin, Vestibule) {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(TRUST_LOCAL)
        .extra(ROOMS)
        .start();
    (origin, v)
}

/// A request from `ip` with these headers: (status, room cookie set, body).
fn get(
    v: &Vestibule,
    ip: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let mut req = client().get(v.url(target)).header("X-Forwarded-For", ip);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().expect("the proxy answers");
    let status = resp.status().as_u16();
    let cookie = room_cookie(&resp, "presale_room");
    (status, cookie, resp.text().unwrap_or_default())
}

/// Opens an invitation's link from `ip` as a browser would: `303` to the same target without
/// the code, with the place. Returns (Location, room cookie).
fn open_link(v: &Vestibule, ip: &str, target: &str) -> (String, String) {
    let resp = client()
        .get(v.url(target))
        .header("X-Forwarded-For", ip)
        .send()
        .expect("the proxy answers");
    assert_eq!(resp.status().as_u16(), 303, "{target}");
    let location = resp.headers()["location"].to_str().unwrap().to_owned();
    let cookie = room_cookie(&resp, "presale_room").expect("a place with the redirect");
    (location, cookie)
}

fn invitations(v: &Vestibule, room: &str, result: &str) -> f64 {
    v.metric(&format!(
        "vestibule_room_invitations_total{{result=\"{result}\",room=\"{room}\"}}"
    ))
}

fn through(body: &str) -> bool {
    body.starts_with('{') && body.contains("\"headers\"")
}

#[test]
fn only_the_invited_join_and_each_invitation_as_often_as_it_allows() {
    let (_origin, v) = start();
    let json = [("Accept", "application/json")];

    // Nobody gets in without an invitation: 403, no place, in HTML and in JSON.
    let (status, cookie, body) = get(&v, "10.7.0.1", "/presale/__echo", &[]);
    assert_eq!((status, cookie), (403, None), "{body}");
    assert!(
        body.contains("name=\"vestibule_invite\""),
        "a form for a code: {body}"
    );
    assert!(!body.contains("role=\"alert\""), "nothing was refused yet");
    let (status, _, body) = get(&v, "10.7.0.1", "/presale/__echo", &json);
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, answer["decision"].as_str()),
        (403, Some("uninvited"))
    );
    assert!(
        answer.get("invitation_refused").is_none(),
        "nothing was presented: {answer}"
    );

    // A link: let in, and the origin never sees the parameter.
    let single = v.invite_codes("presale", &["--count", "2"]);
    assert_eq!(single.len(), 2);
    assert_ne!(single[0], single[1]);
    // A browser is sent on to the same target without the code, which so leaves the address
    // bar (and the `Referer` of the origin's page); the place is the cookie from then on.
    let target = format!("/presale/__echo?a=1&vestibule_invite={}&b=2", single[0]);
    let (location, alice) = open_link(&v, "10.7.0.1", &target);
    assert_eq!(location, "/presale/__echo?a=1&b=2");
    assert!(alice.contains("&rm=presale&"), "{alice}");
    let (_, _, body) = get(
        &v,
        "10.7.0.1",
        &location,
        &[("Cookie", &format!("presale_room={alice}"))],
    );
    assert!(through(&body), "{body}");
    let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["query"], "a=1&b=2", "{echo}");

    // Its one use is taken: another identity is refused and told why; the same one joins
    // again (a second device, a lost cookie).
    let (status, cookie, body) = get(&v, "10.7.0.2", &target, &[]);
    assert_eq!((status, cookie), (403, None));
    assert!(
        body.contains("role=\"alert\""),
        "the refusal is said: {body}"
    );
    let (status, _, _) = get(&v, "10.7.0.1", &target, &[]);
    assert_eq!(status, 303);

    // An app is told why.
    let (status, _, body) = get(&v, "10.7.0.2", &target, &json);
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            status,
            answer["decision"].as_str(),
            answer["invitation_refused"].as_str()
        ),
        (403, Some("uninvited"), Some("used_up")),
        "{answer}"
    );

    // A header works as the link does (no redirect: an app asked), and never reaches the
    // origin either; nor does a link's code when an app follows it asking for JSON.
    let (status, _, body) = get(
        &v,
        "10.7.0.3",
        "/presale/__echo",
        &[("Vestibule-Invite", &single[1])],
    );
    assert_eq!(status, 200, "{body}");
    let headers = echo_headers(&body);
    assert!(
        header_values(&headers, "vestibule-invite").is_empty(),
        "{headers:?}"
    );
    let shared = v.invite_codes("presale", &["--uses", "3", "--lane", "members"]);
    let escaped = shared[0].replace('~', "%7E");
    for ip in ["10.7.1.1", "10.7.1.2"] {
        let target = format!("/presale/__echo?vestibule_invite={escaped}");
        let (location, _) = open_link(&v, ip, &target);
        assert_eq!(location, "/presale/__echo");
    }
    let target = format!("/presale/__echo?x=1&vestibule_invite={escaped}");
    let (status, _, body) = get(&v, "10.7.1.3", &target, &json);
    assert_eq!(status, 200, "{body}");
    let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["query"], "x=1", "{echo}");
    let (status, _, _) = get(
        &v,
        "10.7.1.4",
        &format!("/presale/?vestibule_invite={escaped}"),
        &[],
    );
    assert_eq!(status, 403, "three uses, a fourth identity");

    // A place got in the open room is no place in the presale.
    let resp = client()
        .get(v.url("/shop/__echo"))
        .header("X-Forwarded-For", "10.7.0.9")
        .send()
        .unwrap();
    let shop = room_cookie(&resp, "waiting_room").expect("the open room's place");
    let (status, _, _) = get(
        &v,
        "10.7.0.9",
        "/presale/__echo",
        &[("Cookie", &format!("presale_room={shop}"))],
    );
    assert_eq!(status, 403);

    // Accepted: 2 by link (the same visitor twice), 1 by header, 3 shared. Refused: 3.
    assert_eq!(invitations(&v, "presale", "accepted"), 6.0);
    assert_eq!(invitations(&v, "presale", "refused"), 3.0);
    let status = v.status();
    let room = status["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "presale")
        .unwrap();
    assert_eq!(room["access"], "invite", "{room}");
    assert_eq!(room["invitations"]["in_use"], 3, "{room}");
    assert_eq!(room["invitations"]["holders"], 5, "{room}");
    assert_eq!(room["invitations"]["max"], 100_000, "{room}");
    let dump = serde_json::to_string(&status).unwrap();
    assert!(!dump.contains(&single[0]), "no code in /status");
}

#[test]
fn bad_invitations_are_refused_plainly() {
    let (_origin, v) = start();
    let good = v.invite_codes("presale", &[]).remove(0);
    let other_room = v.invite_codes("shop", &[]).remove(0);
    let huge = format!("{good}{}", "~".repeat(6_000));
    let separators = "~".repeat(60);
    let truncated = &good[..good.len() - 3];
    let forged = good.replacen("~1~public~", "~9~public~", 1);
    let bad: [&str; 7] = [
        &huge,
        &separators,
        truncated,
        &forged,
        &other_room,
        "i1~key1~0011223344556677~99999999999~1~public~00000000000000000000000000000000",
        "",
    ];
    for (i, code) in bad.iter().enumerate() {
        let ip = format!("10.8.0.{i}");
        let (status, cookie, body) = get(&v, &ip, "/presale/", &[("Vestibule-Invite", code)]);
        assert_eq!((status, cookie), (403, None), "{code:?}: {body}");
    }
    // Raw bytes a header cannot be UTF-8 for, and a link parameter that decodes to them.
    let raw = raw_exchange(
        v.proxy,
        b"GET /presale/ HTTP/1.1\r\nHost: x\r\nVestibule-Invite: i1~\xff\xfe~\r\nConnection: close\r\n\r\n",
    );
    assert!(raw.starts_with("HTTP/1.1 403"), "{raw}");
    let (status, _, _) = get(&v, "10.8.1.1", "/presale/?vestibule_invite=%ff%fe", &[]);
    assert_eq!(status, 403);
    assert_eq!(
        invitations(&v, "presale", "refused"),
        bad.len() as f64 + 2.0
    );
    // An open room takes everyone; a bad code only counts as refused there.
    let resp = client()
        .get(v.url(&format!("/shop/__echo?vestibule_invite={forged}")))
        .header("X-Forwarded-For", "10.8.2.1")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(invitations(&v, "shop", "refused"), 1.0);
    // The good code still works after all of that.
    let (status, _, _) = get(&v, "10.8.3.1", "/presale/", &[("Vestibule-Invite", &good)]);
    assert_eq!(status, 200);
}

#[test]
fn the_cli_prints_links_and_names_its_mistakes() {
    let (_origin, v) = start();
    let links = v.invite_codes(
        "presale",
        &[
            "--count",
            "3",
            "--link",
            "https://shop.example/presale?ref=mail",
            "--expires",
            "2h",
        ],
    );
    assert_eq!(links.len(), 3);
    for link in &links {
        let code = link
            .strip_prefix("https://shop.example/presale?ref=mail&vestibule_invite=")
            .unwrap_or_else(|| panic!("{link}"));
        assert!(code.starts_with("i1~key1~"), "{code}");
    }
    // The link works as printed (on the proxy's own address).
    let code = links[0].split("vestibule_invite=").nth(1).unwrap();
    let (location, _) = open_link(
        &v,
        "10.9.0.1",
        &format!("/presale/?vestibule_invite={code}"),
    );
    assert_eq!(location, "/presale/");

    let config = v.config_path();
    let config = config.to_str().unwrap();
    // The page can be previewed, refused or not, in any language.
    let render = |state: &str| {
        let (code, out, err) = run_cli(&[
            "pages", "render", "--config", config, "--room", "presale", "--page", "invite",
            "--lang", "ja", "--state", state,
        ]);
        assert_eq!(code, 0, "{err}");
        out
    };
    assert!(render("refused").contains("role=\"alert\""));
    let page = render("unknown");
    assert!(!page.contains("role=\"alert\""), "{page}");
    assert!(
        page.contains("lang=\"ja\"") && page.contains("招待コード"),
        "{page}"
    );
    for (args, says) in [
        (
            vec!["--room", "nope"],
            "--room: no room is named \"nope\" (rooms: presale, shop)",
        ),
        (
            vec!["--room", "presale", "--lane", "VIP"],
            "--lane: \"VIP\" must be",
        ),
        (
            vec!["--room", "presale", "--uses", "0"],
            "--uses: must be between 1 and 1000000",
        ),
        (
            vec!["--room", "presale", "--count", "0"],
            "--count: must be between 1 and 100000",
        ),
        (
            vec!["--room", "presale", "--link", "/relative"],
            "--link: \"/relative\" is not an absolute URL",
        ),
    ] {
        let mut all = vec!["invite", "--config", config];
        all.extend(args);
        let (code, out, err) = run_cli(&all);
        assert_eq!(code, 1, "{all:?}: {out}");
        assert!(out.is_empty(), "no codes on a mistake: {out}");
        assert!(err.contains(says), "{all:?}: {err}");
    }
}

#[test]
fn a_reload_revokes_an_invitation_and_opens_the_room() {
    let (_origin, v) = start();
    let (status, _, _) = get(&v, "10.10.0.1", "/presale/__echo", &[]);
    assert_eq!(status, 403);

    // A link that leaked: revoked by its id (the code's third field) in the config. Whoever
    // joined with it keeps their place; nobody else gets in with it.
    let leaked = v.invite_codes("presale", &["--uses", "100"]).remove(0);
    let (_, holder) = open_link(
        &v,
        "10.10.1.1",
        &format!("/presale/?vestibule_invite={leaked}"),
    );
    let id = leaked.split('~').nth(2).unwrap();
    v.wait_generation_above(v.edit_config(
        "access = \"invite\"",
        &format!("access = \"invite\"\nrevoked_invitations = [\"{id}\"]"),
    ));
    let (status, _, body) = get(
        &v,
        "10.10.1.2",
        "/presale/",
        &[("Vestibule-Invite", &leaked)],
    );
    assert_eq!(status, 403);
    assert!(body.contains("role=\"alert\""), "{body}");
    let (_, _, body) = get(
        &v,
        "10.10.1.1",
        "/presale/__echo",
        &[("Cookie", &format!("presale_room={holder}"))],
    );
    assert!(through(&body), "the holder keeps their place: {body}");
    assert_eq!(v.status()["rooms"][0]["invitations"]["revoked"], 1);
    v.wait_generation_above(v.edit_config("access = \"invite\"", "access = \"open\""));
    let (status, cookie, body) = get(&v, "10.10.0.1", "/presale/__echo", &[]);
    assert_eq!(status, 200, "{body}");
    assert!(through(&body), "{body}");
    let token = cookie.expect("a place");
    assert!(token.contains("&rm=presale&"), "a room of several: {token}");

    // A mistake in the key is named, and the last good config keeps serving.
    let generation = v.edit_config("access = \"open\"", "access = \"friends\"");
    assert!(
        eventually(std::time::Duration::from_secs(10), || v
            .log_text()
            .contains(
                "room[0].access: must be \"open\" or \"invite\", got \"friends\""
            )),
        "{}",
        v.log_text()
    );
    assert_eq!(v.generation(), generation);
    let (status, _, _) = get(&v, "10.10.0.2", "/presale/__echo", &[]);
    assert_eq!(status, 200);
}
