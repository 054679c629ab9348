//! What operators see: the dashboard's queries against a live `/metrics`, the exposition
//! format, the logs, `/status.html`, and the files under `conf/`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::common::*;

const EVERYTHING: &str = "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
[log]\nformat = \"json\"\naccess = true\n\
[[room]]\nname = \"shop\"\npages = \"pages\"\nallow_percentage = 50\nbypass_paths = [\"/static/\"]\nbypass_cidrs = [\"10.0.0.0/8\"]\n\
[[room]]\nname = \"app\"\npaths = [\"/app\"]\ncookie_name = \"wr_app\"\npages = \"pages\"\nadmission = \"fifo\"\nnew_users_per_minute = 5\napi = true\njwt = true\n\
[[room]]\nname = \"closed\"\npaths = [\"/closed\"]\ncookie_name = \"wr_closed\"\npages = \"pages\"\nallow_percentage = 0\n\
[[room]]\nname = \"sale\"\npaths = [\"/sale\"]\ncookie_name = \"wr_sale\"\npages = \"pages\"\nadmission = \"random\"\nnew_users_per_minute = 2\nautopilot = true\nautopilot_interval = \"1s\"\n\
[[room.event]]\nname = \"launch\"\nprequeue_start = \"2025-12-01T09:30:00Z\"\nstart = \"2025-12-01T10:00:00Z\"\nend = \"2025-12-01T14:00:00Z\"\n\
[[room]]\nname = \"gate\"\npaths = [\"/gate\"]\ncookie_name = \"wr_gate\"\npages = \"pages\"\nallow_percentage = 100\nchallenge = \"pow\"\nchallenge_difficulty = 8\n\
[[rate_limit]]\nname = \"burst\"\nwindow = \"1s\"\nlimit = 3\npenalty = \"1m\"\npaths = [\"/static/\"]\n\
[[rate_limit]]\nname = \"writes\"\nalgorithm = \"token_bucket\"\nlimit = 100\nperiod = \"1m\"\nscope = \"origin\"\n\
[[rate_limit]]\nname = \"slots\"\nalgorithm = \"concurrency\"\nlimit = 100\n\
[[rate_limit]]\nname = \"watch\"\nwindow = \"1s\"\nlimit = 1\naction = \"log\"\n\
[[events.sink]]\nname = \"archive\"\nkind = \"file\"\n";

