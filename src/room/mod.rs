//! Admission: which room a request belongs to, and what that room decides.
//!
//! A request is routed by host and by the longest matching path prefix among all rooms; inside
//! its room, `bypass_paths` and `bypass_cidrs` let it pass untouched. The room then checks the
//! presented cookie (every candidate value, first valid wins) and its admission policy decides.
//! Nothing here sees HTTP: the proxy hands in the host, the normalised path, the client address,
//! the identity and the raw cookie values, and gets an [`Outcome`] back.

pub mod capacity;
pub mod event;
pub mod lottery;

use std::net::IpAddr;
use std::sync::Arc;

use crate::autopilot::pilot::{PilotCell, PilotHandle, RoomNow, Steered};
use crate::challenge::{self, Challenge, Failure};
use crate::config::{
    Access, Admission, ChallengeConfig, HostPattern, OnChallengeFailure, RoomConfig,
};
use crate::controls::RoomCell;
use crate::identity::Identity;
use crate::invite::{self, Refusal};
use crate::keys::KeyRing;
use crate::pages::{Estimates, PageContext, PageKind, Pages};
use crate::path::RequestPath;
use crate::store::{CounterStore, Invited, Mark, MarkKind, Ticket};
use crate::time::Timestamp;
use crate::token::{Reject, Token};

use capacity::{Capacity, Figures};
use lottery::Lottery;

/// What a room decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Forward to the origin.
    Allow,
    /// Unknown user: issue a wait token, show `startwaiting`.
    Anon,
    /// Valid wait token, not yet eligible: show `keepwaiting`, no new cookie.
    Wait,
    /// Lottery: an eligible wait token lost its draw; a new wait token, `keepwaiting`.
    Lost,
    /// The room is closed: show `deny`; the visitor keeps their place in line.
    Deny,
    /// Never held (bypass rule, or the room is disabled).
    Bypass,
    /// The room is sold out: show `soldout`; the visitor keeps their place in line.
    SoldOut,
    /// The line is full (`max_waiting_users`): show `queuefull`, no wait token.
    QueueFull,
    /// An event's pre-queue: show `prequeue`, a wait token due at the start.
    PreQueue,
    /// A new arrival in a `pow` room: show `challenge`, no token until it is solved.
    Challenge,
    /// A visitor without a valid invitation in an `invite` room: show `invite` with
    /// status 403, no token.
    Uninvited,
}

impl Decision {
    pub const ALL: [Decision; 11] = [
        Decision::Allow,
        Decision::Anon,
        Decision::Wait,
        Decision::Lost,
        Decision::Deny,
        Decision::Bypass,
        Decision::SoldOut,
        Decision::QueueFull,
        Decision::PreQueue,
        Decision::Challenge,
        Decision::Uninvited,
    ];

    /// Position in [`Decision::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The `decision` label and JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Anon => "anon",
            Decision::Wait => "wait",
            Decision::Lost => "lost",
            Decision::Deny => "deny",
            Decision::Bypass => "bypass",
            Decision::SoldOut => "sold_out",
            Decision::QueueFull => "queue_full",
            Decision::PreQueue => "prequeue",
            Decision::Challenge => "challenge",
            Decision::Uninvited => "uninvited",
        }
    }

    /// Whether the request goes on to the origin.
    pub fn forwards(self) -> bool {
        matches!(self, Decision::Allow | Decision::Bypass)
    }

    /// The page shown when the request does not go on.
    pub fn page(self) -> PageKind {
        match self {
            Decision::Deny => PageKind::Deny,
            Decision::SoldOut => PageKind::SoldOut,
            Decision::QueueFull => PageKind::QueueFull,
            Decision::PreQueue => PageKind::PreQueue,
            Decision::Challenge => PageKind::Challenge,
            Decision::Uninvited => PageKind::Invite,
            Decision::Wait | Decision::Lost => PageKind::KeepWaiting,
            _ => PageKind::StartWaiting,
        }
    }
}

/// What to do with the room cookie on the response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CookieAction {
    Keep,
    /// Send this new value.
    Set(Arc<str>),
    Delete,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub decision: Decision,
    pub cookie: CookieAction,
    /// Why the presented cookie was not trusted, if one was presented and was not.
    pub rejected: Option<Reject>,
    /// A waiting user was let in by this request.
    pub admitted: bool,
    /// Waiting decisions: seconds until the client should check in again.
    pub refresh_secs: u64,
    /// FIFO rooms: users ahead in the queue.
    pub users_ahead: Option<u64>,
    pub estimates: Estimates,
    /// Capacity rooms: the admitted user's place, which a revoke gives back.
    pub place: Option<Place>,
    /// Held because an operator paused the line.
    pub paused: bool,
    /// Held requests: the operator's notice for the room.
    pub message: Option<Arc<String>>,
    /// `pow` rooms: the challenge to solve (with [`Decision::Challenge`]).
    pub challenge: Option<Challenge>,
    /// `pow` rooms: what this request did with a challenge.
    pub pow: PowCount,
    /// The invitation this request presented, if it needed one: accepted, or why not.
    pub invitation: Option<Result<(), Refusal>>,
}

/// What a request brings besides its cookies. Only a visitor without a valid token
/// needs either.
#[derive(Clone, Copy, Debug, Default)]
pub struct Brought<'a> {
    /// A proof-of-work solution, `value:nonce`.
    pub solution: Option<&'a [u8]>,
    /// An invitation code.
    pub invitation: Option<&'a [u8]>,
}

/// What one request did with a room's proof-of-work, for
/// `vestibule_room_challenges_total{result}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowCount {
    pub issued: bool,
    pub solved: bool,
    pub failed: Option<crate::challenge::Failure>,
}

