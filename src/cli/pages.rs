//! `vestibule pages render`: one of a room's pages, as a visitor would get it.

use std::path::Path;
use std::process::ExitCode;

use vestibule::pages::{Estimates, PageKind};
use vestibule::room::{CookieAction, Decision, Outcome, Room};
use vestibule::snapshot::Snapshot;
use vestibule::time::Timestamp;

pub(crate) fn render_page(
    path: &Path,
    room: &str,
    page: &str,
    lang: Option<&str>,
    state: &str,
    message: Option<String>,
) -> ExitCode {
    let snapshot = match Snapshot::load(
        path,
        None,
        &vestibule::state::State::local(),
        vestibule::time::now(),
    ) {
        Ok(s) => s,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let fail = |m: String| {
        eprintln!("vestibule pages render: {m}");
        ExitCode::FAILURE
    };
    let Some((room, pages)) = snapshot.room_named(room) else {
        let names: Vec<&str> = snapshot.rooms.iter().map(|r| r.name()).collect();
        return fail(format!(
            "no room is named \"{room}\" (rooms: {})",
            names.join(", ")
        ));
    };
    let kind = match page_kind(page) {
        Ok(kind) => kind,
        Err(m) => return fail(m),
    };
    let now = preview_time(room, kind, state);
    let catalogs = pages.at(room, now).catalogs();
    let language = match lang {
        None => pages.language_for(room, None, now),
        Some(tag) => {
            let index = catalogs.negotiate(Some(tag.as_bytes()), usize::MAX);
            if index == usize::MAX {
                let tags: Vec<&str> = catalogs.languages().map(|l| l.tag.as_str()).collect();
                return fail(format!(
                    "no catalog for \"{tag}\" (languages: {})",
                    tags.join(", ")
                ));
            }
            index
        }
    };
    let outcome = match sample_outcome(room, kind, state, message) {
        Ok(outcome) => outcome,
        Err(m) => return fail(m),
    };
    let mut ctx = vestibule::pages::room_context(room, pages, &outcome, language, now);
    if ctx.event.is_none() && kind == PageKind::PreQueue {
        let start = now.secs() + 1234;
        ctx = ctx.with_event(
            "sample",
            "prequeue",
            (start, start + 3600),
            true,
            now.secs(),
        );
    }
    // A challenge page as the room would ask it (a sample value: its solution is never checked).
    let solution_cookie = format!("{}_pow", room.config.cookie.name);
    if kind == PageKind::Challenge {
        ctx.challenge_value = "p1~preview~0~16~0000000000000000~0";
        ctx.challenge_difficulty = room.config.challenge.map_or(16, |c| c.difficulty);
        ctx.solution_cookie = &solution_cookie;
        ctx.refresh_seconds = room.config.challenge.map_or(300, |c| c.ttl.as_secs());
    }
    if matches!(kind, PageKind::RateLimited | PageKind::Error) {
        ctx.retry_after = 30;
        ctx.rule = "per-ip";
        ctx.status = if kind == PageKind::Error { 502 } else { 429 };
    }
    let html = pages.at(room, now).render(kind, &ctx);
    print!("{}", String::from_utf8_lossy(&html));
    ExitCode::SUCCESS
}

/// The page named `page` (its file name without `.html`).
fn page_kind(page: &str) -> Result<PageKind, String> {
    let pages: Vec<PageKind> = PageKind::ALL.to_vec();
    let Some(kind) = pages
        .iter()
        .copied()
        .find(|k| k.file_name().trim_end_matches(".html") == page)
    else {
        let names: Vec<&str> = pages
            .iter()
            .map(|k| k.file_name().trim_end_matches(".html"))
            .collect();
        return Err(format!("no page \"{page}\" (pages: {})", names.join(", ")));
    };
    Ok(kind)
}

/// The moment the page is shown at: now, or for a pre-queue 1234 s before the start of the room's
/// next event.
fn preview_time(room: &Room, kind: PageKind, state: &str) -> Timestamp {
    // A pre-queue is shown as a visitor 1234 s before the start of the room's next event (or its
    // first) would see it; a room without events gets a sample one.
    let mut now = vestibule::time::now();
    let prequeue = room
        .config
        .events
        .iter()
        .filter(|e| e.prequeue_start.is_some())
        .find(|e| e.end > now.secs())
        .or_else(|| {
            room.config
                .events
                .iter()
                .find(|e| e.prequeue_start.is_some())
        });
    if state == "prequeue" || kind == PageKind::PreQueue {
        if let Some(e) = prequeue {
            now = Timestamp::from_secs(e.start - 1234.min(e.start - e.opens()));
        }
    }
    now
}

/// The outcome the page is rendered for: the decision its kind shows, in the sample `state`, with
/// the operator's `message`.
fn sample_outcome(
    room: &Room,
    kind: PageKind,
    state: &str,
    message: Option<String>,
) -> Result<Outcome, String> {
    let decision = match kind {
        PageKind::StartWaiting => Decision::Anon,
        PageKind::KeepWaiting => Decision::Wait,
        PageKind::Deny => Decision::Deny,
        PageKind::SoldOut => Decision::SoldOut,
        PageKind::QueueFull => Decision::QueueFull,
        PageKind::PreQueue => Decision::PreQueue,
        PageKind::Challenge => Decision::Challenge,
        PageKind::Invite => Decision::Uninvited,
        PageKind::RateLimited | PageKind::Error | PageKind::Enqueue => Decision::Wait,
    };
    let mut outcome = Outcome::new(decision, CookieAction::Keep);
    outcome.refresh_secs = room.retry_after();
    let estimates = |p25, p50, p75| Estimates {
        p25: Some(p25),
        p50: Some(p50),
        p75: Some(p75),
    };
    match state {
        "wait" => {
            outcome.users_ahead = Some(1234);
            outcome.estimates = estimates(2.0, 3.0, 4.0);
        }
        "soon" => {
            outcome.users_ahead = Some(3);
            outcome.estimates = estimates(0.2, 0.4, 0.6);
        }
        "front" => {
            outcome.users_ahead = Some(0);
            outcome.estimates = estimates(0.1, 0.2, 0.3);
        }
        "unknown" | "prequeue" => {}
        "paused" => outcome.paused = true,
        // The invite page after a code was refused.
        "refused" => outcome.invitation = Some(Err(vestibule::invite::Refusal::UsedUp)),
        other => {
            return Err(format!(
            "no state \"{other}\" (states: wait, soon, front, unknown, paused, prequeue, refused)"
        ))
        }
    }
    if let Some(text) = message {
        match vestibule::controls::check_message(&text) {
            Ok(text) => outcome.message = Some(std::sync::Arc::new(text)),
            Err(e) => return Err(e),
        }
    }
    Ok(outcome)
}
