//! `vestibule init DIR`: a first config that needs no guessing.
//!
//! It writes a small working `vestibule.toml` (one titled room, a per-client rate limit, the admin
//! listener on loopback, operator overrides kept beside it), a key ring with a fresh random key,
//! and the built-in pages and catalogs, so an operator can edit what visitors see. Existing files
//! are never overwritten without `force`: a second `init` into a live folder would otherwise
//! replace the key ring and sign every visitor out.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::pages::PageKind;

/// What `init` writes, and where.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// The folder; made if missing.
    pub dir: PathBuf,
    /// The origin, `host:port` (a name is resolved when the config loads).
    pub origin: String,
    /// The proxy's listener.
    pub listen: std::net::SocketAddr,
    /// The admin listener (the console, `/status.html`, `/metrics`); keep it on loopback, or set a token.
    pub admin: std::net::SocketAddr,
    /// What visitors are told they wait for.
    pub title: String,
    /// Overwrite files that exist.
    pub force: bool,
}

/// The default origin: where `vestibule demo` starts its built-in one, so `demo` works with the
/// written config before a real origin exists.
pub const DEFAULT_ORIGIN: &str = "127.0.0.1:8000";

/// Checks `host:port` without resolving it (the config does that when it loads).
pub(crate) fn check_origin(origin: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "--origin: \"{}\" is not host:port (e.g. 127.0.0.1:8000 or app.internal:8080)",
            origin.escape_default()
        )
    };
    if origin.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let (host, port) = origin.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if host_ok && port.parse::<u16>().is_ok_and(|p| p > 0) {
        Ok(())
    } else {
        Err(bad())
    }
}

/// A TOML string literal (quotes and escapes done by the toml crate, so any title is safe).
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The config file `init` writes.
pub fn config_text(opts: &InitOptions) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"# Written by `vestibule init`. Check edits with:  vestibule --check --config <this file>
# Most settings reload on save (or SIGHUP); listen addresses and threads need a restart.
# Every key, with its default and a comment, is in conf/vestibule.toml and the book's
# configuration reference (docs/src/reference/configuration.md). Paths are relative to this
# file's folder.

[server]
listen = [{listen}]                  # where visitors connect (restart to change)

[admin]
listen = {admin}                     # /console /status.html /status /metrics /healthz /readyz; loopback only
                                     # unless `token` is set (16+ characters)
state_file = "state/overrides.json"  # operator actions (pause, message, sold out) survive restarts here

[upstream]
peers = [{origin}]                   # your origin(s), host:port, round robin

[keys]
file = "keys.toml"                   # the key ring; keep it private (0600)

[log]
level = "info"
access = true                        # one line per request

# One waiting room guarding the whole site. It lets in 200 new visitors a minute and at most
# 1000 at once; everyone beyond waits in arrival order on the pages in ./pages.
[[room]]
name = "site"
title = {title}                      # visitors read "<title> is very busy right now"
paths = ["/"]
admission = "fifo"                   # "fifo" (arrival order) | "random" | "lottery"
new_users_per_minute = 200           # 0 = no limit of that kind
total_active_users = 1000            # 0 = no limit of that kind
session_duration = "5m"              # an admitted visitor idle this long makes room for the next
refresh = "20s"                      # waiting pages check in this often
cookie_name = "waiting_room"
pages = "pages"                      # the templates and i18n catalogs; edit them freely

# At most 20 requests a second per client, averaged over 10 s; past it, 429 for a minute.
[[rate_limit]]
name = "per-client"
key = ["client_ip"]
algorithm = "window"
window = "10s"
limit = 20
penalty = "1m"
"#,
        listen = toml_string(&opts.listen.to_string()),
        admin = toml_string(&opts.admin.to_string()),
        origin = toml_string(&opts.origin),
        title = toml_string(&opts.title),
    );
    s
}

/// A key ring holding one fresh key (as `vestibule keygen` prints it).
pub(crate) fn keys_text(id: &str) -> String {
    format!(
        "# The key ring, written by `vestibule init`: every key under [ring] verifies tokens, and\n\
         # `active` signs new ones. Keep this file private (0600).\n\
         # Rotating without a restart: add a key (`vestibule keygen`), point `active` at it, and\n\
         # remove the old one once its tokens have expired.\n\
         active = \"{id}\"\n\n[ring]\n{id} = \"{key}\"\n",
        key = crate::keys::generate()
    )
}

