//! `[[room]]`: defaults, cookies, pages, paths, admission, autopilot, challenge, access and lanes.

use super::*;

#[test]
fn room_defaults_follow_the_spec() {
    let c = parse(&format!("{MINIMAL}[[room]]\n")).unwrap();
    let r = &c.rooms[0];
    assert_eq!(r.name, "default");
    assert!(r.enabled && r.hosts.is_empty() && !r.queue_all);
    assert_eq!(r.paths, ["/"]);
    assert_eq!(
        r.admission,
        Admission::Lottery {
            allow_percentage: 50,
            wait_period: Duration::from_secs(30),
            allow_period: Duration::from_secs(3600),
            closed_refresh: Duration::from_secs(60),
        }
    );
    assert_eq!(r.cookie.name, "waiting_room");
    assert_eq!(r.cookie.lifetime, Duration::from_secs(7200));
    assert_eq!(r.cookie.same_site, SameSite::Lax);
    assert_eq!(r.cookie.secure, CookieSecure::Auto);
    assert_eq!(r.wait_status, 200);
    // No `pages` and no /etc/vestibule/pages folder here: the built-in pages.
    assert_eq!(r.pages, None);
}

/// Each room that names no cookie gets its own; the first keeps `waiting_room`.
#[test]
fn rooms_without_cookie_names_get_their_own() {
    let c = parse(&format!(
        "{MINIMAL}[[room]]\nname = \"shop\"\npaths = [\"/shop\"]\n\
         [[room]]\nname = \"tickets\"\npaths = [\"/tickets\"]\n\
         [[room]]\nname = \"api.v2\"\npaths = [\"/api\"]\n"
    ))
    .unwrap();
    let names: Vec<&str> = c.rooms.iter().map(|r| r.cookie.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "waiting_room",
            "waiting_room_tickets",
            "waiting_room_api.v2"
        ]
    );
    // A room that names its cookie leaves `waiting_room` to the first that does not.
    let c = parse(&format!(
        "{MINIMAL}[[room]]\nname = \"a\"\ncookie_name = \"a_cookie\"\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\n"
    ))
    .unwrap();
    assert_eq!(c.rooms[1].cookie.name, "waiting_room");
    // A written name that collides with a default one is still refused, at the second room.
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nname = \"a\"\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\n\
         [[room]]\nname = \"c\"\npaths = [\"/c\"]\ncookie_name = \"waiting_room_b\"\n"
    ));
    assert!(
        e.contains(":11: room[2].cookie_name: \"waiting_room_b\" is used by another room"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nname = \"a\"\ncookie_name = \"waiting_room_b\"\n\
         [[room]]\nname = \"c\"\npaths = [\"/c\"]\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\n"
    ));
    assert!(
        e.contains("room[2].cookie_name: this room's default cookie name \"waiting_room_b\" is used by another room"),
        "{e}"
    );
}

/// A room's pages: a named folder must exist; with none named, `pages` beside the config if
/// it is there, else the built-in pages.
#[test]
fn a_room_without_a_pages_folder_gets_the_built_in_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vestibule.toml");
    let load = |text: &str| Config::parse(text, &path, &Disk);
    let room = format!("{MINIMAL}[[room]]\n");
    assert_eq!(load(&room).unwrap().rooms[0].pages, None);
    std::fs::create_dir(dir.path().join("pages")).unwrap();
    assert_eq!(
        load(&room).unwrap().rooms[0].pages,
        Some(dir.path().join("pages"))
    );
    // A folder that is named and missing is kept in the config: the snapshot serves the
    // built-in pages in its place and warns (the same for the server's pages and an event's).
    assert_eq!(
        load(&format!("{room}pages = \"pagse\"\n")).unwrap().rooms[0].pages,
        Some(dir.path().join("pagse"))
    );
    assert_eq!(
        load(&format!("{MINIMAL}[server]\npages = \"nope\"\n"))
            .unwrap()
            .server
            .pages,
        Some(dir.path().join("nope"))
    );
    let with_event = load(&format!(
        "{room}[[room.event]]\nname = \"e\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T11:00:00Z\"\npages = \"nope\"\n"
    ))
    .unwrap();
    assert_eq!(
        with_event.rooms[0].events[0].pages,
        Some(dir.path().join("nope"))
    );
}

