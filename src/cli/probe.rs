//! `vestibule probe`: asks a running instance's admin listener for `/readyz` or `/healthz`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

pub(crate) fn probe(config: &Path, path: &str, wait: Duration) -> ExitCode {
    use vestibule::probe::{wait_for_ok, Target};
    let outcome = Target::from_config(config).and_then(|t| wait_for_ok(&t, path, wait));
    match outcome {
        Ok(body) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule probe: {e}");
            ExitCode::FAILURE
        }
    }
}
