//! What changed between two configs, in words for the reload log, and which changes need new
//! sockets (a restart). Never prints a secret: the admin token shows as "changed".

use std::fmt::Debug;

use super::sinks::Destination;
use super::{Admission, Algorithm, Config, HostPattern, RoomConfig, RuleConfig};

/// Settings that only take effect on restart (they shape sockets and runtimes), as
/// `(key, old, new)`.
pub(crate) fn needs_restart(old: &Config, new: &Config) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    let mut check = |key: &'static str, a: String, b: String| {
        if a != b {
            out.push((key, a, b));
        }
    };
    check(
        "server.listen",
        list(&old.server.listen),
        list(&new.server.listen),
    );
    check(
        "server.tls_listen",
        list(&old.server.tls_listen),
        list(&new.server.tls_listen),
    );
    check(
        "server.h2c",
        old.server.h2c.to_string(),
        new.server.h2c.to_string(),
    );
    check(
        "server.threads",
        old.server.threads.to_string(),
        new.server.threads.to_string(),
    );
    check(
        "server.work_stealing",
        old.server.work_stealing.to_string(),
        new.server.work_stealing.to_string(),
    );
    check(
        "server.pid_file",
        old.server.pid_file.display().to_string(),
        new.server.pid_file.display().to_string(),
    );
    check(
        "server.upgrade_sock",
        old.server.upgrade_sock.display().to_string(),
        new.server.upgrade_sock.display().to_string(),
    );
    check(
        "server.graceful_shutdown",
        duration(old.server.graceful_shutdown),
        duration(new.server.graceful_shutdown),
    );
    check(
        "admin.listen",
        old.admin.listen.to_string(),
        new.admin.listen.to_string(),
    );
    check(
        "upstream.keepalive_pool_size",
        old.upstream.keepalive_pool_size.to_string(),
        new.upstream.keepalive_pool_size.to_string(),
    );
    check(
        "upstream.ca_file",
        format!("{:?}", old.upstream.ca_file),
        format!("{:?}", new.upstream.ca_file),
    );
    check(
        "cluster",
        format!("{:?}", old.cluster),
        format!("{:?}", new.cluster),
    );
    // The secrets' `Debug` hides them, and a webhook's URL shows only where it goes: a new key
    // in the same file, or a new token in a URL's path, shows as no change here, so it is
    // named apart, unshown.
    check(
        "events.sink",
        format!("{:?}", old.sinks),
        format!("{:?}", new.sinks),
    );
    if old.sinks.len() == new.sinks.len()
        && old
            .sinks
            .iter()
            .zip(&new.sinks)
            .any(|(a, b)| a.destination != b.destination)
        && format!("{:?}", old.sinks) == format!("{:?}", new.sinks)
    {
        let hook = |d: &Destination| match d {
            Destination::Webhook { url, secret, .. } => Some((url.clone(), secret.clone())),
            _ => None,
        };
        let pairs = || {
            old.sinks
                .iter()
                .zip(&new.sinks)
                .map(|(a, b)| (hook(&a.destination), hook(&b.destination)))
        };
        let new_url = pairs().any(|(a, b)| a.map(|h| h.0) != b.map(|h| h.0));
        let new_key = pairs().any(|(a, b)| a.map(|h| h.1) != b.map(|h| h.1));
        if new_url {
            check(
                "events.sink url",
                "(a URL)".into(),
                "(a new path or query)".into(),
            );
        }
        if new_key || !new_url {
            check(
                "events.sink secret_file",
                "(a key)".into(),
                "(a new key)".into(),
            );
        }
    }
    out
}

/// Keeps the restart-only settings of `serving` in `new`, so the config in service describes
/// the sockets actually open.
pub(crate) fn keep_restart_settings(new: &mut Config, serving: &Config) {
    new.server.listen = serving.server.listen.clone();
    new.server.tls_listen = serving.server.tls_listen.clone();
    new.server.h2c = serving.server.h2c;
    new.server.threads = serving.server.threads;
    new.server.work_stealing = serving.server.work_stealing;
    new.server.pid_file = serving.server.pid_file.clone();
    new.server.upgrade_sock = serving.server.upgrade_sock.clone();
    new.server.graceful_shutdown = serving.server.graceful_shutdown;
    new.admin.listen = serving.admin.listen;
    new.upstream.ca_file = serving.upstream.ca_file.clone();
    new.upstream.keepalive_pool_size = serving.upstream.keepalive_pool_size;
    new.cluster = serving.cluster.clone();
    new.sinks = serving.sinks.clone();
}

