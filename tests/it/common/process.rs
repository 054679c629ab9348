//! Child processes stopped by pid ([`Proc`]), starting the binary under test, running its
//! CLI, and a process's resident memory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

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
