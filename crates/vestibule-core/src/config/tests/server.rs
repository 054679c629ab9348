//! `[server]`, `[admin]`, `[identity]`, `[upstream]` and `[cluster]`: addresses, CIDRs, the edge's
//! settings, Pingora's conf and the checks of a reload.

use super::*;

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
fn a_reload_is_checked_with_the_sockets_in_service() {
    let serving = parse(&format!(
        "{MINIMAL}[admin]\nlisten = \"0.0.0.0:9901\"\ntoken = \"0123456789abcdef\"\n"
    ))
    .unwrap();
    // Moving to loopback and dropping the token: the move waits for a restart, so the token
    // must stay.
    let mut edited = parse(&format!("{MINIMAL}[admin]\nlisten = \"127.0.0.1:9901\"\n")).unwrap();
    let e = edited
        .keep_restart_settings(&serving, &Disk)
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
    let pending = edited.keep_restart_settings(&serving, &Disk).unwrap();
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

#[test]
fn the_api_prefix_and_cors_origins_are_checked() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.server.api_prefix, "/.vestibule");
    assert!(c.server.api_cors_origins.is_empty());
    let c = parse(&format!(
        "{MINIMAL}[server]\napi_prefix = \"/_queue\"\napi_cors_origins = [\"https://Shop.example\", \"*\"]\n"
    ))
    .unwrap();
    assert_eq!(c.server.api_prefix, "/_queue");
    assert_eq!(c.server.api_cors_origins, ["https://shop.example", "*"]);
    for bad in ["", "/", "x", "/a/", "/a//b", "/a/../b", "/a b", "/a?b"] {
        let e = errors(&format!("{MINIMAL}[server]\napi_prefix = \"{bad}\"\n"));
        assert!(
            e.contains("vestibule.toml:4: server.api_prefix: "),
            "{bad}: {e}"
        );
    }
    let e = errors(&format!(
        "{MINIMAL}[server]\napi_cors_origins = [\"https://ok.example\", \"shop.example\", \"https://a/b\"]\n"
    ));
    assert!(e.contains("server.api_cors_origins[1]"), "{e}");
    assert!(e.contains("server.api_cors_origins[2]"), "{e}");
    assert!(!e.contains("server.api_cors_origins[0]"), "{e}");
}

#[test]
fn jwt_settings_are_checked() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.jwt.issuer, "vestibule");
    let c = parse(&format!(
        "{MINIMAL}[jwt]\nissuer = \"https://queue.example\"\n[[room]]\nname = \"sale\"\njwt = true\n[[room]]\nname = \"b\"\ncookie_name = \"b\"\njwt = true\njwt_audience = \"api\"\njwt_validity = \"10m\"\n"
    ))
    .unwrap();
    assert_eq!(c.jwt.issuer, "https://queue.example");
    let j = c.rooms[0].jwt.as_ref().unwrap();
    assert_eq!((j.audience.as_str(), j.validity.as_secs()), ("sale", 3600));
    let j = c.rooms[1].jwt.as_ref().unwrap();
    assert_eq!((j.audience.as_str(), j.validity.as_secs()), ("api", 600));
    let e = errors(&format!("{MINIMAL}[[room]]\njwt_audience = \"x\"\n"));
    assert!(
        e.contains("room[0].jwt_audience: only applies with jwt = true"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[[room]]\njwt = true\njwt_validity = \"10s\"\n"
    ));
    assert!(
        e.contains("vestibule.toml:5: room[0].jwt_validity: must be between 1m and 7d"),
        "{e}"
    );
    let e = errors(&format!("{MINIMAL}[jwt]\nissuer = \"\"\n"));
    assert!(e.contains("jwt.issuer"), "{e}");
    for other in ["access = \"invite\"", "challenge = \"pow\""] {
        let e = errors(&format!("{MINIMAL}[[room]]\njwt = true\n{other}\n"));
        assert!(
            e.contains("vestibule.toml:4: room[0].jwt: cannot be used with"),
            "{other}: {e}"
        );
    }
    // A room's JWT cookie is its own: no other room may take its name, in either order.
    for rooms in [
        "[[room]]\nname = \"a\"\ncookie_name = \"x\"\njwt = true\n[[room]]\nname = \"b\"\ncookie_name = \"x_jwt\"\n",
        "[[room]]\nname = \"b\"\ncookie_name = \"x_jwt\"\n[[room]]\nname = \"a\"\ncookie_name = \"x\"\njwt = true\n",
    ] {
        let e = errors(&format!("{MINIMAL}{rooms}"));
        assert!(e.contains("room[1].cookie_name"), "{e}");
    }
}

#[test]
fn the_queue_api_needs_a_fifo_room_in_one_order() {
    let fifo = "[[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 5\n";
    let c = parse(&format!(
        "{MINIMAL}{fifo}api = true\nqueue_position_expiry = \"5m\"\n"
    ))
    .unwrap();
    let api = c.rooms[0].api.as_ref().unwrap();
    assert_eq!(api.position_expiry.as_secs(), 300);
    assert!(parse(&format!("{MINIMAL}{fifo}")).unwrap().rooms[0]
        .api
        .is_none());
    for (room, says) in [
        ("[[room]]\napi = true\n", "room[0].api: applies only to capacity rooms with order = \"fifo\""),
        (
            "[[room]]\nadmission = \"random\"\nnew_users_per_minute = 5\napi = true\n",
            "room[0].api: applies only to capacity rooms",
        ),
        (
            &format!("{fifo}api = true\nlanes = {{ members = 2 }}\n"),
            "room[0].api: cannot be used with lanes",
        ),
        (
            &format!("{fifo}api = true\naccess = \"invite\"\n"),
            "room[0].api: cannot be used with access = \"invite\"",
        ),
        (
            &format!("{fifo}queue_position_expiry = \"1m\"\n"),
            "room[0].queue_position_expiry: only applies with api = true",
        ),
        (
            &format!("{fifo}api = true\nqueue_position_expiry = \"5s\"\n"),
            "vestibule.toml:8: room[0].queue_position_expiry: must be 0s (never) or between 10s and 1d",
        ),
    ] {
        let e = errors(&format!("{MINIMAL}{room}"));
        assert!(e.contains(says), "{room}: {e}");
    }
}

#[test]
fn history_keys_default_and_bad_values_name_file_line_and_key() {
    let c = parse(MINIMAL).unwrap();
    let dir = c.admin.history_dir.as_ref().unwrap();
    assert!(dir.ends_with("state/history"), "{dir:?}");
    assert_eq!(c.admin.history_days, 30);
    assert_eq!(c.admin.max_history_bytes, 1 << 30);
    let c = parse(&format!(
        "{MINIMAL}[admin]\nhistory_dir = \"\"\nmax_history_bytes = \"500 MB\"\n"
    ))
    .unwrap();
    assert_eq!(c.admin.history_dir, None);
    assert_eq!(c.admin.max_history_bytes, 500_000_000);
    let e = errors(&format!(
        "{MINIMAL}[admin]\nhistory_days = 0\nmax_history_bytes = \"1 lot\"\n"
    ));
    assert!(
        e.contains(":4: admin.history_days: must be 1 to 3660"),
        "{e}"
    );
    assert!(
        e.contains(":5: admin.max_history_bytes: must be a size"),
        "{e}"
    );
    let e = errors(&format!(
        "{MINIMAL}[admin]\nmax_history_bytes = \"10KiB\"\n"
    ));
    assert!(e.contains("at least 1MiB"), "{e}");
}