/// One line per changed setting, e.g. `room default: allow_percentage 50 -> 80`.
pub fn describe(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    diff_fields(
        "identity",
        &identity_fields(old),
        &identity_fields(new),
        &mut out,
    );
    diff_fields(
        "upstream",
        &upstream_fields(old),
        &upstream_fields(new),
        &mut out,
    );
    diff_fields("log", &log_fields(old), &log_fields(new), &mut out);
    diff_fields("server", &server_fields(old), &server_fields(new), &mut out);
    diff_fields("tls", &tls_fields(old), &tls_fields(new), &mut out);
    diff_fields(
        "jwt",
        &vec![("issuer", format!("{:?}", old.jwt.issuer))],
        &vec![("issuer", format!("{:?}", new.jwt.issuer))],
        &mut out,
    );
    diff_oidc(old, new, &mut out);
    if old.admin.token != new.admin.token {
        out.push("admin: token changed".into());
    }
    let named = |c: &Config| -> Vec<String> {
        c.admin
            .operators
            .iter()
            .filter(|o| !(o.name == "admin" && c.admin.token.is_some()))
            .map(|o| format!("{} ({})", o.name, o.role.as_str()))
            .collect()
    };
    let (was, now) = (named(old), named(new));
    for o in now.iter().filter(|o| !was.contains(o)) {
        out.push(format!("admin: operator {o} added"));
    }
    for o in was.iter().filter(|o| !now.contains(o)) {
        out.push(format!("admin: operator {o} removed"));
    }
    let tokens = |c: &Config| -> Vec<(String, [u8; 32])> {
        c.admin
            .operators
            .iter()
            .map(|o| (o.name.clone(), o.token_sha256))
            .collect()
    };
    for (name, hash) in tokens(new) {
        if name == "admin" && new.admin.token.is_some() {
            continue;
        }
        if tokens(old).iter().any(|(n, h)| *n == name && *h != hash) {
            out.push(format!("admin: operator {name}'s token changed"));
        }
    }
    if old.admin.audit_file != new.admin.audit_file {
        out.push(format!(
            "admin: audit_file {} -> {}",
            old.admin.audit_file.display(),
            new.admin.audit_file.display()
        ));
    }
    if old.admin.history_dir != new.admin.history_dir
        || old.admin.history_days != new.admin.history_days
        || old.admin.max_history_bytes != new.admin.max_history_bytes
    {
        out.push(format!(
            "admin: history {:?} ({} days, {} bytes) -> {:?} ({} days, {} bytes)",
            old.admin.history_dir,
            old.admin.history_days,
            old.admin.max_history_bytes,
            new.admin.history_dir,
            new.admin.history_days,
            new.admin.max_history_bytes
        ));
    }
    if old.admin.cookie_secure != new.admin.cookie_secure {
        out.push(format!(
            "admin: cookie_secure {} -> {}",
            old.admin.cookie_secure, new.admin.cookie_secure
        ));
    }
    if old.keys_file != new.keys_file {
        out.push(format!(
            "keys: file {} -> {}",
            old.keys_file.display(),
            new.keys_file.display()
        ));
    }
    diff_named(
        "room",
        &old.rooms,
        &new.rooms,
        |r| r.name.as_str(),
        room_fields,
        &mut out,
    );
    diff_named(
        "rate_limit",
        &old.rate_limits,
        &new.rate_limits,
        |r| r.name.as_str(),
        rule_fields,
        &mut out,
    );
    out
}

