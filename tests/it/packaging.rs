//! The files that ship around the binary: every path the Dockerfile copies exists, and the
//! sample config is valid; `vestibule init` writes a config that serves; the completion scripts
//! and man pages come from the clap definition and parse.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

#[test]
fn dockerfile_copies_only_existing_paths() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let mut copies = 0;
    for line in dockerfile.lines() {
        let Some(rest) = line.trim().strip_prefix("COPY ") else {
            continue;
        };
        if rest.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(
                root.join(src).exists(),
                "Dockerfile copies {src}, which does not exist"
            );
            copies += 1;
        }
    }
    assert!(copies >= 3, "expected COPY lines in the Dockerfile");
    assert!(
        dockerfile.contains("useradd --system --uid 10001")
            && dockerfile.contains("USER 10001:10001"),
        "the image must run as the vestibule user, not root"
    );
    assert!(dockerfile.contains("EXPOSE 8080 9901"));
    // Health from /readyz through `vestibule probe`, and signals through tini as PID 1.
    let health = dockerfile
        .lines()
        .skip_while(|l| !l.starts_with("HEALTHCHECK"))
        .take(2)
        .collect::<String>();
    assert!(
        health.contains("\"probe\"") && health.contains("/etc/vestibule/conf/vestibule.toml"),
        "{health}"
    );
    assert!(dockerfile.contains("ENTRYPOINT [\"/usr/bin/tini\", \"--\""));
    // `COPY . .` takes the whole tree: the context must leave out the builds and the history.
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    for entry in ["target/", ".git/", "**/node_modules/"] {
        assert!(
            ignore.lines().any(|l| l == entry),
            ".dockerignore lacks {entry}"
        );
    }
}

/// The image's config validates, with its secrets where the container finds them (here in a
/// temporary folder), and keeps its only writable state under /var/lib/vestibule.
#[test]
fn the_container_config_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("deploy/container/vestibule.toml")).unwrap();
    assert!(text.contains("state_file = \"/var/lib/vestibule/overrides.json\""));
    assert!(text.contains("listen = \"0.0.0.0:9901\""));
    let tmp = tempfile::tempdir().unwrap();
    let secrets = tmp.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    let (_, ring, _) = run_cli(&["keygen"]);
    std::fs::write(
        secrets.join("keys.toml"),
        format!("active = \"k1\"\n[ring]\nk1 = \"{}\"\n", ring.trim()),
    )
    .unwrap();
    std::fs::write(secrets.join("admin-token"), "a-token-of-the-container\n").unwrap();
    let conf = tmp.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let origin = Origin::start();
    let local = text
        .replace("/run/secrets/vestibule", secrets.to_str().unwrap())
        .replace("\"origin:8000\"", &format!("\"{}\"", origin.addr))
        .replace(
            "\"../pages\"",
            &format!("\"{}\"", root.join("pages").display()),
        );
    std::fs::write(conf.join("vestibule.toml"), local).unwrap();
    let (code, out, err) = run_cli(&[
        "--check",
        "--config",
        conf.join("vestibule.toml").to_str().unwrap(),
    ]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
}

