//! `[[events.sink]]`: each kind read with its defaults, and every mistake named by key.

use super::*;
use crate::config::sinks::{Destination, SinkSecret};

/// A config in a temporary folder holding a webhook secret `hook-secret`.
fn with_secret(extra: &str) -> (tempfile::TempDir, Result<Config, ConfigErrors>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hook-secret"), "0123456789abcdef0123\n").unwrap();
    let text = format!("{MINIMAL}[[room]]\nname = \"shop\"\nallow_percentage = 10\n{extra}");
    let c = Config::parse(&text, &dir.path().join("vestibule.toml"), &Disk);
    (dir, c)
}

#[test]
fn sinks_are_read_with_their_defaults() {
    let (dir, c) = with_secret(
        "[[events.sink]]\nname = \"shop\"\nkind = \"webhook\"\n\
         url = \"https://shop.example/hooks/vestibule\"\nsecret_file = \"hook-secret\"\n\
         types = [\"admission.granted\"]\nrooms = [\"shop\"]\n\
         [[events.sink]]\nname = \"log\"\nkind = \"file\"\nmax_file_bytes = \"1MiB\"\n\
         max_spool_bytes = \"1MiB\"\nmax_retry_age = \"1h\"\nspool_dir = \"/var/spool/x\"\n\
         [[events.sink]]\nname = \"stream\"\nkind = \"redis_stream\"\nredis = \"redis://10.0.0.5:6379/0\"\n",
    );
    let c = c.unwrap();
    assert_eq!(c.sinks.len(), 3);
    let hook = &c.sinks[0];
    assert_eq!(
        hook.destination,
        Destination::Webhook {
            url: "https://shop.example/hooks/vestibule".into(),
            secret: SinkSecret(b"0123456789abcdef0123".to_vec()),
            secret_file: dir.path().join("hook-secret"),
        }
    );
    assert_eq!(hook.spool_dir, dir.path().join("state/spool/shop"));
    assert_eq!(hook.max_spool_bytes, 256 << 20);
    assert_eq!(hook.max_retry_age, Duration::from_secs(86_400));
    assert!(hook.wants("admission.granted", Some("shop")));
    assert!(!hook.wants("room.minute", Some("shop")));
    assert!(!hook.wants("admission.granted", None));
    assert!(!format!("{hook:?}").contains("0123456789"));
    let (_dir, with_password) = with_secret(
        "[[events.sink]]\nname = \"s\"\nkind = \"redis_stream\"\nredis = \"redis://:hunter2@10.0.0.5:6379/0\"\n\
         [[events.sink]]\nname = \"w\"\nkind = \"webhook\"\nurl = \"https://u:hunter3@x/\"\nsecret_file = \"hook-secret\"\n",
    );
    let shown = format!("{:?}", with_password.unwrap().sinks);
    assert!(!shown.contains("hunter"), "{shown}");

    let file = &c.sinks[1];
    assert_eq!(
        file.destination,
        Destination::File {
            path: dir.path().join("state/events.jsonl"),
            max_file_bytes: 1 << 20
        }
    );
    assert_eq!(file.spool_dir, Path::new("/var/spool/x"));
    assert_eq!(file.max_retry_age, Duration::from_secs(3600));
    assert!(file.wants("operator.action", None));

    assert_eq!(
        c.sinks[2].destination,
        Destination::RedisStream {
            stream: "vestibule:events".into(),
            max_len: 100_000,
            redis: Some("redis://10.0.0.5:6379/0".into())
        }
    );
}

#[test]
fn bad_sinks_name_their_keys() {
    let (_dir, c) = with_secret(
        "[[events.sink]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"ftp://user:hunter2@x/\"\nsecret_file = \"hook-secret\"\n\
         [[events.sink]]\nname = \"b\"\nkind = \"webhook\"\nurl = \"https://x/\"\nsecret_file = \"missing\"\n\
         [[events.sink]]\nname = \"a\"\nkind = \"file\"\ntypes = [\"vestibule.room.minute\", \"nope\"]\n\
         rooms = [\"shop\", \"ghost\"]\nurl = \"https://x/\"\n\
         [[events.sink]]\nname = \"d\"\nkind = \"kafka\"\n\
         [[events.sink]]\nname = \"e\"\nkind = \"redis_stream\"\n\
         [[events.sink]]\nname = \"f\"\nkind = \"webhook\"\nsecret_file = \"hook-secret\"\n\
         [[events.sink]]\nname = \"g\"\nkind = \"file\"\nmax_spool_bytes = \"1KiB\"\nmax_file_bytes = \"lots\"\n\
         [[events.sink]]\nname = \"h\"\nkind = \"webhook\"\nurl = \"https://user:hunter2@x/\"\nsecret_file = \"hook-secret\"\nbogus = 1\n",
    );
    let e = c.unwrap_err().to_string();
    for expected in [
        "events.sink[0].url",
        "must be an http:// or https:// URL",
        "events.sink[1].secret_file",
        "cannot read",
        "events.sink[2].name",
        "another sink is named \"a\"",
        "events.sink[2].types[0]",
        "write it without the prefix: \"room.minute\"",
        "events.sink[2].types[1]",
        "events.sink[2].rooms[1]",
        "no room is named \"ghost\"",
        "events.sink[2].url",
        "applies only to kind = \"webhook\"",
        "events.sink[3].kind",
        "events.sink[4].redis",
        "events.sink[5].url",
        "events.sink[6].max_spool_bytes",
        "events.sink[6].max_file_bytes",
        "events.sink[7].bogus",
    ] {
        assert!(e.contains(expected), "{expected:?} missing from:\n{e}");
    }
    assert!(!e.contains("hunter2"), "{e}");
    assert!(!e.contains("0123456789abcdef"), "{e}");
    // Lines are named.
    assert!(e.contains(":17: events.sink[2].name"), "{e}");
}

