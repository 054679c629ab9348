//! From the file schema to the canonical [`Config`]: every check, every default, every error.
//!
//! This module holds the parse, the `Validator` that collects every problem with its key and
//! line, and the checks several sections share (addresses, CIDRs, path prefixes, names). Each
//! section of the file is checked in its own submodule: `server` (`[server]`, `[tls]`,
//! `[admin]`, `[identity]`, `[log]`), `cluster`, `upstream`, `rooms`, `admission` (a room's
//! lottery or capacity and its autopilot), `rules` (`[[rate_limit]]`) and `sinks`
//! (`[[events.sink]]`).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

use super::error::{from_toml, ConfigError, ConfigErrors};
use super::file::{FileConfig, LimitText, RateLimitFile, RoomFile, UpstreamFile};
use super::locate::{line_of_key, Locator};
use super::*;
use crate::identity::{IdentityPolicy, Source};

mod admission;
mod cluster;
mod oidc;
mod rooms;
mod rules;
mod server;
mod sinks;
mod upstream;

pub(super) fn parse(text: &str, path: &Path, host: &dyn Host) -> Result<Config, ConfigErrors> {
    // Unknown keys do not stop the parse: each is reported, and what did parse is validated
    // too, so one run lists every problem of the file.
    let mut unknown = Vec::new();
    let parsed =
        serde_ignored::deserialize(toml::Deserializer::new(text), |p| unknown.push(dotted(&p)));
    let mut v = Validator {
        host,
        locator: std::cell::OnceCell::new(),
        text,
        path,
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        errors: Vec::new(),
    };
    for key in unknown {
        let field = key.rsplit(['.', '[']).next().unwrap_or(&key).to_owned();
        let message = match super::suggest::did_you_mean(&key) {
            Some(known) => format!("unknown field `{field}`; did you mean `{known}`?"),
            None => format!("unknown field `{field}`"),
        };
        v.err(key, message);
    }
    let file: FileConfig = match parsed {
        Ok(file) => file,
        Err(e) => {
            v.errors.push(from_toml(path, text, &e, false));
            return Err(ConfigErrors(v.errors));
        }
    };
    let config = v.config(file);
    if v.errors.is_empty() {
        if let Some(config) = config {
            return Ok(config);
        }
    }
    Err(ConfigErrors(v.errors))
}

/// A key path as errors name it: `room[0].allow_percent`.
fn dotted(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", dotted(parent)),
        Path::Map { parent, key } => match dotted(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => dotted(parent),
    }
}

struct Validator<'a> {
    /// The files, folders and names the config refers to.
    host: &'a dyn Host,
    /// Parsed on the first error only: a good file is never parsed twice.
    locator: std::cell::OnceCell<Locator<'a>>,
    text: &'a str,
    path: &'a Path,
    dir: PathBuf,
    errors: Vec<ConfigError>,
}

