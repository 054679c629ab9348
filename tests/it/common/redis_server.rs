//! Real Redis servers for tests: one ([`Redis`]) or a three-shard cluster ([`RedisCluster`]).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::*;

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
