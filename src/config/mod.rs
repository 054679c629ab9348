//! The configuration, as the edge reads it: the core's [`Config`] and its parser
//! (`vestibule_core::config`), given the real machine to ask about the files, folders and names
//! a config refers to ([`System`]), and Pingora's server settings derived from it.

#[cfg(test)]
mod documented;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

pub use vestibule_core::config::*;

/// The machine vestibule runs on, as the config parser sees it: files from the file system,
/// peer names from the system resolver (DNS), and the Redis client's word on a store URL.
pub struct System;

impl Host for System {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn read_bytes(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn resolve(&self, name: &str) -> std::io::Result<Vec<SocketAddr>> {
        name.to_socket_addrs().map(|a| a.collect())
    }

    fn check_store_url(&self, url: &str) -> Result<(), String> {
        redis::Client::open(url)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// [`System`], except that peers must be literal addresses: nothing touches the network (for
/// fuzzing and tools).
pub struct Offline;

impl Host for Offline {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        System.read(path)
    }

    fn read_bytes(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        System.read_bytes(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        System.is_dir(path)
    }

    fn resolve(&self, name: &str) -> std::io::Result<Vec<SocketAddr>> {
        literal_address(name)
    }

    fn check_store_url(&self, url: &str) -> Result<(), String> {
        System.check_store_url(url)
    }
}

/// Reads and validates the config file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(path, None, format!("cannot read the config file: {e}")))?;
    parse(&text, path)
}

/// Validates a config text; `path` labels errors and anchors relative paths.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
    Config::parse(text, path, &System)
}

/// As [`parse`], but never touching the network: peers must be literal addresses.
pub fn parse_offline(text: &str, path: &Path) -> Result<Config, ConfigErrors> {
    Config::parse(text, path, &Offline)
}

/// This machine's host name, when it has one (a cluster node's default name).
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// Pingora's server settings, derived from ours.
pub(crate) fn pingora_conf(config: &Config) -> pingora::server::configuration::ServerConf {
    let mut conf = pingora::server::configuration::ServerConf {
        threads: config.server.threads,
        pid_file: config.server.pid_file.to_string_lossy().into_owned(),
        upgrade_sock: config.server.upgrade_sock.to_string_lossy().into_owned(),
        ..Default::default()
    };
    // Pingora sleeps the whole grace period, then gives runtimes the shutdown timeout, and
    // exiting takes a moment more: split `graceful_shutdown` so the process is gone within
    // it. In-flight requests keep running through the grace period.
    let total = config.server.graceful_shutdown.as_secs();
    let timeout = total.min(1);
    let slack = u64::from(total >= 3);
    conf.grace_period_seconds = Some(total - timeout - slack);
    conf.graceful_shutdown_timeout_seconds = Some(timeout);
    conf.work_stealing = config.server.work_stealing;
    // Pingora's timeouts of a second or more (an origin's reads and writes, above all) go on
    // the worker's own Tokio timer wheel, not on Pingora's shared 10 ms ticks: a timeout
    // that is cancelled (an answer that came in time, nearly always) leaves the wheel at
    // once, where a tick's timer stayed until it expired (`read_timeout`, 30 s, after the
    // request), and no clock thread wakes every 10 ms to take each worker's timer lock
    // (docs/src/performance.md).
    conf.fast_timeout_to_tokio_threshold_seconds = Some(0);
    // Pingora's default (128) is below the concurrency of a busy edge: once more
    // connections are in flight than the pool holds, released ones are closed and the next
    // requests open new ones (docs/src/performance.md).
    conf.upstream_keepalive_pool_size = config.upstream.keepalive_pool_size;
    conf.ca_file = config
        .upstream
        .ca_file
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned());
    conf
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[upstream]\npeers = [\"127.0.0.1:8000\"]\n";

    fn parse_offline(text: &str) -> Result<Config, ConfigErrors> {
        super::parse_offline(text, Path::new("/etc/vestibule/vestibule.toml"))
    }

    #[test]
    fn pingora_conf_bounds_shutdown() {
        let c = parse_offline(&format!(
            "{MINIMAL}[server]\ngraceful_shutdown = \"3s\"\nthreads = 4\n"
        ))
        .unwrap();
        let p = pingora_conf(&c);
        assert_eq!(p.threads, 4);
        assert_eq!(p.grace_period_seconds, Some(1));
        assert_eq!(p.graceful_shutdown_timeout_seconds, Some(1));
        assert_eq!(p.pid_file, "/tmp/vestibule.pid");
        // Timeouts of 1 s and more on Tokio's timer wheel.
        assert_eq!(p.fast_timeout_to_tokio_threshold_seconds, Some(0));
        let c = parse_offline(&format!("{MINIMAL}[server]\ngraceful_shutdown = \"0s\"\n")).unwrap();
        assert_eq!(pingora_conf(&c).grace_period_seconds, Some(0));
    }

    /// The machine's own answers: the system resolver, and the Redis client's word on a URL.
    #[test]
    fn the_system_host_resolves_names_and_asks_the_redis_client() {
        let path = Path::new("/etc/vestibule/vestibule.toml");
        let e = parse("[upstream]\npeers = [\"no-such-host.invalid:80\"]\n", path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("upstream.peers[0]: cannot resolve \"no-such-host.invalid:80\""),
            "{e}"
        );
        let cluster = |url: &str| {
            parse(
                &format!("{MINIMAL}[cluster]\nstore = \"redis\"\nredis = [\"{url}\"]\n"),
                path,
            )
        };
        let e = cluster("http://x").unwrap_err().to_string();
        assert!(
            e.contains("cluster.redis[0]: is not a Redis URL like"),
            "{e}"
        );
        for url in ["redis://10.0.0.5:6379/1", "valkey://a:6379"] {
            assert!(cluster(url).is_ok(), "{url}");
        }
        // An offline parse still asks the Redis client, and refuses names.
        let e = parse_offline("[upstream]\npeers = [\"origin.example:80\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("host names are not resolved offline"), "{e}");
    }
}