#[test]
fn capacity_rooms_need_a_limit() {
    let e = errors(&format!("{MINIMAL}[[room]]\nadmission = \"random\"\n"));
    assert!(
        e.contains("room[0].admission: \"random\" needs a capacity"),
        "{e}"
    );
    let c = parse(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\ntotal_active_users = 500\nrefresh = \"30s\"\n"
    ))
    .unwrap();
    match &c.rooms[0].admission {
        Admission::Capacity(cap) => {
            assert_eq!(cap.order, QueueOrder::Fifo);
            assert_eq!(cap.total_active_users, 500);
            assert_eq!(cap.new_users_per_minute, 0);
            assert_eq!(cap.refresh, Duration::from_secs(30));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn same_site_none_forces_secure() {
    let c = parse(&format!("{MINIMAL}[[room]]\ncookie_same_site = \"none\"\n")).unwrap();
    assert_eq!(c.rooms[0].cookie.secure, CookieSecure::Always);
    let e = errors(&format!(
        "{MINIMAL}[[room]]\ncookie_same_site = \"none\"\ncookie_secure = \"never\"\n"
    ));
    assert!(e.contains("room[0].cookie_secure"), "{e}");
}

#[test]
fn prefixes_are_matched_in_their_normal_form() {
    let c = parse(&format!(
        "{MINIMAL}[[room]]\npaths = [\"/shop//cart\"]\nbypass_paths = [\"/%73tatic/\", \"/a\\\\b\"]\n"
    ))
    .unwrap();
    assert_eq!(c.rooms[0].paths, ["/shop/cart"]);
    assert_eq!(c.rooms[0].bypass_paths, ["/static/", "/a/b"]);
}

#[test]
fn prefixes_that_no_request_could_match_are_errors() {
    let e = errors(&format!(
        "{MINIMAL}[[room]]\npaths = [\"/shop;v=1\"]\nbypass_paths = [\"/ok/\", \"/a%3bb/\", \"/x%00/\", \"/s/..;/y\"]\n"
    ));
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    has("vestibule.toml:4: room[0].paths[0]: \"/shop;v=1\" holds a ';' parameter");
    has("vestibule.toml:5: room[0].bypass_paths[1]: \"/a%3bb/\" holds a ';' parameter");
    has("room[0].bypass_paths[2]: \"/x%00/\": the path holds a control character");
    has("room[0].bypass_paths[3]: \"/s/..;/y\" holds a ';' parameter");
    assert!(!e.contains("bypass_paths[0]"), "{e}");
}

#[test]
fn acme_challenges_bypass_rooms_unless_turned_off() {
    assert!(parse(MINIMAL).unwrap().server.bypass_acme_challenge);
    let c = parse(&format!(
        "{MINIMAL}[server]\nbypass_acme_challenge = false\n"
    ))
    .unwrap();
    assert!(!c.server.bypass_acme_challenge);
    let e = errors(&format!(
        "{MINIMAL}[server]\nbypass_acme_challenge = \"no\"\n"
    ));
    assert!(
        e.contains(
            "vestibule.toml:4: server.bypass_acme_challenge: invalid type: string \"no\", expected a boolean"
        ),
        "{e}"
    );
}

#[test]
fn operator_keys_are_checked() {
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"lottery\"\nmax_waiting_users = 10\n"
    ));
    assert!(
        e.contains(
            "room[0].max_waiting_users: only applies when admission is \"random\" or \"fifo\""
        ),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 10\nmax_waiting_users = -1\n"
    ));
    assert!(
        e.contains("room[0].max_waiting_users: must be between 0"),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}[[room]]\nsold_out = \"yes\"\n"));
    assert!(
        e.contains(":4: ") && e.contains("expected a boolean"),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}[admin]\nstate_file = \" \"\n"));
    assert!(e.contains("admin.state_file: must name a file"), "{e}");
}

#[test]
fn autopilot_keys_are_read_and_checked() {
    let c = parse(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 50\nautopilot = true\n\
         autopilot_target_latency = \"300ms\"\nautopilot_max_error_rate = 0.05\nautopilot_min = 5\n\
         autopilot_max = 400\nautopilot_interval = \"15s\"\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\nadmission = \"fifo\"\nnew_users_per_minute = 50\n"
    ))
    .unwrap();
    assert_eq!(
        c.rooms[0].autopilot,
        Some(AutopilotConfig {
            target_latency: Duration::from_millis(300),
            max_error_rate: 0.05,
            min: 5,
            max: 400,
            interval: Duration::from_secs(15),
            session: Duration::from_secs(300),
        })
    );
    assert_eq!(c.rooms[1].autopilot, None, "off unless asked for");
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 50\nautopilot = true\n\
         autopilot_target_latency = \"0ms\"\nautopilot_max_error_rate = 1.5\nautopilot_min = 500\n\
         autopilot_max = 400\nautopilot_interval = \"10m\"\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\nallow_percentage = 0\nautopilot = true\nautopilot_max = 101\n\
         [[room]]\nname = \"c\"\npaths = [\"/c\"]\ncookie_name = \"c\"\nadmission = \"random\"\ntotal_active_users = 10\nautopilot = true\n\
         autopilot_min = 0\n"
    ));
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    has("vestibule.toml:7: room[0].autopilot_target_latency: must be between 1ms and 60s");
    has("room[0].autopilot_max_error_rate: must be a share between 0 and 1");
    has("room[0].autopilot_min: must not be over autopilot_max (500 > 400)");
    has("room[0].autopilot_interval: must be a whole number of seconds between 1s and 5m");
    has("room[1].autopilot: steers allow_percentage from where it is configured, and 0 closes the room");
    has("room[2].autopilot: steers new_users_per_minute: set it to the value to start from");
    has("room[2].autopilot_min: must be between 1 and 10000000, got 0");
    has("room[1].autopilot_max: must be between 0 and 100, got 101");
    // A lottery room steers its percentage, counting its admitted users for session_duration.
    let c = parse(&format!(
        "{MINIMAL}[[room]]\nallow_percentage = 40\nautopilot = true\nautopilot_min = 0\nsession_duration = \"2m\"\n"
    ))
    .unwrap();
    let a = c.rooms[0].autopilot.unwrap();
    assert_eq!(
        (a.min, a.max, a.session),
        (0, 100, Duration::from_secs(120))
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nallow_percentage = 40\nsession_duration = \"2m\"\n"
    ));
    assert!(
        e.contains(
            "room[0].session_duration: only applies when admission is \"random\" or \"fifo\""
        ),
        "{e}"
    );
}

