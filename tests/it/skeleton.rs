//! The walking skeleton end to end: proxying, the 502 page, `--check`, the admin endpoint,
//! SIGTERM and `demo`, all against the real binary and a real origin on loopback.

use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn proxies_with_forwarded_for_and_host_and_no_internal_headers() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).start();
    let resp = client()
        .get(v.url("/__echo?x=1"))
        .header("Host", "shop.example")
        .header("X-Forwarded-For", "6.6.6.6")
        .header("Vestibule-Command", "revoke")
        .header("vestibule-decision", "allow")
        .header("X-Custom", "kept")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let headers = echo_headers(&resp.text().unwrap());
    assert_eq!(header_values(&headers, "host"), ["shop.example"]);
    // An untrusted client's own XFF is replaced by its address.
    assert_eq!(header_values(&headers, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(header_values(&headers, "x-custom"), ["kept"]);
    assert!(
        headers.iter().all(|(n, _)| !n.starts_with("vestibule-")),
        "{headers:?}"
    );
    // Plain pages come through untouched.
    let resp = client().get(v.url("/hello")).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().unwrap().contains("You are in."));
}

#[test]
fn trusted_proxies_keep_the_chain() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra("[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]")
        .start();
    let body = client()
        .get(v.url("/__echo"))
        .header("X-Forwarded-For", "203.0.113.5")
        .send()
        .unwrap()
        .text()
        .unwrap();
    let headers = echo_headers(&body);
    assert_eq!(
        header_values(&headers, "x-forwarded-for"),
        ["203.0.113.5, 127.0.0.1"]
    );
}

#[test]
fn origin_down_gets_the_502_page_and_readyz_fails() {
    let dead = free_addr();
    let v = Setup::new(dead).start();
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    assert!(resp.headers().contains_key("retry-after"));
    let body = resp.text().unwrap();
    assert!(body.contains("Temporarily unavailable"), "{body}");
    let resp = client()
        .get(v.url("/"))
        .header("Accept", "application/json")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 502);
    let json: serde_json::Value = resp.json().unwrap();
    assert_eq!(json["status"], 502);
    // The health check marks the only peer down.
    assert!(eventually(Duration::from_secs(5), || v
        .admin_get("/readyz")
        .0
        == 503));
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 502);
    assert!(v.metric("vestibule_upstream_unavailable_total") >= 2.0);
}

