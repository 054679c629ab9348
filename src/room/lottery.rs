//! The lottery waiting room: Fastly's stateless pattern, decision for decision.
//!
//! A new user gets a wait token expiring on a period boundary, `exp = (floor(now/d) + 2) * d`,
//! so every token one identity gets within one bucket is identical (extra devices gain
//! nothing) while different identities' tokens differ. Once `exp` passes, the token is drawn
//! once: a generator seeded by its signature gives a fixed number in [0, 1), and the user wins
//! when it is below `allow_percentage`. Presenting the same token again gives the same answer;
//! a loser gets a fresh wait token and waits again. Winners get allow tokens, renewed on
//! allowed requests and re-sent only when their value changes.

use std::time::Duration;

use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::time::Timestamp;
use crate::token::{Claims, Dec, Token};

use super::{CookieAction, Decision, Outcome, Presented};

/// A lottery room's settings, in whole seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lottery {
    pub allow_percentage: u8,
    pub wait_period: u64,
    pub allow_period: u64,
    pub queue_all: bool,
}

/// `(floor(now / d) + 2) * d`: the second period boundary after `now`.
pub fn bucket_exp(now_secs: u64, d: u64) -> u64 {
    let d = d.max(1);
    (now_secs / d).saturating_add(2).saturating_mul(d)
}

impl Lottery {
    pub fn new(allow_percentage: u8, wait: Duration, allow: Duration, queue_all: bool) -> Self {
        Lottery {
            allow_percentage: allow_percentage.min(100),
            wait_period: wait.as_secs().max(1),
            allow_period: allow.as_secs().max(1),
            queue_all,
        }
    }

    /// Whether a token's fixed draw wins at this percentage.
    pub fn wins(&self, token: &Token) -> bool {
        token.draw() * 100.0 < f64::from(self.allow_percentage)
    }

    /// The decision for one request. `presented` is the verdict on the cookie the user sent.
    pub fn decide(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        now: Timestamp,
    ) -> Outcome {
        let valid = presented.valid.as_ref();
        // Closed: nobody gets in, and a cookie they hold is cleared.
        if self.allow_percentage == 0 {
            let cookie = if presented.any {
                CookieAction::Delete
            } else {
                CookieAction::Keep
            };
            return Outcome::new(Decision::Deny, cookie);
        }
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Allow) {
            return self.allow(ring, uid, Some(token), now, false);
        }
        // Holding everyone: admitted users keep access (above), nobody new gets in.
        if self.queue_all {
            return match valid {
                Some(t) => self.keep_waiting(t, now),
                None => self.start_waiting(ring, uid, now),
            };
        }
        if self.allow_percentage >= 100 {
            let admitted = valid.is_some();
            return self.allow(ring, uid, None, now, admitted);
        }
        match valid {
            Some(t) if now.secs() < t.claims.exp => self.keep_waiting(t, now),
            Some(t) if self.wins(t) => self.allow(ring, uid, None, now, true),
            // Lost the draw, or never held a valid token: (re)start waiting.
            _ => self.start_waiting(ring, uid, now),
        }
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
            CookieAction::Set(ring.sign_cached(Claims::new(Dec::Allow, exp, uid, key.id())))
        };
        let mut outcome = Outcome::new(Decision::Allow, cookie);
        outcome.admitted = admitted;
        outcome
    }

    fn start_waiting(&self, ring: &KeyRing, uid: &Identity, now: Timestamp) -> Outcome {
        let exp = bucket_exp(now.secs(), self.wait_period);
        let key = ring.active();
        let value = ring.sign_cached(Claims::new(Dec::Wait, exp, uid, key.id()));
        let mut outcome = Outcome::new(Decision::Anon, CookieAction::Set(value));
        outcome.refresh_secs = exp.saturating_sub(now.secs()).max(1);
        outcome
    }

    fn keep_waiting(&self, token: &Token, now: Timestamp) -> Outcome {
        let mut outcome = Outcome::new(Decision::Wait, CookieAction::Keep);
        // Under queue_all an eligible token has nothing to wait for but the hold: check back
        // each wait period.
        let left = token.claims.exp.saturating_sub(now.secs());
        outcome.refresh_secs = if left == 0 { self.wait_period } else { left };
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::tests::{alice, bob, presented, ring};

    fn lottery(pct: u8) -> Lottery {
        Lottery::new(
            pct,
            Duration::from_secs(30),
            Duration::from_secs(3600),
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
            let later = Timestamp::from_secs(1_000_100);
            let first = l.decide(
                &ring,
                &uid,
                &presented(&ring, &uid, Some(&wait), later),
                later,
            );
            // The same token, presented again (even much later), gets the same answer.
            for dt in [1, 7, 500] {
                let again_at = Timestamp::from_secs(1_000_100 + dt);
                let again = l.decide(
                    &ring,
                    &uid,
                    &presented(&ring, &uid, Some(&wait), again_at),
                    again_at,
                );
                assert_eq!(again.decision, first.decision);
            }
            match first.decision {
                Decision::Allow => {
                    wins += 1;
                    assert!(first.admitted);
                    assert!(set_value(&first).starts_with("dec=allow&exp=1004400&"));
                }
                Decision::Anon => {
                    losses += 1;
                    // A loser gets a new wait token.
                    assert!(set_value(&first).starts_with("dec=wait&exp=1000140&"));
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
    fn zero_denies_and_hundred_allows_everyone() {
        let ring = ring();
        let now = Timestamp::from_secs(3_000_000);
        let o = lottery(0).decide(&ring, &alice(), &presented(&ring, &alice(), None, now), now);
        assert_eq!(
            (o.decision, &o.cookie),
            (Decision::Deny, &CookieAction::Keep)
        );
        let allow = Claims::new(Dec::Allow, 4_000_000, &alice(), "key1").sign(ring.active());
        let o = lottery(0).decide(
            &ring,
            &alice(),
            &presented(&ring, &alice(), Some(&allow), now),
            now,
        );
        assert_eq!(
            (o.decision, &o.cookie),
            (Decision::Deny, &CookieAction::Delete)
        );
        // 100: everyone in, with an allow token so lowering it later keeps them in.
        let o = lottery(100).decide(&ring, &alice(), &presented(&ring, &alice(), None, now), now);
        assert_eq!(o.decision, Decision::Allow);
        assert!(set_value(&o).starts_with("dec=allow&"));
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
        assert_eq!((o.decision, o.refresh_secs), (Decision::Wait, 30));
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
