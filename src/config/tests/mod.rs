use super::*;

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(text, Path::new("/etc/vestibule/vestibule.toml"))
}

fn errors(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

const MINIMAL: &str = "[upstream]\npeers = [\"127.0.0.1:8000\"]\n";

#[test]
fn minimal_file_gets_spec_defaults() {
    let c = parse(MINIMAL).unwrap();
    assert!(c.admin.state_file.ends_with("state/overrides.json"));
    assert_eq!(c.server.listen, vec!["0.0.0.0:8080".parse().unwrap()]);
    assert_eq!(c.server.threads, 2);
    assert_eq!(c.server.pid_file, PathBuf::from("/tmp/vestibule.pid"));
    assert_eq!(
        c.server.upgrade_sock,
        PathBuf::from("/tmp/vestibule_upgrade.sock")
    );
    assert_eq!(c.server.graceful_shutdown, Duration::from_secs(5));
    assert_eq!(c.admin.listen, "127.0.0.1:9901".parse().unwrap());
    assert_eq!(c.admin.token, None);
    assert_eq!(c.identity, IdentityPolicy::default());
    assert_eq!(
        c.upstream.peers[0].addrs,
        vec!["127.0.0.1:8000".parse().unwrap()]
    );
    assert_eq!(c.upstream.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.upstream.read_timeout, Duration::from_secs(30));
    assert_eq!(c.upstream.health_check, Duration::from_secs(5));
    assert_eq!(c.keys_file, PathBuf::from("/etc/vestibule/keys.toml"));
    assert!(c.rooms.is_empty() && c.rate_limits.is_empty());
    assert_eq!(c.log.level, log::LevelFilter::Info);
}

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

#[test]
fn rule_defaults_follow_the_spec() {
    let c = parse(&format!("{MINIMAL}[[rate_limit]]\n")).unwrap();
    let r = &c.rate_limits[0];
    assert_eq!(r.name, "per-ip");
    assert_eq!(r.key, [KeyPart::ClientIp]);
    assert_eq!(
        r.algorithm,
        Algorithm::Window {
            window: Duration::from_secs(10),
            quota: 1000,
            penalty: Duration::from_secs(900)
        }
    );
    assert_eq!((r.scope, r.action), (Scope::All, Action::Block));
    // The README and conf/vestibule.toml document this default.
    assert_eq!(r.max_keys, 16_384);
}

#[test]
fn syntax_errors_carry_the_line() {
    let e = errors("[upstream]\npeers == [\"127.0.0.1:8000\"]\n");
    assert!(e.starts_with("/etc/vestibule/vestibule.toml:2"), "{e}");
}

#[test]
fn unknown_keys_are_errors() {
    let e = errors(&format!(
        "{MINIMAL}[server]\nlisten = [\"0.0.0.0:80\"]\nlisen = 1\n"
    ));
    assert!(e.contains(":5: server.lisen: unknown field `lisen`"), "{e}");
    let e = errors(&format!("{MINIMAL}[[room]]\nallow_percent = 5\n"));
    assert!(e.contains("room[0].allow_percent: unknown field"), "{e}");
}

#[test]
fn unknown_keys_get_the_nearest_known_key() {
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_user_per_minute = 60\n"
    ));
    assert!(
        e.contains(
            "vestibule.toml:5: room[0].new_user_per_minute: unknown field `new_user_per_minute`; \
             did you mean `new_users_per_minute`?"
        ),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}health_chek = \"1s\"\n"));
    assert!(
        e.contains(
            ":3: upstream.health_chek: unknown field `health_chek`; did you mean `health_check`?"
        ),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}[[rate_limit]]\nlimt = 5\n"));
    assert!(e.contains("did you mean `limit`?"), "{e}");
    // Nothing near: no guess.
    let e = errors(&format!("{MINIMAL}[server]\nflux_capacitor = 1\n"));
    assert!(
        e.contains("unknown field `flux_capacitor`") && !e.contains("did you mean"),
        "{e}"
    );
}