/// What bears on a room beyond its own settings, handed to its admission policy:
/// operator actions, and the event running now.
pub struct Hold<'a> {
    /// Paused or sold out: nobody new is let in; everyone keeps their place.
    pub held: bool,
    /// Takes one admission from an operator's `admit` grant, if there is one.
    pub grant: &'a dyn Fn() -> bool,
    /// The event running now, if any: those who pre-queued for it go before later arrivals.
    pub event: Option<&'a crate::config::EventConfig>,
    /// The priority lane a new arrival waits in: their invitation's.
    pub lane: Option<&'a str>,
}

impl Hold<'_> {
    /// Nothing holds the room.
    pub const NONE: Hold<'static> = Hold {
        held: false,
        grant: &|| false,
        event: None,
        lane: None,
    };
}

/// An admitted user's place in a capacity room: their session, and the minute they are counted
/// in now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// A digest of what every token of the session carries (see `capacity::session_of`).
    pub session: u64,
    pub minute: u64,
}

impl Outcome {
    /// An event's pre-queue page: the visitor's token is due at `due` (Unix seconds); the page
    /// asks again then, or every [`event::PREQUEUE_REFRESH_MAX`] until then.
    pub fn prequeued(cookie: CookieAction, due: u64, now: Timestamp) -> Outcome {
        let mut outcome = Outcome::new(Decision::PreQueue, cookie);
        outcome.refresh_secs = due
            .saturating_sub(now.secs())
            .clamp(1, event::PREQUEUE_REFRESH_MAX);
        outcome
    }

    pub fn new(decision: Decision, cookie: CookieAction) -> Outcome {
        Outcome {
            decision,
            cookie,
            rejected: None,
            admitted: false,
            refresh_secs: 0,
            users_ahead: None,
            estimates: Estimates::default(),
            place: None,
            paused: false,
            message: None,
            challenge: None,
            pow: PowCount::default(),
            invitation: None,
        }
    }
}

/// The verdict on the cookie values a request presented.
#[derive(Debug)]
pub struct Presented {
    /// Whether any value was presented at all.
    pub any: bool,
    /// The first value that verified.
    pub valid: Option<Arc<Token>>,
    /// Why the first value failed, when none verified.
    pub rejected: Option<Reject>,
}

/// Which tokens a room takes: those issued by no room in particular, or by this one; and only
/// its own when it asks who may join.
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    pub room: &'a str,
    pub required: bool,
}

impl Binding<'_> {
    /// Tokens of no room in particular (tests).
    pub const ANY: Binding<'static> = Binding {
        room: "",
        required: false,
    };

    fn takes(&self, token: &Token) -> Result<(), Reject> {
        match token.claims.room.as_deref() {
            Some(r) if r == self.room => Ok(()),
            None if !self.required => Ok(()),
            _ => Err(Reject::WrongRoom),
        }
    }
}

impl Presented {
    pub fn check(
        ring: &KeyRing,
        uid: &Identity,
        values: &[&[u8]],
        binding: Binding,
        now: Timestamp,
    ) -> Presented {
        let mut rejected = None;
        for value in values {
            match ring.check(value).and_then(|t| {
                t.check_binding(uid, now)?;
                binding.takes(&t)?;
                Ok(t)
            }) {
                Ok(token) => {
                    return Presented {
                        any: true,
                        valid: Some(token),
                        rejected: None,
                    }
                }
                Err(reason) => {
                    rejected.get_or_insert(reason);
                }
            }
        }
        Presented {
            any: !values.is_empty(),
            valid: None,
            rejected,
        }
    }
}

/// How a room admits people.
#[derive(Debug)]
enum Policy {
    Lottery(Lottery),
    Capacity(Capacity),
}

/// One `[[room]]`, ready to decide.
pub struct Room {
    pub config: RoomConfig,
    pub pages: Arc<Pages>,
    policy: Policy,
    /// Per event (as `config.events`): its policy, the room's settings with its overrides, and
    /// its pages.
    events: Vec<(Policy, Arc<Pages>, usize)>,
    store: Arc<dyn CounterStore>,
    /// Operator overrides; the same cell across reloads.
    controls: Arc<RoomCell>,
    /// The catalog of `default_language` among the room's pages.
    language: usize,
    /// The autopilot; the same cell across reloads.
    pilot: Arc<PilotCell>,
    /// `pow` rooms: the cookie a solution may come back in (`<cookie_name>_pow`).
    solution_cookie: Option<String>,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("name", &self.config.name)
            .field("policy", &self.policy)
            .finish()
    }
}

impl Room {
    /// Builds a room. Capacity rooms keep their counters in `store` (under the room's name), so
    /// a rebuilt room with the same name carries on counting.
    pub fn new(config: RoomConfig, pages: Arc<Pages>, store: &Arc<dyn CounterStore>) -> Room {
        let policy_of = |admission: &Admission| match admission {
            Admission::Lottery {
                allow_percentage,
                wait_period,
                allow_period,
                closed_refresh,
            } => Policy::Lottery(Lottery::new(
                *allow_percentage,
                *wait_period,
                *allow_period,
                *closed_refresh,
                config.queue_all,
            )),
            // An event's policy counts in the room's counters: the same people, other limits.
            Admission::Capacity(c) => Policy::Capacity(Capacity::new(
                &config.name,
                c,
                config.queue_all,
                store.clone(),
            )),
        };
        let policy = policy_of(&config.admission);
        let events = config
            .events
            .iter()
            .map(|e| (policy_of(&e.admission(&config.admission)), pages.clone(), 0))
            .collect();
        let mut room = Room {
            pages,
            policy,
            events,
            store: store.clone(),
            controls: Arc::default(),
            language: 0,
            pilot: Arc::default(),
            solution_cookie: config
                .challenge
                .map(|_| format!("{}_pow", config.cookie.name)),
            config,
        };
        // A room that asks who may join takes only the tokens it issued itself.
        if room.binding().required {
            room.bind_tokens();
        }
        room
    }