/// Drives traffic through every feature and returns the instance.
fn busy_instance(origin: &Origin) -> Vestibule {
    let tls = free_addr();
    let mut setup = Setup::new(origin.addr)
        .extra(EVERYTHING)
        .file(
            "jwt-1.pem",
            vestibule::jwt::generate(vestibule::jwt::Algorithm::Es256),
        )
        .self_signed_tls(tls, &["site.test"]);
    setup.keys = crate::jwt::ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    // An operator: the admin actions' series exist for them.
    setup.admin = Some(format!(
        "listen = \"{}\"\ntoken = \"an-operator-token-for-ops\"",
        free_addr()
    ));
    let v = setup.start();
    // One request over TLS (HTTP/2), for the edge's series.
    assert!(wait_for_port(tls, Duration::from_secs(10)));
    let insecure = reqwest::blocking::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let resp = insecure.get(format!("https://{tls}/")).send().unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let c = client();
    let get = |path: &str, ip: &str, cookie: Option<&str>| {
        let mut r = c.get(v.url(path)).header("X-Forwarded-For", ip);
        if let Some(cookie) = cookie {
            r = r.header("Cookie", cookie);
        }
        r.send().unwrap()
    };
    // Room decisions: anon, wait (re-presenting the wait token), deny, bypass, rejections.
    let resp = get("/", "198.51.100.1", None);
    let Some(set_cookie) = resp.headers().get("set-cookie").cloned() else {
        let (status, headers) = (resp.status(), resp.headers().clone());
        panic!(
            "no wait token: {status} {headers:?} {}\nvestibule (pid {}):\n{}",
            resp.text().unwrap_or_default(),
            v.proc.pid(),
            v.log_text()
        );
    };
    let token = set_cookie
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    get("/", "198.51.100.1", Some(&token));
    get("/", "198.51.100.1", Some("waiting_room=forged"));
    get("/closed", "198.51.100.2", None);
    for _ in 0..6 {
        get("/static/app.css", "198.51.100.3", None);
    }
    // A proof-of-work room: a challenge issued, and a forged answer.
    get("/gate", "198.51.100.5", None);
    let resp = c
        .get(v.url("/gate"))
        .header("X-Forwarded-For", "198.51.100.5")
        .header("Vestibule-Solution", "p1~key1~1~8~0000000000000000~00:1")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The queue API: a number, its token, and a JWT the room refuses.
    let queued: serde_json::Value = c
        .post(v.url("/.vestibule/rooms/app/queue"))
        .header("X-Forwarded-For", "198.51.100.20")
        .send()
        .unwrap()
        .json()
        .unwrap();
    let resp = c
        .post(v.url("/.vestibule/rooms/app/token"))
        .body(serde_json::json!({ "request_id": queued["request_id"] }).to_string())
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "{queued}");
    c.get(v.url("/app"))
        .header("X-Forwarded-For", "198.51.100.21")
        .header("Authorization", "Bearer not.a.jwt")
        .send()
        .unwrap();
    // Capacity room: admissions, waiting users, estimates.
    for i in 0..5 {
        get("/sale/item", &format!("198.51.100.{}", 10 + i), None);
    }
    // The autopilot's interval (1 s) with those origin answers in it.
    assert!(eventually(Duration::from_secs(10), || {
        let m = v.metrics();
        metric_sample(
            &m,
            "vestibule_room_autopilot_origin_p95_seconds{room=\"sale\"}",
        )
        .is_some()
    }));
    // Origin errors and a reload of each kind.
    get("/static/x", "198.51.100.4", None);
    let g = v.generation();
    let text = std::fs::read_to_string(v.config_path()).unwrap();
    std::fs::write(
        v.config_path(),
        text.replace("allow_percentage = 50", "allow_percentage = 60"),
    )
    .unwrap();
    v.wait_generation_above(g);
    std::fs::write(v.config_path(), "not toml [").unwrap();
    assert!(eventually(Duration::from_secs(5), || v
        .metric("vestibule_config_reloads_total{result=\"failure\"}")
        >= 1.0));
    std::fs::write(
        v.config_path(),
        text.replace("allow_percentage = 50", "allow_percentage = 60"),
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(5), || v.status()
        ["last_reload_error"]
        .is_null()));
    get("/__status/503", "10.9.9.9", None);
    v
}

/// The shipped Grafana dashboard.
fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/conf/grafana/vestibule.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Metric names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("vestibule_") {
        let start = i + pos;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        names.push(expr[start..end].to_owned());
        i = end;
    }
    names
}

#[test]
fn every_dashboard_query_uses_metrics_that_exist() {
    let origin = Origin::start();
    let v = busy_instance(&origin);
    let metrics = v.metrics();
    let families: BTreeSet<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let samples: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let dashboard = dashboard();
    assert_eq!(dashboard["templating"]["list"][0]["type"], "datasource");
    let mut checked = 0;
    let mut exprs: Vec<String> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["definition"].as_str() {
            exprs.push(q.to_owned());
        }
    }
    for expr in &exprs {
        for name in metric_names(expr) {
            // Every sample the query reads is exported, and it belongs to a family with TYPE.
            assert!(
                samples.contains(name.as_str()),
                "{expr}: no sample named {name} in /metrics\n{metrics}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| families.contains(f)))
                .unwrap_or(&name);
            assert!(families.contains(family), "{expr}: no TYPE for {family}");
            checked += 1;
        }
    }
    assert!(checked >= 16, "only {checked} metric references found");
    // The panels the operators' issue asks for.
    let titles: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for wanted in [
        "Decisions per second",
        "Admitted users",
        "allow percentage",
        "Active and waiting",
        "Wait estimate",
        "Token rejections",
        "Rate-limit outcomes",
        "Penalty box",
        "status class",
        "latency",
        "reloads",
        "generation",
        "Proof-of-work challenges",
        "Invitations",
        "Queue and serving numbers",
        "JWTs issued and refused",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(wanted)),
            "no panel for {wanted}: {titles:?}"
        );
    }
}

