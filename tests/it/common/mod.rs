//! Integration-test harness: the real `vestibule` binary on free loopback ports, in front of the
//! real demo origin (a separate process), talked to with a real HTTP client. Every process a test
//! starts is stopped by its pid when the test ends.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_vestibule");

/// A test key (not the published demo key).
pub const KEY1: &str = "dGVzdC1rZXktb25lLXRlc3Qta2V5LW9uZS10ZXN0LWtleS1vbmUtdGVzdC1rZXktMQ==";
pub const KEY2: &str = "dGVzdC1rZXktdHdvLXRlc3Qta2V5LXR3by10ZXN0LWtleS10d28tdGVzdC1rZXktMg==";

/// A loopback listener on a port never handed out before in this test process.
///
/// Ports from [`free_port`] are released before the process that will listen on them starts,
/// and the kernel may give such a port to the next `bind(0)`. With every port recorded, two
/// tests running at once are never handed the same one, so one test's requests cannot reach
/// another's proxy or origin.
pub fn bind_loopback() -> TcpListener {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        if !given.contains(&port) {
            given.push(port);
            return listener;
        }
    }
    panic!("no loopback port left that this test process has not used already");
}

/// A loopback port nobody listens on right now, and never handed out before in this test
/// process (see [`bind_loopback`]).
pub fn free_port() -> u16 {
    bind_loopback().local_addr().expect("its address").port()
}

pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Waits until something accepts connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// A child process, killed by pid when dropped.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by pid (`TERM`, `HUP`, ...).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// Waits for the process to exit; `None` on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- log of pid {} ---\n{}",
                self.child.id(),
                self.log_text()
            );
        }
    }
}

/// Starts the binary under test: [`BIN`], or the one `VESTIBULE_BIN` names (a release build,
/// for measurements that a debug build would distort).
pub fn spawn(args: &[&str], log: &Path, envs: &[(&str, &str)]) -> Proc {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    let bin = std::env::var_os("VESTIBULE_BIN").unwrap_or_else(|| BIN.into());
    let mut cmd = Command::new(bin);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    Proc {
        child: cmd.spawn().expect("vestibule starts"),
        log: log.to_path_buf(),
    }
}

/// The demo origin in its own process.
pub struct Origin {
    pub addr: SocketAddr,
    /// Held for its drop, which stops the origin with the test.
    #[allow(dead_code)]
    pub proc: Proc,
    _dir: tempfile::TempDir,
}

impl Origin {
    pub fn start() -> Origin {
        Origin::start_with(&[])
    }

    /// The demo origin started with these extra arguments (`--model-capacity 20`, …).
    pub fn start_with(extra: &[&str]) -> Origin {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr = free_addr();
        let addr_text = addr.to_string();
        let mut args = vec!["origin", "--listen", &addr_text, "--threads", "2"];
        args.extend_from_slice(extra);
        let proc = spawn(&args, &dir.path().join("origin.log"), &[]);
        assert!(
            wait_for_port(addr, Duration::from_secs(10)),
            "origin did not start"
        );
        Origin {
            addr,
            proc,
            _dir: dir,
        }
    }

    /// Requests the origin has served so far (`/__stats` does not count itself). Panics when the
    /// origin does not answer: a count that reads 0 on error would let "nothing reached the
    /// origin" pass whenever the origin is down.
    pub fn served(&self) -> u64 {
        let resp = client()
            .get(format!("http://{}/__stats", self.addr))
            .send()
            .expect("the origin answers /__stats");
        assert_eq!(resp.status(), 200, "/__stats");
        let v: serde_json::Value = resp.json().expect("/__stats is JSON");
        v["served"].as_u64().expect("/__stats has a served count")
    }
}

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
        std::fs::write(&config, Self::config_text(&setup, proxy, &admin)).expect("config");
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