#[test]
fn admin_endpoints() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).start();
    assert_eq!(v.admin_get("/healthz").0, 200);
    assert!(eventually(Duration::from_secs(5), || v
        .admin_get("/readyz")
        .0
        == 200));
    for _ in 0..3 {
        assert_eq!(client().get(v.url("/x")).send().unwrap().status(), 200);
    }
    client().get(v.url("/__status/503")).send().unwrap();
    let metrics = v.metrics();
    assert!(
        metric_value(
            &metrics,
            "vestibule_upstream_responses_total{status_class=\"2xx\"}"
        ) >= 3.0,
        "{metrics}"
    );
    assert!(
        metric_value(
            &metrics,
            "vestibule_upstream_responses_total{status_class=\"5xx\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert!(
        metric_value(&metrics, "vestibule_upstream_response_seconds_count") >= 4.0,
        "{metrics}"
    );
    assert_eq!(metric_value(&metrics, "vestibule_config_generation"), 1.0);
    let status = v.status();
    assert_eq!(status["generation"], 1);
    assert!(status["loaded_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(status["last_reload_error"], serde_json::Value::Null);
    assert_eq!(v.admin_get("/nope").0, 404);
}

#[test]
fn admin_off_loopback_requires_the_token() {
    let origin = Origin::start();
    let port = free_port();
    let token = "s3cret-admin-token-for-tests";
    let mut setup = Setup::new(origin.addr);
    setup.admin = Some(format!("listen = \"0.0.0.0:{port}\"\ntoken = \"{token}\""));
    let v = setup.start();
    let url = format!("http://127.0.0.1:{port}/status");
    let resp = client().get(&url).send().unwrap();
    assert_eq!(resp.status(), 401);
    assert!(resp.headers().contains_key("www-authenticate"));
    let resp = client()
        .get(&url)
        .bearer_auth("wrong-token-wrong-token")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client().get(&url).bearer_auth(token).send().unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.text().unwrap();
    assert!(!body.contains(token), "the token leaked into /status");
    assert_eq!(v.admin_get("/metrics").0, 200);
}

#[test]
fn check_accepts_good_configs() {
    let origin = Origin::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.toml");
    std::fs::write(
        &path,
        format!("[upstream]\npeers = [\"{}\"]\n", origin.addr),
    )
    .unwrap();
    let (code, out, err) = run_cli(&["--check", "--config", path.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    // The shipped sample config is valid as it stands.
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/vestibule.toml");
    let (code, out, err) = run_cli(&["--check", "--config", sample]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
}

#[test]
fn check_reports_each_kind_of_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("missing.toml", None, "missing.toml: cannot read the config file"),
        ("syntax.toml", Some("[upstream\npeers = []\n"), "syntax.toml:1"),
        (
            "unknown.toml",
            Some("[upstream]\npeers = [\"127.0.0.1:1\"]\nhealthcheck = \"1s\"\n"),
            "unknown.toml:3: upstream.healthcheck: unknown field `healthcheck`",
        ),
        (
            "listen.toml",
            Some("[server]\nlisten = [\"localhost\"]\n[upstream]\npeers = [\"127.0.0.1:1\"]\n"),
            "listen.toml:2: server.listen[0]: \"localhost\" is not an address",
        ),
        (
            "cidr.toml",
            Some("[identity]\ntrusted_proxies = [\"10.0.0.0/40\"]\n[upstream]\npeers = [\"127.0.0.1:1\"]\n"),
            "cidr.toml:2: identity.trusted_proxies[0]: \"10.0.0.0/40\" is not a CIDR",
        ),
        (
            "resolve.toml",
            Some("[upstream]\npeers = [\"no-such-origin.invalid:80\"]\n"),
            "resolve.toml:2: upstream.peers[0]: cannot resolve \"no-such-origin.invalid:80\"",
        ),
        (
            "suggest.toml",
            Some("[upstream]\npeers = [\"127.0.0.1:1\"]\n[[room]]\nadmission = \"fifo\"\nnew_user_per_minute = 60\n"),
            "suggest.toml:5: room[0].new_user_per_minute: unknown field `new_user_per_minute`; did you mean `new_users_per_minute`?",
        ),
        (
            "type.toml",
            Some("[upstream]\npeers = [\"127.0.0.1:1\"]\n[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 60\nsession_duration = 60\n"),
            "type.toml:6: room[0].session_duration: invalid type: integer `60`",
        ),
        (
            "rate.toml",
            Some("[upstream]\npeers = [\"127.0.0.1:1\"]\n[[rate_limit]]\nlimit = \"5/30s\"\n"),
            "rate.toml:4: rate_limit[0].limit: \"5/30s\": a window rule counts over 1s, 10s or 60s",
        ),
    ];
    for &(name, text, expected) in cases {
        let path = dir.path().join(name);
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let (code, out, err) = run_cli(&["--check", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}: {out}{err}");
        assert!(
            err.contains(expected),
            "{name}: expected {expected:?} in {err:?}"
        );
        assert!(!err.contains("panicked"), "{err}");
        // Running (not just checking) refuses the same file the same way.
        let (code, _, err) = run_cli(&["--config", path.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}");
        assert!(err.contains(expected), "{name}: {err}");
    }
}

/// A first config needs no copied files: a room that names no `pages`, with no `pages` folder
/// beside the config, serves the pages built into the binary, and says so once.
#[test]
fn a_room_without_a_pages_folder_serves_the_built_in_pages() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .without_pages()
        .extra("[[room]]\nname = \"sale\"\nallow_percentage = 0")
        .start();
    assert!(!v.path("pages").exists());
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(room_cookie(&resp, "waiting_room").is_some());
    let body = resp.text().unwrap();
    assert!(body.contains("<h1>sale is closed right now</h1>"), "{body}");
    assert!(
        eventually(Duration::from_secs(5), || v
            .log_text()
            .contains("names no pages and there is no folder")),
        "{}",
        v.log_text()
    );
    // `--check` passes the same file, with the same note.
    let (code, out, err) = run_cli(&["--check", "--config", v.config_path().to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    assert!(err.contains("serving the built-in pages"), "{err}");
}

/// A pages folder the config names and that is not there (a typo, a folder not copied yet) is a
/// warning, not an error: the room serves the built-in pages, the log and `--check` say which
/// folder was missing, and the folder's own pages serve from the next reload once it exists.
#[test]
fn a_named_pages_folder_that_is_missing_serves_the_built_in_pages() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .without_pages()
        .extra("[[room]]\nname = \"sale\"\nallow_percentage = 0\npages = \"no-such-pages\"")
        .start();
    let resp = client().get(v.url("/")).send().unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.text().unwrap();
    assert!(body.contains("<h1>sale is closed right now</h1>"), "{body}");
    let missing = format!(
        "room[0].pages: there is no folder {}: serving the built-in pages",
        v.path("no-such-pages").display()
    );
    assert!(
        eventually(Duration::from_secs(5), || v.log_text().contains(&missing)),
        "{}",
        v.log_text()
    );
    let (code, out, err) = run_cli(&["--check", "--config", v.config_path().to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    assert!(err.contains(&missing), "{err}");
}

/// Two rooms that name no cookie each get their own, so neither's visitors lose their place to
/// the other's; the first keeps `waiting_room`.
#[test]
fn rooms_without_cookie_names_each_set_their_own() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .extra(
            "[[room]]\nname = \"shop\"\npaths = [\"/shop\"]\nallow_percentage = 0\n\
             [[room]]\nname = \"tickets\"\npaths = [\"/tickets\"]\nallow_percentage = 0",
        )
        .start();
    let shop = client().get(v.url("/shop/")).send().unwrap();
    assert_eq!(shop.status(), 200);
    assert!(
        room_cookie(&shop, "waiting_room").is_some(),
        "{:?}",
        set_cookies(&shop)
    );
    assert!(room_cookie(&shop, "waiting_room_tickets").is_none());
    let tickets = client().get(v.url("/tickets/")).send().unwrap();
    assert_eq!(tickets.status(), 200);
    assert!(
        room_cookie(&tickets, "waiting_room_tickets").is_some(),
        "{:?}",
        set_cookies(&tickets)
    );
    assert!(room_cookie(&tickets, "waiting_room").is_none());
}

#[test]
fn sigterm_ends_the_process_promptly() {
    let origin = Origin::start();
    let mut v = Setup::new(origin.addr).start();
    assert_eq!(client().get(v.url("/")).send().unwrap().status(), 200);
    let start = Instant::now();
    v.proc.signal("TERM");
    // The harness sets graceful_shutdown = "2s": gone within it (and a little scheduling slack),
    // with a clean exit status.
    let limit = Duration::from_secs(2) + Duration::from_millis(700);
    let status = v.proc.wait_exit(Duration::from_secs(10));
    let took = start.elapsed();
    let status = status.expect("still running 10 s after SIGTERM");
    assert!(took <= limit, "took {took:?}, graceful_shutdown is 2 s");
    assert!(status.success(), "exit status {status:?}");
    eprintln!("SIGTERM to exit: {took:?}");
}

#[test]
fn demo_starts_its_own_origin_and_prints_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let (proxy, admin, origin) = (free_addr(), free_addr(), free_addr());
    copy_pages(&dir.path().join("pages"));
    std::fs::write(
        dir.path().join("keys.toml"),
        format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
    )
    .unwrap();
    let config = dir.path().join("vestibule.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = [\"{proxy}\"]\npid_file = \"/tmp/vt-demo-{p}.pid\"\nupgrade_sock = \"/tmp/vt-demo-{p}.sock\"\n[admin]\nlisten = \"{admin}\"\n[upstream]\npeers = [\"{origin}\"]\n",
            p = proxy.port()
        ),
    )
    .unwrap();
    let log = dir.path().join("demo.log");
    let demo = spawn(&["demo", "--config", config.to_str().unwrap()], &log, &[]);
    assert!(
        wait_for_port(proxy, Duration::from_secs(15)),
        "{}",
        demo.log_text()
    );
    assert!(
        wait_for_port(origin, Duration::from_secs(5)),
        "demo origin did not start"
    );
    let text = demo.log_text();
    assert!(
        text.contains(&format!("vestibule demo: open http://{proxy}/")),
        "{text}"
    );
    let resp = client().get(format!("http://{proxy}/")).send().unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().unwrap().contains("demo origin"));
}

/// A private CA and a certificate for `origin.test` signed by it: (ca.pem, cert.pem, key.pem).
fn tls_files(dir: &std::path::Path) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["origin.test".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    (
        write("ca.pem", ca.pem()),
        write("cert.pem", leaf.pem()),
        write("key.pem", leaf_key.serialize_pem()),
    )
}

#[test]
fn upstream_tls_verifies_the_origin_by_sni() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(dir.path());
    let addr = free_addr();
    let _origin = spawn(
        &[
            "origin",
            "--listen",
            &addr.to_string(),
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ],
        &dir.path().join("tls-origin.log"),
        &[],
    );
    assert!(wait_for_port(addr, Duration::from_secs(10)));
    let good = Setup::new(addr)
        .upstream_extra(&format!(
            "tls = true\nsni = \"origin.test\"\nca_file = \"{ca}\"\nhealth_check = \"0s\"\n"
        ))
        .start();
    let resp = client().get(good.url("/__echo")).send().unwrap();
    assert_eq!(resp.status(), 200, "{}", good.log_text());
    assert!(echo_headers(&resp.text().unwrap())
        .iter()
        .any(|(n, _)| n == "x-forwarded-for"));
    // The certificate names origin.test: any other name must fail verification.
    let wrong = Setup::new(addr)
        .upstream_extra(&format!(
            "tls = true\nsni = \"wrong.test\"\nca_file = \"{ca}\"\nhealth_check = \"0s\"\n"
        ))
        .start();
    assert_eq!(client().get(wrong.url("/")).send().unwrap().status(), 502);
    // Verification is the cause, not any other connection failure (the control above connects
    // to the same origin with the right name and CA).
    assert!(
        eventually(Duration::from_secs(3), || wrong.log_text().contains(
            "invalid peer certificate: certificate not valid for name \"wrong.test\""
        )),
        "{}",
        wrong.log_text()
    );
    // Without our CA, the system roots do not trust it either.
    let untrusted = Setup::new(addr)
        .upstream_extra("tls = true\nsni = \"origin.test\"\nhealth_check = \"0s\"\n")
        .start();
    assert_eq!(
        client().get(untrusted.url("/")).send().unwrap().status(),
        502
    );
    assert!(
        eventually(Duration::from_secs(3), || untrusted
            .log_text()
            .contains("invalid peer certificate: UnknownIssuer")),
        "{}",
        untrusted.log_text()
    );
}

/// Starts a process with `--upgrade` on `old`'s config file, and waits until it listens on the
/// upgrade socket for the old one's sockets.
fn upgrade_to(old: &Vestibule) -> Proc {
    let config = old.config_path();
    let sock = std::path::PathBuf::from(format!("/tmp/vestibule-test-{}.sock", old.proxy.port()));
    let _ = std::fs::remove_file(&sock);
    let new = spawn(
        &["--upgrade", "--config", config.to_str().unwrap()],
        &old.path("new.log"),
        &[],
    );
    assert!(
        eventually(Duration::from_secs(10), || sock.exists()),
        "the new process never listened on {}:\n{}",
        sock.display(),
        new.log_text()
    );
    new
}

/// SIGQUIT hands the listening sockets to a process started with `--upgrade`: clients see no
/// failed request, and the old process exits.
#[test]
fn zero_downtime_upgrade() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let origin = Origin::start();
    let mut old = Setup::new(origin.addr).start();
    let new = upgrade_to(&old);
    let stop = AtomicBool::new(false);
    let url = old.url("/__echo");
    let (ok, failed) = std::thread::scope(|s| {
        let load = s.spawn(|| {
            let (mut ok, mut failed) = (0, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                // A new connection each time, so both processes' accept paths are exercised.
                let c = client();
                match c.get(&url).send() {
                    Ok(r) if r.status() == 200 => ok += 1,
                    Ok(r) => failed.push(format!("status {}", r.status())),
                    Err(e) => failed.push(e.to_string()),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (ok, failed)
        });
        std::thread::sleep(Duration::from_millis(500));
        old.proc.signal("QUIT");
        assert!(
            old.proc.wait_exit(Duration::from_secs(20)).is_some(),
            "the old process did not exit"
        );
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        load.join().unwrap()
    });
    assert!(
        failed.is_empty(),
        "{} failed requests during the upgrade: {:?}\n{}",
        failed.len(),
        failed,
        new.log_text()
    );
    assert!(ok > 50, "{ok}");
    // The new process serves on its own.
    assert_eq!(client().get(&url).send().unwrap().status(), 200);
}

/// Each worker thread listens on a socket of its own (SO_REUSEPORT), and an upgrade passes them
/// all on. A new process with fewer threads accepts on every socket it was passed: the kernel
/// goes on queueing connections on each of them, and one left unserved would leave about a
/// third of the new connections here waiting forever.
#[test]
fn an_upgrade_to_fewer_threads_accepts_on_every_socket_it_was_passed() {
    let origin = Origin::start();
    let mut old = Setup::new(origin.addr).threads(3).start();
    let config = old.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("threads = 3\n"), "{text}");
    std::fs::write(&config, text.replace("threads = 3\n", "threads = 1\n")).unwrap();
    let new = upgrade_to(&old);
    old.proc.signal("QUIT");
    assert!(
        old.proc.wait_exit(Duration::from_secs(20)).is_some(),
        "the old process did not exit"
    );
    // A new connection each time: the kernel hashes each to one of the 3 sockets.
    let quick = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(3))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = old.url("/__echo");
    let failed: Vec<String> = (0..60)
        .filter_map(|_| match quick.get(&url).send() {
            Ok(r) if r.status() == 200 => None,
            Ok(r) => Some(format!("status {}", r.status())),
            Err(e) => Some(e.to_string()),
        })
        .collect();
    assert!(failed.is_empty(), "{failed:?}\n{}", new.log_text());
}

/// With work stealing on, one service on a runtime of all the worker threads accepts on one
/// socket per address (its threads take work from each other): it serves new and kept-alive
/// connections alike.
#[test]
fn with_work_stealing_one_shared_service_serves() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr)
        .threads(3)
        .server("work_stealing = true")
        .start();
    let kept = client();
    let fresh = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for c in [&kept, &fresh] {
        for _ in 0..20 {
            assert_eq!(c.get(v.url("/__echo")).send().unwrap().status(), 200);
        }
    }
    assert!(
        v.log_text().contains("Starting service: vestibule proxy\n"),
        "{}",
        v.log_text()
    );
}

