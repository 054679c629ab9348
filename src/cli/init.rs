//! `vestibule init`, which writes a first config, and `vestibule --check`, which validates one.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use vestibule::snapshot::Snapshot;

use crate::InitArgs;

pub(crate) fn init(args: &InitArgs) -> ExitCode {
    use vestibule::init::{shell_word, InitOptions};
    let opts = InitOptions {
        dir: args.dir.clone(),
        origin: args.origin.clone(),
        listen: args.listen,
        admin: args.admin,
        title: args.title.clone(),
        force: args.force,
    };
    // The key's id says when it was made, which helps when rotating later.
    let date = vestibule::time::now().rfc3339();
    let key_id = format!("k{}", date.get(..10).unwrap_or("1").replace('-', ""));
    match vestibule::init::init(&opts, &key_id) {
        Ok(config) => {
            let config = shell_word(&config);
            println!(
                "wrote {dir}: vestibule.toml, keys.toml (a fresh key, mode 0600), pages/ and state/",
                dir = args.dir.display()
            );
            println!("next:  vestibule --config {config}");
            let visitors = if args.listen.ip().is_unspecified() {
                SocketAddr::new([127, 0, 0, 1].into(), args.listen.port())
            } else {
                args.listen
            };
            println!(
                "  (visitors on http://{visitors}/, console on http://{}/console; proxying to {}; \
                 with no origin there yet, `vestibule demo --config {config}` starts a built-in one on loopback)",
                args.admin, args.origin
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule init: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn check(path: &Path) -> ExitCode {
    match Snapshot::load(
        path,
        None,
        &vestibule::state::State::local(),
        vestibule::time::now(),
    ) {
        Ok(snapshot) => {
            for w in &snapshot.warnings {
                eprintln!("warning: {w}");
            }
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            ExitCode::FAILURE
        }
    }
}