    /// Pages speak catalog `language` unless the visitor asks for another.
    pub fn with_language(mut self, language: usize) -> Room {
        self.language = language;
        for e in &mut self.events {
            if Arc::ptr_eq(&e.1, &self.pages) {
                e.2 = language;
            }
        }
        self
    }

    /// Event `index` shows the pages of `pages` (its own folder), which speak catalog
    /// `language` unless the visitor asks for another.
    pub fn with_event_pages(mut self, index: usize, pages: Arc<Pages>, language: usize) -> Room {
        if let Some(e) = self.events.get_mut(index) {
            e.1 = pages;
            e.2 = language;
        }
        self
    }

    /// The default language's catalog among the pages shown now.
    fn language_at(&self, now: Timestamp) -> usize {
        match self.event_now(now) {
            Some(p) => self.events[p.index].2,
            None => self.language,
        }
    }

    /// The event in force now (pre-queue or running), if any.
    pub fn event_now(&self, now: Timestamp) -> Option<event::Phase<'_>> {
        event::in_force(&self.config.events, now)
    }

    /// The policy deciding now: a running event's, else the room's.
    fn policy_at(&self, now: Timestamp) -> &Policy {
        match self.event_now(now) {
            Some(p) if p.state == event::EventState::Running => &self.events[p.index].0,
            _ => &self.policy,
        }
    }

    /// The pages shown now: the event's in force, else the room's.
    pub fn pages_at(&self, now: Timestamp) -> &Arc<Pages> {
        match self.event_now(now) {
            Some(p) => &self.events[p.index].1,
            None => &self.pages,
        }
    }

    /// What visitors are told they wait for now: the title of the event in force, else the
    /// room's.
    pub fn title_at(&self, now: Timestamp) -> &str {
        self.event_now(now)
            .and_then(|p| p.event.overrides.title.as_deref())
            .unwrap_or(&self.config.title)
    }

    /// The language of a page shown at `now` for a visitor who sent `accept_language`.
    pub fn language_for(&self, accept_language: Option<&[u8]>, now: Timestamp) -> usize {
        self.pages_at(now)
            .catalogs()
            .negotiate(accept_language, self.language_at(now))
    }

    /// This room decides under `controls` (the operator overrides kept for its name).
    pub fn with_controls(mut self, controls: Arc<RoomCell>) -> Room {
        self.controls = controls;
        self
    }

    /// This room (and each of its events) admits at what `pilot` sets while its autopilot
    /// runs: the pace of a capacity room, the percentage of a lottery.
    pub fn with_pilot(mut self, pilot: Arc<PilotCell>) -> Room {
        let handle = PilotHandle(Some(pilot.clone()));
        let policies =
            std::iter::once(&mut self.policy).chain(self.events.iter_mut().map(|e| &mut e.0));
        for policy in policies {
            match policy {
                Policy::Capacity(c) => c.steer_by(handle.clone()),
                Policy::Lottery(l) => l.pilot = handle.clone(),
            }
        }
        self.pilot = pilot;
        self
    }

    pub fn pilot(&self) -> &PilotCell {
        &self.pilot
    }

    /// Signs the room's name into every token it issues from now on (`rm=`): a room that asks
    /// who may join, and every room of a set of several (see [`RoomSet::new`]).
    fn bind_tokens(&mut self) {
        let room: Arc<str> = Arc::from(self.config.name.as_str());
        let policies =
            std::iter::once(&mut self.policy).chain(self.events.iter_mut().map(|e| &mut e.0));
        for policy in policies {
            match policy {
                Policy::Lottery(l) => l.bound = Some(room.clone()),
                Policy::Capacity(c) => c.bind_to(room.clone()),
            }
        }
    }

    /// Which tokens this room takes.
    fn binding(&self) -> Binding<'_> {
        Binding {
            room: &self.config.name,
            required: self.config.challenge.is_some() || self.config.access == Access::Invite,
        }
    }

    /// `pow` rooms: the name of the cookie a solution may come back in.
    pub fn solution_cookie(&self) -> Option<&str> {
        self.solution_cookie.as_deref()
    }

    /// What the autopilot steers from now: the configured `new_users_per_minute` and session in
    /// force (a running event's, else the room's), what is active and what waits. `None` for
    /// lottery rooms.
    pub fn pilot_now(&self, now: Timestamp) -> Option<RoomNow> {
        let autopilot = self.config.autopilot.as_ref()?;
        Some(match self.policy_at(now) {
            Policy::Capacity(c) => {
                let figures = c.figures(now);
                RoomNow {
                    steered: Steered::Pace,
                    configured: f64::from(c.configured_new_per_minute()),
                    session_minutes: c.session_minutes() as f64,
                    active: figures.active,
                    waiting: figures.waiting,
                }
            }
            // The autopilot counts a lottery's draws and wins itself.
            Policy::Lottery(l) => RoomNow {
                steered: Steered::Percentage,
                configured: f64::from(l.allow_percentage),
                session_minutes: autopilot.session.as_secs().div_ceil(60).max(1) as f64,
                active: 0,
                waiting: 0,
            },
        })
    }

    pub fn controls(&self) -> &RoomCell {
        &self.controls
    }

    /// Whether the room is sold out now: the operator's override, else the `sold_out` key.
    pub fn sold_out(&self) -> bool {
        self.sold_out_under(self.controls.held())
    }

    fn sold_out_under(&self, held: crate::controls::Held) -> bool {
        held.sold_out.unwrap_or(self.config.sold_out)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Decides one request. `cookies` are the values of this room's cookie the request sent.
    pub fn decide(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        cookies: &[&[u8]],
        now: Timestamp,
    ) -> Outcome {
        self.decide_bringing(ring, uid, cookies, Brought::default(), now)
    }

    /// Decides one request that may bring a proof-of-work solution or an invitation. A visitor without a valid token joins an `invite` room only with a valid
    /// invitation, and a `pow` room only with a correct solution.
    pub fn decide_bringing(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        cookies: &[&[u8]],
        brought: Brought,
        now: Timestamp,
    ) -> Outcome {
        if !self.config.enabled {
            return Outcome::new(Decision::Bypass, CookieAction::Keep);
        }
        let presented = Presented::check(ring, uid, cookies, self.binding(), now);
        let held = self.controls.held();
        let sold_out = self.sold_out_under(held);
        // Who may join: an invitation first (no work is asked of someone who may not join).
        let mut used = None;
        if presented.valid.is_none() {
            used = brought
                .invitation
                .map(|code| self.use_invitation(ring, uid, code, now));
        }
        let invitation = used
            .as_ref()
            .map(|u| u.as_ref().map(|_| ()).map_err(|r| *r));
        // The lane a new arrival waits in: their invitation's.
        let lane = match &used {
            Some(Ok(i)) => Some(i.lane),
            _ => None,
        };
        let uninvited = self.config.access == Access::Invite && invitation != Some(Ok(()));
        if presented.valid.is_none() && uninvited {
            let mut outcome = Outcome::new(Decision::Uninvited, CookieAction::Keep);
            outcome.rejected = presented.rejected;
            outcome.invitation = invitation;
            outcome.message = self.controls.message();
            return outcome;
        }
        let mut pow = PowCount::default();
        // A sold-out room lets nobody new in: no work is asked for a place that cannot move.
        if let (Some(c), None, false) = (&self.config.challenge, &presented.valid, sold_out) {
            let checked = brought
                .solution
                .map(|s| challenge::check(ring, self.name(), uid, s, now));
            if checked == Some(Ok(())) {
                pow.solved = true;
            } else {
                let mut outcome = self.unsolved(c, checked.and_then(Result::err), ring, uid, now);
                outcome.rejected = presented.rejected;
                outcome.invitation = invitation;
                outcome.paused = held.paused;
                outcome.message = self.controls.message();
                return outcome;
            }
        }
        let phase = self.event_now(now);
        let running = phase.filter(|p| p.state == event::EventState::Running);
        let hold = Hold {
            held: held.paused || sold_out,
            // An operator's `admit`: not while sold out.
            grant: &|| !sold_out && self.controls.take_grant(&*self.store, self.name(), now),
            event: running.map(|p| p.event),
            lane,
        };
        let policy = match running {
            Some(p) => &self.events[p.index].0,
            None => &self.policy,
        };
        let mut outcome = match (policy, phase) {
            (Policy::Lottery(l), Some(p)) if p.state == event::EventState::PreQueue => {
                l.prequeue(ring, uid, &presented, p.event, now)
            }
            (Policy::Capacity(c), Some(p)) if p.state == event::EventState::PreQueue => {
                c.prequeue(ring, uid, &presented, (p.event, lane), now)
            }
            (Policy::Lottery(l), _) => l.decide_held(ring, uid, &presented, &hold, now),
            (Policy::Capacity(c), _) => c.decide_held(ring, uid, &presented, &hold, now),
        };
        if !outcome.decision.forwards() {
            if sold_out && outcome.decision != Decision::QueueFull {
                outcome.decision = Decision::SoldOut;
                outcome.users_ahead = None;
                outcome.estimates = Estimates::default();
                outcome.refresh_secs = self.closed_refresh();
            } else if held.paused {
                outcome.paused = true;
            }
            outcome.message = self.controls.message();
        }
        outcome.rejected = outcome.rejected.or(presented.rejected);
        outcome.pow = pow;
        outcome.invitation = invitation;
        if let (Policy::Lottery(l), true, Some(t)) = (policy, outcome.admitted, &presented.valid) {
            outcome.admitted = self.first_win(l, t, now);
        }
        // A lottery's autopilot counts draws: a lost one, or a visitor let in (from the line, or
        // straight in at 100 %).
        if let (Policy::Lottery(_), Some(_)) = (policy, &self.config.autopilot) {
            if outcome.decision == Decision::Lost {
                self.pilot.count_draw(false);
            } else if outcome.decision == Decision::Allow
                && (outcome.admitted || presented.valid.is_none())
            {
                self.pilot.count_draw(true);
            }
        }
        outcome
    }

    /// Checks an invitation `code` and lets `uid` join with it if it has a use left for them:
    /// one HMAC, and the store's memory of who joined with it.
    fn use_invitation<'c>(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        code: &'c [u8],
        now: Timestamp,
    ) -> Result<invite::Invitation<'c>, Refusal> {
        let invitation = invite::check(ring, self.name(), code, now)?;
        if self.config.revoked_invitations.contains(&invitation.id) {
            return Err(Refusal::Revoked);
        }
        let ticket = Ticket {
            invite: invitation.id,
            holder: invitation.holder(uid),
            uses: invitation.uses,
            until: Timestamp::from_secs(invitation.exp),
            cap: self.config.max_invitations,
        };
        match self.store.invite(self.name(), &ticket, now) {
            Invited::First | Invited::Again => Ok(invitation),
            Invited::UsedUp => Err(Refusal::UsedUp),
            Invited::Full => Err(Refusal::Full),
        }
    }

    /// The answer to a visitor of a `pow` room who brought no solution, or one that `failed`: a
    /// challenge, or under `infinite_queue` a place that never moves.
    fn unsolved(
        &self,
        c: &ChallengeConfig,
        failed: Option<Failure>,
        ring: &KeyRing,
        uid: &Identity,
        now: Timestamp,
    ) -> Outcome {
        // An expired challenge, or one of a key retired since, was genuinely ours: it gets a
        // fresh one whatever the mode.
        let held = c.on_failure == OnChallengeFailure::InfiniteQueue
            && failed.is_some_and(|f| !matches!(f, Failure::Expired | Failure::UnknownKey));
        let mut outcome = if held {
            // A place that never moves, for as long as the failed solution comes back.
            let mut o = Outcome::new(Decision::Wait, CookieAction::Keep);
            o.refresh_secs = self.retry_after();
            o
        } else {
            let ttl = c.ttl.as_secs();
            let mut o = Outcome::new(Decision::Challenge, CookieAction::Keep);
            o.challenge = Some(challenge::issue(
                ring,
                self.name(),
                uid,
                c.difficulty,
                ttl,
                now,
            ));
            o.refresh_secs = ttl;
            o.pow.issued = true;
            o
        };
        outcome.pow.failed = failed;
        outcome
    }

    /// A winning wait token may be presented again (a second tab, a double reload) within its
    /// window and win again: it is one admission, counted once.
    fn first_win(&self, lottery: &Lottery, token: &Token, now: Timestamp) -> bool {
        let mut id = [0u8; 8];
        id.copy_from_slice(&token.signature()[..8]);
        let mark = Mark {
            kind: MarkKind::Admitted,
            id: u64::from_le_bytes(id),
        };
        let until = Timestamp::from_secs(token.claims.exp.saturating_add(lottery.wait_period));
        self.store.mark(&self.config.name, mark, until, now)
    }

    /// What a request's cookie holds, checked but decided on nothing (for subresources, which
    /// never join the queue nor check in): `Some(Dec::Allow)` for a valid, unrevoked allow
    /// token, `Some(Dec::Wait)` for a valid wait token.
    pub fn holding(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        cookies: &[&[u8]],
        now: Timestamp,
    ) -> Option<crate::token::Dec> {
        let token = Presented::check(ring, uid, cookies, self.binding(), now).valid?;
        if let (Policy::Capacity(c), crate::token::Dec::Allow) =
            (self.policy_at(now), token.claims.dec)
        {
            if c.is_revoked(&token.claims, now) {
                return None;
            }
        }
        Some(token.claims.dec)
    }

    /// How often a closed or sold-out page checks again: `closed_refresh` of a lottery room,
    /// `refresh` of a capacity room.
    fn closed_refresh(&self) -> u64 {
        match &self.policy {
            Policy::Lottery(l) => l.closed_refresh,
            Policy::Capacity(c) => c.refresh_secs(),
        }
    }

    /// How long a held visitor should wait before asking again: the refresh of a capacity
    /// room, the wait period of a lottery room (or its `closed_refresh` when closed).
    pub fn retry_after(&self) -> u64 {
        match &self.policy {
            Policy::Lottery(l) if l.allow_percentage == 0 => l.closed_refresh,
            Policy::Lottery(l) => l.wait_period,
            Policy::Capacity(c) => c.refresh_secs(),
        }
    }

    /// Capacity rooms: the `new_users_per_minute` in force now (the autopilot's while it runs, a
    /// running event's, else the room's; 0 = no limit).
    pub fn effective_new_users_per_minute(&self, now: Timestamp) -> Option<u64> {
        match self.policy_at(now) {
            Policy::Capacity(c) => Some(c.new_per_minute()),
            Policy::Lottery(_) => None,
        }
    }

    /// The chance, in percent, that an eligible waiting user gets in right now.
    pub fn effective_allow_percentage(&self, now: Timestamp) -> f64 {
        if !self.config.enabled {
            return 100.0;
        }
        if self.controls.held().paused || self.sold_out() {
            return 0.0;
        }
        if self
            .event_now(now)
            .is_some_and(|p| p.state == event::EventState::PreQueue)
        {
            return 0.0;
        }
        match self.policy_at(now) {
            Policy::Lottery(_) if self.config.queue_all => 0.0,
            Policy::Lottery(l) => l.percentage(),
            Policy::Capacity(c) => 100.0 * c.figures(now).admit_chance,
        }
    }

    /// How many invitations are remembered as in use in this room now (against
    /// `max_invitations`).
    pub fn invitations_in_use(&self, now: Timestamp) -> crate::store::InUse {
        self.store.invitations_in_use(self.name(), now)
    }

    /// Live figures of a capacity room (`None` for lottery rooms, which keep no counts).
    pub fn figures(&self, now: Timestamp) -> Option<Figures> {
        match self.policy_at(now) {
            Policy::Capacity(c) => Some(c.figures(now)),
            Policy::Lottery(_) => None,
        }
    }

    /// Ends an admitted user's session: capacity rooms stop counting them, once, and refuse the
    /// session's tokens from then on.
    pub fn revoke(&self, place: Option<Place>, now: Timestamp) {
        if let (Policy::Capacity(c), Some(place)) = (self.policy_at(now), place) {
            c.revoke(place, now);
        }
    }

    /// The template variables for a waiting, deny or rate-limit page of this room, at `now`
    /// (its event, and the title in force).
    pub fn page_context<'a>(
        &'a self,
        outcome: &'a Outcome,
        language: usize,
        now: Timestamp,
    ) -> PageContext<'a> {
        let mut ctx = PageContext::plain(
            &self.config.name,
            outcome.decision.as_str(),
            outcome.refresh_secs,
            // Nobody without an invitation may join: a refusal, not a wait.
            if outcome.decision == Decision::Uninvited {
                403
            } else {
                self.config.wait_status
            },
        )
        .with_wait(outcome.estimates)
        .in_language(
            self.pages_at(now).catalogs(),
            language,
            self.language_at(now),
        );
        ctx.title = self.title_at(now);
        ctx.queueing = self.config.admission.method();
        ctx.queue_all = self.config.queue_all;
        ctx.users_ahead = outcome.users_ahead;
        ctx.paused = outcome.paused;
        ctx.message = outcome.message.as_deref().map(String::as_str);
        ctx.invitation_refused = matches!(outcome.invitation, Some(Err(_)));
        if let (Some(c), Some(cookie)) = (&outcome.challenge, &self.solution_cookie) {
            ctx.challenge_value = crate::pages::CHALLENGE_MARK;
            ctx.challenge_difficulty = c.difficulty;
            ctx.solution_cookie = cookie;
        }
        if let Some(p) = event::current(&self.config.events, now) {
            ctx = ctx.with_event(
                &p.event.name,
                p.state.as_str(),
                (p.event.start, p.event.end),
                p.event.shuffle_at_start,
                now.secs(),
            );
        }
        ctx
    }
}

