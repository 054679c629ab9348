//! The lottery waiting room: Fastly's stateless pattern, decision for decision.
//!
//! A new user gets a wait token expiring on a period boundary, `exp = (floor(now/d) + 2) * d`,
//! so every token one identity gets within one bucket is identical (extra devices gain
//! nothing) while different identities' tokens differ. Once `exp` passes, the token is eligible
//! for one more wait period and is drawn once: a generator seeded by a keyed hash of its
//! signature (the key derived from the ring key that signed it) gives a fixed number in
//! [0, 1), and the user wins when it is below `allow_percentage`. Presenting the same token
//! again gives the same answer; nobody without the key can tell a winning token from a losing
//! one; and a token older than its eligibility window is a new arrival, so winners cannot be
//! collected and presented days later. A loser gets a fresh wait token and waits again.
//! Winners get allow tokens, renewed on allowed requests and re-sent only when their value
//! changes.
//!
//! A room that holds everyone (`allow_percentage = 0`, closed; or `queue_all`) keeps waiting
//! visitors in line: their wait token is renewed whenever it has come due, never deleted, so
//! they are eligible the moment the room opens again. Admitted users keep access.

use std::sync::Arc;
use std::time::Duration;

use crate::autopilot::pilot::PilotHandle;
use crate::controls::PaceHandle;
use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::time::Timestamp;
use crate::token::{Claims, Dec, Reject, Token};

use super::event::prequeue_place;
use super::{CookieAction, Decision, Hold, Outcome, Presented};
use crate::config::EventConfig;

/// A lottery room's settings, in whole seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lottery {
    pub allow_percentage: u8,
    pub wait_period: u64,
    pub allow_period: u64,
    /// How often the page of a closed room checks again.
    pub closed_refresh: u64,
    pub queue_all: bool,
    /// The autopilot that sets the percentage while it runs.
    pub pilot: PilotHandle,
    /// The operator's pace override, which beats the autopilot while in force.
    pub operator: PaceHandle,
    /// Tokens carry the room's name (rooms that ask who may join).
    pub bound: Option<Arc<str>>,
}

/// `(floor(now / d) + 2) * d`: the second period boundary after `now`.
pub fn bucket_exp(now_secs: u64, d: u64) -> u64 {
    let d = d.max(1);
    (now_secs / d).saturating_add(2).saturating_mul(d)
}

/// Where a wait token stands at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Due {
    /// Before `exp`: keep waiting.
    NotYet,
    /// Within one wait period after `exp`: drawn.
    Eligible,
    /// Older: the holder is a new arrival.
    Stale,
}

impl Lottery {
    pub fn new(
        allow_percentage: u8,
        wait: Duration,
        allow: Duration,
        closed_refresh: Duration,
        queue_all: bool,
    ) -> Self {
        Lottery {
            allow_percentage: allow_percentage.min(100),
            wait_period: wait.as_secs().max(1),
            allow_period: allow.as_secs().max(1),
            closed_refresh: closed_refresh.as_secs().max(1),
            queue_all,
            pilot: PilotHandle::default(),
            operator: PaceHandle::default(),
            bound: None,
        }
    }

    /// The percentage in force at `now`: the operator's override while in force, else the
    /// autopilot's while it runs, else `allow_percentage`. (A configured 0 closes the room
    /// whatever the autopilot or the operator's pace says; neither opens a closed room.)
    pub fn percentage(&self, now: Timestamp) -> f64 {
        self.operator.pace(now).unwrap_or_else(|| {
            self.pilot
                .percentage()
                .unwrap_or(f64::from(self.allow_percentage))
        })
    }

    /// Whether a token's fixed draw wins at the percentage in force at `now` (never, if its
    /// key is gone).
    pub fn wins(&self, token: &Token, ring: &KeyRing, now: Timestamp) -> bool {
        token
            .draw(ring)
            .is_some_and(|d| d * 100.0 < self.percentage(now))
    }

    fn due(&self, token: &Token, now: Timestamp) -> Due {
        let exp = token.claims.exp;
        if now.secs() < exp {
            Due::NotYet
        } else if now.secs() < exp.saturating_add(self.wait_period) {
            Due::Eligible
        } else {
            Due::Stale
        }
    }

