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
    assert!(copies >= 4, "expected COPY lines in the Dockerfile");
    assert!(
        dockerfile.contains("USER vestibule"),
        "the image must not run as root"
    );
    assert!(dockerfile.contains("EXPOSE 8080 9901"));
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
        assert!(
            page.contains(&format!("vestibule\\-{name}(1)")),
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
    assert!(sub.contains(".TH VESTIBULE-TOKEN-INSPECT 1"), "{sub}");

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
