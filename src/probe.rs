//! `vestibule probe`: ask the running instance's admin listener for `/readyz` (or `/healthz`)
//! and exit 0 on a 200. It is the readiness check of the systemd unit (`ExecStartPost`), the
//! container's `HEALTHCHECK` and the Kubernetes probes, none of which can rely on curl being
//! installed or on the admin token being written in their own files.
//!
//! Only the `[admin]` table is read, leniently: a config edit that fails validation leaves the
//! last good generation serving, and the probe must keep saying so rather than fail (a liveness
//! probe that failed then would restart a healthy process into a config it cannot load).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one attempt may take (connect, then the whole answer).
const ATTEMPT: Duration = Duration::from_secs(2);
/// What a 401 means to the operator.
const REFUSED: &str = "the admin token was refused (check admin.token or admin.token_file)";
/// The pause between attempts while `--wait` lasts.
const RETRY: Duration = Duration::from_millis(250);

/// Where the admin listener is and what it needs to be asked.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    /// The address to connect to (an unspecified listen address becomes loopback).
    pub addr: SocketAddr,
    pub token: Option<String>,
}

impl Target {
    /// The `[admin]` table of the config at `path`: `listen` (default `127.0.0.1:9901`), and
    /// `token`, or the content of `token_file` (relative to the config's folder), trimmed.
    pub fn from_config(path: &Path) -> Result<Target, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let doc: toml::Table = text
            .parse()
            .map_err(|e| format!("{} is not TOML: {e}", path.display()))?;
        let admin = doc.get("admin").and_then(|a| a.as_table());
        let key = |name: &str| admin.and_then(|a| a.get(name)).and_then(|v| v.as_str());
        let listen = key("listen").unwrap_or("127.0.0.1:9901");
        let mut addr: SocketAddr = listen
            .parse()
            .map_err(|_| format!("admin.listen = \"{listen}\" is not an address:port"))?;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        let token = match (key("token").filter(|t| !t.is_empty()), key("token_file")) {
            (Some(token), _) => Some(token.to_owned()),
            (None, Some(file)) if !file.trim().is_empty() => {
                let file = resolve(path, file.trim());
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    format!("admin.token_file: cannot read {}: {e}", file.display())
                })?;
                Some(text.trim().to_owned())
            }
            _ => None,
        };
        Ok(Target { addr, token })
    }
}

fn resolve(config: &Path, file: &str) -> PathBuf {
    let file = Path::new(file);
    if file.is_absolute() {
        return file.to_path_buf();
    }
    config.parent().unwrap_or(Path::new(".")).join(file)
}

/// One GET of `path`: the status code and the body's first line.
pub fn get(target: &Target, path: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect_timeout(&target.addr, ATTEMPT)
        .map_err(|e| format!("cannot connect to {}: {e}", target.addr))?;
    let _ = stream.set_read_timeout(Some(ATTEMPT));
    let _ = stream.set_write_timeout(Some(ATTEMPT));
    let auth = target
        .token
        .as_deref()
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\n{auth}Connection: close\r\n\r\n",
        target.addr
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{}: {e}", target.addr))?;
    let mut answer = Vec::new();
    // A read error after some bytes (a reset at close) still leaves a usable status line.
    if let Err(e) = stream.take(64 * 1024).read_to_end(&mut answer) {
        if answer.is_empty() {
            return Err(format!("{}: {e}", target.addr));
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("{} did not answer HTTP", target.addr))?;
    Ok((status, body.lines().next().unwrap_or_default().to_owned()))
}

/// GET `path` until it answers 200 or `wait` has passed (at least one attempt). The error is
/// the last answer or failure, for the operator to read.
pub fn wait_for_ok(target: &Target, path: &str, wait: Duration) -> Result<String, String> {
    let deadline = Instant::now() + wait;
    loop {
        let last = match get(target, path) {
            Ok((200, body)) => return Ok(body),
            Ok((401, _)) => return Err(format!("{path}: 401, {REFUSED}")),
            Ok((status, body)) => format!("{path}: {status} {body}"),
            Err(e) => e,
        };
        if Instant::now() + RETRY >= deadline {
            return Err(last);
        }
        std::thread::sleep(RETRY);
    }
}
