//! `vestibule invite`: invitation links for a room.

use std::path::Path;
use std::process::ExitCode;

use vestibule::snapshot::Snapshot;
use vestibule::time::Timestamp;

use crate::InviteArgs;

pub fn invite(path: &Path, args: &InviteArgs) -> ExitCode {
    use vestibule::invite::{self, Terms, MAX_USES};
    let fail = |m: String| {
        eprintln!("vestibule invite: {m}");
        ExitCode::FAILURE
    };
    let now = vestibule::time::now();
    let snapshot = match Snapshot::load(path, None, &vestibule::state::State::local(), now) {
        Ok(s) => s,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let Some(room) = snapshot.rooms.iter().find(|r| r.name() == args.room) else {
        let names: Vec<&str> = snapshot.rooms.iter().map(|r| r.name()).collect();
        return fail(format!(
            "--room: no room is named \"{}\" (rooms: {})",
            args.room,
            names.join(", ")
        ));
    };
    let Some(ring) = &snapshot.keys else {
        return fail(format!(
            "{}: no key ring ([keys] ring): invitations are signed with it",
            path.display()
        ));
    };
    if !invite::is_valid_lane(&args.lane) {
        return fail(format!(
            "--lane: \"{}\" must be 1 to {} of a-z, 0-9, '_' and '-'",
            args.lane,
            invite::MAX_LANE_LEN
        ));
    }
    if !(1..=MAX_USES).contains(&args.uses) {
        return fail(format!("--uses: must be between 1 and {MAX_USES}"));
    }
    if !(1..=100_000).contains(&args.count) {
        return fail("--count: must be between 1 and 100000".into());
    }
    if args.expires.as_secs() == 0 {
        return fail("--expires: must be at least 1s".into());
    }
    let link = match &args.link {
        Some(url) => match url.parse::<http::Uri>() {
            Ok(uri) if uri.scheme().is_some() && !url.contains('#') => Some(url.clone()),
            _ => {
                return fail(format!(
                    "--link: \"{url}\" is not an absolute URL without a #fragment"
                ))
            }
        },
        None => None,
    };
    let terms = Terms {
        room: room.name().to_owned(),
        lane: args.lane.clone(),
        exp: now.secs().saturating_add(args.expires.as_secs()),
        uses: args.uses,
    };
    let mut out = String::new();
    for _ in 0..args.count {
        let code = invite::make(ring.active(), &terms);
        match &link {
            Some(url) => {
                let join = if url.contains('?') { '&' } else { '?' };
                out.push_str(&format!("{url}{join}{}={code}\n", invite::LINK_PARAMETER));
            }
            None => {
                out.push_str(&code);
                out.push('\n');
            }
        }
    }
    print!("{out}");
    eprintln!(
        "{} invitation(s) for room \"{}\", lane \"{}\", {} use(s) each, until {}: signed with key \"{}\"; keep it in the ring until then",
        args.count,
        room.name(),
        args.lane,
        args.uses,
        Timestamp::from_secs(terms.exp).rfc3339(),
        ring.active().id()
    );
    ExitCode::SUCCESS
}