/// The room a request belongs to.
#[derive(Clone, Copy, Debug)]
pub struct Route<'a> {
    /// Position in the set (stable for one snapshot).
    pub index: usize,
    pub room: &'a Room,
    /// A bypass rule matched: forward untouched.
    pub bypass: bool,
}

#[derive(Debug)]
struct RouteEntry {
    host: Option<HostPattern>,
    prefix: String,
    room: usize,
}

/// Every room of a snapshot, with a routing table built at load.
#[derive(Debug, Default)]
pub struct RoomSet {
    rooms: Vec<Room>,
    routes: Vec<RouteEntry>,
    cookie_names: Vec<String>,
}

impl RoomSet {
    /// Rooms of a set of several sign their names into their tokens, so none takes another's
    /// place for its own (their tokens without a name, issued before a reload added a room,
    /// are still taken until they expire). A set of one keeps the VCL's four fields.
    pub fn new(mut rooms: Vec<Room>) -> RoomSet {
        if rooms.len() > 1 {
            for room in &mut rooms {
                room.bind_tokens();
            }
        }
        let mut routes = Vec::new();
        for (i, room) in rooms.iter().enumerate() {
            for prefix in &room.config.paths {
                if room.config.hosts.is_empty() {
                    routes.push(RouteEntry {
                        host: None,
                        prefix: prefix.clone(),
                        room: i,
                    });
                }
                for host in &room.config.hosts {
                    routes.push(RouteEntry {
                        host: Some(host.clone()),
                        prefix: prefix.clone(),
                        room: i,
                    });
                }
            }
        }
        // Longest prefix first; at equal length a room naming the host beats a catch-all;
        // then file order (the sort is stable).
        routes.sort_by_key(|r| (std::cmp::Reverse(r.prefix.len()), r.host.is_none()));
        // Solutions of `pow` rooms never reach the origin either.
        let cookie_names = rooms
            .iter()
            .map(|r| r.config.cookie.name.clone())
            .chain(rooms.iter().filter_map(|r| r.solution_cookie.clone()))
            .collect();
        RoomSet {
            rooms,
            routes,
            cookie_names,
        }
    }