/// The visible subcommands, as `vestibule --help` lists them (so the tests follow the CLI).
fn subcommands() -> Vec<String> {
    let (code, out, err) = run_cli(&["--help"]);
    assert_eq!(code, 0, "{err}");
    let list = out
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("Options:").next())
        .expect("--help lists the commands");
    let names: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect();
    for expected in ["init", "keygen", "demo", "completions", "man"] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    names
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_writes_a_config_that_serves_and_never_overwrites_without_force() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("site");
    let (proxy, admin) = (free_addr(), free_addr());
    let (origin_s, proxy_s, admin_s) = (
        origin.addr.to_string(),
        proxy.to_string(),
        admin.to_string(),
    );
    let args = [
        "init",
        dir.to_str().unwrap(),
        "--origin",
        &origin_s,
        "--listen",
        &proxy_s,
        "--admin",
        &admin_s,
        "--title",
        "Spring sale",
    ];
    let (code, out, err) = run_cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    let config = dir.join("vestibule.toml");
    assert!(
        out.contains(&format!("next:  vestibule --config {}", config.display())),
        "{out}"
    );
    // A fresh key ring, private, and not the published demo key.
    let keys = dir.join("keys.toml");
    #[cfg(unix)]
    assert_eq!(mode(&keys), 0o600);
    let ring = std::fs::read_to_string(&keys).unwrap();
    let sample =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/conf/keys.toml")).unwrap();
    let secret = |text: &str| text.lines().last().unwrap_or_default().to_owned();
    assert_ne!(secret(&ring), secret(&sample));
    // The pages are written out for editing.
    assert!(dir.join("pages/startwaiting.html").is_file());
    assert!(dir.join("pages/i18n/en.toml").is_file());

    // It validates without a warning.
    let (code, out, err) = run_cli(&["--check", "--config", config.to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");
    assert!(!err.contains("warning"), "{err}");
    // Visitors read the title.
    let (code, page, err) = run_cli(&[
        "pages",
        "render",
        "--config",
        config.to_str().unwrap(),
        "--room",
        "site",
        "--page",
        "startwaiting",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(page.contains("Spring sale is very busy"), "{page}");

    // It serves: the first visitor is let in to the origin, the status page answers.
    let v = spawn(
        &["--config", config.to_str().unwrap()],
        &tmp.path().join("vestibule.log"),
        &[],
    );
    assert!(
        wait_for_port(proxy, Duration::from_secs(15)),
        "{}",
        v.log_text()
    );
    let resp = client()
        .get(format!("http://{proxy}/"))
        .header("Accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("set-cookie").is_some(), "no room cookie");
    let body = resp.text().unwrap();
    assert!(body.contains("You are in"), "{body}");
    let resp = client()
        .get(format!("http://{admin}/status.html"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);

    // A second init refuses, and leaves the ring as it was.
    let (code, _, err) = run_cli(&args);
    assert_eq!(code, 1);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&keys).unwrap(), ring);
    // --force replaces it: a new key, still private.
    let mut forced = args.to_vec();
    forced.push("--force");
    let (code, _, err) = run_cli(&forced);
    assert_eq!(code, 0, "{err}");
    assert_ne!(
        secret(&std::fs::read_to_string(&keys).unwrap()),
        secret(&ring)
    );
    #[cfg(unix)]
    assert_eq!(mode(&keys), 0o600);
}

#[test]
fn init_refuses_a_folder_it_cannot_make_and_a_bad_origin() {
    let tmp = tempfile::tempdir().unwrap();
    // A file where a folder should be: no folder can be made under it, whoever runs the test.
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, b"a file").unwrap();
    let under = blocker.join("site");
    let (code, out, err) = run_cli(&["init", under.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("vestibule init: cannot create the folder"),
        "{err}"
    );
    let (code, _, err) = run_cli(&["init", blocker.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("is not a folder"), "{err}");
    let dir = tmp.path().join("site");
    let (code, _, err) = run_cli(&["init", dir.to_str().unwrap(), "--origin", "no-port"]);
    assert_eq!(code, 1);
    assert!(err.contains("--origin"), "{err}");
    assert!(!dir.exists(), "nothing is written for a bad origin");
    // A folder that already holds something of the operator's is left alone.
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), b"mine").unwrap();
    let (code, _, err) = run_cli(&["init", busy.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("is not empty") && err.contains("notes.txt"),
        "{err}"
    );
    assert!(
        !busy.join("vestibule.toml").exists(),
        "init wrote into a busy folder"
    );
}

#[test]
fn completions_come_from_the_cli_and_bash_parses_them() {
    let names = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = run_cli(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for name in &names {
            assert!(
                out.contains(name.as_str()),
                "{shell} completions lack {name}"
            );
        }
    }
    let (code, _, err) = run_cli(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error");
    assert!(err.contains("possible values"), "{err}");

    let (_, script, _) = run_cli(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vestibule.bash");
    std::fs::write(&file, &script).unwrap();
    match std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => missing_tool("bash -n", e),
    }
    // Sourcing it registers the completion function (bash parses and runs it).
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p vestibule",
            file.display()
        ))
        .output();
    if let Ok(out) = out {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("_vestibule"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn man_pages_list_every_subcommand_and_render() {
    let names = subcommands();
    let (code, page, err) = run_cli(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(page.contains(".TH VESTIBULE 1"), "{page}");
    for name in &names {
        // roff writes every hyphen of a name as `\-`.
        assert!(
            page.contains(&format!("vestibule\\-{}(1)", name.replace('-', "\\-"))),
            "the page lacks {name}"
        );
        let (code, sub, err) = run_cli(&["man", name]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            sub.contains(&format!(".TH VESTIBULE-{} 1", name.to_uppercase())),
            "{sub}"
        );
    }
    let (code, _, err) = run_cli(&["man", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no subcommand \"nope\""), "{err}");
    let (code, sub, _) = run_cli(&["man", "token", "inspect"]);
    assert_eq!(code, 0);
    let title = format!(".TH {} 1", "vestibule-token-inspect".to_uppercase());
    assert!(sub.contains(&title), "{sub}");

    // groff renders it without a warning, where installed (Debian: groff-base).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vestibule.1");
    std::fs::write(&file, &page).unwrap();
    match std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-P-cbou", "-ww"])
        .arg(&file)
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let warnings = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && warnings.trim().is_empty(),
                "{warnings}"
            );
            assert!(
                text.contains("SUBCOMMANDS") && text.contains("vestibule-init(1)"),
                "{text}"
            );
        }
        Err(e) => missing_tool("groff (Debian: groff-base), to render the man page", e),
    }
}

/// `vestibule init` into `dir` with an origin, a proxy and an admin address; returns the
/// config's path.
fn init_site(dir: &Path, origin: &str, proxy: &str, admin: &str) -> std::path::PathBuf {
    let (code, out, err) = run_cli(&[
        "init",
        dir.to_str().unwrap(),
        "--origin",
        origin,
        "--listen",
        proxy,
        "--admin",
        admin,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    dir.join("vestibule.toml")
}

#[test]
fn the_admin_token_can_live_in_a_file_and_probe_uses_it() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("site");
    let (proxy, admin) = (free_addr(), free_addr());
    let config = init_site(
        &dir,
        &origin.addr.to_string(),
        &proxy.to_string(),
        &admin.to_string(),
    );
    let text = std::fs::read_to_string(&config).unwrap();
    let config_str = config.to_str().unwrap();
    let with = |admin_keys: &str| {
        std::fs::write(
            &config,
            text.replacen("[admin]\n", &format!("[admin]\n{admin_keys}\n"), 1),
        )
        .unwrap();
    };

    // Unreadable, too short, or beside a written token: each a --check error naming the key.
    with("token_file = \"secret/admin-token\"");
    let (code, _, err) = run_cli(&["--check", "--config", config_str]);
    assert_eq!(code, 1);
    assert!(
        err.contains("admin.token_file") && err.contains("cannot read"),
        "{err}"
    );
    std::fs::create_dir(dir.join("secret")).unwrap();
    std::fs::write(dir.join("secret/admin-token"), "short\n").unwrap();
    let (code, _, err) = run_cli(&["--check", "--config", config_str]);
    assert_eq!(code, 1);
    assert!(
        err.contains("admin.token_file") && err.contains("16"),
        "{err}"
    );
    let token = "a-token-kept-in-a-secret-file";
    // The newline `echo` or an editor adds is not part of the token.
    std::fs::write(dir.join("secret/admin-token"), format!("{token}\n")).unwrap();
    with(&format!(
        "token = \"{token}\"\ntoken_file = \"secret/admin-token\""
    ));
    let (code, _, err) = run_cli(&["--check", "--config", config_str]);
    assert_eq!(code, 1);
    assert!(
        err.contains("admin.token_file") && err.contains("keep the token in one place"),
        "{err}"
    );
    with("token_file = \"secret/admin-token\"");
    let (code, out, err) = run_cli(&["--check", "--config", config_str]);
    assert_eq!((code, out.trim()), (0, "ok"), "{err}");

    // Nothing serves yet: the probe fails, quickly when asked once.
    let (code, _, err) = run_cli(&["probe", "--config", config_str]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot connect"), "{err}");

    let v = spawn(
        &["--config", config_str],
        &tmp.path().join("vestibule.log"),
        &[],
    );
    let (code, out, err) = run_cli(&["probe", "--config", config_str, "--wait", "15s"]);
    assert_eq!(code, 0, "{err}\n{}", v.log_text());
    assert!(out.contains("ready"), "{out}");
    let (code, _, err) = run_cli(&["probe", "--config", config_str, "--path", "/healthz"]);
    assert_eq!(code, 0, "{err}");
    // The token guards the listener but not its probes: without it, 401; with the file's
    // content, 200.
    let health = format!("http://{admin}/healthz");
    assert_eq!(client().get(&health).send().unwrap().status(), 200);
    let url = format!("http://{admin}/status");
    assert_eq!(client().get(&url).send().unwrap().status(), 401);
    let resp = client().get(&url).bearer_auth(token).send().unwrap();
    assert_eq!(resp.status(), 200);

    // A rotated secret applies on the next reload, with no restart.
    let rotated = "a-rotated-token-from-the-same-file";
    std::fs::write(dir.join("secret/admin-token"), rotated).unwrap();
    // Wait for the old token to stop working (one refusal): guessing with the new one before
    // the reload would count against the login throttle.
    assert!(
        eventually(Duration::from_secs(10), || {
            client()
                .get(&url)
                .bearer_auth(token)
                .send()
                .is_ok_and(|r| r.status() == 401)
        }),
        "{}",
        v.log_text()
    );
    let resp = client().get(&url).bearer_auth(rotated).send().unwrap();
    assert_eq!(resp.status(), 200, "{}", v.log_text());
    let (code, _, err) = run_cli(&["probe", "--config", config_str]);
    assert_eq!(code, 0, "{err}");
}

/// Kubernetes mounts a ConfigMap as `name -> ..data/name`, `..data` a link to a timestamped
/// folder, and updates it by writing a new folder and renaming a new `..data` over the old one:
/// the config's own name never changes. The reload must follow.
#[cfg(unix)]
#[test]
fn a_configmap_style_update_reloads() {
    use std::os::unix::fs::symlink;
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let site = tmp.path().join("site");
    let (proxy, admin) = (free_addr(), free_addr());
    init_site(
        &site,
        &origin.addr.to_string(),
        &proxy.to_string(),
        &admin.to_string(),
    );
    // The mounted folder: the config and the ring through ..data, as kubelet lays them out.
    let mount = tmp.path().join("conf");
    let first = mount.join("..2026_01_01_00_00_00.000000001");
    std::fs::create_dir_all(&first).unwrap();
    let text = std::fs::read_to_string(site.join("vestibule.toml"))
        .unwrap()
        .replace("pages = \"pages\"", "pages = \"../site/pages\"");
    std::fs::write(first.join("vestibule.toml"), &text).unwrap();
    std::fs::copy(site.join("keys.toml"), first.join("keys.toml")).unwrap();
    symlink(first.file_name().unwrap(), mount.join("..data")).unwrap();
    for name in ["vestibule.toml", "keys.toml"] {
        symlink(Path::new("..data").join(name), mount.join(name)).unwrap();
    }
    let config = mount.join("vestibule.toml");
    let v = spawn(
        &["--config", config.to_str().unwrap()],
        &tmp.path().join("vestibule.log"),
        &[],
    );
    let status = || -> Option<serde_json::Value> {
        client()
            .get(format!("http://{admin}/status"))
            .send()
            .ok()?
            .json()
            .ok()
    };
    assert!(
        eventually(Duration::from_secs(15), || status().is_some()),
        "{}",
        v.log_text()
    );
    let generation = status().unwrap()["generation"].as_u64().unwrap();

    // The update, step by step as kubelet makes it.
    let second = mount.join("..2026_01_01_00_05_00.000000002");
    std::fs::create_dir(&second).unwrap();
    std::fs::write(
        second.join("vestibule.toml"),
        text.replace("new_users_per_minute = 200", "new_users_per_minute = 201"),
    )
    .unwrap();
    std::fs::copy(first.join("keys.toml"), second.join("keys.toml")).unwrap();
    symlink(second.file_name().unwrap(), mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(&first).unwrap();

    assert!(
        eventually(Duration::from_secs(10), || {
            status().is_some_and(|s| s["generation"].as_u64() > Some(generation))
        }),
        "no reload after the ..data swap: {}",
        v.log_text()
    );
    let s = status().unwrap();
    assert!(
        s["last_reload_error"].is_null(),
        "{}",
        s["last_reload_error"]
    );
    assert!(
        s.to_string().contains("\"new_users_per_minute\":201"),
        "{s}"
    );

    // And the next update too: the watch follows the new folder.
    let generation = s["generation"].as_u64().unwrap();
    let third = mount.join("..2026_01_01_00_10_00.000000003");
    std::fs::create_dir(&third).unwrap();
    std::fs::write(
        third.join("vestibule.toml"),
        text.replace("new_users_per_minute = 200", "new_users_per_minute = 202"),
    )
    .unwrap();
    std::fs::copy(second.join("keys.toml"), third.join("keys.toml")).unwrap();
    symlink(third.file_name().unwrap(), mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(&second).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            status().is_some_and(|s| {
                s["generation"].as_u64() > Some(generation)
                    && s.to_string().contains("\"new_users_per_minute\":202")
            })
        }),
        "no reload after the second swap: {}",
        v.log_text()
    );
}

/// `make dist`'s packing, with the debug binary (a release build is too slow for CI): the
/// tarball holds the binary, man pages, completions, docs, config and pages, every file is in
/// its SHA256SUMS and matches, and the demo key ring is not in it.
#[test]
fn dist_packs_a_tarball_whose_sums_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dist");
    let run = std::process::Command::new(root.join("packaging/dist.sh"))
        .arg(BIN)
        .arg(&out)
        .env("GZIP_LEVEL", "1")
        .output();
    let run = match run {
        Ok(run) => run,
        Err(e) => return missing_tool("bash, to run packaging/dist.sh", e),
    };
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let tarball = std::path::PathBuf::from(String::from_utf8_lossy(&run.stdout).trim());
    let name = tarball.file_name().unwrap().to_str().unwrap().to_owned();
    let (_, version, _) = run_cli(&["--version"]);
    let version = version.split_whitespace().nth(1).unwrap().to_owned();
    assert!(name.starts_with(&format!("vestibule-{version}-")), "{name}");
    let sh = |script: &str, dir: &Path| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The tarball's own sum, then its files' sums.
    sh(&format!("sha256sum -c '{name}.sha256'"), &out);
    sh(&format!("tar -xzf '{name}'"), &out);
    let top = out.join(name.trim_end_matches(".tar.gz"));
    let checked = sh("sha256sum -c --strict SHA256SUMS", &top);
    for file in [
        "bin/vestibule",
        "share/man/man1/vestibule.1.gz",
        "share/man/man1/vestibule-init.1.gz",
        "share/completions/vestibule.bash",
        "share/completions/_vestibule",
        "share/completions/vestibule.fish",
        "README.md",
        "conf/vestibule.toml",
        "conf/vestibule.service",
        "conf/prometheus/alerts.yml",
        "conf/grafana/vestibule.json",
        "pages/startwaiting.html",
        "pages/i18n/en.toml",
        "packaging/sysusers.d/vestibule.conf",
    ] {
        assert!(top.join(file).is_file(), "{file} is not in the tarball");
        assert!(
            checked.contains(&format!("./{file}: OK")),
            "{file} is not in SHA256SUMS"
        );
    }
    assert!(top.join("docs").is_dir());
    assert!(
        !top.join("conf/keys.toml").exists(),
        "the published demo key ring ships"
    );
    // Every file is summed: as many lines as files, less SHA256SUMS itself.
    let files = sh("find . -type f ! -name SHA256SUMS | wc -l", &top);
    assert_eq!(
        checked.lines().count(),
        files.trim().parse::<usize>().unwrap()
    );
    let packed = top.join("bin/vestibule");
    let v = std::process::Command::new(&packed)
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("vestibule {version}")
    );
}
