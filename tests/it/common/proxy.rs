//! The proxy under test: the binary and the test keys, how to configure one ([`Setup`]) and
//! the running proxy ([`Vestibule`]), reading its `/metrics`, its pages, and tokens signed with
//! the test keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_vestibule");

/// A test key (not the published demo key).
pub const KEY1: &str = "dGVzdC1rZXktb25lLXRlc3Qta2V5LW9uZS10ZXN0LWtleS1vbmUtdGVzdC1rZXktMQ==";
pub const KEY2: &str = "dGVzdC1rZXktdHdvLXRlc3Qta2V5LXR3by10ZXN0LWtleS10d28tdGVzdC1rZXktMg==";

/// How to start a proxy for a test.
pub struct Setup {
    /// Lines added to `[server]`.
    pub server_extra: String,
    pub upstream: String,
    pub upstream_extra: String,
    pub extra: String,
    pub admin: Option<String>,
    pub keys: String,
    pub env: Vec<(String, String)>,
    /// Files written into the proxy's folder before it starts: (relative path, contents).
    pub files: Vec<(String, Vec<u8>)>,
    /// `[server] threads`.
    pub threads: usize,
    /// Whether the shipped pages are copied to `pages/` beside the config (they are unless
    /// [`Setup::without_pages`]).
    pub copy_pages: bool,
}

impl Setup {
    pub fn new(origin: SocketAddr) -> Setup {
        Setup {
            server_extra: String::new(),
            upstream: format!("[\"{origin}\"]"),
            upstream_extra: "health_check = \"1s\"\n".into(),
            extra: String::new(),
            admin: None,
            keys: format!("active = \"key1\"\n[ring]\nkey1 = \"{KEY1}\"\n"),
            env: Vec::new(),
            files: Vec::new(),
            threads: 2,
            copy_pages: true,
        }
    }

    /// No `pages/` folder beside the config: rooms that name none serve the built-in pages.
    pub fn without_pages(mut self) -> Setup {
        self.copy_pages = false;
        self
    }

    /// `[server] threads` (2 unless set).
    pub fn threads(mut self, threads: usize) -> Setup {
        self.threads = threads;
        self
    }

    /// Writes `contents` to `name` (relative to the config file) before the proxy starts.
    pub fn file(mut self, name: &str, contents: impl Into<Vec<u8>>) -> Setup {
        self.files.push((name.to_owned(), contents.into()));
        self
    }

    /// A self-signed certificate for `names` in `tls/site.pem` and `tls/site.key`, a TLS
    /// listener at `addr` and the `[tls]` table that names them.
    pub fn self_signed_tls(self, addr: SocketAddr, names: &[&str]) -> Setup {
        let ck = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .expect("certificate");
        self.file("tls/site.pem", ck.cert.pem())
            .file("tls/site.key", ck.key_pair.serialize_pem())
            .server(&format!("tls_listen = [\"{addr}\"]"))
            .extra("[tls]\ncertificates = [{ cert = \"tls/site.pem\", key = \"tls/site.key\" }]")
    }

    pub fn extra(mut self, toml: &str) -> Setup {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }

    /// Adds lines to the `[server]` table.
    pub fn server(mut self, toml: &str) -> Setup {
        self.server_extra.push_str(toml);
        self.server_extra.push('\n');
        self
    }

    pub fn upstream_extra(mut self, toml: &str) -> Setup {
        self.upstream_extra = toml.to_owned();
        self
    }

    pub fn start(self) -> Vestibule {
        Vestibule::start(self)
    }
}

/// A running proxy with its own folder (config, keys, pages, log).
pub struct Vestibule {
    /// Dropped first (fields drop in order): a failing test prints the log from `dir` before
    /// the folder goes.
    pub proc: Proc,
    pub dir: tempfile::TempDir,
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    pub admin_token: Option<String>,
}

impl Vestibule {
    pub fn config_text(setup: &Setup, proxy: SocketAddr, admin: &str) -> String {
        format!(
            "[server]\nlisten = [\"{proxy}\"]\nthreads = {threads}\ngraceful_shutdown = \"2s\"\npid_file = \"/tmp/vestibule-test-{port}.pid\"\nupgrade_sock = \"/tmp/vestibule-test-{port}.sock\"\n{server_extra}\
             [admin]\n{admin}\n\
             [upstream]\npeers = {peers}\n{upstream_extra}\n\
             {extra}",
            port = proxy.port(),
            threads = setup.threads,
            peers = setup.upstream,
            server_extra = setup.server_extra,
            upstream_extra = setup.upstream_extra,
            extra = setup.extra,
        )
    }