#[test]
fn metrics_are_valid_exposition_with_help_and_type() {
    let origin = Origin::start();
    let v = busy_instance(&origin);
    let text = v.metrics();
    let scrape =
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parses");
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(families.len() >= 14, "{families:?}");
    for family in &families {
        assert!(family.starts_with("vestibule_"), "{family}");
        assert!(scrape.docs.contains_key(family), "no HELP for {family}");
    }
    for sample in &scrape.samples {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                sample
                    .metric
                    .strip_suffix(s)
                    .filter(|f| families.contains(*f))
            })
            .unwrap_or(&sample.metric);
        assert!(
            families.contains(family),
            "sample {} has no TYPE",
            sample.metric
        );
    }
    // Figures from every feature are there.
    for series in [
        "vestibule_room_decisions_total{decision=\"anon\",mode=\"enforce\",room=\"shop\"}",
        "vestibule_room_decisions_total{decision=\"wait\",mode=\"enforce\",room=\"shop\"}",
        "vestibule_room_decisions_total{decision=\"deny\",mode=\"enforce\",room=\"closed\"}",
        "vestibule_room_decisions_total{decision=\"bypass\",mode=\"enforce\",room=\"shop\"}",
        "vestibule_token_rejected_total{reason=\"malformed\",room=\"shop\"}",
        "vestibule_room_admitted_total{room=\"sale\"}",
        "vestibule_room_waiting_users{lane=\"public\",room=\"sale\"}",
        "vestibule_ratelimit_decisions_total{outcome=\"limited\",rule=\"burst\"}",
        "vestibule_ratelimit_decisions_total{outcome=\"dry_run\",rule=\"watch\"}",
        "vestibule_ratelimit_penalty_box_entries{rule=\"burst\"}",
        "vestibule_upstream_responses_total{status_class=\"5xx\"}",
        "vestibule_config_reloads_total{result=\"failure\"}",
    ] {
        assert!(metric_value(&text, series) >= 1.0, "{series} is 0\n{text}");
    }
}

#[test]
fn logs_parse_and_hold_no_secrets() {
    let origin = Origin::start();
    let v = busy_instance(&origin);
    // A valid cookie the proxy issued, presented again.
    let resp = client()
        .get(v.url("/"))
        .header("X-Forwarded-For", "203.0.113.77")
        .send()
        .unwrap();
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let value = cookie.trim_start_matches("waiting_room=").to_owned();
    client()
        .get(v.url("/?token=SECRET-QUERY"))
        .header("X-Forwarded-For", "203.0.113.77")
        .header("Cookie", &cookie)
        .send()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let log = v.log_text();
    let mut access = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let json: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            json["ts"].is_string() && json["level"].is_string() && json["target"].is_string(),
            "{line}"
        );
        if json["target"] == "vestibule::access" {
            access += 1;
            assert!(
                json["status"].is_u64() && json["path"].is_string() && json["rules"].is_object(),
                "{line}"
            );
        }
    }
    assert!(access >= 19, "{access} access lines: one per request");
    assert!(!log.contains(KEY1), "the signing key is in the log");
    assert!(!log.contains(&value), "a whole cookie is in the log");
    assert!(!log.contains("sig=0x"), "a token is in the log");
    assert!(
        !log.contains("SECRET-QUERY"),
        "a query string is in the log"
    );
    assert!(
        log.contains("\"decision\":\"wait\""),
        "decisions are logged"
    );
    assert!(
        log.contains("\"burst\":\"limited\""),
        "rule outcomes are logged"
    );
}

#[test]
fn status_is_complete_and_has_a_page_for_people() {
    let origin = Origin::start();
    let v = busy_instance(&origin);
    let s = v.status();
    for key in [
        "generation",
        "loaded_at",
        "last_reload_error",
        "keys",
        "rooms",
        "rate_limits",
    ] {
        assert!(s.get(key).is_some(), "/status lacks {key}");
    }
    assert_eq!(s["keys"]["active"], "key1");
    assert_eq!(s["keys"]["ids"], serde_json::json!(["key1"]));
    let rules = s["rate_limits"].as_array().unwrap();
    let burst = rules.iter().find(|r| r["name"] == "burst").unwrap();
    assert_eq!(burst["penalty_box_entries"], 1);
    let sale = s["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "sale")
        .unwrap();
    assert!(sale["waiting_users"].as_u64().unwrap() >= 1);
    let text = serde_json::to_string(&s).unwrap();
    assert!(!text.contains(KEY1));
    let (code, html) = v.admin_get("/status.html");
    assert_eq!(code, 200);
    assert!(
        html.contains("<table>") && html.contains("sale") && html.contains("burst"),
        "{html}"
    );
}

#[test]
fn shipped_operations_files_are_sound() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("conf/vestibule.service")).unwrap();
    for line in [
        "ExecReload=/bin/kill -HUP $MAINPID",
        "KillSignal=SIGTERM",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "User=vestibule",
    ] {
        assert!(unit.contains(line), "the unit lacks {line}");
    }
    let prom = std::fs::read_to_string(root.join("conf/prometheus.yml")).unwrap();
    assert!(prom.contains("metrics_path: /metrics") && prom.contains("127.0.0.1:9901"));
}

