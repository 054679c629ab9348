//! `vestibule ctl` against the real server: the built binary, run as an operator would, with the
//! token from `VESTIBULE_ADMIN_TOKEN` or `--token-file`.

use std::process::Command;

use crate::common::*;

const TOKEN: &str = "ctl-operator-token-for-tests";

/// Runs `vestibule ctl --admin <admin> args…` with `env` set for it alone (and no token from
/// the environment unless `env` gives one): (exit code, stdout, stderr).
fn ctl(admin: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["ctl", "--admin", admin])
        .args(args)
        .env_remove("VESTIBULE_ADMIN_TOKEN");
    for (k, val) in env {
        cmd.env(k, val);
    }
    let out = cmd.output().expect("vestibule runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn server(origin: &Origin) -> Vestibule {
    let mut setup = Setup::new(origin.addr).extra(TRUST_LOCAL).extra(
        "[[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 5\ntotal_active_users = 50\n\
         [[room]]\nname = \"draw\"\npaths = [\"/draw\"]\ncookie_name = \"wr_draw\"\nallow_percentage = 10\n\
         [[room]]\nname = \"queue\"\npaths = [\"/queue\"]\ncookie_name = \"wr_queue\"\nadmission = \"fifo\"\nnew_users_per_minute = 5\napi = true\n",
    );
    // The queue API's room signs JWTs.
    setup = setup.file(
        "jwt-1.pem",
        vestibule::jwt::generate(vestibule::jwt::Algorithm::Es256),
    );
    setup.keys = crate::jwt::ring_with(&[("k1", "ES256", "jwt-1.pem")]);
    setup.admin = Some(format!("listen = \"{}\"\ntoken = \"{TOKEN}\"", free_addr()));
    setup.start()
}