    pub fn start(setup: Setup) -> Vestibule {
        let dir = tempfile::tempdir().expect("temp dir");
        if setup.copy_pages {
            copy_pages(&dir.path().join("pages"));
        }
        std::fs::write(dir.path().join("keys.toml"), &setup.keys).expect("keys");
        for (name, contents) in &setup.files {
            let path = dir.path().join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("folder");
            }
            std::fs::write(path, contents).expect("file");
        }
        let proxy = free_addr();
        let admin_addr = free_addr();
        let admin = setup
            .admin
            .clone()
            .unwrap_or_else(|| format!("listen = \"{admin_addr}\""));
        let admin_token = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("token = \""))
            .map(|t| t.trim_end_matches('"').to_owned());
        let admin_listen: SocketAddr = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("listen = \""))
            .map(|t| t.trim_end_matches('"').parse().expect("admin addr"))
            .unwrap_or(admin_addr);
        let config = dir.path().join("vestibule.toml");
        // `@PROXY@` in the config is the proxy's address (an OpenID issuer names it, say).
        let text = Self::config_text(&setup, proxy, &admin).replace("@PROXY@", &proxy.to_string());
        std::fs::write(&config, text).expect("config");
        let envs: Vec<(&str, &str)> = setup
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let proc = spawn(
            &["--config", config.to_str().expect("utf-8 path")],
            &dir.path().join("vestibule.log"),
            &envs,
        );
        let admin_probe = if admin_listen.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], admin_listen.port()))
        } else {
            admin_listen
        };
        let v = Vestibule {
            dir,
            proxy,
            admin: admin_probe,
            admin_token,
            proc,
        };
        let up = wait_for_port(proxy, Duration::from_secs(15))
            && wait_for_port(admin_probe, Duration::from_secs(5));
        assert!(up, "vestibule did not start:\n{}", v.proc.log_text());
        v
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.proxy, path)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("vestibule.toml")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// GET on the admin endpoint, with the token when one is configured.
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        let mut req = client().get(format!("http://{}{}", self.admin, path));
        if let Some(t) = &self.admin_token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().expect("admin answers");
        let status = resp.status().as_u16();
        let body = resp
            .text()
            .unwrap_or_else(|e| panic!("admin {path}: {status}, body unreadable: {e}"));
        (status, body)
    }

    pub fn status(&self) -> serde_json::Value {
        let (code, body) = self.admin_get("/status");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("status is not JSON ({e}): {body:?}"))
    }

    /// The config generation `/status` reports.
    pub fn generation(&self) -> u64 {
        self.status()["generation"]
            .as_u64()
            .expect("generation is a number")
    }

    /// Replaces the first `from` in the config file with `to` (which the watcher then reloads),
    /// and returns the generation before the edit.
    pub fn edit_config(&self, from: &str, to: &str) -> u64 {
        let generation = self.generation();
        let text = std::fs::read_to_string(self.config_path()).expect("the config");
        assert!(text.contains(from), "{from:?} is not in the config");
        std::fs::write(self.config_path(), text.replacen(from, to, 1)).expect("the config");
        generation
    }

    /// Invitation codes for `room` from `vestibule invite` on this proxy's config,
    /// one per line printed; `args` are more of its flags.
    pub fn invite_codes(&self, room: &str, args: &[&str]) -> Vec<String> {
        let config = self.config_path();
        let mut all = vec![
            "invite",
            "--config",
            config.to_str().expect("path"),
            "--room",
            room,
        ];
        all.extend_from_slice(args);
        let (code, out, err) = run_cli(&all);
        assert_eq!(code, 0, "vestibule invite: {err}");
        out.lines().map(str::to_owned).collect()
    }

    /// Waits (up to 5 s) for a generation above `previous`, and returns it.
    pub fn wait_generation_above(&self, previous: u64) -> u64 {
        let mut g = previous;
        assert!(
            eventually(Duration::from_secs(5), || {
                g = self.generation();
                g > previous
            }),
            "no reload after 5 s:\n{}",
            self.log_text()
        );
        g
    }

    /// The text of `/metrics`; panics unless it answers 200.
    pub fn metrics(&self) -> String {
        let (code, body) = self.admin_get("/metrics");
        assert_eq!(code, 200, "/metrics: {body}");
        body
    }

    /// The value of one sample line of `/metrics` (`name{labels}`); panics when it is absent.
    pub fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics(), series)
    }

    pub fn log_text(&self) -> String {
        self.proc.log_text()
    }

    /// Starts the proxy again on the same folder and config (after the test stopped it),
    /// logging to `log` in its folder, and waits for both its listeners.
    pub fn start_again(&mut self, log: &str) {
        self.proc = spawn(
            &["--config", self.config_path().to_str().expect("utf-8 path")],
            &self.path(log),
            &[],
        );
        let up = wait_for_port(self.proxy, Duration::from_secs(15))
            && wait_for_port(self.admin, Duration::from_secs(5));
        assert!(up, "vestibule did not start again:\n{}", self.log_text());
    }
}

/// The value of the sample `series` (`name{labels}`, labels in exposition order) in a
/// `/metrics` text. Panics when there is no such sample, naming the samples of that family, so a
/// renamed series or label fails loudly instead of reading as 0.
pub fn metric_value(text: &str, series: &str) -> f64 {
    metric_sample(text, series).unwrap_or_else(|| {
        let family = series.split('{').next().unwrap_or(series);
        let seen: Vec<&str> = text.lines().filter(|l| l.starts_with(family)).collect();
        panic!("no sample {series} in /metrics; the family has: {seen:#?}")
    })
}

/// The value of the sample `series`, or `None` when it is absent (for tests where absence is
/// the point).
pub fn metric_sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let value = l.strip_prefix(series)?.strip_prefix(' ')?;
        Some(value.trim().parse().expect("a sample value is a number"))
    })
}

/// The shipped pages, copied so a test may edit its own.
pub fn copy_pages(to: &Path) {
    std::fs::create_dir_all(to).expect("pages dir");
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("pages");
    copy_dir(&from, to);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("folder");
    for entry in std::fs::read_dir(from).expect("folder") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy page");
        }
    }
}

/// The ring the harness writes into every `keys.toml` ([`KEY1`] as `key1`).
pub fn test_ring() -> vestibule::keys::KeyRing {
    vestibule::keys::KeyRing::from_entries("key1", &[("key1", KEY1)]).expect("test ring")
}

/// A token signed with the harness's `key1`.
pub fn mint(dec: vestibule::token::Dec, exp: u64, uid: &vestibule::identity::Identity) -> String {
    vestibule::token::Claims::new(dec, exp, uid, "key1").sign(test_ring().active())
}

/// The identity of a test client talking straight to the proxy.
pub fn localhost() -> vestibule::identity::Identity {
    vestibule::identity::Identity::of_ip("127.0.0.1".parse().expect("ip"), 64)
}
