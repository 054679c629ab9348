//! `[server]`, `[tls]`, `[admin]`, `[identity]` and `[log]`: the listeners and the process.

use super::*;

/// The largest `h2_reset_per_connection` / `h2_reset_per_client`.
const MAX_RESET_BUDGET: i64 = 1_000_000;

impl Validator<'_> {
    pub(super) fn server(&mut self, file: &FileConfig) -> Option<ServerConfig> {
        let s = &file.server;
        let mut listen = Vec::new();
        if s.listen.is_empty() {
            self.err("server.listen", "needs at least one address");
        }
        for (i, l) in s.listen.iter().enumerate() {
            if let Some(a) = self.socket_addr(format!("server.listen[{i}]"), l) {
                listen.push(a);
            }
        }
        if s.threads == 0 || s.threads > MAX_THREADS {
            self.err(
                "server.threads",
                format!("must be between 1 and {MAX_THREADS}, got {}", s.threads),
            );
        }
        if s.pid_file.trim().is_empty() {
            self.err("server.pid_file", "must not be empty");
        }
        if s.upgrade_sock.trim().is_empty() {
            self.err("server.upgrade_sock", "must not be empty");
        }
        if s.graceful_shutdown > Duration::from_secs(3600) {
            self.err("server.graceful_shutdown", "must be at most 1h");
        }
        for (key, d) in [
            ("server.keepalive_timeout", s.keepalive_timeout),
            ("server.header_timeout", s.header_timeout),
        ] {
            if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
                self.err(key, "must be between 1s and 1h");
            }
        }
        let mut tls_listen = Vec::new();
        for (i, l) in s.tls_listen.iter().enumerate() {
            if let Some(a) = self.socket_addr(format!("server.tls_listen[{i}]"), l) {
                if listen.contains(&a) {
                    self.err(
                        format!("server.tls_listen[{i}]"),
                        format!("{a} is also in server.listen"),
                    );
                }
                tls_listen.push(a);
            }
        }
        if s.redirect_to_https && s.tls_listen.is_empty() {
            self.err(
                "server.redirect_to_https",
                "needs server.tls_listen: there is no https listener to redirect to",
            );
        }
        // A folder that is missing serves the built-in pages, with a warning (see the snapshot).
        let pages = s.pages.as_deref().map(|p| self.resolve(p));
        let h2_resets = self.reset_budget(s);
        let api_prefix = self.api_prefix(&s.api_prefix);
        let api_cors_origins = self.cors_origins(&s.api_cors_origins);
        Some(ServerConfig {
            listen,
            threads: s.threads,
            pid_file: PathBuf::from(&s.pid_file),
            upgrade_sock: PathBuf::from(&s.upgrade_sock),
            graceful_shutdown: s.graceful_shutdown,
            work_stealing: s.work_stealing,
            keepalive_timeout: s.keepalive_timeout,
            header_timeout: s.header_timeout,
            pages,
            proxy_protocol: s.proxy_protocol,
            tls_listen,
            h2c: s.h2c,
            redirect_to_https: s.redirect_to_https,
            h2_resets,
            bypass_acme_challenge: s.bypass_acme_challenge,
            api_prefix,
            api_cors_origins,
            max_streams: s.max_streams,
        })
    }

    /// `server.api_prefix`: a path of its own, like `/.vestibule`, matched as request paths are
    /// (normalised, without a trailing `/`).
    fn api_prefix(&mut self, p: &str) -> String {
        let key = "server.api_prefix";
        let ok = p.len() >= 2
            && p.len() <= 64
            && p.starts_with('/')
            && !p.ends_with('/')
            && !p.contains("//")
            && p[1..].split('/').all(|seg| seg != "." && seg != "..")
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-~".contains(&b));
        if !ok {
            self.err(
                key,
                format!(
                    "\"{p}\" must be a path like \"/.vestibule\": it starts with '/', does not end \
                     with one, and holds letters, digits and . _ - ~ only"
                ),
            );
        }
        p.to_owned()
    }

    /// `server.api_cors_origins`: `"*"`, or origins like `"https://shop.example"`.
    fn cors_origins(&mut self, origins: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, o) in origins.iter().enumerate() {
            let key = format!("server.api_cors_origins[{i}]");
            if o == "*" {
                out.push(o.clone());
                continue;
            }
            let host = o
                .strip_prefix("https://")
                .or_else(|| o.strip_prefix("http://"));
            let ok = host.is_some_and(|h| {
                !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
            });
            if ok {
                out.push(o.to_ascii_lowercase());
            } else {
                self.err(
                    key,
                    format!(
                        "\"{o}\" is not \"*\" or an origin like \"https://shop.example\" (no path)"
                    ),
                );
            }
        }
        out
    }

    /// The `h2_reset_*` keys of `[server]`.
    fn reset_budget(&mut self, s: &super::file::ServerFile) -> ResetBudget {
        let per_connection =
            self.reset_count("server.h2_reset_per_connection", s.h2_reset_per_connection);
        let per_client = self.reset_count("server.h2_reset_per_client", s.h2_reset_per_client);
        for (key, d, min) in [
            (
                "server.h2_reset_window",
                s.h2_reset_window,
                Duration::from_secs(1),
            ),
            (
                "server.h2_reset_penalty",
                s.h2_reset_penalty,
                Duration::from_secs(1),
            ),
            (
                "server.h2_reset_within",
                s.h2_reset_within,
                Duration::from_millis(10),
            ),
        ] {
            if d < min || d > Duration::from_secs(3600) {
                self.err(
                    key,
                    format!("must be between {} and 1h", humantime::format_duration(min)),
                );
            }
        }
        ResetBudget {
            per_connection,
            per_client,
            window: s.h2_reset_window,
            penalty: s.h2_reset_penalty,
            within: s.h2_reset_within,
        }
    }

    fn reset_count(&mut self, key: &str, n: i64) -> u32 {
        if !(0..=MAX_RESET_BUDGET).contains(&n) {
            self.err(
                key,
                format!("must be between 0 (no limit) and {MAX_RESET_BUDGET}, got {n}"),
            );
        }
        n.clamp(0, MAX_RESET_BUDGET) as u32
    }

    pub(super) fn tls(&mut self, file: &FileConfig) -> TlsConfig {
        let t = &file.tls;
        let min_version = match t.min_version.as_str() {
            "1.2" => TlsVersion::Tls12,
            "1.3" => TlsVersion::Tls13,
            other => {
                self.err(
                    "tls.min_version",
                    format!("must be \"1.2\" or \"1.3\", got \"{other}\""),
                );
                TlsVersion::Tls12
            }
        };
        let mut certificates = Vec::new();
        for (i, c) in t.certificates.iter().enumerate() {
            for (what, p) in [("cert", &c.cert), ("key", &c.key)] {
                if p.trim().is_empty() {
                    self.err(
                        format!("tls.certificates[{i}].{what}"),
                        "must name a PEM file",
                    );
                }
            }
            certificates.push(CertificatePaths {
                cert: self.resolve(&c.cert),
                key: self.resolve(&c.key),
            });
        }
        if !file.server.tls_listen.is_empty() && t.certificates.is_empty() {
            self.err(
                "tls.certificates",
                "needs at least one { cert, key } pair: server.tls_listen is set",
            );
        }
        TlsConfig {
            certificates,
            min_version,
        }
    }

    pub(super) fn admin(&mut self, file: &FileConfig) -> Option<AdminConfig> {
        let listen = self.socket_addr("admin.listen".into(), &file.admin.listen)?;
        let (token, token_file) = self.admin_token(file);
        let operators = self.operators(file, token.as_deref());
        if let Some(message) = admin_token_missing(listen, !operators.is_empty()) {
            self.err("admin.token", message);
        }
        if token.as_ref().is_some_and(|t| t.len() < 16) {
            let key = if token_file.is_some() {
                "admin.token_file"
            } else {
                "admin.token"
            };
            self.err(key, "must be at least 16 characters");
        }
        let state_file = file.admin.state_file.trim();
        if state_file.is_empty() {
            self.err(
                "admin.state_file",
                "must name a file (operator actions are kept in it)",
            );
        }
        let state_file = self.resolve(state_file);
        let audit_file = file.admin.audit_file.trim();
        if audit_file.is_empty() {
            self.err(
                "admin.audit_file",
                "must name a file (every operator action is recorded in it)",
            );
        }
        let audit_file = self.resolve(audit_file);
        let history_dir = file.admin.history_dir.trim();
        let history_dir = (!history_dir.is_empty()).then(|| self.resolve(history_dir));
        if !(1..=3660).contains(&file.admin.history_days) {
            self.err(
                "admin.history_days",
                "must be 1 to 3660 (days of per-minute history kept)",
            );
        }
        let max_history_bytes = match parse_bytes(&file.admin.max_history_bytes) {
            Some(b) if b >= MIN_HISTORY_BYTES => b,
            _ => {
                self.err(
                    "admin.max_history_bytes",
                    format!(
                        "must be a size of at least 1MiB, such as \"1GiB\" or \"500MB\" (got {:?})",
                        file.admin.max_history_bytes
                    ),
                );
                0
            }
        };
        Some(AdminConfig {
            listen,
            token,
            token_file,
            state_file,
            operators,
            audit_file,
            cookie_secure: file.admin.cookie_secure,
            history_dir,
            history_days: file.admin.history_days,
            max_history_bytes,
        })
    }

    /// The named operators, then the plain token as an operator named `admin`.
    fn operators(&mut self, file: &FileConfig, token: Option<&str>) -> Vec<Operator> {
        use sha2::Digest;
        let mut out: Vec<Operator> = Vec::new();
        for (i, o) in file.admin.operators.iter().enumerate() {
            let k = |field: &str| format!("admin.operators[{i}].{field}");
            let name = o.name.trim();
            let name_ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c));
            if !name_ok {
                self.err(
                    k("name"),
                    "must be 1 to 64 letters, digits or . _ @ - (it is shown in the audit log)",
                );
                continue;
            }
            if out.iter().any(|p| p.name == name) {
                self.err(k("name"), format!("\"{name}\" is named twice"));
                continue;
            }
            if name == "admin" && token.is_some() {
                self.err(
                    k("name"),
                    "\"admin\" is the operator of admin.token: choose another name",
                );
                continue;
            }
            let hex = o.token_sha256.trim();
            let mut hash = [0u8; 32];
            let parsed = hex.len() == 64
                && hex.is_ascii()
                && (0..32).all(|j| match u8::from_str_radix(&hex[2 * j..2 * j + 2], 16) {
                    Ok(b) => {
                        hash[j] = b;
                        true
                    }
                    Err(_) => false,
                });
            if !parsed {
                self.err(
                    k("token_sha256"),
                    "must be 64 hex digits: the SHA-256 of the operator's token \
                     (printf %s \"$TOKEN\" | sha256sum)",
                );
                continue;
            }
            let role = match o.role.as_str() {
                "operator" => Role::Operator,
                "viewer" => Role::Viewer,
                other => {
                    self.err(
                        k("role"),
                        format!(
                            "must be \"operator\" or \"viewer\", got \"{}\"",
                            other.escape_debug()
                        ),
                    );
                    continue;
                }
            };
            if out.iter().any(|p| p.token_sha256 == hash) {
                self.err(
                    k("token_sha256"),
                    "is another operator's token: every operator needs a token of their own",
                );
                continue;
            }
            out.push(Operator {
                name: name.to_owned(),
                token_sha256: hash,
                role,
            });
        }
        if let Some(token) = token {
            out.push(Operator {
                name: "admin".into(),
                token_sha256: sha2::Sha256::digest(token.as_bytes()).into(),
                role: Role::Operator,
            });
        }
        out
    }

    /// The admin token, written in the config (`token`) or kept in a file of its own
    /// (`token_file`: a Docker or Kubernetes secret, say), never both. The file's content is
    /// trimmed, so the newline an editor or `echo` adds is not part of the token.
    fn admin_token(&mut self, file: &FileConfig) -> (Option<String>, Option<PathBuf>) {
        let written = Some(file.admin.token.clone()).filter(|t| !t.is_empty());
        let path = file.admin.token_file.trim();
        if path.is_empty() {
            return (written, None);
        }
        if written.is_some() {
            self.err(
                "admin.token_file",
                "cannot be set together with admin.token: keep the token in one place",
            );
            return (written, None);
        }
        let path = self.resolve(path);
        match self.host.read(&path) {
            Ok(text) if text.trim().is_empty() => {
                self.err("admin.token_file", format!("{} is empty", path.display()));
                (None, Some(path))
            }
            Ok(text) => (Some(text.trim().to_owned()), Some(path)),
            Err(e) => {
                self.err(
                    "admin.token_file",
                    format!("cannot read {}: {e}", path.display()),
                );
                (None, Some(path))
            }
        }
    }

    pub(super) fn identity(&mut self, file: &FileConfig) -> Option<IdentityPolicy> {
        let i = &file.identity;
        let source = match i.source.as_str() {
            "client_ip" => Source::ClientIp,
            "header" => match http::HeaderName::from_bytes(i.header.trim().as_bytes()) {
                Ok(name) => Source::Header(name),
                Err(_) => {
                    self.err(
                        "identity.header",
                        format!("\"{}\" is not a valid header name", i.header),
                    );
                    return None;
                }
            },
            other => {
                self.err(
                    "identity.source",
                    format!("must be \"client_ip\" or \"header\", got \"{other}\""),
                );
                return None;
            }
        };
        if !(8..=128).contains(&i.ipv6_prefix) {
            self.err(
                "identity.ipv6_prefix",
                format!("must be between 8 and 128, got {}", i.ipv6_prefix),
            );
        }
        let trusted_proxies = self.cidrs("identity.trusted_proxies", &i.trusted_proxies);
        if matches!(source, Source::Header(_)) && i.trusted_proxies.is_empty() {
            self.err(
                "identity.source",
                format!(
                    "\"header\" needs identity.trusted_proxies: the {} header is believed only from a trusted proxy, and with none anyone could choose their identity",
                    i.header.trim()
                ),
            );
        }
        Some(IdentityPolicy {
            source,
            ipv6_prefix: i.ipv6_prefix,
            trusted_proxies,
        })
    }

    pub(super) fn log(&mut self, file: &FileConfig) -> Option<LogConfig> {
        let level = match file.log.level.parse::<log::LevelFilter>() {
            Ok(l) => l,
            Err(_) => {
                self.err(
                    "log.level",
                    format!(
                        "must be one of off, error, warn, info, debug, trace; got \"{}\"",
                        file.log.level
                    ),
                );
                log::LevelFilter::Info
            }
        };
        let format = match file.log.format.as_str() {
            "plain" => LogFormat::Plain,
            "json" => LogFormat::Json,
            other => {
                self.err(
                    "log.format",
                    format!("must be \"plain\" or \"json\", got \"{other}\""),
                );
                LogFormat::Plain
            }
        };
        Some(LogConfig {
            level,
            format,
            access: file.log.access,
        })
    }
}

/// The least `admin.max_history_bytes`: a day of a few rooms' minutes.
const MIN_HISTORY_BYTES: u64 = 1 << 20;

/// A size: a whole number of bytes, or one with a unit (`B`, `KB`, `MB`, `GB`, `TB` in powers
/// of 1000; `KiB`, `MiB`, `GiB`, `TiB` in powers of 1024), a space between them allowed.
pub(crate) fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(scale)
}