/// A value of the wrong type names the key and its line, however deep the key is written.
#[test]
fn type_errors_name_the_key_and_line() {
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 60\nsession_duration = 60\n"
    ));
    assert!(
        e.starts_with("/etc/vestibule/vestibule.toml:6: room[0].session_duration: invalid type"),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}[server]\nthreads = \"two\"\n"));
    assert!(
        e.starts_with("/etc/vestibule/vestibule.toml:4: server.threads: invalid type"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\n[[room]]\nname = \"b\"\nenabled = \"yes\"\n"
    ));
    assert!(e.contains(":6: room[1].enabled: invalid type"), "{e}");
    let e = errors(&format!("{MINIMAL}[[rate_limit]]\nlimit = 1.5\n"));
    assert!(e.contains(":4: rate_limit[0].limit: invalid type"), "{e}");
    let e = errors("[upstream]\npeers = [\"127.0.0.1:8000\", 7]\n");
    assert!(e.contains(":2: upstream.peers[1]: invalid type"), "{e}");
    // Every error of one file reads the same way: file, line, key, message.
    let e = errors(&format!(
        "{MINIMAL}[tls]\ncertificates = [{{ cert = 1, key = \"k\" }}]\n"
    ));
    assert!(
        e.contains(":4: tls.certificates[0].cert: invalid type"),
        "{e}"
    );
}

/// Every problem of a file in one run, each with its key and line: unknown keys do not
/// stop the parse, and what parsed is validated too.
#[test]
fn every_problem_is_reported_at_once() {
    let text = format!(
        "{MINIMAL}[server]\nlisen = [\"0.0.0.0:80\"]\nthreads = 0\n\
         [[room]]\nallow_percent = 5\nallow_percentage = 101\n\
         [[room]]\nname = \"two\"\npaths = [\"/two\"]\ncookie_name = \"two\"\nqueue_everyone = true\n"
    );
    let e = errors(&text);
    for wanted in [
        ":4: server.lisen: unknown field `lisen`",
        ":5: server.threads:",
        ":7: room[0].allow_percent: unknown field `allow_percent`",
        ":8: room[0].allow_percentage:",
        ":13: room[1].queue_everyone: unknown field `queue_everyone`",
    ] {
        assert!(e.contains(wanted), "{wanted} missing from:\n{e}");
    }
    assert_eq!(e.lines().count(), 5, "{e}");
}

#[test]
fn bad_addresses_and_cidrs_name_the_key() {
    let e = errors(&format!(
        "{MINIMAL}[server]\nlisten = [\"0.0.0.0:80\", \"nope\"]\n"
    ));
    assert!(
        e.contains(":4: server.listen[1]: \"nope\" is not an address"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[identity]\ntrusted_proxies = [\"10.0.0.0/33\"]\n"
    ));
    assert!(e.contains(":4: identity.trusted_proxies[0]"), "{e}");
}

#[test]
fn cidrs_accept_addresses_and_normalise() {
    let c = parse(&format!(
        "{MINIMAL}[identity]\ntrusted_proxies = [\"10.1.2.3/8\", \"192.0.2.1\", \"::ffff:10.0.0.0/104\"]\n"
    ))
    .unwrap();
    let nets: Vec<String> = c
        .identity
        .trusted_proxies
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(nets, ["10.0.0.0/8", "192.0.2.1/32", "10.0.0.0/8"]);
}

#[test]
fn unresolvable_upstream() {
    let e = errors("[upstream]\npeers = [\"no-such-host.invalid:80\"]\n");
    assert!(
        e.contains("upstream.peers[0]: cannot resolve \"no-such-host.invalid:80\""),
        "{e}"
    );
    let e = errors("[upstream]\npeers = [\"127.0.0.1\"]\n");
    assert!(e.contains("needs a port"), "{e}");
    let e = errors("[server]\nthreads = 2\n");
    assert!(e.contains("upstream.peers: is required"), "{e}");
}

#[test]
fn admin_token_required_off_loopback() {
    let e = errors(&format!("{MINIMAL}[admin]\nlisten = \"0.0.0.0:9901\"\n"));
    assert!(e.contains("admin.token: is required"), "{e}");
    let c = parse(&format!(
        "{MINIMAL}[admin]\nlisten = \"0.0.0.0:9901\"\ntoken = \"0123456789abcdef0123\"\n"
    ))
    .unwrap();
    assert!(c.admin.token.is_some());
    assert!(!format!("{:?}", c.admin).contains("0123456789abcdef"));
}

#[test]
fn keys_that_do_not_apply_say_why() {
    let e = errors(&format!(
        "{MINIMAL}[[rate_limit]]\nalgorithm = \"window\"\nperiod = \"10s\"\n"
    ));
    assert!(
        e.contains("rate_limit[0].period: does not apply to a \"window\" rule"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"lottery\"\nnew_users_per_minute = 10\n"
    ));
    assert!(
        e.contains(
            "room[0].new_users_per_minute: only applies when admission is \"random\" or \"fifo\""
        ),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 10\nallow_percentage = 5\n"
    ));
    assert!(
        e.contains("room[0].allow_percentage: only applies when admission is \"lottery\""),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[rate_limit]]\nalgorithm = \"concurrency\"\npenalty = \"1m\"\n"
    ));
    assert!(e.contains("rate_limit[0].penalty: does not apply"), "{e}");
}