/// promtool (Debian `prometheus`; `.ci/run` installs it), or a loud skip.
fn promtool() -> Option<std::process::Command> {
    let found = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        crate::common::missing_tool(
            "promtool (Debian: prometheus), to check the exposition and the alert rules",
            "not installed",
        );
        return None;
    }
    Some(std::process::Command::new("promtool"))
}

/// Runs promtool with `stdin` and returns (success, stdout + stderr).
fn run_promtool(mut cmd: std::process::Command, stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool starts");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        pipe.write_all(text.as_bytes()).expect("write to promtool");
    }
    drop(pipe);
    let out = child.wait_with_output().expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `promtool check metrics` has nothing to say about a scrape taken after traffic through every
/// feature, and every metric the alert rules read is one the proxy exports.
#[test]
fn a_scrape_after_every_feature_passes_promtool() {
    let Some(mut cmd) = promtool() else { return };
    let origin = Origin::start();
    let v = busy_instance(&origin);
    let text = v.metrics();
    cmd.args(["check", "metrics"]);
    let (ok, findings) = run_promtool(cmd, Some(&text));
    assert!(ok && findings.trim().is_empty(), "promtool: {findings}");
    // The rules' metrics exist (a renamed metric would leave an alert that can never fire).
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/conf/prometheus/alerts.yml"
    ))
    .unwrap();
    let mut read = 0;
    for name in metric_names(&rules) {
        let exported = text.lines().any(|l| {
            l.strip_prefix("# TYPE ")
                .and_then(|l| l.split_whitespace().next())
                .is_some_and(|family| family == name)
        });
        assert!(exported, "alerts.yml reads {name}, which /metrics lacks");
        read += 1;
    }
    assert!(read >= 6, "only {read} metric references in alerts.yml");
}

/// The shipped alert rules are valid, the shipped Prometheus config loads them, and their unit
/// tests (`conf/prometheus/alerts_test.yml`: each alert fires on what should trip it and stays
/// quiet on a neighbour that should not) pass.
#[test]
fn alert_rules_pass_their_promtool_tests() {
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf");
    for args in [
        vec!["check", "config", "prometheus.yml"],
        vec!["check", "rules", "prometheus/alerts.yml"],
        vec!["test", "rules", "prometheus/alerts_test.yml"],
    ] {
        let Some(mut cmd) = promtool() else { return };
        cmd.current_dir(&conf).args(&args);
        let (ok, out) = run_promtool(cmd, None);
        assert!(ok, "promtool {}: {out}", args.join(" "));
    }
    let rules = std::fs::read_to_string(conf.join("prometheus/alerts.yml")).unwrap();
    for alert in [
        "VestibuleAdminDown",
        "VestibuleOriginErrors",
        "VestibuleOriginUnreachable",
        "VestibuleConfigReloadFailed",
        "VestibulePenaltyBoxNearlyFull",
        "VestibuleWaitOverAnHour",
        "VestibuleCertificateExpiresSoon",
        "VestibuleEventsBacklog",
        "VestibuleEventsDropped",
    ] {
        assert!(rules.contains(&format!("alert: {alert}")), "no {alert}");
    }
}