    /// The decision for one request. `presented` is the verdict on the cookie the user sent.
    #[cfg(test)]
    pub fn decide(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        now: Timestamp,
    ) -> Outcome {
        self.decide_held(ring, uid, presented, &Hold::NONE, now)
    }

    /// Decides under what holds the room beyond its settings (operator actions).
    pub(crate) fn decide_held(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        let valid = presented.valid.as_ref();
        // Admitted users keep access, whatever holds the room.
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Allow) {
            return self.allow(ring, uid, Some(token), now, false);
        }
        let waiting = valid.filter(|t| t.claims.dec == Dec::Wait);
        // Closed, or holding everyone: nobody new gets in, and those waiting keep their place;
        // an operator's `admit` still lets in those whose wait is over.
        if self.allow_percentage == 0 || self.queue_all || hold.held {
            if waiting.is_some_and(|t| self.due(t, now) == Due::Eligible) && (hold.grant)() {
                return self.allow(ring, uid, None, now, true);
            }
            return self.hold(ring, uid, waiting.map(|t| &**t), now);
        }
        if self.percentage(now) >= 100.0 {
            let admitted = waiting.is_some();
            let mut outcome = self.allow(ring, uid, None, now, admitted);
            outcome.arrived = !admitted;
            return outcome;
        }
        match waiting.map(|t| (t, self.due(t, now))) {
            Some((t, Due::NotYet)) => self.keep_waiting(t, now),
            Some((t, Due::Eligible)) if self.wins(t, ring, now) => {
                self.allow(ring, uid, None, now, true)
            }
            // Lost the draw, but an operator let some more in.
            Some((_, Due::Eligible)) if (hold.grant)() => self.allow(ring, uid, None, now, true),
            // Lost the draw: wait again, with a new wait token.
            Some((_, Due::Eligible)) => {
                let mut outcome = self.start_waiting(ring, uid, now);
                outcome.decision = Decision::Lost;
                outcome
            }
            // Too old to be drawn: a new arrival.
            Some((_, Due::Stale)) => {
                let mut outcome = self.start_waiting(ring, uid, now);
                outcome.rejected = Some(Reject::Expired);
                outcome.arrived = true;
                outcome
            }
            None => {
                let mut outcome = self.start_waiting(ring, uid, now);
                outcome.arrived = true;
                outcome
            }
        }
    }

    /// An event's pre-queue: nobody new is let in and admitted users keep access.
    /// Everyone else gets, or keeps, a wait token due in the event's first wait period, at the
    /// moment of their place in the pre-queue ([`prequeue_place`]: drawn, keyed, with
    /// `shuffle_at_start`; else by arrival), so pre-queued visitors are drawn first, in that
    /// order, ahead of anyone who arrives after `start` (whose tokens come due a wait period
    /// later at the earliest).
    pub fn prequeue(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        event: &EventConfig,
        now: Timestamp,
    ) -> Outcome {
        let valid = presented.valid.as_ref();
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Allow) {
            return self.allow(ring, uid, Some(token), now, false);
        }
        let first_period = event.start..event.start.saturating_add(self.wait_period);
        let mut arrived = false;
        let in_line = valid
            .filter(|t| t.claims.dec == Dec::Wait && first_period.contains(&t.claims.exp))
            .map(|t| t.claims.exp);
        let (cookie, due) = match in_line {
            Some(exp) => (CookieAction::Keep, exp),
            None => {
                arrived = valid.is_none_or(|t| t.claims.dec != Dec::Wait);
                let place = prequeue_place(ring.active(), event, uid, now.secs());
                let offset = (place * self.wait_period as f64) as u64;
                let due = event.start + offset.min(self.wait_period - 1);
                let key = ring.active();
                let token = ring.sign_cached(
                    Claims::new(Dec::Wait, due, uid, key.id()).in_room(self.bound.as_ref()),
                );
                (CookieAction::Set(token), due)
            }
        };
        let mut outcome = Outcome::prequeued(cookie, due, now);
        outcome.arrived = arrived;
        outcome
    }

    /// A closed room (the `deny` page) or one holding everyone (`queue_all`): a visitor keeps
    /// their place, with a wait token renewed whenever it has come due.
    fn hold(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        waiting: Option<&Token>,
        now: Timestamp,
    ) -> Outcome {
        let closed = self.allow_percentage == 0;
        let mut outcome = match waiting {
            Some(t) if self.due(t, now) == Due::NotYet => self.keep_waiting(t, now),
            Some(_) => {
                let mut renewed = self.start_waiting(ring, uid, now);
                renewed.decision = Decision::Wait;
                renewed
            }
            None => {
                let mut outcome = self.start_waiting(ring, uid, now);
                outcome.arrived = true;
                outcome
            }
        };
        if closed {
            outcome.decision = Decision::Deny;
            outcome.refresh_secs = self.closed_refresh;
        } else if outcome.decision == Decision::Wait {
            // Held: nothing to wait for but the hold, so check back each wait period.
            outcome.refresh_secs = outcome.refresh_secs.clamp(1, self.wait_period);
        }
        outcome
    }

    fn allow(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        current: Option<&Token>,
        now: Timestamp,
        admitted: bool,
    ) -> Outcome {
        let exp = bucket_exp(now.secs(), self.allow_period);
        let key = ring.active();
        // Same fields, same key: the signature, and so the cookie, would not change.
        let unchanged = current.is_some_and(|t| {
            t.claims.exp == exp && t.claims.kid == key.id() && t.claims.is_lottery()
        });
        let cookie = if unchanged {
            CookieAction::Keep
        } else {
            CookieAction::Set(ring.sign_cached(
                Claims::new(Dec::Allow, exp, uid, key.id()).in_room(self.bound.as_ref()),
            ))
        };
        let mut outcome = Outcome::new(Decision::Allow, cookie);
        outcome.admitted = admitted;
        outcome
    }

    fn start_waiting(&self, ring: &KeyRing, uid: &Identity, now: Timestamp) -> Outcome {
        let exp = bucket_exp(now.secs(), self.wait_period);
        let key = ring.active();
        let value = ring
            .sign_cached(Claims::new(Dec::Wait, exp, uid, key.id()).in_room(self.bound.as_ref()));
        let mut outcome = Outcome::new(Decision::Anon, CookieAction::Set(value));
        outcome.refresh_secs = exp.saturating_sub(now.secs()).max(1);
        outcome
    }

    fn keep_waiting(&self, token: &Token, now: Timestamp) -> Outcome {
        let mut outcome = Outcome::new(Decision::Wait, CookieAction::Keep);
        outcome.refresh_secs = token.claims.exp.saturating_sub(now.secs()).max(1);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::tests::{alice, bob, presented, ring};
    use crate::token::Reject;

    fn lottery(pct: u8) -> Lottery {
        Lottery::new(
            pct,
            Duration::from_secs(30),
            Duration::from_secs(3600),
            Duration::from_secs(60),
            false,
        )
    }

    fn set_value(o: &Outcome) -> &str {
        match &o.cookie {
            CookieAction::Set(v) => v,
            other => panic!("expected Set, got {other:?}"),
        }
    }

    #[test]
    fn bucket_alignment() {
        assert_eq!(bucket_exp(0, 30), 60);
        assert_eq!(bucket_exp(29, 30), 60);
        assert_eq!(bucket_exp(30, 30), 90);
        assert_eq!(bucket_exp(1_700_000_012, 3600), 1_700_002_800 + 3600);
        assert_eq!(bucket_exp(u64::MAX, 30), u64::MAX);
    }

    #[test]
    fn new_user_waits_with_an_aligned_token() {
        let ring = ring();
        let now = Timestamp::from_secs(1_000_012);
        let o = lottery(50).decide(&ring, &alice(), &presented(&ring, &alice(), None, now), now);
        assert_eq!(o.decision, Decision::Anon);
        let value = set_value(&o);
        assert!(
            value.starts_with("dec=wait&exp=1000050&uid=192.0.2.10&kid=key1&sig=0x"),
            "{value}"
        );
        assert_eq!(o.refresh_secs, 38);
    }

    #[test]
    fn same_identity_same_bucket_same_token() {
        let ring = ring();
        let l = lottery(50);
        let t1 = Timestamp::from_secs(1_000_001);
        let t2 = Timestamp::from_secs(1_000_019);
        let a1 = l.decide(&ring, &alice(), &presented(&ring, &alice(), None, t1), t1);
        let a2 = l.decide(&ring, &alice(), &presented(&ring, &alice(), None, t2), t2);
        let b1 = l.decide(&ring, &bob(), &presented(&ring, &bob(), None, t1), t1);
        assert_eq!(set_value(&a1), set_value(&a2));
        assert_ne!(set_value(&a1), set_value(&b1));
    }

    #[test]
    fn waiting_before_exp_keeps_the_cookie() {
        let ring = ring();
        let l = lottery(50);
        let t0 = Timestamp::from_secs(1_000_000);
        let wait = set_value(&l.decide(&ring, &alice(), &presented(&ring, &alice(), None, t0), t0))
            .to_owned();
        let t1 = Timestamp::from_secs(1_000_030);
        let o = l.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&wait), t1),
            t1,
        );
        assert_eq!(o.decision, Decision::Wait);
        assert_eq!(o.cookie, CookieAction::Keep);
        assert_eq!(o.refresh_secs, 20);
    }

    #[test]
    fn eligible_tokens_draw_once_and_stick() {
        let ring = ring();
        let l = lottery(50);
        let (mut wins, mut losses) = (0, 0);
        for i in 0..400u32 {
            let uid = Identity::of_ip(std::net::IpAddr::from([10, 0, (i >> 8) as u8, i as u8]), 64);
            let t0 = Timestamp::from_secs(1_000_000);
            let wait =
                set_value(&l.decide(&ring, &uid, &presented(&ring, &uid, None, t0), t0)).to_owned();
            // exp is 1_000_050; the token is drawn until 1_000_080.
            let later = Timestamp::from_secs(1_000_055);
            let first = l.decide(
                &ring,
                &uid,
                &presented(&ring, &uid, Some(&wait), later),
                later,
            );
            // The same token, presented again within its window, gets the same answer.
            for dt in [1, 7, 24] {
                let again_at = Timestamp::from_secs(1_000_055 + dt);
                let again = l.decide(
                    &ring,
                    &uid,
                    &presented(&ring, &uid, Some(&wait), again_at),
                    again_at,
                );
                assert_eq!(again.decision, first.decision);
            }
            // Later, winner or not, it is a new arrival: winners cannot be hoarded.
            for dt in [25, 500, 86_400] {
                let stale_at = Timestamp::from_secs(1_000_055 + dt);
                let stale = l.decide(
                    &ring,
                    &uid,
                    &presented(&ring, &uid, Some(&wait), stale_at),
                    stale_at,
                );
                assert_eq!(stale.decision, Decision::Anon);
                assert_eq!(stale.rejected, Some(Reject::Expired));
            }
            match first.decision {
                Decision::Allow => {
                    wins += 1;
                    assert!(first.admitted);
                    assert!(set_value(&first).starts_with("dec=allow&exp=1004400&"));
                }
                Decision::Lost => {
                    losses += 1;
                    // A loser gets a new wait token (and the decision says it lost, not that
                    // it arrived).
                    assert!(set_value(&first).starts_with("dec=wait&exp=1000110&"));
                }
                other => panic!("{other:?}"),
            }
        }
        // 400 draws at p = 0.5: mean 200, sigma 10.
        assert!((160..=240).contains(&wins), "wins {wins} losses {losses}");
    }

    #[test]
    fn allow_tokens_renew_only_when_the_value_changes() {
        let ring = ring();
        let l = lottery(50);
        let now = Timestamp::from_secs(2_000_000);
        let allow = Claims::new(Dec::Allow, bucket_exp(now.secs(), 3600), &alice(), "key1")
            .sign(ring.active());
        let o = l.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&allow), now),
            now,
        );
        assert_eq!(
            (o.decision, &o.cookie, o.admitted),
            (Decision::Allow, &CookieAction::Keep, false)
        );
        // Next allow bucket: renewed.
        let later = Timestamp::from_secs(2_000_000 + 3600);
        let o = l.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&allow), later),
            later,
        );
        assert_eq!(o.decision, Decision::Allow);
        assert!(set_value(&o).starts_with(&format!(
            "dec=allow&exp={}&",
            bucket_exp(later.secs(), 3600)
        )));
    }

    #[test]
    fn allow_tokens_expire() {
        let ring = ring();
        let l = lottery(50);
        let allow = Claims::new(Dec::Allow, 2_000_000, &alice(), "key1").sign(ring.active());
        let now = Timestamp::from_secs(2_000_000);
        let p = presented(&ring, &alice(), Some(&allow), now);
        assert_eq!(p.rejected, Some(crate::token::Reject::Expired));
        let o = l.decide(&ring, &alice(), &p, now);
        assert_eq!(o.decision, Decision::Anon);
    }

    #[test]
    fn zero_closes_the_room_but_keeps_everyone_in_line() {
        let ring = ring();
        let now = Timestamp::from_secs(3_000_000);
        let closed = lottery(0);
        // A newcomer gets the deny page and a place in line, checking back every closed_refresh.
        let o = closed.decide(&ring, &alice(), &presented(&ring, &alice(), None, now), now);
        assert_eq!(o.decision, Decision::Deny);
        assert_eq!(o.refresh_secs, 60);
        let wait = set_value(&o).to_owned();
        assert!(wait.starts_with("dec=wait&exp=3000060&"), "{wait}");
        // Before it comes due the token stands; after, it is renewed (never deleted).
        let t = Timestamp::from_secs(3_000_020);
        let o = closed.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&wait), t),
            t,
        );
        assert_eq!(
            (o.decision, &o.cookie),
            (Decision::Deny, &CookieAction::Keep)
        );
        let t = Timestamp::from_secs(3_000_065);
        let o = closed.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&wait), t),
            t,
        );
        assert_eq!(o.decision, Decision::Deny);
        let renewed = set_value(&o).to_owned();
        assert!(renewed.starts_with("dec=wait&exp=3000120&"), "{renewed}");
        // The room reopens: the renewed token is drawn as soon as it is due.
        let open = Timestamp::from_secs(3_000_121);
        let o = lottery(100).decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&renewed), open),
            open,
        );
        assert_eq!((o.decision, o.admitted), (Decision::Allow, true));
        // Admitted users keep access in a closed room.
        let allow = Claims::new(Dec::Allow, 4_000_000, &alice(), "key1").sign(ring.active());
        let o = closed.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&allow), now),
            now,
        );
        assert_eq!(o.decision, Decision::Allow);
    }

    #[test]
    fn hundred_allows_everyone_with_an_allow_token() {
        let ring = ring();
        let now = Timestamp::from_secs(3_000_000);
        let o = lottery(100).decide(&ring, &alice(), &presented(&ring, &alice(), None, now), now);
        assert_eq!(o.decision, Decision::Allow);
        assert!(set_value(&o).starts_with("dec=allow&"));
        // So lowering it later keeps them in.
        let lowered = Timestamp::from_secs(3_000_010);
        let token = set_value(&o).to_owned();
        let o = lottery(1).decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&token), lowered),
            lowered,
        );
        assert_eq!(o.decision, Decision::Allow);
    }

    #[test]
    fn queue_all_holds_everyone_but_the_admitted() {
        let ring = ring();
        let mut l = lottery(100);
        l.queue_all = true;
        let now = Timestamp::from_secs(5_000_000);
        let o = l.decide(&ring, &alice(), &presented(&ring, &alice(), None, now), now);
        assert_eq!(o.decision, Decision::Anon);
        let wait = set_value(&o).to_owned();
        let later = Timestamp::from_secs(5_000_500);
        let o = l.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&wait), later),
            later,
        );
        // Come due under the hold: renewed, so the visitor stays eligible for the reopening.
        assert_eq!((o.decision, o.refresh_secs), (Decision::Wait, 30));
        assert!(set_value(&o).starts_with("dec=wait&exp=5000550&"));
        let allow = Claims::new(Dec::Allow, 6_000_000, &alice(), "key1").sign(ring.active());
        let o = l.decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&allow), later),
            later,
        );
        assert_eq!(o.decision, Decision::Allow);
    }
}
