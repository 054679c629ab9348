//! `vestibule report`: the post-event report of one room, from the per-minute history and the
//! audit log the config names. Exit 0 written, 1 nothing to report or a file that could not
//! be read or written, 2 a command line that cannot be followed.

use std::path::Path;
use std::process::ExitCode;

use vestibule::config::Admission;
use vestibule::report::{self, Failure, Request};

use crate::ReportArgs;

pub fn report(config_path: &Path, args: &ReportArgs) -> ExitCode {
    let usage = |m: String| {
        eprintln!("vestibule report: {m}");
        ExitCode::from(2)
    };
    let config = match vestibule::config::load(config_path) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let room = config.rooms.iter().find(|r| r.name == args.room);
    let (from, to, event) = match (&args.event, &args.from, &args.to) {
        (Some(name), None, None) => {
            let Some(room) = room else {
                return usage(format!("--event: no room is named \"{}\"", args.room));
            };
            let Some(e) = room.events.iter().find(|e| e.name == *name) else {
                let names: Vec<&str> = room.events.iter().map(|e| e.name.as_str()).collect();
                return usage(format!(
                    "--event: room {} has no event named \"{name}\" (events: {})",
                    args.room,
                    names.join(", ")
                ));
            };
            (
                e.prequeue_start.unwrap_or(e.start),
                e.end,
                Some(name.clone()),
            )
        }
        (None, Some(from), Some(to)) => {
            let parse = |flag: &str, v: &str| {
                vestibule_core::history::parse_start(v).ok_or_else(|| {
                    format!("{flag}: \"{v}\" is not an RFC 3339 time (2026-11-27T20:00:00Z)")
                })
            };
            match (parse("--from", from), parse("--to", to)) {
                (Ok(f), Ok(t)) if f < t => (f, t, None),
                (Ok(_), Ok(_)) => return usage("--from must be before --to".into()),
                (Err(m), _) | (_, Err(m)) => return usage(m),
            }
        }
        _ => return usage("give either --event E, or both --from T and --to T".into()),
    };
    let Some(history_dir) = config.admin.history_dir.clone() else {
        eprintln!(
            "vestibule report: {}: admin.history_dir is \"\": no history is kept",
            config_path.display()
        );
        return ExitCode::FAILURE;
    };
    let req = Request {
        room: args.room.clone(),
        from,
        to,
        event,
        history_dir,
        audit_file: Some(config.admin.audit_file.clone()),
        lottery: room.is_some_and(|r| matches!(r.admission, Admission::Lottery { .. })),
    };
    let built = report::build(&req).and_then(|r| {
        for s in &r.skipped {
            eprintln!("vestibule report: skipped {s}");
        }
        report::write(&r, &args.out).map(|()| r)
    });
    match built {
        Ok(r) => {
            println!(
                "{}: {} minutes, {} arrivals, {} admitted, {} operator actions",
                args.out.display(),
                r.totals.minutes,
                r.totals.arrivals,
                r.totals.admitted,
                r.actions.len()
            );
            ExitCode::SUCCESS
        }
        Err(Failure::Nothing(m) | Failure::Io(m)) => {
            eprintln!("vestibule report: {m}");
            ExitCode::FAILURE
        }
    }
}