fn room(v: &Vestibule, name: &str) -> serde_json::Value {
    v.status()["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
        .unwrap()
}

#[test]
fn ctl_runs_the_admin_api_with_the_token_from_the_environment_or_a_file() {
    let origin = Origin::start();
    let v = server(&origin);
    let admin = format!("http://{}", v.admin);
    let env = [("VESTIBULE_ADMIN_TOKEN", TOKEN)];
    let file = v.path("admin-token");
    std::fs::write(&file, format!("  {TOKEN}\n")).unwrap();
    let file = file.to_str().unwrap();

    // Status, in words: a line per room; and as the server's JSON.
    let (code, out, err) = ctl(&admin, &["status"], &env);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("sale  open  active 0/50  waiting 0"),
        "{out}"
    );
    assert!(lines[1].starts_with("draw  open"), "{out}");
    let (code, out, err) = ctl(&admin, &["--token-file", file, "status", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(json["rooms"][0]["name"], "sale");

    // An action, then /status says so.
    let (code, out, err) = ctl(&admin, &["--token-file", file, "pause", "sale"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("room sale: pause done; overrides: paused by admin"),
        "{out}"
    );
    assert_eq!(room(&v, "sale")["paused"], true);
    let (code, out, _) = ctl(&admin, &["status"], &env);
    assert_eq!(code, 0);
    assert!(out.starts_with("sale  paused"), "{out}");
    let (code, _, err) = ctl(&admin, &["resume", "sale"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(room(&v, "sale")["paused"], false);

    // The rest of the actions.
    let (code, _, err) = ctl(&admin, &["message", "sale", "Back at 3"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        room(&v, "sale")["overrides"]["message"]["text"],
        "Back at 3"
    );
    let (code, _, err) = ctl(&admin, &["message", "sale", "--clear"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(room(&v, "sale")["overrides"].get("message").is_none());
    let (code, _, err) = ctl(&admin, &["sold-out", "draw", "on"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(room(&v, "draw")["sold_out"], true);
    let (code, _, err) = ctl(&admin, &["sold-out", "draw", "off"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(room(&v, "draw")["sold_out"], false);
    let (code, out, err) = ctl(&admin, &["admit", "sale", "3"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("admit done"), "{out}");

    let (code, out, err) = ctl(&admin, &["serving", "queue", "+3"], &env);
    assert_eq!(
        (code, out.trim()),
        (0, "room queue: serving number now 3"),
        "{err}"
    );
    let (code, _, err) = ctl(&admin, &["serving", "sale", "2"], &env);
    assert_eq!(code, 1);
    assert!(err.contains("no queue API"), "{err}");

    // The pace override takes the key of the room's admission.
    let (code, out, err) = ctl(&admin, &["pace", "sale", "40", "--for", "30m"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pace 40/min until "), "{out}");
    assert_eq!(room(&v, "sale")["effective_new_users_per_minute"], 40);
    let (code, _, err) = ctl(&admin, &["pace", "draw", "12.5"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(room(&v, "draw")["effective_allow_percentage"], 12.5);
    // The server's refusal comes through, and exits 1.
    let (code, _, err) = ctl(&admin, &["pace", "sale", "2.5"], &env);
    assert_eq!(code, 1);
    assert!(err.contains("400") && err.contains("whole number"), "{err}");

    // The audit log of the real server: every action above, newest first, each by ctl.
    let (code, out, err) = ctl(&admin, &["audit", "--room", "sale", "--json"], &env);
    assert_eq!(code, 0, "{err}");
    let records: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let actions: Vec<&str> = records.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["pace", "admit", "message_clear", "message_set", "resume", "pause"],
        "{out}"
    );
    assert!(records.iter().all(|r| r["via"] == "ctl" && r["operator"] == "admin"));
    assert_eq!(records[0]["args"]["new_users_per_minute"], 40.0);
    assert_eq!(records[0]["args"]["for_seconds"], 1800);
    let (code, out, err) = ctl(&admin, &["audit", "--limit", "2"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");

    // Refused and failed: 1, with the reason.
    let (code, _, err) = ctl(&admin, &["pause", "nope"], &env);
    assert_eq!(code, 1);
    assert!(
        err.contains("404") && err.contains("no room is named \"nope\""),
        "{err}"
    );
    let (code, _, err) = ctl(&admin, &["pace", "nope", "5"], &env);
    assert_eq!(code, 1);
    assert!(err.contains("no room is named"), "{err}");
    let wrong = [("VESTIBULE_ADMIN_TOKEN", "not-the-operator-token")];
    let (code, _, err) = ctl(&admin, &["status"], &wrong);
    assert_eq!(code, 1);
    assert!(
        err.contains("401") && err.contains("token was refused"),
        "{err}"
    );
    let (code, _, err) = ctl(&admin, &["pause", "sale"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("needs a token"), "{err}");
    assert_eq!(
        room(&v, "sale")["paused"],
        false,
        "nothing refused changed anything"
    );

    // Usage: 2, before anything is sent.
    for args in [
        &["admit", "sale", "x"][..],
        &["admit", "sale", "0"],
        &["sold-out", "sale", "maybe"],
        &["serving", "sale", "+0"],
        &["pace", "sale", "fast"],
        &["pace", "sale", "5", "--for", "10s"],
        &["launch", "sale"],
    ] {
        let (code, _, err) = ctl(&admin, args, &env);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let (code, _, err) = ctl(
        &admin,
        &["--token-file", "/nonexistent/token", "status"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
}

#[test]
fn ctl_says_which_address_is_not_answering() {
    let addr = free_addr();
    let (code, out, err) = ctl(&format!("http://{addr}"), &["status"], &[]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains(&format!("cannot connect to the admin listener at {addr}")),
        "{err}"
    );
    let (code, _, err) = ctl("https://127.0.0.1:9901", &["status"], &[]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn ctl_has_a_man_page_and_completions() {
    let (code, out, _) = run_cli(&["man", "ctl"]);
    assert_eq!(code, 0);
    assert!(out.contains("vestibule\\-ctl"), "{out}");
    let (code, out, _) = run_cli(&["man", "ctl", "pace"]);
    assert_eq!(code, 0);
    assert!(out.contains("\\-\\-for"), "{out}");
    let (code, out, _) = run_cli(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("vestibule__subcmd__ctl__subcmd__pace"),
        "{out}"
    );
}

#[test]
fn ctl_lists_the_audit_log_one_line_a_record_from_a_chunked_answer() {
    // The audit endpoint's shape, newest first, in two chunks.
    const RECORDS: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
        4f\r\n[{\"time\":\"2026-11-27T12:01:00Z\",\"operator\":\"alice\",\"source\":\"console\",\"room\":\"s\r\n\
        ca\r\nale\",\"action\":\"pace\",\"args\":{\"new_users_per_minute\":40},\"before\":null,\"after\":{\"new_users_per_minute\":40}},\
{\"time\":\"2026-11-27T12:00:00Z\",\"operator\":\"bob\",\"source\":\"api\",\"room\":\"sale\",\"action\":\"pause\"}]\r\n\
        0\r\n\r\n";
    let addr = canned_origin(RECORDS);
    let admin = format!("http://{addr}");
    let (code, out, err) = ctl(&admin, &["audit", "--room", "sale", "--limit", "2"], &[]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            r#"2026-11-27T12:01:00Z  alice (console)  sale  pace {"new_users_per_minute":40}  – -> {"new_users_per_minute":40}"#,
            "2026-11-27T12:00:00Z  bob (api)  sale  pause  – -> –",
        ],
        "{out}"
    );
    let (code, out, _) = ctl(&admin, &["audit", "--json"], &[]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json.as_array().map(Vec::len), Some(2));
    let (code, _, err) = ctl(&admin, &["audit", "--limit", "5000"], &[]);
    assert_eq!(code, 2, "{err}");
}
