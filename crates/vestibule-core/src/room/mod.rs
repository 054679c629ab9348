//! Admission: which room a request belongs to, and what that room decides.
//!
//! A request is routed by host and by the longest matching path prefix among all rooms; inside
//! its room, `bypass_paths` and `bypass_cidrs` let it pass untouched. The room then checks the
//! presented cookie (every candidate value, first valid wins) and its admission policy decides.
//! Nothing here sees HTTP: the proxy hands in the host, the normalised path, the client address,
//! the identity and the raw cookie values, and gets an [`Outcome`] back.

mod admission;
pub mod capacity;
pub mod draw;
pub mod event;
pub mod lottery;
mod outcome;
pub mod page;
mod routes;
#[cfg(test)]
pub mod tests;
pub mod watch;

/// Rooms for tests and benches.
#[doc(hidden)]
pub mod testing {
    use std::path::Path;
    use std::sync::Arc;

    use super::{Room, RoomSet};
    use crate::config::{testing::Bare, Config};
    use crate::store::local::LocalStore;

    /// The rooms of the `[[room]]` tables in `toml`, each on a fresh in-process store.
    pub fn rooms(toml: &str) -> RoomSet {
        let config = Config::parse(
            &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
            Path::new("/tmp/x.toml"),
            &Bare,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        RoomSet::new(
            config
                .rooms
                .into_iter()
                .map(|r| Room::new(r, &(Arc::new(LocalStore::new()) as _)))
                .collect(),
        )
    }
}

pub use outcome::{
    Binding, Brought, CookieAction, Decision, Hold, Outcome, Place, PowCount, Presented,
};
pub use routes::{RoomSet, Route};

use std::sync::Arc;

use crate::autopilot::pilot::{PilotCell, PilotHandle, RoomNow};
use crate::challenge::{self, Failure};
use crate::config::{
    Access, Admission as AdmissionConfig, ChallengeConfig, OnChallengeFailure, RoomConfig,
};
use crate::controls::{Held, PaceHandle, RoomCell};
use crate::identity::Identity;
use crate::invite::{self, Refusal};
use crate::keys::KeyRing;
use crate::store::{CounterStore, Invited, Mark, MarkKind, Ticket};
use crate::time::Timestamp;
use crate::token::Token;

use admission::Admission;
use capacity::{Capacity, Figures};
use lottery::Lottery;
use page::Estimates;

/// How a room admits people: a lottery or a capacity room.
type Policy = Box<dyn Admission>;

/// One `[[room]]`, ready to decide.
pub struct Room {
    pub config: RoomConfig,
    policy: Policy,
    /// Per event (as `config.events`): its policy, the room's settings with its overrides.
    events: Vec<Policy>,
    store: Arc<dyn CounterStore>,
    /// Operator overrides; the same cell across reloads.
    controls: Arc<RoomCell>,
    /// The autopilot; the same cell across reloads.
    pilot: Arc<PilotCell>,
    /// `pow` rooms: the cookie a solution may come back in (`<cookie_name>_pow`).
    solution_cookie: Option<String>,
    /// `jwt` rooms: the cookie their JWT goes in (`<cookie_name>_jwt`).
    jwt_cookie: Option<String>,
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
    pub fn new(config: RoomConfig, store: &Arc<dyn CounterStore>) -> Room {
        let policy_of = |admission: &AdmissionConfig| match admission {
            AdmissionConfig::Lottery {
                allow_percentage,
                wait_period,
                allow_period,
                closed_refresh,
            } => Box::new(Lottery::new(
                *allow_percentage,
                *wait_period,
                *allow_period,
                *closed_refresh,
                config.queue_all,
            )) as Policy,
            // An event's policy counts in the room's counters: the same people, other limits.
            AdmissionConfig::Capacity(c) => Box::new(Capacity::new(
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
            .map(|e| policy_of(&e.admission(&config.admission)))
            .collect();
        let mut room = Room {
            policy,
            events,
            store: store.clone(),
            controls: Arc::default(),
            pilot: Arc::default(),
            solution_cookie: config
                .challenge
                .map(|_| format!("{}_pow", config.cookie.name)),
            jwt_cookie: config
                .jwt
                .as_ref()
                .map(|_| format!("{}_jwt", config.cookie.name)),
            config,
        };
        // A room that asks who may join takes only the tokens it issued itself.
        if room.binding().required {
            room.bind_tokens();
        }
        if room.config.api.is_some() {
            let policies = std::iter::once(&mut room.policy).chain(room.events.iter_mut());
            for policy in policies {
                policy.number_arrivals();
            }
        }
        room
    }

    /// The capacity room deciding now (a running event's, else the room's), if the room has
    /// the queue API.
    pub fn numbered(&self, now: Timestamp) -> Option<&Capacity> {
        self.config.api.as_ref()?;
        self.policy_at(now).capacity()
    }

    /// The event in force now (pre-queue or running), if any.
    pub fn event_now(&self, now: Timestamp) -> Option<event::Phase<'_>> {
        event::in_force(&self.config.events, now)
    }

    /// `event`'s verifiable draw (one of this room's events), once the draw secret is known;
    /// `None` for a keyed draw.
    pub fn draw(&self, event: &crate::config::EventConfig) -> Option<draw::Draw> {
        if !event.verifiable() {
            return None;
        }
        draw::secret_of(&*self.store).map(|s| s.draw(self.name(), event))
    }

    /// The receipts handed out in `event`'s verifiable draw, and how many more were handed out
    /// past the store's bound and are not remembered.
    pub fn receipts(
        &self,
        event: &crate::config::EventConfig,
        now: Timestamp,
    ) -> (Vec<draw::Receipt>, u64) {
        draw::receipts(&*self.store, self.name(), event, now)
    }

    /// The policy deciding now: a running event's, else the room's.
    fn policy_at(&self, now: Timestamp) -> &Policy {
        match self.event_now(now) {
            Some(p) if p.state == event::EventState::Running => &self.events[p.index],
            _ => &self.policy,
        }
    }

    /// What visitors are told they wait for now: the title of the event in force, else the
    /// room's.
    pub fn title_at(&self, now: Timestamp) -> &str {
        self.event_now(now)
            .and_then(|p| p.event.overrides.title.as_deref())
            .unwrap_or(&self.config.title)
    }

    /// This room decides under `controls` (the operator overrides kept for its name), and it
    /// and each of its events admit at the operator's pace override while one is in force.
    pub fn with_controls(mut self, controls: Arc<RoomCell>) -> Room {
        let handle = PaceHandle(Some(controls.clone()));
        let policies = std::iter::once(&mut self.policy).chain(self.events.iter_mut());
        for policy in policies {
            policy.paced_by(handle.clone());
        }
        self.controls = controls;
        self
    }

    /// This room (and each of its events) admits at what `pilot` sets while its autopilot
    /// runs: the pace of a capacity room, the percentage of a lottery.
    pub fn with_pilot(mut self, pilot: Arc<PilotCell>) -> Room {
        let handle = PilotHandle(Some(pilot.clone()));
        let policies = std::iter::once(&mut self.policy).chain(self.events.iter_mut());
        for policy in policies {
            policy.steer_by(handle.clone());
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
        let policies = std::iter::once(&mut self.policy).chain(self.events.iter_mut());
        for policy in policies {
            policy.bind_to(room.clone());
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

    /// `jwt` rooms: the name of the cookie their JWT goes in.
    pub fn jwt_cookie(&self) -> Option<&str> {
        self.jwt_cookie.as_deref()
    }

    /// What the autopilot steers from now: the configured `new_users_per_minute` and session in
    /// force (a running event's, else the room's), what is active and what waits. `None` for
    /// lottery rooms.
    pub fn pilot_now(&self, now: Timestamp) -> Option<RoomNow> {
        let autopilot = self.config.autopilot.as_ref()?;
        Some(self.policy_at(now).pilot_now(autopilot, now))
    }

    pub fn controls(&self) -> &RoomCell {
        &self.controls
    }

    /// Whether the room is sold out now: the operator's override, else the `sold_out` key.
    pub fn sold_out(&self) -> bool {
        self.sold_out_under(self.controls.held())
    }

    fn sold_out_under(&self, held: Held) -> bool {
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
            Some(p) => &self.events[p.index],
            None => &self.policy,
        };
        let mut outcome = match phase {
            Some(p) if p.state == event::EventState::PreQueue => {
                policy.prequeue(ring, uid, &presented, p.event, lane, now)
            }
            _ => policy.decide_held(ring, uid, &presented, &hold, now),
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
        if let (true, Some(t)) = (outcome.admitted, &presented.valid) {
            if let Some(until) = policy.wins_until(t) {
                outcome.admitted = self.first_win(t, until, now);
            }
        }
        // A lottery's autopilot counts draws: a lost one, or a visitor let in (from the line, or
        // straight in at 100 %).
        if policy.draws() && self.config.autopilot.is_some() {
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
    fn first_win(&self, token: &Token, until: Timestamp, now: Timestamp) -> bool {
        let mut id = [0u8; 8];
        id.copy_from_slice(&token.signature()[..8]);
        let mark = Mark {
            kind: MarkKind::Admitted,
            id: u64::from_le_bytes(id),
        };
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
        if token.claims.dec == crate::token::Dec::Allow
            && self.policy_at(now).is_revoked(&token.claims, now)
        {
            return None;
        }
        Some(token.claims.dec)
    }

    /// How often a closed or sold-out page checks again: `closed_refresh` of a lottery room,
    /// `refresh` of a capacity room.
    fn closed_refresh(&self) -> u64 {
        self.policy.closed_refresh()
    }

    /// How long a held visitor should wait before asking again: the refresh of a capacity
    /// room, the wait period of a lottery room (or its `closed_refresh` when closed).
    pub fn retry_after(&self) -> u64 {
        self.policy.retry_after()
    }

    /// Capacity rooms: the `new_users_per_minute` in force now (the operator's pace override
    /// while in force, else the autopilot's while it runs, a running event's, else the room's;
    /// 0 = no limit).
    pub fn effective_new_users_per_minute(&self, now: Timestamp) -> Option<u64> {
        self.policy_at(now).new_users_per_minute(now)
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
        self.policy_at(now).admit_chance(now)
    }

    /// How many invitations are remembered as in use in this room now (against
    /// `max_invitations`).
    pub fn invitations_in_use(&self, now: Timestamp) -> crate::store::InUse {
        self.store.invitations_in_use(self.name(), now)
    }

    /// Live figures of a capacity room (`None` for lottery rooms, which keep no counts). During
    /// an event's pre-queue, its visitors are the waiting users (they check in from the start).
    pub fn figures(&self, now: Timestamp) -> Option<Figures> {
        let policy = self.policy_at(now);
        let mut figures = policy.figures(now)?;
        if let Some(p) = self
            .event_now(now)
            .filter(|p| p.state == event::EventState::PreQueue)
        {
            figures.waiting += policy.prequeued(p.event, now);
        }
        Some(figures)
    }

    /// Ends an admitted user's session: capacity rooms stop counting them, once, and refuse the
    /// session's tokens from then on.
    pub fn revoke(&self, place: Option<Place>, now: Timestamp) {
        if let Some(place) = place {
            self.policy_at(now).revoke(place, now);
        }
    }
}