/// A window rule's `limit` may be a rate: "5/10s" is a quota of 5 per 10 s window.
#[test]
fn window_limits_may_be_rates() {
    let rule = |text: &str| {
        parse(&format!("{MINIMAL}[[rate_limit]]\n{text}\n"))
            .unwrap()
            .rate_limits[0]
            .algorithm
    };
    let window = |secs, quota| Algorithm::Window {
        window: Duration::from_secs(secs),
        quota,
        penalty: Duration::from_secs(900),
    };
    assert_eq!(rule("limit = \"5/10s\""), window(10, 5));
    assert_eq!(rule("limit = \"100 / 1m\""), window(60, 100));
    assert_eq!(rule("limit = \"3/s\""), window(1, 3));
    // A number is still requests per second, averaged over the window.
    assert_eq!(rule("limit = 5\nwindow = \"10s\""), window(10, 50));
    // Token buckets take the same text for `limit` per `period`.
    assert_eq!(
        rule("algorithm = \"token_bucket\"\nlimit = \"15/1m\""),
        Algorithm::TokenBucket {
            limit: 15,
            period: Duration::from_secs(60),
            penalty: Duration::from_secs(900),
        }
    );
    for (text, wanted) in [
        (
            "limit = \"5/10s\"\nwindow = \"10s\"",
            ":5: rate_limit[0].window: is already given by limit = \"5/10s\"",
        ),
        (
            "limit = \"5/30s\"",
            ":4: rate_limit[0].limit: \"5/30s\": a window rule counts over 1s, 10s or 60s, got 30s",
        ),
        (
            "limit = \"five/10s\"",
            ":4: rate_limit[0].limit: \"five/10s\" is not a number of requests or a rate like \"5/10s\"",
        ),
        ("limit = \"5\"", ":4: rate_limit[0].limit: \"5\" is not a number"),
        ("limit = \"5/0s\"", ":4: rate_limit[0].limit: \"5/0s\" is not"),
        ("limit = \"5/ages\"", ":4: rate_limit[0].limit: \"5/ages\" is not"),
        ("limit = \"0/10s\"", ":4: rate_limit[0].limit: must be between 1 and 100000000, got 0"),
        (
            "algorithm = \"token_bucket\"\nlimit = \"1/2d\"",
            ":5: rate_limit[0].limit: \"1/2d\": the period must be between 1s and 24h",
        ),
        (
            "algorithm = \"token_bucket\"\nlimit = \"1/1s\"\nperiod = \"1s\"",
            ":6: rate_limit[0].period: is already given by limit",
        ),
        (
            "algorithm = \"concurrency\"\nlimit = \"4/1s\"",
            ":5: rate_limit[0].limit: \"4/1s\" is a rate; a concurrency rule's limit is a number",
        ),
    ] {
        let e = errors(&format!("{MINIMAL}[[rate_limit]]\n{text}\n"));
        assert!(e.contains(wanted), "{text}: {wanted} missing from {e}");
    } // Whatever is written, an error naming the key, never a panic.
    for text in [
        "/",
        "5/",
        "/10s",
        "99999999999999999999/10s",
        "-5/10s",
        "5/10s/3",
        "5/99999999999999999999999s",
        "5/1e400s",
        "5 / ",
        "\u{e9}/\u{e9}",
    ] {
        let e = errors(&format!("{MINIMAL}[[rate_limit]]\nlimit = \"{text}\"\n"));
        assert!(e.contains(":4: rate_limit[0].limit: "), "{text}: {e}");
    }
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
    let load = |text: &str| Config::parse(text, &path);
    let room = format!("{MINIMAL}[[room]]\n");
    assert_eq!(load(&room).unwrap().rooms[0].pages, None);
    std::fs::create_dir(dir.path().join("pages")).unwrap();
    assert_eq!(
        load(&room).unwrap().rooms[0].pages,
        Some(dir.path().join("pages"))
    );
    let e = load(&format!("{room}pages = \"pagse\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "vestibule.toml:4: room[0].pages: there is no folder {}; leave `pages` out to serve the built-in pages",
            dir.path().join("pagse").display()
        )),
        "{e}"
    );
    // The same rule for the server's pages and an event's: a named folder must be there.
    let e = load(&format!("{MINIMAL}[server]\npages = \"nope\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vestibule.toml:4: server.pages: there is no folder"),
        "{e}"
    );
    let e = load(&format!(
        "{room}[[room.event]]\nname = \"e\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T11:00:00Z\"\npages = \"nope\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("vestibule.toml:8: room[0].event[0].pages: there is no folder"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
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
fn every_problem_is_reported() {
    let e = parse(&format!(
        "{MINIMAL}[[room]]\nallow_percentage = 150\nwait_status = 302\ncookie_same_site = \"sometimes\"\n[[room]]\n[[rate_limit]]\nwindow = \"5s\"\nkey = [\"ip\"]\n"
    ))
    .unwrap_err();
    let text = e.to_string();
    assert!(e.0.len() >= 5, "{text}");
    assert!(
        text.contains(":4: room[0].allow_percentage: must be between 0 and 100, got 150"),
        "{text}"
    );
    assert!(text.contains("room[0].wait_status"), "{text}");
    assert!(text.contains("room[0].cookie_same_site"), "{text}");
    assert!(
        text.contains("room[1].name: another room is already named \"default\""),
        "{text}"
    );
    assert!(
        text.contains("rate_limit[0].window: must be \"1s\", \"10s\" or \"60s\""),
        "{text}"
    );
    assert!(
        text.contains("rate_limit[0].key[0]: \"ip\" is not a key part"),
        "{text}"
    );
}

#[test]
fn durations_are_strings() {
    let e = errors(&format!("{MINIMAL}[server]\ngraceful_shutdown = 5\n"));
    assert!(e.contains(":4"), "{e}");
    let e = errors(&format!(
        "{MINIMAL}[server]\ngraceful_shutdown = \"5 parsecs\"\n"
    ));
    assert!(e.contains(":4"), "{e}");
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
fn key_parts() {
    let c = parse(&format!(
        "{MINIMAL}[[rate_limit]]\nkey = [\"client_ip\", \"host\", \"path\", \"method\", \"header:X-Api-Key\", \"cookie:session\"]\nmethods = [\"post\"]\n"
    ))
    .unwrap();
    let r = &c.rate_limits[0];
    assert_eq!(r.key.len(), 6);
    assert_eq!(
        r.key[4],
        KeyPart::Header(http::HeaderName::from_static("x-api-key"))
    );
    assert_eq!(r.methods, [http::Method::POST]);
}

#[test]
fn pingora_conf_bounds_shutdown() {
    let c = parse(&format!(
        "{MINIMAL}[server]\ngraceful_shutdown = \"3s\"\nthreads = 4\n"
    ))
    .unwrap();
    let p = c.pingora_conf();
    assert_eq!(p.threads, 4);
    assert_eq!(p.grace_period_seconds, Some(1));
    assert_eq!(p.graceful_shutdown_timeout_seconds, Some(1));
    assert_eq!(p.pid_file, "/tmp/vestibule.pid");
    // Timeouts of 1 s and more on Tokio's timer wheel.
    assert_eq!(p.fast_timeout_to_tokio_threshold_seconds, Some(0));
    let c = parse(&format!("{MINIMAL}[server]\ngraceful_shutdown = \"0s\"\n")).unwrap();
    assert_eq!(c.pingora_conf().grace_period_seconds, Some(0));
}

#[test]
fn a_header_identity_needs_trusted_proxies() {
    let e = errors(&format!("{MINIMAL}[identity]\nsource = \"header\"\n"));
    assert!(
        e.contains("vestibule.toml:4: identity.source: \"header\" needs identity.trusted_proxies"),
        "{e}"
    );
    let ok = parse(&format!(
        "{MINIMAL}[identity]\nsource = \"header\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n"
    ));
    assert!(ok.is_ok(), "{ok:?}");
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
fn a_reload_is_checked_with_the_sockets_in_service() {
    let serving = parse(&format!(
        "{MINIMAL}[admin]\nlisten = \"0.0.0.0:9901\"\ntoken = \"0123456789abcdef\"\n"
    ))
    .unwrap();
    // Moving to loopback and dropping the token: the move waits for a restart, so the token
    // must stay.
    let mut edited = parse(&format!("{MINIMAL}[admin]\nlisten = \"127.0.0.1:9901\"\n")).unwrap();
    let e = edited
        .keep_restart_settings(&serving)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("admin.token") && e.contains("until a restart"),
        "{e}"
    );
    // Changing only the token is fine, and a listen change is reported as pending.
    let mut edited = parse(&format!(
        "{MINIMAL}[admin]\nlisten = \"0.0.0.0:9902\"\ntoken = \"fedcba9876543210\"\n"
    ))
    .unwrap();
    let pending = edited.keep_restart_settings(&serving).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].0, "admin.listen");
    assert_eq!(edited.admin.listen, serving.admin.listen);
    assert_eq!(edited.admin.token.as_deref(), Some("fedcba9876543210"));
}

#[test]
fn cluster_defaults_and_errors() {
    let c = parse(MINIMAL).unwrap().cluster;
    assert_eq!(c.store, StoreKind::Local);
    assert_eq!(c.sync_interval, Duration::from_secs(1));
    assert_eq!(c.on_store_failure, OnStoreFailure::LastShare);
    assert_eq!(c.key_prefix, "vestibule:");
    let c = parse(&format!(
        "{MINIMAL}[cluster]\nstore = \"redis\"\nredis = [\"redis://:hunter2secret@10.0.0.5:6379/1\"]\nnode = \"edge-1\"\nsync_interval = \"250ms\"\non_store_failure = \"closed\"\n"
    ))
    .unwrap()
    .cluster;
    assert_eq!(c.store, StoreKind::Redis);
    assert_eq!(c.node.as_deref(), Some("edge-1"));
    assert_eq!(c.sync_interval, Duration::from_millis(250));
    assert_eq!(c.on_store_failure, OnStoreFailure::Closed);
    // The password never shows in logs (reload diffs print the Debug form).
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("hunter2secret") && shown.contains("10.0.0.5"),
        "{shown}"
    );
    let e = errors(&format!(
        "{MINIMAL}[cluster]\nstore = \"etcd\"\nsync_interval = \"20s\"\non_store_failure = \"maybe\"\nnode = \"a b\"\n"
    ));
    for key in [
        "cluster.store",
        "cluster.sync_interval",
        "cluster.on_store_failure",
        "cluster.node",
    ] {
        assert!(e.contains(key), "{key} missing from {e}");
    }
    // Several URLs: the seed nodes of a Redis Cluster.
    let c = parse(&format!(
        "{MINIMAL}[cluster]\nstore = \"redis\"\nredis = [\"redis://a:6379\", \"redis://b:6379\"]\n"
    ))
    .unwrap()
    .cluster;
    assert_eq!(c.redis.len(), 2);
    let e = errors(&format!(
        "{MINIMAL}[cluster]\nstore = \"redis\"\nredis = [\"http://x\"]\n"
    ));
    assert!(e.contains("cluster.redis[0]"), "{e}");
    let e = errors(&format!(
        "{MINIMAL}[cluster]\nstore = \"redis\"\nredis = []\n"
    ));
    assert!(e.contains("cluster.redis"), "{e}");
}

