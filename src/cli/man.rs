//! `vestibule man`: the manual pages, from the clap definition.

use std::process::ExitCode;

use crate::Cli;

/// vestibule(1), or the page of the subcommand at `path`, from the clap definition. The main page
/// lists the subcommands as vestibule-<name>(1), which `vestibule man <name>` prints.
pub(crate) fn man(path: &[String]) -> ExitCode {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // Building gives each subcommand its display name (`vestibule-init`) and usage line.
    cmd.build();
    for part in path {
        let found = cmd
            .get_subcommands()
            .find(|s| s.get_name() == part && !s.is_hide_set())
            .cloned();
        let Some(sub) = found else {
            let names: Vec<&str> = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name())
                .collect();
            eprintln!(
                "vestibule man: no subcommand \"{}\" (subcommands: {})",
                part.escape_default(),
                names.join(", ")
            );
            return ExitCode::FAILURE;
        };
        cmd = sub;
    }
    let title = cmd
        .get_display_name()
        .unwrap_or(cmd.get_name())
        .to_uppercase();
    let mut out = Vec::new();
    if let Err(e) = clap_mangen::Man::new(cmd)
        .title(title)
        .source(format!("vestibule {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out)
    {
        eprintln!("vestibule man: {e}");
        return ExitCode::FAILURE;
    }
    print_bytes(&out)
}

/// Writes to stdout; a closed pipe (`vestibule man | head`) ends the command without a panic.
pub(crate) fn print_bytes(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
