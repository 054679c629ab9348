//! `vestibule ctl`: the command line of [`vestibule::ctl`], and its exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use vestibule::ctl::{self, Client, Command};

#[derive(Args, Debug)]
pub(crate) struct CtlArgs {
    /// The admin listener, http://host:port.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        default_value = "http://127.0.0.1:9901"
    )]
    admin: String,
    /// A file holding the admin token (trimmed). Without it, the token is read from
    /// VESTIBULE_ADMIN_TOKEN; without either, requests carry none.
    #[arg(long, global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Print the server's JSON answer instead of a summary.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand, Debug)]
enum CtlCommand {
    /// Every room: state, active users against the cap, waiting users, overrides.
    Status,
    /// Stop admitting in ROOM; the queue keeps its order.
    Pause { room: String },
    /// Admit again in ROOM.
    Resume { room: String },
    /// Let the next N waiting visitors of ROOM in now, beyond the per-minute cap.
    Admit {
        room: String,
        #[arg(value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
        count: u64,
    },
    /// Show TEXT on every page of ROOM (at most 500 characters); "" or --clear removes it.
    Message {
        room: String,
        #[arg(required_unless_present = "clear")]
        text: Option<String>,
        /// Remove the notice.
        #[arg(long, conflicts_with = "text")]
        clear: bool,
    },
    /// Declare ROOM sold out (on), or drop that override (off).
    SoldOut {
        room: String,
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Move the serving counter of ROOM (a room with the queue API) by +N.
    Serving {
        room: String,
        #[arg(value_name = "+N", allow_hyphen_values = true, value_parser = increment)]
        by: u64,
    },
    /// Admit in ROOM at N new users a minute (a capacity room) or N percent (a lottery room),
    /// over the configured value, an event's and the autopilot's, until cleared
    /// (`DELETE /rooms/ROOM/overrides`) or for --for.
    Pace {
        room: String,
        #[arg(value_name = "N", value_parser = pace)]
        value: f64,
        /// How long it lasts, 1m to 7d, e.g. "30m" (default: until cleared).
        #[arg(long = "for", value_name = "DURATION", value_parser = lasts)]
        lasts: Option<String>,
    },
    /// The operator actions recorded, newest first.
    Audit {
        /// Only this room's.
        #[arg(long)]
        room: Option<String>,
        /// At most this many (the server's default is 100; at most 1000).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: Option<u32>,
    },
}

fn increment(text: &str) -> Result<u64, String> {
    ctl::parse_increment(text).map_err(|e| e.message().to_owned())
}

fn pace(text: &str) -> Result<f64, String> {
    ctl::parse_pace(text).map_err(|e| e.message().to_owned())
}

/// A duration from 1m to 7d, kept as written.
fn lasts(text: &str) -> Result<String, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("not a duration ({e})"))?;
    if d < std::time::Duration::from_secs(60) || d > std::time::Duration::from_secs(7 * 86_400) {
        return Err("from 1m to 7d".into());
    }
    Ok(text.to_owned())
}

pub(crate) fn ctl(args: CtlArgs) -> ExitCode {
    let command = match args.command {
        CtlCommand::Status => Command::Status,
        CtlCommand::Pause { room } => Command::Pause(room),
        CtlCommand::Resume { room } => Command::Resume(room),
        CtlCommand::Admit { room, count } => Command::Admit(room, count),
        CtlCommand::Message { room, text, clear } => {
            Command::Message(room, text.filter(|t| !clear && !t.is_empty()))
        }
        CtlCommand::SoldOut { room, state } => Command::SoldOut(room, state == "on"),
        CtlCommand::Serving { room, by } => Command::Serving(room, by),
        CtlCommand::Pace { room, value, lasts } => Command::Pace(room, value, lasts),
        CtlCommand::Audit { room, limit } => Command::Audit { room, limit },
    };
    let outcome = Client::new(&args.admin, args.token_file.as_deref())
        .and_then(|client| client.run(&command, args.json));
    match outcome {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("vestibule ctl: {}", failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}