#[test]
fn challenge_keys_are_read_and_checked() {
    let c = parse(&format!(
        "{MINIMAL}[[room]]\nchallenge = \"pow\"\nchallenge_difficulty = 20\nchallenge_ttl = \"2m\"\n\
         on_challenge_failure = \"infinite_queue\"\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\nchallenge = \"pow\"\n\
         [[room]]\nname = \"c\"\npaths = [\"/c\"]\ncookie_name = \"c\"\nchallenge_difficulty = 9\n"
    ))
    .unwrap();
    assert_eq!(
        c.rooms[0].challenge,
        Some(ChallengeConfig {
            difficulty: 20,
            ttl: Duration::from_secs(120),
            on_failure: OnChallengeFailure::InfiniteQueue,
        })
    );
    assert_eq!(
        c.rooms[1].challenge,
        Some(ChallengeConfig {
            difficulty: 16,
            ttl: Duration::from_secs(300),
            on_failure: OnChallengeFailure::Retry,
        }),
        "the defaults"
    );
    assert_eq!(c.rooms[2].challenge, None, "none unless asked for");
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nchallenge = \"captcha\"\nchallenge_difficulty = 29\nchallenge_ttl = \"2s\"\n\
         on_challenge_failure = \"ban\"\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\nchallenge = \"pow\"\nchallenge_difficulty = 7\nchallenge_ttl = \"90m\"\n"
    ));
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    has("room[0].challenge: must be \"none\" or \"pow\", got \"captcha\"");
    has("room[0].challenge_difficulty: must be between 8 and 28 (leading zero bits; each one doubles the work), got 29");
    has("room[0].challenge_ttl: must be a whole number of seconds between 10s and 1h");
    has("room[0].on_challenge_failure: must be \"retry\" or \"infinite_queue\", got \"ban\"");
    has("room[1].challenge_difficulty: must be between 8 and 28");
    has("room[1].challenge_ttl: must be a whole number of seconds between 10s and 1h");
    assert!(
        e.contains("vestibule.toml:"),
        "names the file and line:\n{e}"
    );
}

#[test]
fn access_keys_are_read_and_checked() {
    let c = parse(&format!(
        "{MINIMAL}[[room]]\naccess = \"invite\"\nmax_invitations = 5000\n\
         revoked_invitations = [\"00112233aabbccdd\", \"i1~k~0000000000000001~1~1~public~00\"]\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\n"
    ))
    .unwrap();
    assert_eq!(
        (c.rooms[0].access, c.rooms[0].max_invitations),
        (Access::Invite, 5000)
    );
    assert_eq!(
        c.rooms[0]
            .revoked_invitations
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [1, 0x00112233aabbccdd]
    );
    assert_eq!(
        (c.rooms[1].access, c.rooms[1].max_invitations),
        (Access::Open, DEFAULT_MAX_INVITATIONS),
        "the defaults"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\naccess = \"members\"\nmax_invitations = 0\nrevoked_invitations = [\"0011\"]\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\nmax_invitations = 10000001\n"
    ));
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    has("room[0].access: must be \"open\" or \"invite\", got \"members\"");
    has("room[0].max_invitations: must be between 1 and 10000000 (invitations in use remembered at once), got 0");
    has("room[1].max_invitations: must be between 1 and 10000000");
    has("room[0].revoked_invitations[0]: \"0011\" is neither an invitation's id (16 hex digits) nor a code");
    assert!(
        e.contains("vestibule.toml:"),
        "names the file and line:\n{e}"
    );
}