impl Validator<'_> {
    fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        let text = self.text;
        let line = self.locator.get_or_init(|| Locator::new(text)).line(&key);
        self.errors
            .push(ConfigError::new(self.path, Some(key), message).at_line(line));
    }

    fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir.join(p)
        }
    }

    fn config(&mut self, file: FileConfig) -> Option<Config> {
        let server = self.server(&file);
        let admin = self.admin(&file);
        let identity = self.identity(&file);
        let upstream = match &file.upstream {
            Some(u) => self.upstream(u),
            None => {
                self.err(
                    "upstream.peers",
                    "is required: the origin servers to protect, e.g. [\"127.0.0.1:8000\"]",
                );
                None
            }
        };
        let rooms = self.rooms(&file.room);
        let rate_limits = self.rules(&file.rate_limit);
        let log = self.log(&file);
        let cluster = self.cluster(&file);
        let tls = self.tls(&file);
        let jwt = self.jwt(&file.jwt);
        let oidc = server
            .as_ref()
            .and_then(|s| self.oidc(&file.oidc, &s.api_prefix, &rooms));
        let sinks = self.sinks(&file, &rooms, &cluster);
        let keys_file = self.resolve(&file.keys.file);
        if file.keys.file.trim().is_empty() {
            self.err("keys.file", "must name the key ring file");
        }
        Some(Config {
            path: self.path.to_path_buf(),
            server: server?,
            admin: admin?,
            identity: identity?,
            upstream: upstream?,
            keys_file,
            rooms,
            rate_limits,
            log: log?,
            cluster,
            tls,
            jwt,
            oidc,
            sinks,
        })
    }

    /// `[jwt]`.
    fn jwt(&mut self, j: &super::file::JwtFile) -> JwtConfig {
        if j.issuer.is_empty() || j.issuer.len() > 256 || j.issuer.chars().any(char::is_control) {
            self.err(
                "jwt.issuer",
                "must be 1 to 256 characters, without control characters",
            );
        }
        JwtConfig {
            issuer: j.issuer.clone(),
        }
    }

    fn socket_addr(&mut self, key: String, value: &str) -> Option<SocketAddr> {
        match value.trim().parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.err(
                    key,
                    format!("\"{value}\" is not an address like \"0.0.0.0:8080\" or \"[::]:8080\""),
                );
                None
            }
        }
    }

    fn cidrs(&mut self, key: &str, values: &[String]) -> Vec<IpNet> {
        let mut out = Vec::new();
        for (i, value) in values.iter().enumerate() {
            let v = value.trim();
            let parsed = v
                .parse::<IpNet>()
                .or_else(|_| v.parse::<std::net::IpAddr>().map(IpNet::from));
            match parsed {
                // Store networks in canonical form (host bits cleared, mapped IPv6 as IPv4).
                Ok(net) => out.push(canonical_net(net)),
                Err(_) => self.err(
                    format!("{key}[{i}]"),
                    format!("\"{value}\" is not a CIDR like \"10.0.0.0/8\" or an address"),
                ),
            }
        }
        out
    }

    /// Path prefixes, in the normalised form request paths are matched in (`crate::path`).
    fn prefixes(&mut self, key: &str, values: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(values.len());
        for (i, p) in values.iter().enumerate() {
            if !p.starts_with('/') {
                self.err(
                    format!("{key}[{i}]"),
                    format!("\"{p}\" must start with '/'"),
                );
            }
            // Requests are matched with their `;` parameters dropped, so a prefix holding one
            // would never match.
            if p.contains(';') || p.to_ascii_lowercase().contains("%3b") {
                self.err(
                    format!("{key}[{i}]"),
                    format!(
                        "\"{p}\" holds a ';' parameter, which request paths are matched without"
                    ),
                );
                continue;
            }
            match crate::path::normalize(p) {
                Ok(normal) => out.push(normal.as_str().to_owned()),
                Err(e) => self.err(
                    format!("{key}[{i}]"),
                    format!("\"{}\": {e}", p.escape_debug()),
                ),
            }
        }
        out
    }
}

/// Why the admin endpoint on `listen` cannot go without a token, if it cannot.
fn admin_token_missing(listen: SocketAddr, has_operators: bool) -> Option<String> {
    (!listen.ip().is_loopback() && !has_operators).then(|| {
        format!(
            "is required because admin.listen ({listen}) is not a loopback address \
             (write it here, keep it in a file named by admin.token_file, or name \
             admin.operators)"
        )
    })
}

/// Checks of a config as it will run after a reload: the restart-only settings of the config
/// in service (sockets already open) with everything else from the new file. A reload must not
/// apply an edit that is only safe together with a socket change it cannot make.
pub(super) fn check_as_run(config: &Config, host: &dyn Host) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    if let Some(message) =
        admin_token_missing(config.admin.listen, !config.admin.operators.is_empty())
    {
        let text = host.read(&config.path).unwrap_or_default();
        errors.push(
            ConfigError::new(
                &config.path,
                Some("admin.token".to_owned()),
                format!("{message} (the listener in service until a restart)"),
            )
            .at_line(line_of_key(&text, "admin.token")),
        );
    }
    errors
}

fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) => {
            if let Some(v4) = v6.addr().to_ipv4_mapped() {
                if v6.prefix_len() >= 96 {
                    if let Ok(n) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96) {
                        return IpNet::V4(n.trunc());
                    }
                }
            }
            IpNet::V6(v6.trunc())
        }
        IpNet::V4(v4) => IpNet::V4(v4.trunc()),
    }
}

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// RFC 6265 cookie-name: an HTTP token.
fn is_cookie_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
