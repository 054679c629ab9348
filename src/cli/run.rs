//! Running the proxy: `vestibule` itself, `vestibule demo` and `vestibule origin`.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use vestibule::app::App;
use vestibule::server::{self, RunOptions};
use vestibule::snapshot::Snapshot;

fn start(path: &Path) -> Option<std::sync::Arc<App>> {
    match App::start(path) {
        Ok(app) => Some(app),
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!(
                "vestibule: not started; fix the problems above (`vestibule --check` lists them)"
            );
            None
        }
    }
}

/// Every client connection is a file descriptor: take all the hard limit allows (as nginx's
/// `worker_rlimit_nofile` does), so a flood of connections meets the timeouts, not `EMFILE`.
fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => log::info!("file descriptors: up to {n}"),
        Err(e) => log::warn!("cannot raise the file descriptor limit: {e}"),
    }
}

pub fn run(path: &Path, options: RunOptions) -> ExitCode {
    let Some(app) = start(path) else {
        return ExitCode::FAILURE;
    };
    let snapshot = app.snapshot();
    vestibule::logging::init(&snapshot.config.log);
    raise_fd_limit();
    restore_overrides(&app, &snapshot);
    for w in &snapshot.warnings {
        log::warn!("{w}");
    }
    let server = server::build(app, &options);
    server.run_forever()
}

/// Operator actions taken before the restart, and where the next ones are kept. Both `run` and
/// `demo` call it once logging is up (so a broken file is reported): without it, actions would
/// apply but be forgotten by a restart.
fn restore_overrides(app: &App, snapshot: &Snapshot) {
    app.state
        .controls
        .load(&snapshot.config.admin.state_file, &*app.state.store);
}

pub(crate) fn run_demo(path: &Path) -> ExitCode {
    let Some(app) = start(path) else {
        return ExitCode::FAILURE;
    };
    let snapshot = app.snapshot();
    let config = &snapshot.config;
    let origin = config
        .upstream
        .peers
        .first()
        .and_then(|p| p.addrs.first().copied());
    let mut options = RunOptions::default();
    let origin_note = match origin {
        Some(addr) if reachable(addr) => format!("your origin at {addr}"),
        Some(addr) if addr.ip().is_loopback() => {
            options.demo_origin = Some(addr);
            format!("the built-in demo origin on {addr}")
        }
        Some(addr) => {
            eprintln!(
                "vestibule demo: the configured origin {addr} is not reachable, and the demo origin only runs on loopback; \
                 point upstream.peers at 127.0.0.1 in {}",
                path.display()
            );
            return ExitCode::FAILURE;
        }
        None => unreachable!("validation requires at least one peer"),
    };
    let listen = config.server.listen.first().copied();
    let url = listen.map_or_else(String::new, |a| {
        let host = if a.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            a.ip().to_string()
        };
        format!("http://{host}:{}/", a.port())
    });
    // Warnings first, on stderr, where they are seen before the URL is opened: the sample
    // ring's published key above all, since anyone can forge cookies with it.
    for w in &snapshot.warnings {
        eprintln!("warning: {w}");
    }
    println!("vestibule demo: open {url}");
    println!("  proxying to {origin_note}");
    println!(
        "  console: http://{admin}/console  (status page: /status.html, JSON: /status, metrics: /metrics)",
        admin = config.admin.listen
    );
    println!(
        "  operator overrides kept in {}",
        config.admin.state_file.display()
    );
    println!(
        "  edit {} to change the room; Ctrl-C to stop",
        path.display()
    );
    vestibule::logging::init(&config.log);
    raise_fd_limit();
    restore_overrides(&app, &snapshot);
    let server = server::build(app.clone(), &options);
    drop(snapshot);
    server.run_forever()
}

fn reachable(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

pub(crate) fn run_origin(
    origin: vestibule::demo::DemoOrigin,
    listen: SocketAddr,
    threads: usize,
    tls: Option<(PathBuf, PathBuf)>,
) -> ExitCode {
    vestibule::logging::init(&vestibule::config::LogConfig {
        level: log::LevelFilter::Warn,
        format: vestibule::config::LogFormat::Plain,
        access: false,
    });
    let mut server = pingora::server::Server::new_with_opt_and_conf(
        pingora::server::configuration::Opt::default(),
        pingora::server::configuration::ServerConf {
            grace_period_seconds: Some(0),
            graceful_shutdown_timeout_seconds: Some(1),
            ..Default::default()
        },
    );
    server.bootstrap();
    let mut origin = server::model_origin_service(origin, None, threads.max(1));
    match tls {
        None => origin.add_tcp(&listen.to_string()),
        Some((cert, key)) => {
            if let Err(e) = origin.add_tls(
                &listen.to_string(),
                &cert.to_string_lossy(),
                &key.to_string_lossy(),
            ) {
                eprintln!("vestibule origin: cannot use the TLS certificate or key: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    server.add_service(origin);
    server.run_forever()
}