/// Origin timeouts run on each worker's own timer wheel: once requests have gone through (each
/// one armed and cancelled a `read_timeout`), the process has no clock thread of Pingora's
/// ("Timer thread"), which would wake 100 times a second to take every worker's timer lock.
#[test]
fn origin_timeouts_need_no_clock_thread() {
    let origin = Origin::start();
    let v = Setup::new(origin.addr).start();
    let c = client();
    for _ in 0..20 {
        assert_eq!(c.get(v.url("/__echo")).send().unwrap().status(), 200);
    }
    let tasks = format!("/proc/{}/task", v.proc.pid());
    let names: Vec<String> = std::fs::read_dir(&tasks)
        .expect("a Linux /proc")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("vestibule proxy")),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n == "Timer thread"), "{names:?}");
}

/// The shipped sample config and key ring in a temporary folder, on free loopback ports, with an
/// admin token (operator actions need one) and `extra_admin` added to `[admin]`.
fn sample_demo(dir: &std::path::Path, extra_admin: &str) -> (Proc, std::net::SocketAddr, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (proxy, admin, origin) = (free_addr(), free_addr(), free_addr());
    copy_pages(&dir.join("pages"));
    std::fs::copy(root.join("conf/keys.toml"), dir.join("keys.toml")).unwrap();
    let sample = std::fs::read_to_string(root.join("conf/vestibule.toml")).unwrap();
    let mut config = sample.clone();
    for (from, to) in [
        (
            "listen = [\"0.0.0.0:8080\"]",
            format!("listen = [\"{proxy}\"]"),
        ),
        (
            "/tmp/vestibule.pid",
            format!("/tmp/vt-sample-{}.pid", proxy.port()),
        ),
        (
            "/tmp/vestibule_upgrade.sock",
            format!("/tmp/vt-sample-{}.sock", proxy.port()),
        ),
        (
            "listen = \"127.0.0.1:9901\"",
            format!("listen = \"{admin}\"\n{extra_admin}"),
        ),
        (
            "token = \"\"",
            "token = \"a-test-admin-token-0123\"".to_owned(),
        ),
        (
            "peers = [\"127.0.0.1:8000\"]",
            format!("peers = [\"{origin}\"]"),
        ),
        ("pages = \"../pages\"", "pages = \"pages\"".to_owned()),
    ] {
        assert!(
            config.contains(from),
            "the sample config no longer has {from}"
        );
        config = config.replace(from, &to);
    }
    let path = dir.join("vestibule.toml");
    std::fs::write(&path, config).unwrap();
    let demo = spawn(
        &["demo", "--config", path.to_str().unwrap()],
        &dir.join("demo.log"),
        &[],
    );
    assert!(
        wait_for_port(proxy, Duration::from_secs(15)),
        "{}",
        demo.log_text()
    );
    (demo, proxy, admin.to_string())
}