/// A client that follows no redirects and keeps no cookies: tests see every header.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// Runs the binary to completion and returns (exit code, stdout, stderr).
pub fn run_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("vestibule runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The origin's view of a request: (method, path, headers in order).
pub fn echo_headers(body: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(body).expect("echo JSON");
    v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().unwrap_or_default().to_owned(),
                pair[1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub fn header_values(headers: &[(String, String)], name: &str) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Every `Set-Cookie` value of a response.
pub fn set_cookies(resp: &reqwest::blocking::Response) -> Vec<&str> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .map(|h| h.to_str().expect("Set-Cookie is text"))
        .collect()
}

/// Trust the test client's `X-Forwarded-For`, so each test user can have an address of its own.
pub const TRUST_LOCAL: &str = "[identity]\ntrusted_proxies = [\"127.0.0.1/32\"]";

/// Sends `request` as written on a fresh connection and returns everything the server answered
/// until it closed the connection (or 10 s passed).
pub fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    use std::io::Write;
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The value a response's `Set-Cookie` gives cookie `name`, if it sets it.
pub fn room_cookie(resp: &reqwest::blocking::Response, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    set_cookies(resp).into_iter().find_map(|v| {
        v.strip_prefix(&prefix)
            .map(|rest| rest.split(';').next().unwrap_or("").to_owned())
    })
}

/// One visitor with an address of its own (through [`TRUST_LOCAL`]) and a cookie jar holding one
/// room cookie, asking for JSON so decisions are easy to read.
pub struct User {
    pub ip: String,
    pub cookie_name: String,
    pub cookie: Option<String>,
}

impl User {
    /// User number `i`, at `10.1.x.y`.
    pub fn new(i: u32) -> User {
        User::at(&format!("10.1.{}.{}", i / 256, i % 256))
    }

    pub fn at(ip: &str) -> User {
        User {
            ip: ip.to_owned(),
            cookie_name: "waiting_room".into(),
            cookie: None,
        }
    }

    /// The same user, holding the cookie of a room with another `cookie_name`.
    pub fn with_cookie_name(mut self, name: &str) -> User {
        self.cookie_name = name.to_owned();
        self
    }

    /// A GET that keeps whatever room cookie the answer sets (and forgets a deleted one).
    pub fn get(&mut self, v: &Vestibule, path: &str) -> reqwest::blocking::Response {
        let mut req = client()
            .get(v.url(path))
            .header("X-Forwarded-For", &self.ip)
            .header("Accept", "application/json");
        if let Some(c) = &self.cookie {
            req = req.header("Cookie", format!("{}={c}", self.cookie_name));
        }
        let resp = req.send().expect("the proxy answers");
        if let Some(value) = room_cookie(&resp, &self.cookie_name) {
            self.cookie = (value != "deleted").then_some(value);
        }
        resp
    }

    /// "allow" when the origin answered, else the room's JSON decision; and the JSON.
    pub fn decision(&mut self, v: &Vestibule) -> (String, serde_json::Value) {
        let body: serde_json::Value = self.get(v, "/__echo").json().expect("JSON");
        (decision_in(&body), body)
    }
}

/// "allow" for the demo origin's echo, else the `decision` of a room's JSON answer.
pub fn decision_in(body: &serde_json::Value) -> String {
    if body.get("headers").is_some() {
        return "allow".into();
    }
    body["decision"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision in {body}"))
        .to_owned()
}

/// An origin that answers every request with the same bytes, written as given (for answers the
/// demo origin cannot give, such as informational responses), then closes the connection.
/// Serves until the test ends.
pub fn canned_origin(answer: &'static [u8]) -> SocketAddr {
    scripted_origin(answer, false)
}

/// An origin that reads each request head, writes `answer` (possibly nothing, possibly part of
/// a response), and then holds the connection open without another byte for up to 30 s.
pub fn stalling_origin(answer: &'static [u8]) -> SocketAddr {
    scripted_origin(answer, true)
}

fn scripted_origin(answer: &'static [u8], hold: bool) -> SocketAddr {
    use std::io::Write;
    let listener = bind_loopback();
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = s.write_all(answer);
                if hold {
                    // Until the proxy gives up on it (a read returns 0) or 30 s pass.
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let _ = s.read(&mut byte);
                }
            });
        }
    });
    addr
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