    /// The route for a request. `host` is lowercase without port; `path` is normalised.
    pub fn route(&self, host: &str, path: &RequestPath, client_ip: IpAddr) -> Option<Route<'_>> {
        let normal = path.as_str();
        let entry = self.routes.iter().find(|r| {
            normal.starts_with(r.prefix.as_str()) && r.host.as_ref().is_none_or(|h| h.matches(host))
        })?;
        let room = &self.rooms[entry.room];
        // A bypass must hold however the origin reads the path.
        let bypass = room
            .config
            .bypass_paths
            .iter()
            .any(|p| path.is_under(p.as_str()))
            || room
                .config
                .bypass_cidrs
                .iter()
                .any(|n| n.contains(&client_ip));
        Some(Route {
            index: entry.room,
            room,
            bypass,
        })
    }

    pub fn get(&self, index: usize) -> Option<&Room> {
        self.rooms.get(index)
    }

    /// Every room cookie name: all of them are removed before the origin sees a request.
    pub fn cookie_names(&self) -> &[String] {
        &self.cookie_names
    }

    pub fn iter(&self) -> impl Iterator<Item = &Room> {
        self.rooms.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    pub use crate::keys::testing::ring;

    pub fn store() -> Arc<dyn CounterStore> {
        Arc::new(crate::store::local::LocalStore::new())
    }

    pub fn alice() -> Identity {
        Identity::of_ip("192.0.2.10".parse().unwrap(), 64)
    }

    pub fn bob() -> Identity {
        Identity::of_ip("192.0.2.11".parse().unwrap(), 64)
    }

    pub fn presented(
        ring: &KeyRing,
        uid: &Identity,
        value: Option<&str>,
        now: Timestamp,
    ) -> Presented {
        let values: Vec<&[u8]> = value.map(str::as_bytes).into_iter().collect();
        Presented::check(ring, uid, &values, Binding::ANY, now)
    }

    fn rooms(toml: &str) -> RoomSet {
        let config = Config::parse(
            &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
            Path::new("/tmp/x.toml"),
        )
        .unwrap();
        RoomSet::new(
            config
                .rooms
                .into_iter()
                .map(|r| Room::new(r, Pages::builtin(), &store()))
                .collect(),
        )
    }

    fn routed(set: &RoomSet, host: &str, path: &str, ip: &str) -> Option<(String, bool)> {
        let path = crate::path::normalize(path).unwrap();
        set.route(host, &path, ip.parse().unwrap())
            .map(|r| (r.room.name().to_owned(), r.bypass))
    }

    #[test]
    fn longest_prefix_and_host_win() {
        let set = rooms(
            "[[room]]\nname = \"site\"\n\
             [[room]]\nname = \"checkout\"\npaths = [\"/checkout\"]\ncookie_name = \"wr_checkout\"\n\
             [[room]]\nname = \"shop\"\nhosts = [\"shop.example\", \"*.shop.example\"]\npaths = [\"/\"]\ncookie_name = \"wr_shop\"\nbypass_paths = [\"/static/\"]\nbypass_cidrs = [\"10.0.0.0/8\"]\n",
        );
        let r = |h, p| routed(&set, h, p, "192.0.2.1");
        assert_eq!(r("a.example", "/"), Some(("site".into(), false)));
        assert_eq!(
            r("a.example", "/checkout/pay"),
            Some(("checkout".into(), false))
        );
        assert_eq!(r("shop.example", "/"), Some(("shop".into(), false)));
        assert_eq!(r("eu.shop.example", "/x"), Some(("shop".into(), false)));
        // The longer prefix wins even over a host match.
        assert_eq!(
            r("shop.example", "/checkout"),
            Some(("checkout".into(), false))
        );
        assert_eq!(
            r("shop.example", "/static/app.css"),
            Some(("shop".into(), true))
        );
        assert_eq!(
            routed(&set, "shop.example", "/", "10.1.2.3"),
            Some(("shop".into(), true))
        );
        assert_eq!(
            set.cookie_names(),
            ["waiting_room", "wr_checkout", "wr_shop"]
        );
    }

    #[test]
    fn unguarded_paths_have_no_room() {
        let set = rooms("[[room]]\npaths = [\"/tickets\"]\n");
        assert!(routed(&set, "x", "/", "192.0.2.1").is_none());
        assert!(routed(&set, "x", "/tickets/1", "192.0.2.1").is_some());
    }

    #[test]
    fn disabled_rooms_bypass() {
        let set = rooms("[[room]]\nenabled = false\nallow_percentage = 0\n");
        let room = set.iter().next().unwrap();
        let now = Timestamp::from_secs(1);
        let o = room.decide(&ring(), &alice(), &[], now);
        assert_eq!(
            (o.decision, o.cookie),
            (Decision::Bypass, CookieAction::Keep)
        );
        assert_eq!(room.effective_allow_percentage(now), 100.0);
    }

    #[test]
    fn first_valid_candidate_wins_and_rejections_are_reported() {
        let set = rooms("[[room]]\nallow_percentage = 100\n");
        let room = set.iter().next().unwrap();
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let good = crate::token::Claims::new(crate::token::Dec::Allow, 5_000, &alice(), "key1")
            .sign(ring.active());
        let o = room.decide(&ring, &alice(), &[b"junk", good.as_bytes()], now);
        assert_eq!(o.decision, Decision::Allow);
        assert_eq!(o.rejected, None);
        let o = room.decide(&ring, &bob(), &[good.as_bytes()], now);
        assert_eq!(o.rejected, Some(Reject::WrongUser));
        let o = room.decide(&ring, &alice(), &[b"junk"], now);
        assert_eq!(o.rejected, Some(Reject::Malformed));
    }

    fn code(ring: &KeyRing, room: &str, uses: u32) -> String {
        crate::invite::make(
            ring.active(),
            &crate::invite::Terms {
                room: room.into(),
                lane: "public".into(),
                exp: 10_000,
                uses,
            },
        )
    }

    fn bringing(code: &str) -> Brought<'_> {
        Brought {
            solution: None,
            invitation: Some(code.as_bytes()),
        }
    }

    #[test]
    fn an_invite_room_lets_in_only_the_invited_and_as_many_as_invited() {
        let set = rooms(
            "[[room]]\nname = \"presale\"\naccess = \"invite\"\nallow_percentage = 0\n\
             [[room]]\nname = \"shop\"\npaths = [\"/shop\"]\ncookie_name = \"shop\"\nallow_percentage = 0\n",
        );
        let (presale, shop) = (set.get(0).unwrap(), set.get(1).unwrap());
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let uninvited = presale.decide(&ring, &alice(), &[], now);
        assert_eq!(
            (uninvited.decision, &uninvited.cookie, uninvited.invitation),
            (Decision::Uninvited, &CookieAction::Keep, None)
        );
        assert_eq!(presale.page_context(&uninvited, 0, now).status, 403);

        let one = code(&ring, "presale", 1);
        let o = presale.decide_bringing(&ring, &alice(), &[], bringing(&one), now);
        assert_eq!((o.decision, o.invitation), (Decision::Deny, Some(Ok(()))));
        let CookieAction::Set(token) = o.cookie else {
            panic!("no token for an invited visitor: {o:?}")
        };
        assert!(token.contains("&rm=presale&"), "{token}");
        // The token is the place from then on.
        let o = presale.decide(&ring, &alice(), &[token.as_bytes()], now);
        assert_eq!((o.decision, o.rejected), (Decision::Deny, None));
        // Its one use is taken: another identity is refused, the same one joins again.
        let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&one), now);
        assert_eq!(
            (o.decision, o.invitation),
            (Decision::Uninvited, Some(Err(Refusal::UsedUp)))
        );
        assert!(presale.page_context(&o, 0, now).invitation_refused);
        let o = presale.decide_bringing(&ring, &alice(), &[], bringing(&one), now);
        assert_eq!(o.invitation, Some(Ok(())));
        assert_eq!(presale.invitations_in_use(now).invitations, 1);
        assert_eq!(presale.invitations_in_use(now).holders, 1);

        // A code of another room, and a place got in another room, are no way in.
        let other = code(&ring, "shop", 5);
        let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&other), now);
        assert_eq!(o.invitation, Some(Err(Refusal::BadSignature)));
        let CookieAction::Set(shop_token) = shop.decide(&ring, &bob(), &[], now).cookie else {
            panic!("the open room gives a token")
        };
        let o = presale.decide(&ring, &bob(), &[shop_token.as_bytes()], now);
        assert_eq!(
            (o.decision, o.rejected),
            (Decision::Uninvited, Some(Reject::WrongRoom))
        );
        // Nor is the presale's token a place in the shop.
        let o = shop.decide(&ring, &alice(), &[token.as_bytes()], now);
        assert_eq!(
            (o.decision, o.rejected),
            (Decision::Deny, Some(Reject::WrongRoom))
        );
        assert_ne!(
            o.cookie,
            CookieAction::Keep,
            "a new place in the shop's own line"
        );
    }

    #[test]
    fn an_open_room_takes_anyone_and_counts_refused_invitations() {
        let set = rooms("[[room]]\nname = \"shop\"\nallow_percentage = 100\n");
        let shop = set.get(0).unwrap();
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let o = shop.decide_bringing(&ring, &alice(), &[], bringing("i1~junk"), now);
        assert_eq!(
            (o.decision, o.invitation),
            (Decision::Allow, Some(Err(Refusal::Malformed)))
        );
        let expired = code(&ring, "shop", 1);
        let later = Timestamp::from_secs(10_000);
        let o = shop.decide_bringing(&ring, &alice(), &[], bringing(&expired), later);
        assert_eq!(o.invitation, Some(Err(Refusal::Expired)));
        // A visitor holding a place needs no invitation: it is not looked at.
        let CookieAction::Set(token) = shop.decide(&ring, &bob(), &[], now).cookie else {
            panic!("a token")
        };
        let o = shop.decide_bringing(&ring, &bob(), &[token.as_bytes()], bringing("x"), now);
        assert_eq!(o.invitation, None);
    }

    #[test]
    fn a_revoked_invitation_is_refused_and_its_holders_keep_their_places() {
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let before =
            rooms("[[room]]\nname = \"presale\"\naccess = \"invite\"\nallow_percentage = 100\n");
        let shared = code(&ring, "presale", 10);
        let o =
            before
                .get(0)
                .unwrap()
                .decide_bringing(&ring, &alice(), &[], bringing(&shared), now);
        let CookieAction::Set(token) = o.cookie else {
            panic!("a place: {o:?}")
        };
        let id = crate::invite::id_of(&shared).unwrap();
        let after = rooms(&format!(
            "[[room]]\nname = \"presale\"\naccess = \"invite\"\nallow_percentage = 100\nrevoked_invitations = [\"{id:016x}\"]\n"
        ));
        let presale = after.get(0).unwrap();
        let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&shared), now);
        assert_eq!(
            (o.decision, o.invitation),
            (Decision::Uninvited, Some(Err(Refusal::Revoked)))
        );
        let o = presale.decide(&ring, &alice(), &[token.as_bytes()], now);
        assert_eq!(o.decision, Decision::Allow, "a holder keeps their place");
    }

    #[test]
    fn a_full_memory_refuses_new_invitations_and_keeps_used_ones() {
        let set = rooms("[[room]]\nname = \"presale\"\naccess = \"invite\"\nmax_invitations = 1\n");
        let presale = set.get(0).unwrap();
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let (a, b) = (code(&ring, "presale", 2), code(&ring, "presale", 2));
        let o = presale.decide_bringing(&ring, &alice(), &[], bringing(&a), now);
        assert_eq!(o.invitation, Some(Ok(())));
        let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&b), now);
        assert_eq!(o.invitation, Some(Err(Refusal::Full)));
        let o = presale.decide_bringing(&ring, &bob(), &[], bringing(&a), now);
        assert_eq!(
            o.invitation,
            Some(Ok(())),
            "a remembered one still has a use"
        );
    }

    #[test]
    fn rooms_of_a_set_of_several_take_only_their_own_places() {
        let ring = ring();
        let now = Timestamp::from_secs(1_000);
        let token = |room: &Room, uid: &Identity| match room.decide(&ring, uid, &[], now).cookie {
            CookieAction::Set(t) => t,
            other => panic!("no token: {other:?}"),
        };
        // One open room: the VCL's four fields.
        let one = rooms("[[room]]\nallow_percentage = 100\n");
        let vcl = token(one.get(0).unwrap(), &alice());
        assert!(!vcl.contains("rm="), "{vcl}");
        // Several: each names itself, and refuses another's.
        let set = rooms(
            "[[room]]\nname = \"site\"\nallow_percentage = 100\n\
             [[room]]\nname = \"checkout\"\npaths = [\"/checkout\"]\ncookie_name = \"c\"\nallow_percentage = 0\n",
        );
        let (site, checkout) = (set.get(0).unwrap(), set.get(1).unwrap());
        let easy = token(site, &alice());
        assert!(easy.contains("&rm=site&"), "{easy}");
        let o = checkout.decide(&ring, &alice(), &[easy.as_bytes()], now);
        assert_eq!(
            (o.decision, o.rejected),
            (Decision::Deny, Some(Reject::WrongRoom))
        );
        assert!(matches!(&o.cookie, CookieAction::Set(t) if t.contains("&rm=checkout&")));
        // A token naming no room (from before a second room was added) is still taken.
        let o = site.decide(&ring, &alice(), &[vcl.as_bytes()], now);
        assert_eq!((o.decision, o.rejected), (Decision::Allow, None));
        assert_eq!(
            site.holding(&ring, &alice(), &[easy.as_bytes()], now),
            Some(crate::token::Dec::Allow)
        );
        assert_eq!(
            checkout.holding(&ring, &alice(), &[easy.as_bytes()], now),
            None
        );
    }
}