fn pause(admin: &str) -> serde_json::Value {
    let resp = client()
        .post(format!("http://{admin}/rooms/default/pause"))
        .bearer_auth("a-test-admin-token-0123")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().unwrap()
}

#[test]
fn the_sample_demo_is_titled_warns_points_at_the_status_page_and_keeps_actions() {
    let dir = tempfile::tempdir().unwrap();
    let (demo, proxy, admin) = sample_demo(dir.path(), "");
    let text = demo.log_text();
    assert!(
        text.contains("warning: ") && text.contains("published demo key"),
        "{text}"
    );
    assert!(
        text.contains(&format!("console: http://{admin}/console")),
        "{text}"
    );
    // The sample room is a lottery: a newcomer waits, and reads the room's title.
    let resp = client()
        .get(format!("http://{proxy}/"))
        .header("Accept", "text/html")
        .send()
        .unwrap();
    let page = resp.text().unwrap();
    assert!(page.contains("The demo shop is very busy"), "{page}");
    assert!(!page.contains("default is very busy"), "{page}");
    let (code, status_page) = {
        let resp = client()
            .get(format!("http://{admin}/status.html"))
            .bearer_auth("a-test-admin-token-0123")
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    assert_eq!(code, 200, "{status_page}");
    // `demo` keeps operator actions in the state file, and says so only when it did.
    let json = pause(&admin);
    assert_eq!(json["persisted"], true, "{json}");
    let kept = std::fs::read_to_string(dir.path().join("state/overrides.json")).unwrap();
    assert!(kept.contains("\"paused\""), "{kept}");
}

#[test]
fn an_action_that_cannot_be_kept_says_persisted_false() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the state file's folder should be: the folder cannot be made, whoever runs.
    std::fs::write(dir.path().join("blocker"), b"not a folder").unwrap();
    let (demo, _proxy, admin) = sample_demo(dir.path(), "state_file = \"blocker/overrides.json\"");
    let json = pause(&admin);
    assert_eq!(json["persisted"], false, "{json}");
    // The pause applies all the same.
    assert_eq!(json["paused"], true, "{json}");
    assert!(
        eventually(Duration::from_secs(5), || demo
            .log_text()
            .contains("not kept across a restart")),
        "{}",
        demo.log_text()
    );
}