/// The dashboard works with several instances: an `instance` variable every query honours,
/// per-instance gauges labelled by instance, counters summed, no hard-coded ranges, and an
/// import block that offers a data-source picker.
#[test]
fn the_dashboard_is_ready_for_many_instances() {
    let dashboard = dashboard();
    assert_eq!(dashboard["__inputs"][0]["pluginId"], "prometheus");
    assert!(dashboard["__requires"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == "prometheus"));
    let vars: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(vars.contains(&"instance"), "{vars:?}");
    let mut rows = 0;
    let mut targets = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap_or("");
        if panel["type"] == "row" {
            rows += 1;
            continue;
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let legend = target["legendFormat"].as_str().unwrap_or("");
            targets += 1;
            // Every selector of a vestibule metric honours the instance variable.
            let selectors = expr.matches("vestibule_").count();
            let honoured = expr.matches("instance=~\"$instance\"").count();
            assert_eq!(selectors, honoured, "{title}: {expr}");
            // Ranges follow the dashboard's step, never a fixed window.
            assert!(
                !expr.contains("[1m]") && !expr.contains("[5m]"),
                "{title}: {expr}"
            );
            // A series kept per instance says which instance in its legend; anything else is
            // aggregated over the instances.
            if expr.contains("by (instance") {
                assert!(legend.contains("{{instance}}"), "{title}: {legend}");
            } else {
                let aggregated = [
                    "sum(",
                    "sum by",
                    "histogram_quantile(",
                    "max(",
                    "max by (",
                    "min by (",
                ]
                .iter()
                .any(|a| expr.starts_with(a));
                assert!(aggregated, "{title}: not aggregated over instances: {expr}");
            }
            // Legends read "p50", not "p0.5".
            assert!(!legend.contains("{{quantile}}"), "{title}: {legend}");
        }
    }
    assert!(rows >= 5, "a row per concern: {rows}");
    assert!(targets >= 18, "{targets} queries");
    // Every query is valid PromQL once Grafana's variables are filled in: promtool parses
    // them as recording rules.
    let Some(mut cmd) = promtool() else { return };
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, panel) in dashboard["panels"].as_array().unwrap().iter().enumerate() {
        for (j, target) in panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*")
                .replace("$room", ".*")
                .replace("$rule", ".*");
            let expr = serde_json::to_string(&expr).unwrap();
            rules.push_str(&format!(
                "      - record: dashboard:panel{i}:target{j}\n        expr: {expr}\n"
            ));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard_rules.yml");
    std::fs::write(&file, rules).unwrap();
    cmd.arg("check").arg("rules").arg(&file);
    let (ok, out) = run_promtool(cmd, None);
    assert!(ok, "a dashboard query is not valid PromQL: {out}");
}

/// The plain access log, end to end: one line per request with every field, in the order the
/// requests were served, a line logged meanwhile (a rejected reload) between the lines before it
/// and after it, no query string, and every buffered line written when the process stops
/// (SIGTERM right after the last request, well inside the 100 ms between flushes).
#[test]
fn plain_access_lines_keep_fields_order_and_survive_shutdown() {
    let origin = Origin::start();
    let mut v = Setup::new(origin.addr)
        .threads(1)
        .extra(
            "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
             [log]\naccess = true\n\
             [[room]]\npages = \"pages\"\nallow_percentage = 100\n\
             [[rate_limit]]\nname = \"per-ip\"\nwindow = \"10s\"\nlimit = 1000000\n",
        )
        .start();
    let c = client();
    let get = |i: usize| {
        let resp = c
            .get(v.url(&format!("/seq/{i}?secret=Q{i}")))
            .header("X-Forwarded-For", "203.0.113.9")
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200);
    };
    const N: usize = 200;
    for i in 0..N / 2 {
        get(i);
    }
    // An invalid edit: its error line is written at once, after the buffered access lines.
    v.edit_config("allow_percentage = 100", "allow_percentage = \"lots\"");
    assert!(
        eventually(Duration::from_secs(5), || v
            .log_text()
            .contains("keeps serving")),
        "no error line for the rejected reload:\n{}",
        v.log_text()
    );
    for i in N / 2..N {
        get(i);
    }
    v.proc.signal("TERM");
    assert!(v.proc.wait_exit(Duration::from_secs(10)).is_some());

    let log = v.log_text();
    let line = regex::Regex::new(
        r#"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ access 203\.0\.113\.9 "GET /seq/(\d+)" 200 room=default decision=allow rules=per-ip:pass upstream=127\.0\.0\.1:\d+ upstream_ms=\d+\.\d ms=\d+\.\d$"#,
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut error_after = None;
    for l in log.lines() {
        if l.contains("keeps serving") {
            error_after.get_or_insert(seen.len());
        }
        if l.contains(" access ") && l.contains("/seq/") {
            let caps = line
                .captures(l)
                .unwrap_or_else(|| panic!("an access line lost its shape: {l}"));
            seen.push(caps[1].parse::<usize>().unwrap());
        }
    }
    assert_eq!(
        seen,
        (0..N).collect::<Vec<_>>(),
        "every request once, in order"
    );
    assert_eq!(
        error_after,
        Some(N / 2),
        "the error line sits between the two halves"
    );
    assert!(
        !log.contains("secret") && !log.contains("Q1"),
        "a query string is in the log"
    );
}
