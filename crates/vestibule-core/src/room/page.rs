//! The page data a room produces, with no template engine behind it: which page an answer
//! shows ([`PageKind`]), the wait estimates it carries ([`Estimates`]), and the place holder of a
//! challenge value in a rendered page ([`CHALLENGE_MARK`]). The edge's page sets render them.

use serde::Serialize;

/// The pages a set must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKind {
    StartWaiting,
    KeepWaiting,
    Deny,
    RateLimited,
    Error,
    SoldOut,
    QueueFull,
    PreQueue,
    Challenge,
    Invite,
    /// A room's enqueue token missing (`required`) or refused.
    Enqueue,
}

impl PageKind {
    /// Every page, in file order.
    pub const ALL: [PageKind; 11] = [
        PageKind::StartWaiting,
        PageKind::KeepWaiting,
        PageKind::Deny,
        PageKind::RateLimited,
        PageKind::Error,
        PageKind::SoldOut,
        PageKind::QueueFull,
        PageKind::PreQueue,
        PageKind::Challenge,
        PageKind::Invite,
        PageKind::Enqueue,
    ];

    /// The page's file in a pages folder.
    pub fn file_name(self) -> &'static str {
        match self {
            PageKind::StartWaiting => "startwaiting.html",
            PageKind::KeepWaiting => "keepwaiting.html",
            PageKind::Deny => "deny.html",
            PageKind::RateLimited => "ratelimited.html",
            PageKind::Error => "error.html",
            PageKind::SoldOut => "soldout.html",
            PageKind::QueueFull => "queuefull.html",
            PageKind::PreQueue => "prequeue.html",
            PageKind::Challenge => "challenge.html",
            PageKind::Invite => "invite.html",
            PageKind::Enqueue => "enqueue.html",
        }
    }
}

/// Wait estimates in minutes; `None` when unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Estimates {
    pub p25: Option<f64>,
    pub p50: Option<f64>,
    pub p75: Option<f64>,
}

/// Stands for the challenge value in a rendered challenge page: it appears where the template
/// writes `challenge_value` and nowhere else. Values are made of `[A-Za-z0-9._~-]`, which
/// neither HTML nor a script string escapes.
pub const CHALLENGE_MARK: &str = "__VESTIBULE_CHALLENGE__";