type Fields = Vec<(&'static str, String)>;

/// `[oidc]`: its issuer and room, and each client added, removed or changed (a secret only as
/// "changed").
fn diff_oidc(old: &Config, new: &Config, out: &mut Vec<String>) {
    let fields = |c: &Config| -> Fields {
        match &c.oidc {
            Some(o) => vec![
                ("enabled", "true".into()),
                ("issuer", format!("{:?}", o.issuer)),
                ("room", format!("{:?}", o.room)),
            ],
            None => vec![
                ("enabled", "false".into()),
                ("issuer", "-".into()),
                ("room", "-".into()),
            ],
        }
    };
    diff_fields("oidc", &fields(old), &fields(new), out);
    let clients = |c: &Config| c.oidc.as_ref().map_or(&[][..], |o| &o.clients[..]).to_vec();
    let (before, after) = (clients(old), clients(new));
    for n in &after {
        match before.iter().find(|o| o.id == n.id) {
            None => out.push(format!("oidc client {:?}: added", n.id)),
            Some(o) => {
                if o.secret != n.secret {
                    out.push(format!("oidc client {:?}: secret changed", n.id));
                }
                if o.redirect_uris != n.redirect_uris {
                    out.push(format!(
                        "oidc client {:?}: redirect_uris {:?} -> {:?}",
                        n.id, o.redirect_uris, n.redirect_uris
                    ));
                }
            }
        }
    }
    for o in &before {
        if !after.iter().any(|n| n.id == o.id) {
            out.push(format!("oidc client {:?}: removed", o.id));
        }
    }
}

fn diff_fields(prefix: &str, old: &Fields, new: &Fields, out: &mut Vec<String>) {
    for ((name, a), (_, b)) in old.iter().zip(new) {
        if a != b {
            out.push(format!("{prefix}: {name} {a} -> {b}"));
        }
    }
}

fn diff_named<T>(
    section: &str,
    old: &[T],
    new: &[T],
    name: impl Fn(&T) -> &str,
    fields: impl Fn(&T) -> Fields,
    out: &mut Vec<String>,
) {
    for n in new {
        match old.iter().find(|o| name(o) == name(n)) {
            None => out.push(format!("{section} {}: added", name(n))),
            Some(o) => diff_fields(
                &format!("{section} {}", name(n)),
                &fields(o),
                &fields(n),
                out,
            ),
        }
    }
    for o in old {
        if !new.iter().any(|n| name(n) == name(o)) {
            out.push(format!("{section} {}: removed", name(o)));
        }
    }
}

fn list<T: ToString>(items: &[T]) -> String {
    let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

fn debug<T: Debug>(v: &T) -> String {
    format!("{v:?}")
}

fn duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn identity_fields(c: &Config) -> Fields {
    let i = &c.identity;
    vec![
        ("source", debug(&i.source)),
        ("ipv6_prefix", i.ipv6_prefix.to_string()),
        ("trusted_proxies", list(&i.trusted_proxies)),
    ]
}

fn upstream_fields(c: &Config) -> Fields {
    let u = &c.upstream;
    vec![
        (
            "peers",
            list(&u.peers.iter().map(|p| p.name.clone()).collect::<Vec<_>>()),
        ),
        ("tls", u.tls.to_string()),
        ("sni", u.sni.clone()),
        ("connect_timeout", duration(u.connect_timeout)),
        ("read_timeout", duration(u.read_timeout)),
        ("health_check", duration(u.health_check)),
    ]
}

/// The `[server]` settings a reload applies (the others need a restart).
fn server_fields(c: &Config) -> Fields {
    vec![
        ("keepalive_timeout", duration(c.server.keepalive_timeout)),
        ("header_timeout", duration(c.server.header_timeout)),
        ("proxy_protocol", c.server.proxy_protocol.to_string()),
        ("redirect_to_https", c.server.redirect_to_https.to_string()),
        (
            "h2_reset_per_connection",
            c.server.h2_resets.per_connection.to_string(),
        ),
        (
            "h2_reset_per_client",
            c.server.h2_resets.per_client.to_string(),
        ),
        ("h2_reset_window", duration(c.server.h2_resets.window)),
        ("h2_reset_penalty", duration(c.server.h2_resets.penalty)),
        ("h2_reset_within", duration(c.server.h2_resets.within)),
        (
            "bypass_acme_challenge",
            c.server.bypass_acme_challenge.to_string(),
        ),
        ("api_prefix", c.server.api_prefix.clone()),
        ("api_cors_origins", list(&c.server.api_cors_origins)),
        ("max_streams", c.server.max_streams.to_string()),
    ]
}

fn tls_fields(c: &Config) -> Fields {
    let files: Vec<String> = c
        .tls
        .certificates
        .iter()
        .map(|p| p.cert.display().to_string())
        .collect();
    vec![
        ("min_version", c.tls.min_version.as_str().to_owned()),
        ("certificates", format!("[{}]", files.join(", "))),
    ]
}

fn log_fields(c: &Config) -> Fields {
    vec![
        ("level", c.log.level.to_string().to_lowercase()),
        ("format", debug(&c.log.format).to_lowercase()),
        ("access", c.log.access.to_string()),
    ]
}

fn room_fields(r: &RoomConfig) -> Fields {
    let hosts: Vec<String> = r
        .hosts
        .iter()
        .map(|h| match h {
            HostPattern::Exact(h) => h.clone(),
            HostPattern::Suffix(s) => format!("*{s}"),
        })
        .collect();
    let mut f = vec![
        ("enabled", r.enabled.to_string()),
        ("hosts", list(&hosts)),
        ("paths", list(&r.paths)),
        ("bypass_paths", list(&r.bypass_paths)),
        ("bypass_cidrs", list(&r.bypass_cidrs)),
        ("admission", r.admission.method().to_owned()),
        ("cookie_name", r.cookie.name.clone()),
        ("cookie_lifetime", duration(r.cookie.lifetime)),
        (
            "cookie_same_site",
            debug(&r.cookie.same_site).to_lowercase(),
        ),
        ("cookie_secure", debug(&r.cookie.secure).to_lowercase()),
        ("wait_status", r.wait_status.to_string()),
        (
            "pages",
            r.pages
                .as_ref()
                .map_or("(built in)".into(), |p| p.display().to_string()),
        ),
        ("queue_all", r.queue_all.to_string()),
        ("title", format!("{:?}", r.title)),
        ("sold_out", r.sold_out.to_string()),
        (
            "events",
            list(
                &r.events
                    .iter()
                    .map(|e| {
                        use crate::config::event::rfc3339;
                        let pre = e.prequeue_start.map(rfc3339).unwrap_or_default();
                        let draw = match (e.shuffle_at_start, e.draw) {
                            (false, _) => "",
                            (true, crate::config::DrawKind::Keyed) => " shuffled",
                            (true, crate::config::DrawKind::Verifiable) => " verifiable draw",
                        };
                        format!(
                            "{} {pre}|{}..{}{draw}",
                            e.name,
                            rfc3339(e.start),
                            rfc3339(e.end)
                        )
                    })
                    .collect::<Vec<_>>(),
            ),
        ),
        (
            "autopilot",
            r.autopilot.map_or("false".into(), |a| {
                format!(
                    "{}..{} a minute, p95 {}, errors {}, every {}",
                    a.min,
                    a.max,
                    duration(a.target_latency),
                    a.max_error_rate,
                    duration(a.interval)
                )
            }),
        ),
        (
            "challenge",
            r.challenge.map_or("none".into(), |c| {
                format!(
                    "pow, difficulty {}, ttl {}, on failure {}",
                    c.difficulty,
                    duration(c.ttl),
                    c.on_failure.as_str()
                )
            }),
        ),
        ("access", r.access.as_str().to_owned()),
        ("max_invitations", r.max_invitations.to_string()),
        (
            "revoked_invitations",
            format!("{} revoked", r.revoked_invitations.len()),
        ),
        (
            "jwt",
            r.jwt.as_ref().map_or("false".into(), |j| {
                format!("audience {:?}, valid {}", j.audience, duration(j.validity))
            }),
        ),
    ];
    // Method-specific settings line up only when the method is the same; a method change is
    // reported by `admission` above.
    match &r.admission {
        Admission::Lottery {
            allow_percentage,
            wait_period,
            allow_period,
            closed_refresh,
        } => {
            f.push(("allow_percentage", allow_percentage.to_string()));
            f.push(("wait_period", duration(*wait_period)));
            f.push(("allow_period", duration(*allow_period)));
            f.push(("closed_refresh", duration(*closed_refresh)));
        }
        Admission::Capacity(c) => {
            f.push(("new_users_per_minute", c.new_users_per_minute.to_string()));
            f.push(("total_active_users", c.total_active_users.to_string()));
            f.push(("session_duration", duration(c.session_duration)));
            f.push(("refresh", duration(c.refresh)));
            f.push(("rejoin_grace", duration(c.rejoin_grace)));
            let lanes: Vec<String> = c
                .lanes
                .iter()
                .map(|l| format!("{} = {}", l.name, l.weight))
                .collect();
            f.push(("lanes", format!("{{{}}}", lanes.join(", "))));
        }
    }
    f
}

fn rule_fields(r: &RuleConfig) -> Fields {
    let mut f = vec![
        ("key", debug(&r.key)),
        ("paths", list(&r.paths)),
        ("methods", list(&r.methods)),
        ("scope", debug(&r.scope).to_lowercase()),
        ("action", debug(&r.action).to_lowercase()),
        ("bypass_cidrs", list(&r.bypass_cidrs)),
        ("max_keys", r.max_keys.to_string()),
    ];
    match r.algorithm {
        Algorithm::Window {
            window,
            quota,
            penalty,
        } => {
            f.push(("algorithm", "window".into()));
            f.push(("window", duration(window)));
            f.push(("limit", super::window_limit_text(window, quota)));
            f.push(("penalty", duration(penalty)));
        }
        Algorithm::TokenBucket {
            limit,
            period,
            penalty,
        } => {
            f.push(("algorithm", "token_bucket".into()));
            f.push(("limit", limit.to_string()));
            f.push(("period", duration(period)));
            f.push(("penalty", duration(penalty)));
        }
        Algorithm::Concurrency { limit } => {
            f.push(("algorithm", "concurrency".into()));
            f.push(("limit", limit.to_string()));
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(extra: &str) -> Config {
        Config::parse(
            &format!("[upstream]\npeers = [\"127.0.0.1:8000\"]\n{extra}"),
            Path::new("/tmp/v.toml"),
            &crate::config::testing::Bare,
        )
        .unwrap()
    }

    #[test]
    fn describes_field_changes() {
        let old = parse("[[room]]\nallow_percentage = 50\n[[rate_limit]]\nlimit = 100\n");
        let new = parse("[[room]]\nallow_percentage = 80\n[[room]]\nname = \"b\"\ncookie_name = \"b\"\n[[rate_limit]]\nlimit = 200\n[log]\nlevel = \"debug\"\n");
        let lines = describe(&old, &new);
        assert_eq!(
            lines,
            [
                "log: level info -> debug",
                "room default: allow_percentage 50 -> 80",
                "room b: added",
                "rate_limit per-ip: limit 100 -> 200",
            ]
        );
        assert!(describe(&new, &new).is_empty());
        assert_eq!(
            describe(&new, &old)
                .iter()
                .filter(|l| l.ends_with("removed"))
                .count(),
            1
        );
    }

    #[test]
    fn secrets_are_not_printed() {
        let old = parse("[admin]\ntoken = \"aaaaaaaaaaaaaaaaaaaa\"\n");
        let new = parse("[admin]\ntoken = \"bbbbbbbbbbbbbbbbbbbb\"\n");
        let lines = describe(&old, &new).join("\n");
        assert_eq!(lines, "admin: token changed");
    }

    #[test]
    fn oidc_clients_are_named_and_their_secrets_never_printed() {
        let room = "[[room]]\nname = \"sale\"\nadmission = \"fifo\"\nnew_users_per_minute = 5\napi = true\n";
        let oidc = |secret: &str, extra: &str| {
            parse(&format!(
                "{room}[oidc]\nenabled = true\nissuer = \"https://q.example/.vestibule/oidc\"\nroom = \"sale\"\nclients = [{{ id = \"shop\", secret = \"{secret}\", redirect_uris = [\"https://shop.example/cb\"] }}{extra}]\n"
            ))
        };
        let old = oidc("aaaaaaaaaaaaaaaaaaaa", "");
        let new = oidc(
            "bbbbbbbbbbbbbbbbbbbb",
            ", { id = \"app\", secret = \"cccccccccccccccccccc\", redirect_uris = [\"https://app.example/cb\"] }",
        );
        let lines = describe(&old, &new).join("\n");
        assert_eq!(
            lines,
            "oidc client \"shop\": secret changed\noidc client \"app\": added"
        );
        let off = describe(&new, &parse(room)).join("\n");
        assert!(off.contains("oidc: enabled true -> false"), "{off}");
        assert!(!off.contains("cccc") && !lines.contains("bbbb"), "{off}");
    }

    #[test]
    fn restart_settings() {
        let old = parse("");
        let mut new = parse("[server]\nlisten = [\"0.0.0.0:9090\"]\ntls_listen = [\"0.0.0.0:9443\"]\nh2c = true\nthreads = 4\nredirect_to_https = true\n[admin]\nlisten = \"127.0.0.1:9999\"\n[tls]\ncertificates = [{ cert = \"a.pem\", key = \"a.key\" }]\n");
        let keys: Vec<&str> = needs_restart(&old, &new)
            .iter()
            .map(|(k, _, _)| *k)
            .collect();
        // Certificates, min_version and redirect_to_https apply at reload; sockets do not.
        assert_eq!(
            keys,
            [
                "server.listen",
                "server.tls_listen",
                "server.h2c",
                "server.threads",
                "admin.listen"
            ]
        );
        keep_restart_settings(&mut new, &old);
        assert!(needs_restart(&old, &new).is_empty());
    }
}