/// A real `redis-server` on a free loopback port, without persistence, stopped by its pid when
/// dropped. `None` (after a loud message) only when `redis-server` is not installed.
pub struct Redis {
    pub port: u16,
    pub child: Child,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Option<Redis> {
        Redis::start_on(free_port())
    }

    /// On a given port (to bring a stopped server back where the nodes look for it).
    pub fn start_on(port: u16) -> Option<Redis> {
        Redis::spawn(port, &[])
    }

    /// `redis-server` on `port` with `extra` arguments, in a folder of its own.
    fn spawn(port: u16, extra: &[&str]) -> Option<Redis> {
        let dir = tempfile::tempdir().expect("temp dir");
        let port_text = port.to_string();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port_text,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                dir.path().to_str().expect("utf-8 path"),
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                missing_tool(
                    "redis-server",
                    format!("{e}; `.ci/run` installs it (apt-get install redis-server)"),
                );
                return None;
            }
        };
        let r = Redis { port, child, dir };
        assert!(
            wait_for_port(
                SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_secs(10)
            ),
            "redis-server did not start on {port}"
        );
        Some(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Sends a signal to this server by its pid (`STOP` freezes it: connections stay open and
    /// nothing answers; `CONT` thaws it).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} redis-server");
    }

    /// Stops this server (by its pid) and waits until it is gone.
    pub fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
        self.port
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A three-shard Redis Cluster on free loopback ports (no replicas), stopped by pid when
/// dropped. `None` (after a loud message) when `redis-server` or `redis-cli` is not installed.
pub struct RedisCluster {
    pub shards: Vec<Redis>,
}

impl RedisCluster {
    pub fn start() -> Option<RedisCluster> {
        let mut shards = Vec::new();
        for _ in 0..3 {
            let shard = Redis::spawn(
                free_port(),
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ],
            )?;
            shards.push(shard);
        }
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(shards.iter().map(|s| format!("127.0.0.1:{}", s.port)));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        match Command::new("redis-cli").args(&args).output() {
            Ok(out) => assert!(
                out.status.success(),
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&out.stdout)
            ),
            Err(e) => {
                missing_tool("redis-cli (Debian: redis-tools, with redis-server)", e);
                return None;
            }
        }
        let ok = eventually(Duration::from_secs(10), || {
            Command::new("redis-cli")
                .args(["-p", &shards[0].port.to_string(), "cluster", "info"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
        });
        assert!(ok, "the Redis Cluster did not come up");
        Some(RedisCluster { shards })
    }

    /// The seed URLs, as `[cluster] redis` takes them.
    pub fn urls(&self) -> Vec<String> {
        self.shards
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }
}

/// Resident memory of process `pid`, KiB. Panics when it cannot be read: a figure of 0 would
/// pass every "memory stayed low" check.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("no /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS for {pid}"))
}

/// Seconds since the epoch, with their fraction.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Visitors queued in two priority lanes of a fifo room `sale` whose minute is full,
/// to be let in during the `measured` minute.
pub struct LaneQueue {
    pub measured: u64,
    pub public: Vec<User>,
    pub members: Vec<User>,
}

