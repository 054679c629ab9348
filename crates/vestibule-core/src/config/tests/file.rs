//! The file as a whole: its defaults, syntax and type errors, unknown keys, and every problem
//! reported at once with its key and line.

use super::*;

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