#[test]
fn a_short_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s"), "short\n").unwrap();
    let text = format!(
        "{MINIMAL}[[events.sink]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"http://127.0.0.1:1/\"\nsecret_file = \"s\"\n"
    );
    let e = Config::parse(&text, &dir.path().join("v.toml"), &Disk)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("events.sink[0].secret_file") && e.contains("at least 16"),
        "{e}"
    );
    assert!(!e.contains("short"), "{e}");
}

#[test]
fn the_clusters_redis_serves_a_stream_sink() {
    let c = parse(&format!(
        "{MINIMAL}[cluster]\nstore = \"redis\"\nredis = [\"redis://127.0.0.1:6379/0\"]\n\
         [[events.sink]]\nname = \"s\"\nkind = \"redis_stream\"\nstream = \"ev\"\nmax_len = 10\ntypes = [\"room.minute\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.sinks[0].destination,
        Destination::RedisStream {
            stream: "ev".into(),
            max_len: 10,
            redis: None
        }
    );
}

#[test]
fn sinks_change_on_restart_only() {
    let (_dir, old) = with_secret("");
    let (_dir2, new) = with_secret("[[events.sink]]\nname = \"log\"\nkind = \"file\"\n");
    let (old, new) = (old.unwrap(), new.unwrap());
    let pending = crate::config::diff::needs_restart(&old, &new);
    assert!(
        pending.iter().any(|(k, _, _)| *k == "events.sink"),
        "{pending:?}"
    );
    let mut kept = new.clone();
    crate::config::diff::keep_restart_settings(&mut kept, &old);
    assert!(kept.sinks.is_empty());
}

#[test]
fn a_new_webhook_key_is_named_as_waiting_for_a_restart_and_never_shown() {
    let sink = "[[events.sink]]\nname = \"shop\"\nkind = \"webhook\"\nurl = \"https://x/\"\nsecret_file = \"hook-secret\"\n";
    let (dir, old) = with_secret(sink);
    let old = old.unwrap();
    std::fs::write(
        dir.path().join("hook-secret"),
        "a-brand-new-key-of-some-length\n",
    )
    .unwrap();
    let text = format!("{MINIMAL}[[room]]\nname = \"shop\"\nallow_percentage = 10\n{sink}");
    let new = Config::parse(&text, &dir.path().join("vestibule.toml"), &Disk).unwrap();
    let pending = crate::config::diff::needs_restart(&old, &new);
    assert!(
        pending
            .iter()
            .any(|(k, _, _)| *k == "events.sink secret_file"),
        "{pending:?}"
    );
    let shown = format!("{pending:?}");
    assert!(
        !shown.contains("brand-new") && !shown.contains("0123456789"),
        "{shown}"
    );
}

#[test]
fn a_webhook_url_shows_only_where_it_goes() {
    use crate::config::url_origin;
    assert_eq!(
        url_origin("https://hooks.slack.com/services/T0/B0/sekrit-token"),
        "https://hooks.slack.com/…"
    );
    assert_eq!(
        url_origin("https://user:pw@hooks.example:8443/in?token=sekrit"),
        "https://hooks.example:8443/…"
    );
    assert_eq!(url_origin("http://hooks.example/"), "http://hooks.example/");
    assert_eq!(url_origin("http://hooks.example"), "http://hooks.example");
    assert_eq!(url_origin("hooks.example/sekrit"), "hooks.example/…");
    // Nowhere a config, a diff or --check prints it.
    let sink = |url: &str| {
        format!(
            "[[events.sink]]\nname = \"shop\"\nkind = \"webhook\"\nurl = \"{url}\"\nsecret_file = \"hook-secret\"\n"
        )
    };
    let (dir, old) = with_secret(&sink("https://hooks.example/in/old-sekrit-token"));
    let old = old.unwrap();
    assert!(!format!("{old:?}").contains("sekrit"), "{old:?}");
    let text = format!(
        "{MINIMAL}[[room]]\nname = \"shop\"\nallow_percentage = 10\n{}",
        sink("https://hooks.example/in/new-sekrit-token")
    );
    let new = Config::parse(&text, &dir.path().join("vestibule.toml"), &Disk).unwrap();
    let pending = crate::config::diff::needs_restart(&old, &new);
    let shown = format!("{pending:?}");
    assert!(
        pending.iter().any(|(k, _, _)| *k == "events.sink url") && !shown.contains("sekrit"),
        "{shown}"
    );
    assert!(
        !pending
            .iter()
            .any(|(k, _, _)| *k == "events.sink secret_file"),
        "{shown}"
    );
    let (_dir, bad) = with_secret(&sink("ftp://hooks.example/in/sekrit-token"));
    let said = bad.unwrap_err().to_string();
    assert!(
        said.contains("events.sink[0].url") && !said.contains("sekrit"),
        "{said}"
    );
}

#[test]
fn two_file_sinks_may_not_share_a_file() {
    // Both default to state/events.jsonl.
    let (_dir, c) = with_secret(
        "[[events.sink]]\nname = \"a\"\nkind = \"file\"\n\
         [[events.sink]]\nname = \"b\"\nkind = \"file\"\n",
    );
    let said = c.unwrap_err().to_string();
    assert!(
        said.contains("events.sink[1].path") && said.contains("another file sink's file"),
        "{said}"
    );
    let (_dir, c) = with_secret(
        "[[events.sink]]\nname = \"a\"\nkind = \"file\"\n\
         [[events.sink]]\nname = \"b\"\nkind = \"file\"\npath = \"state/other.jsonl\"\n",
    );
    assert!(c.is_ok());
}