#[test]
fn shared_applies_to_window_rules_only() {
    let c = parse(&format!("{MINIMAL}[[rate_limit]]\nshared = true\n")).unwrap();
    assert!(c.rate_limits[0].shared);
    assert!(
        !parse(&format!("{MINIMAL}[[rate_limit]]\n"))
            .unwrap()
            .rate_limits[0]
            .shared
    );
    let e = errors(&format!(
        "{MINIMAL}[[rate_limit]]\nalgorithm = \"token_bucket\"\nshared = true\n"
    ));
    assert!(e.contains("rate_limit[0].shared"), "{e}");
}

#[test]
fn edge_and_pool_settings_are_checked() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.upstream.keepalive_pool_size, 1024);
    assert!(c.server.tls_listen.is_empty() && !c.server.h2c && !c.server.redirect_to_https);
    let e = errors(&MINIMAL.replace("[upstream]\n", "[upstream]\nkeepalive_pool_size = 0\n"));
    assert!(
        e.contains("upstream.keepalive_pool_size: must be between 1 and 65536, got 0"),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}[tls]\nmin_version = \"1.1\"\n"));
    assert!(
        e.contains("tls.min_version: must be \"1.2\" or \"1.3\""),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[server]\nredirect_to_https = true\ntls_listen = []\n"
    ));
    assert!(
        e.contains("server.redirect_to_https: needs server.tls_listen"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[server]\nlisten = [\"127.0.0.1:8080\"]\ntls_listen = [\"127.0.0.1:8080\"]\n[tls]\ncertificates = [{{ cert = \"a.pem\", key = \"a.key\" }}]\n"
    ));
    assert!(
        e.contains("server.tls_listen[0]: 127.0.0.1:8080 is also in server.listen"),
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
fn events_are_read_in_time_order() {
    // The event's page folder must exist.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pages/launch")).unwrap();
    let c = Config::parse(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 100\n\
         [[room.event]]\nname = \"late\"\nstart = \"2026-12-02T10:00:00Z\"\nend = \"2026-12-02T12:00:00Z\"\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-12-01T09:30:00Z\"\n\
         start = \"2026-12-01T11:00:00+01:00\"\nend = 2026-12-01T14:00:00Z\nshuffle_at_start = true\n\
         pages = \"pages/launch\"\nnew_users_per_minute = 500\nadmission = \"random\"\ntitle = \"Launch\"\n"
    ), &dir.path().join("vestibule.toml"))
    .unwrap();
    let events = &c.rooms[0].events;
    assert_eq!(
        events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["launch", "late"]
    );
    let e = &events[0];
    assert_eq!(e.prequeue_start, Some(1_796_117_400));
    assert_eq!((e.start, e.end), (1_796_119_200, 1_796_133_600));
    assert!(e.shuffle_at_start);
    assert_eq!(e.pages, Some(dir.path().join("pages/launch")));
    assert_eq!(e.overrides.new_users_per_minute, Some(500));
    assert_eq!(e.overrides.order, Some(QueueOrder::Random));
    assert_eq!(e.overrides.title.as_deref(), Some("Launch"));
    let Admission::Capacity(during) = e.admission(&c.rooms[0].admission) else {
        panic!("a capacity room stays one");
    };
    assert_eq!(
        (during.new_users_per_minute, during.order),
        (500, QueueOrder::Random)
    );
}

#[test]
fn bad_events_name_file_key_and_line() {
    let text = format!(
        "{MINIMAL}[[room]]\nallow_percentage = 10\n\
         [[room.event]]\nname = \"a\"\nstart = \"2026-12-01T10:00:00\"\nend = \"2026-12-01T12:00:00Z\"\n\
         [[room.event]]\nname = \"b\"\nprequeue_start = \"2026-12-01T11:00:00Z\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T12:00:00Z\"\n\
         [[room.event]]\nname = \"c\"\nstart = \"2026-12-03T10:00:00Z\"\nend = \"2026-12-03T09:00:00Z\"\n\
         [[room.event]]\nname = \"d\"\nstart = \"2026-12-04T10:00:00Z\"\nend = \"2026-12-04T12:00:00Z\"\nnew_users_per_minute = 5\nshuffle_at_start = true\n\
         [[room.event]]\nname = \"e\"\nprequeue_start = \"2026-12-04T11:00:00Z\"\nstart = \"2026-12-04T11:30:00Z\"\nend = \"2026-12-04T13:00:00Z\"\n\
         [[room.event]]\nstart = \"next tuesday\"\nend = \"2026-12-05T13:00:00Z\"\n"
    );
    let e = errors(&text);
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    // Each names the file, the line and the key.
    has("vestibule.toml:7: room[0].event[0].start: \"2026-12-01T10:00:00\" is not an RFC 3339 time with a zone");
    has("vestibule.toml:11: room[0].event[1].prequeue_start: must be before start");
    has("vestibule.toml:17: room[0].event[2].end: must be after start");
    has("room[0].event[3].new_users_per_minute: does not apply to this room's admission (\"lottery\")");
    has("room[0].event[3].shuffle_at_start: needs prequeue_start");
    has("vestibule.toml:26: room[0].event[4].prequeue_start: event \"e\" overlaps event \"d\"");
    has("room[0].event[5].name: needs a name");
    has("room[0].event[5].start: \"next tuesday\" is not an RFC 3339 time");
    let e = errors(&format!(
        "{MINIMAL}[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1\n\
         [[room.event]]\nname = \"x\"\nstart = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T12:00:00Z\"\nallow_percentage = 5\nadmission = \"lottery\"\n"
    ));
    assert!(
        e.contains("room[0].event[0].allow_percentage: does not apply"),
        "{e}"
    );
    assert!(
        e.contains("room[0].event[0].admission: must be \"random\" or \"fifo\""),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\n[[room.event]]\nname = \"x\"\n"
    ));
    assert!(e.contains("room[0].event[0].start: is required"), "{e}");
    assert!(e.contains("room[0].event[0].end: is required"), "{e}");
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

#[test]
fn h2_reset_budgets_default_parse_and_are_checked() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.server.h2_resets, ResetBudget::default());
    assert_eq!(c.server.h2_resets.per_connection, 100);
    assert_eq!(c.server.h2_resets.per_client, 200);
    let c = parse(&format!(
        "[server]\nh2_reset_per_connection = 0\nh2_reset_per_client = 50\nh2_reset_window = \"5m\"\n\
         h2_reset_penalty = \"10m\"\nh2_reset_within = \"250ms\"\n{MINIMAL}"
    ))
    .unwrap();
    assert_eq!(
        c.server.h2_resets,
        ResetBudget {
            per_connection: 0,
            per_client: 50,
            window: Duration::from_secs(300),
            penalty: Duration::from_secs(600),
            within: Duration::from_millis(250),
        }
    );
    let e = errors(&format!(
        "[server]\nh2_reset_per_connection = -1\nh2_reset_per_client = 2000000\nh2_reset_window = \"0s\"\n\
         h2_reset_penalty = \"2h\"\nh2_reset_within = \"1ms\"\n{MINIMAL}"
    ));
    let has = |needle: &str| assert!(e.contains(needle), "{needle:?} not in:\n{e}");
    has("vestibule.toml:2: server.h2_reset_per_connection: must be between 0 (no limit) and 1000000, got -1");
    has("vestibule.toml:3: server.h2_reset_per_client: must be between 0 (no limit) and 1000000, got 2000000");
    has("vestibule.toml:4: server.h2_reset_window: must be between 1s and 1h");
    has("vestibule.toml:5: server.h2_reset_penalty: must be between 1s and 1h");
    has("vestibule.toml:6: server.h2_reset_within: must be between 10ms and 1h");
}