/// Every file `init` writes, relative to the folder, with its contents (the key ring last, so
/// that a failure before it leaves no secret behind).
pub fn files(opts: &InitOptions, key_id: &str) -> Vec<(PathBuf, String)> {
    let mut out = vec![
        (PathBuf::from("vestibule.toml"), config_text(opts)),
        (
            Path::new("pages").join(crate::pages::BASE_FILE),
            crate::pages::BUILTIN_BASE.to_owned(),
        ),
    ];
    for kind in PageKind::ALL {
        out.push((
            Path::new("pages").join(kind.file_name()),
            crate::pages::builtin_source(kind).to_owned(),
        ));
    }
    for (tag, text) in crate::i18n::BUILTIN {
        out.push((
            Path::new("pages/i18n").join(format!("{tag}.toml")),
            text.to_owned(),
        ));
    }
    out.push((PathBuf::from("keys.toml"), keys_text(key_id)));
    out
}

/// Writes the files; returns the config file's path. Refuses, before writing anything, a folder
/// that is not empty unless `force` is set: whatever is there (a config of its own, a key ring)
/// is the operator's, and `init` is for starting out.
pub fn init(opts: &InitOptions, key_id: &str) -> Result<PathBuf, String> {
    check_origin(&opts.origin)?;
    let dir = &opts.dir;
    if dir.exists() && !dir.is_dir() {
        return Err(format!("{} exists and is not a folder", dir.display()));
    }
    let files = files(opts, key_id);
    if !opts.force {
        if let Some(first) = first_entry(dir)? {
            return Err(format!(
                "{} is not empty ({} exists); not writing into it (--force writes anyway and replaces the files init writes, the key ring too, which signs every visitor out)",
                dir.display(),
                first.display()
            ));
        }
    }
    for sub in [dir.clone(), dir.join("pages/i18n"), dir.join("state")] {
        std::fs::create_dir_all(&sub)
            .map_err(|e| format!("cannot create the folder {}: {e}", sub.display()))?;
    }
    for (rel, text) in &files {
        let path = dir.join(rel);
        let secret = rel == Path::new("keys.toml");
        write_file(&path, text.as_bytes(), secret)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(dir.join("vestibule.toml"))
}

/// The first entry of `dir`; none when it is empty or does not exist yet.
fn first_entry(dir: &Path) -> Result<Option<PathBuf>, String> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries
            .next()
            .map(|e| e.map_or_else(|_| dir.to_path_buf(), |e| e.path()))),
        // Nothing there yet (or a file above it, which making the folder will report).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!("cannot read {}: {e}", dir.display())),
    }
}

/// Writes `path`; a secret is created 0600 (never readable by others, even for a moment) and
/// set to 0600 when it already existed with wider modes.
fn write_file(path: &Path, bytes: &[u8], secret: bool) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    f.write_all(bytes)?;
    f.sync_all()
}

/// `path` as a shell word: quoted when it holds anything a shell would read differently.
pub fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    let plain = !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'/' | b'.' | b'_' | b'-' | b'+' | b',' | b':' | b'=')
        });
    if plain {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(dir: &Path) -> InitOptions {
        InitOptions {
            dir: dir.to_path_buf(),
            origin: DEFAULT_ORIGIN.into(),
            listen: "127.0.0.1:1".parse().unwrap(),
            admin: "127.0.0.1:2".parse().unwrap(),
            title: "Tickets \"live\" \\ now".into(),
            force: false,
        }
    }

    #[test]
    fn origins_are_host_and_port() {
        for ok in [
            "127.0.0.1:8000",
            "[::1]:80",
            "app.internal:8080",
            "localhost:1",
        ] {
            assert!(check_origin(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "127.0.0.1",
            ":80",
            "a:0",
            "a:99999",
            "a b:80",
            "a\":80",
            "http://a:80",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_written_config_is_valid_and_titled() {
        let dir = tempfile::tempdir().unwrap();
        let path = init(&opts(dir.path()), "k1").unwrap();
        let config = crate::config::load(&path).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(config.rooms[0].title, "Tickets \"live\" \\ now");
        assert!(config.admin.listen.ip().is_loopback());
        assert!(config.admin.state_file.starts_with(dir.path()));
        crate::keys::load(&dir.path().join("keys.toml")).unwrap();
    }

    #[test]
    fn shell_words_are_quoted_when_needed() {
        assert_eq!(shell_word(Path::new("/tmp/x/v.toml")), "/tmp/x/v.toml");
        assert_eq!(shell_word(Path::new("/tmp/a b/v")), "'/tmp/a b/v'");
        assert_eq!(shell_word(Path::new("it's")), r"'it'\''s'");
    }
}