/// Fills this minute's `cap` slots (at most 4 × `cap` arrivals), then queues 12 of the public and, after them, 12 members
/// who open `link` (an invitation link of the `members` lane) as a browser would. Visitor `i`
/// goes to `nodes[i % n]`. Not in a minute's last seconds, so the next minute is measured
/// whole.
pub fn queue_in_lanes(nodes: &[&Vestibule], link: &str, cap: u32) -> LaneQueue {
    let into = unix_now() as u64 % 60;
    if into > 50 {
        std::thread::sleep(Duration::from_secs(60 - into + 1));
    }
    let measured = unix_now() as u64 / 60 + 1;
    let node = |i: usize| nodes[i % nodes.len()];
    // Arrivals spread over the nodes until the minute's slots are taken (in a cluster each node
    // gives its part of them; an arrival a node has no slot for gets an anonymous token and
    // walks away).
    let mut allowed = 0;
    for i in 0..4 * cap {
        if allowed < cap && User::new(i).decision(node(i as usize)).0 == "allow" {
            allowed += 1;
        }
    }
    assert_eq!(allowed, cap, "the minute's slots, taken straight in");
    // Every node learns of the full minute (a cluster syncs every 250 ms in these tests).
    std::thread::sleep(Duration::from_secs(1));
    let mut public: Vec<User> = (100..112).map(User::new).collect();
    for (i, u) in public.iter_mut().enumerate() {
        // A first visit is given an anonymous token; the place comes when it is shown back.
        assert_eq!(u.decision(node(i)).0, "anon");
        assert_eq!(u.decision(node(i)).0, "wait");
    }
    let mut members: Vec<User> = (200..212).map(User::new).collect();
    for (i, u) in members.iter_mut().enumerate() {
        // Opened in a browser: a place, and a redirect to the address without the code.
        let resp = client()
            .get(node(i).url(link))
            .header("X-Forwarded-For", &u.ip)
            .send()
            .expect("the proxy answers");
        assert_eq!(resp.status().as_u16(), 303, "the link gives a place");
        let token = room_cookie(&resp, &u.cookie_name).expect("a place with the redirect");
        assert!(
            token.contains("&ln=members&"),
            "the lane is signed in: {token}"
        );
        u.cookie = Some(token);
        assert_eq!(u.decision(node(i)).0, "wait");
    }
    LaneQueue {
        measured,
        public,
        members,
    }
}

/// Every queued visitor checks in when told, each time on the next node, until the measured
/// minute ends. Returns (lane, minute) of each admission, and (members, public) let in during
/// the measured minute.
pub fn check_in_lanes(
    nodes: &[&Vestibule],
    q: LaneQueue,
) -> (Vec<(&'static str, u64)>, (usize, usize)) {
    let measured = q.measured;
    let admitted = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (lane, users) in [("public", q.public), ("members", q.members)] {
            for (i, mut u) in users.into_iter().enumerate() {
                let admitted = &admitted;
                s.spawn(move || {
                    let deadline = (measured + 1) * 60 - 1;
                    let mut k = i;
                    while (unix_now() as u64) < deadline {
                        k += 1;
                        let (decision, body) = u.decision(nodes[k % nodes.len()]);
                        if decision == "allow" {
                            admitted
                                .lock()
                                .unwrap()
                                .push((lane, unix_now() as u64 / 60));
                            return;
                        }
                        let wait = body["refresh_seconds"].as_u64().unwrap_or(5);
                        std::thread::sleep(Duration::from_secs(wait));
                    }
                });
            }
        }
    });
    let admitted = admitted.into_inner().unwrap();
    let count = |lane: &str| {
        admitted
            .iter()
            .filter(|(l, m)| *l == lane && *m == measured)
            .count()
    };
    let split = (count("members"), count("public"));
    eprintln!(
        "lanes on {} node(s): minute {measured} let in members {}, public {}",
        nodes.len(),
        split.0,
        split.1
    );
    (admitted, split)
}

/// A strict HTTP/1.1 origin on loopback, in this test process, that keeps what it was sent:
/// every connection's raw bytes (the first 256 KiB of each), how many connections and requests
/// it took, and how many requests it could not parse. Bodies are read by `Content-Length` or
/// chunked framing; a request line that is not `METHOD target HTTP/1.x` gets 400 and the
/// connection is closed, as a strict origin does. Each answer is 200 with the body
/// `<n> <method> <target> <body length>`, `n` counting from 1 over the origin's life. A target
/// with `?ms=N` is answered after N milliseconds (at most 5 s). Serves until the test ends.
pub struct RawOrigin {
    pub addr: SocketAddr,
    state: std::sync::Arc<RawState>,
}