#[test]
fn lanes_are_read_and_checked() {
    let cap = "admission = \"fifo\"\nnew_users_per_minute = 10\n";
    let c = parse(&format!(
        "{MINIMAL}[[room]]\n{cap}lanes = {{ members = 3, public = 1, a-z_0 = 1000 }}\n"
    ))
    .unwrap();
    let Admission::Capacity(capacity) = &c.rooms[0].admission else {
        panic!("a capacity room")
    };
    let lanes: Vec<(&str, u32)> = capacity
        .lanes
        .iter()
        .map(|l| (&*l.name, l.weight))
        .collect();
    assert_eq!(lanes, [("public", 1), ("a-z_0", 1000), ("members", 3)]);
    let c = parse(&format!("{MINIMAL}[[room]]\n{cap}lanes = {{}}\n")).unwrap();
    let Admission::Capacity(capacity) = &c.rooms[0].admission else {
        panic!("a capacity room")
    };
    assert!(capacity.lanes.is_empty(), "no lanes: one line");

    let e = errors(&format!(
        "{MINIMAL}[[room]]\n{cap}lanes = {{ members = 0, Gold = 2, vip = 1001 }}\n\
         [[room]]\nname = \"b\"\npaths = [\"/b\"]\ncookie_name = \"b\"\nlanes = {{ public = 1 }}\n"
    ));
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    has("room[0].lanes.members: a lane's weight must be between 1 and 1000, got 0");
    has("room[0].lanes.vip: a lane's weight must be between 1 and 1000, got 1001");
    has("room[0].lanes.Gold: a lane's name is 1-32 of a-z, 0-9, '_' and '-'");
    has("room[0].lanes: needs a \"public\" lane");
    has("room[1].lanes: only applies when admission is \"random\" or \"fifo\" (this room uses \"lottery\")");
    let e = errors(&format!(
        "{MINIMAL}[[room]]\n{cap}lanes = {{ public = \"high\" }}\n"
    ));
    // A weight that is no number: named by its file and line.
    assert!(
        e.contains("vestibule.toml:6:") && e.contains("expected i64"),
        "{e}"
    );
}

/// `enqueue` and `enqueue_key`: the key file is read (relative to the config's folder) and
/// checked; the errors name the file, the line and the key.
#[test]
fn enqueue_keys_parse_and_their_errors_name_file_line_and_key() {
    use crate::enqueue::{testing::SECRET, Mode};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vestibule.toml");
    std::fs::write(dir.path().join("site.key"), SECRET).unwrap();
    std::fs::write(dir.path().join("short.key"), b"short\n").unwrap();
    let parse = |room: &str| Config::parse(&format!("{MINIMAL}[[room]]\n{room}"), &config, &Disk);
    let errors = |room: &str| parse(room).unwrap_err().to_string();

    let c = parse("enqueue = \"required\"\nenqueue_key = \"site.key\"\n").unwrap();
    let e = c.rooms[0].enqueue.as_ref().unwrap();
    assert_eq!(e.mode, Mode::Required);
    assert_eq!(e.key_file, dir.path().join("site.key"));
    assert_eq!(e.key.algorithm(), "HS256");
    let c = parse("enqueue = \"optional\"\nenqueue_key = \"site.key\"\n").unwrap();
    assert_eq!(c.rooms[0].enqueue.as_ref().unwrap().mode, Mode::Optional);
    assert_eq!(parse("").unwrap().rooms[0].enqueue, None);
    assert_eq!(parse("enqueue = \"off\"\n").unwrap().rooms[0].enqueue, None);

    let path = config.display();
    let e = errors("enqueue = \"on\"\n");
    assert!(
        e.contains(&format!(
            "{path}:4: room[0].enqueue: must be \"off\", \"optional\" or \"required\", got \"on\""
        )),
        "{e}"
    );
    let e = errors("enqueue = \"required\"\n");
    assert!(
        e.contains(&format!(
            "{path}:4: room[0].enqueue: \"required\" needs enqueue_key"
        )),
        "{e}"
    );
    let e = errors("enqueue_key = \"site.key\"\n");
    assert!(
        e.contains(&format!(
            "{path}:4: room[0].enqueue_key: only applies with enqueue"
        )),
        "{e}"
    );
    let e = errors("enqueue = \"optional\"\nenqueue_key = \"missing.key\"\n");
    assert!(
        e.contains(&format!("{path}:5: room[0].enqueue_key: cannot read")),
        "{e}"
    );
    assert!(e.contains("missing.key"), "{e}");
    let e = errors("enqueue = \"optional\"\nenqueue_key = \"short.key\"\n");
    assert!(
        e.contains(&format!("{path}:5: room[0].enqueue_key:")),
        "{e}"
    );
    assert!(e.contains("short.key: an HS256 secret of 5 bytes"), "{e}");
}