#[derive(Default)]
struct RawState {
    connections: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
    malformed: std::sync::atomic::AtomicU64,
    received: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// How much of each connection's bytes a [`RawOrigin`] keeps.
const RAW_KEEP: usize = 256 * 1024;

impl RawOrigin {
    pub fn start() -> RawOrigin {
        let listener = bind_loopback();
        let addr = listener.local_addr().expect("addr");
        let state = std::sync::Arc::new(RawState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { continue };
                let state = shared.clone();
                let index = {
                    let mut received = state.received.lock().unwrap_or_else(|p| p.into_inner());
                    received.push(Vec::new());
                    received.len() - 1
                };
                state
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || raw_serve(s, &state, index));
            }
        });
        RawOrigin { addr, state }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state
            .connections
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Well-formed requests read so far (answered or not).
    pub fn requests(&self) -> u64 {
        self.state
            .requests
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests it could not parse (each answered with 400, its connection closed).
    pub fn malformed(&self) -> u64 {
        self.state
            .malformed
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The bytes received, one entry per connection, in the order they were accepted.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.state
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Reads from `s` into `buf` (recording what came) until `buf` holds at least `want` bytes;
/// false when the connection ends first.
fn raw_fill(s: &mut TcpStream, buf: &mut Vec<u8>, want: usize, state: &RawState, i: usize) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < want {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                let mut received = state.received.lock().unwrap_or_else(|p| p.into_inner());
                let kept = &mut received[i];
                let room = RAW_KEEP.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&chunk[..room]);
            }
        }
    }
    true
}

/// Reads one CRLF-ended line from the front of the connection's buffer.
fn raw_line(s: &mut TcpStream, buf: &mut Vec<u8>, state: &RawState, i: usize) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf[..end].to_vec();
            buf.drain(..end + 2);
            return Some(line);
        }
        if buf.len() > 64 * 1024 || !raw_fill(s, buf, buf.len() + 1, state, i) {
            return None;
        }
    }
}

fn raw_serve(mut s: TcpStream, state: &RawState, i: usize) {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    loop {
        let Some(request_line) = raw_line(&mut s, &mut buf, state, i) else {
            return;
        };
        let text = String::from_utf8_lossy(&request_line).into_owned();
        let parts: Vec<&str> = text.split(' ').collect();
        let well_formed = parts.len() == 3
            && !parts[0].is_empty()
            && parts[0].bytes().all(|b| b.is_ascii_uppercase())
            && parts[2].starts_with("HTTP/1.");
        if !well_formed {
            state.malformed.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nbad request",
            );
            return;
        }
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            let Some(line) = raw_line(&mut s, &mut buf, state, i) else {
                return;
            };
            if line.is_empty() {
                break;
            }
            let line = String::from_utf8_lossy(&line).to_ascii_lowercase();
            if let Some((name, value)) = line.split_once(':') {
                match name.trim() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "transfer-encoding" => chunked = value.contains("chunked"),
                    _ => {}
                }
            }
        }
        let mut body = 0usize;
        if chunked {
            loop {
                let Some(size) = raw_line(&mut s, &mut buf, state, i) else {
                    return;
                };
                let size = String::from_utf8_lossy(&size);
                let Ok(size) =
                    usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                else {
                    state.malformed.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                if size == 0 {
                    // Trailers, up to the empty line.
                    loop {
                        match raw_line(&mut s, &mut buf, state, i) {
                            Some(l) if l.is_empty() => break,
                            Some(_) => {}
                            None => return,
                        }
                    }
                    break;
                }
                if !raw_fill(&mut s, &mut buf, size + 2, state, i) {
                    return;
                }
                buf.drain(..size + 2);
                body += size;
            }
        } else if length > 0 {
            if !raw_fill(&mut s, &mut buf, length, state, i) {
                return;
            }
            buf.drain(..length);
            body = length;
        }
        let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
        let target = parts[1];
        if let Some(ms) = target
            .split_once("ms=")
            .and_then(|(_, v)| v.split('&').next())
            .and_then(|v| v.parse::<u64>().ok())
        {
            std::thread::sleep(Duration::from_millis(ms.min(5_000)));
        }
        let answer = format!("{n} {} {target} {body}", parts[0]);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        );
        if s.write_all(head.as_bytes()).is_err() || s.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A tool a test needs is missing: under `CI=true` that fails the test (`.ci/run` installs every
/// tool), elsewhere the test says loudly what it skipped.
pub fn missing_tool(what: &str, why: impl std::fmt::Display) {
    let message = format!("{what} cannot run ({why})");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}: .ci/run installs it, and under CI=true a missing tool fails");
    }
    eprintln!("!! SKIPPED: {message}");
}
