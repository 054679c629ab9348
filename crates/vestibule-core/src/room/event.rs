//! Scheduled events: where a room's events stand at a moment, and the keyed draw that
//! orders pre-queued visitors at the start.
//!
//! An event is *scheduled* until its pre-queue opens (or its start, without one), *pre-queue*
//! from `prequeue_start` to `start` (nobody new is let in; visitors get a wait token due at
//! `start`), *running* from `start` to `end` (its overrides apply), and *ended* after. Everything
//! here is computed from the configuration and the clock: nothing is read on the request path.
//!
//! ## The draw at the start
//!
//! With `shuffle_at_start`, a pre-queued visitor's place is drawn from a keyed hash of their
//! identity and the event (the key derived from the ring's active signing key, as the lottery's
//! draws are). It is fixed per identity: refreshing, a second tab or arriving earlier draw the
//! same place, and nobody without the key can compute it. Capacity rooms give the visitor a
//! position in the pre-queue's span of arrival buckets (`(opens, start)`), so fifo lets
//! pre-queued visitors in in the drawn order, all ahead of anyone who arrived after `start`;
//! lottery rooms make the pre-queue token come due at a drawn moment of the first wait period.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::config::EventConfig;
use crate::identity::Identity;
use crate::keys::SigningKey;
use crate::time::Timestamp;
use crate::token::unit_interval;

/// The longest a pre-queue page waits before asking again (it asks at its token's due time
/// when that comes sooner), so a moved start reaches pre-queued visitors.
pub(crate) const PREQUEUE_REFRESH_MAX: u64 = 300;

/// Where an event stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventState {
    Scheduled,
    PreQueue,
    Running,
    Ended,
}

impl EventState {
    pub const ALL: [EventState; 4] = [
        EventState::Scheduled,
        EventState::PreQueue,
        EventState::Running,
        EventState::Ended,
    ];

    /// The `state` label and JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Scheduled => "scheduled",
            EventState::PreQueue => "prequeue",
            EventState::Running => "running",
            EventState::Ended => "ended",
        }
    }

    pub fn of(event: &EventConfig, now: Timestamp) -> EventState {
        let s = now.secs();
        if s >= event.end {
            EventState::Ended
        } else if s >= event.start {
            EventState::Running
        } else if s >= event.opens() {
            EventState::PreQueue
        } else {
            EventState::Scheduled
        }
    }
}

/// One event of a room and where it stands.
#[derive(Clone, Copy, Debug)]
pub struct Phase<'a> {
    /// Position among the room's events.
    pub index: usize,
    pub event: &'a EventConfig,
    pub state: EventState,
}

impl Phase<'_> {
    /// Whether the event holds the room now (pre-queue or running).
    pub fn in_force(&self) -> bool {
        matches!(self.state, EventState::PreQueue | EventState::Running)
    }
}

fn phase(index: usize, event: &EventConfig, now: Timestamp) -> Phase<'_> {
    Phase {
        index,
        event,
        state: EventState::of(event, now),
    }
}

/// The event in force now (pre-queue or running), if any. `events` never overlap.
pub fn in_force(events: &[EventConfig], now: Timestamp) -> Option<Phase<'_>> {
    let s = now.secs();
    let (i, e) = events
        .iter()
        .enumerate()
        .find(|(_, e)| e.opens() <= s && s < e.end)?;
    Some(phase(i, e, now))
}

/// The event to tell visitors and operators about: the one in force, else the next to come,
/// else the last that ended.
pub fn current(events: &[EventConfig], now: Timestamp) -> Option<Phase<'_>> {
    in_force(events, now)
        .or_else(|| next(events, now))
        .or_else(|| {
            let (i, e) = events
                .iter()
                .enumerate()
                .filter(|(_, e)| e.end <= now.secs())
                .max_by_key(|(_, e)| e.end)?;
            Some(phase(i, e, now))
        })
}

/// The next event whose window has not opened yet.
pub fn next(events: &[EventConfig], now: Timestamp) -> Option<Phase<'_>> {
    let (i, e) = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.opens() > now.secs())
        .min_by_key(|(_, e)| e.opens())?;
    Some(phase(i, e, now))
}

/// A pre-queued visitor's fixed draw in [0, 1) for `event`: their place in the pre-queue with
/// `shuffle_at_start`. Keyed (see the module doc): the same identity always draws the same, and
/// nobody without `key` can compute it.
pub fn draw(key: &SigningKey, event: &EventConfig, uid: &Identity) -> f64 {
    let mut message = Vec::with_capacity(64 + event.name.len() + uid.as_str().len());
    message.extend_from_slice(b"vestibule event draw v1\0");
    message.extend_from_slice(event.name.as_bytes());
    message.push(0);
    message.extend_from_slice(&event.start.to_le_bytes());
    message.extend_from_slice(uid.as_str().as_bytes());
    let mut rng = ChaCha20Rng::from_seed(key.draw_seed(&message));
    unit_interval(rng.next_u64())
}

/// A pre-queued visitor's place in [0, 1) among everyone pre-queued for `event`: with
/// `shuffle_at_start` their keyed draw, else how far into the pre-queue they arrived (those
/// who were already waiting when it opened first). Pre-queue tokens come due at
/// `start + place × one check-in interval`, so visitors come back at the start in the order of
/// their places, and are let in in that order.
pub(crate) fn prequeue_place(
    key: &SigningKey,
    event: &EventConfig,
    uid: &Identity,
    arrival: u64,
) -> f64 {
    if event.shuffle_at_start {
        return draw(key, event, uid);
    }
    let opens = event.opens();
    let span = event.start.saturating_sub(opens).max(1);
    (arrival.saturating_sub(opens) as f64 / span as f64).clamp(0.0, 0.999_999)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EventOverrides;

    pub fn event(name: &str, prequeue: Option<u64>, start: u64, end: u64) -> EventConfig {
        EventConfig {
            name: name.into(),
            prequeue_start: prequeue,
            start,
            end,
            shuffle_at_start: true,
            draw: Default::default(),
            pages: None,
            overrides: EventOverrides::default(),
        }
    }

    #[test]
    fn states_follow_the_clock() {
        let e = event("launch", Some(100), 200, 300);
        let at = |s| EventState::of(&e, Timestamp::from_secs(s));
        assert_eq!(at(99), EventState::Scheduled);
        assert_eq!(at(100), EventState::PreQueue);
        assert_eq!(at(199), EventState::PreQueue);
        assert_eq!(at(200), EventState::Running);
        assert_eq!(at(299), EventState::Running);
        assert_eq!(at(300), EventState::Ended);
        let no_prequeue = event("x", None, 200, 300);
        assert_eq!(
            EventState::of(&no_prequeue, Timestamp::from_secs(150)),
            EventState::Scheduled
        );
    }

    #[test]
    fn current_and_next() {
        let events = [event("a", Some(100), 200, 300), event("b", None, 400, 500)];
        let name = |p: Option<Phase>| p.map(|p| (p.event.name.clone(), p.state));
        let t = Timestamp::from_secs;
        assert_eq!(
            name(current(&events, t(50))),
            Some(("a".into(), EventState::Scheduled))
        );
        assert_eq!(
            name(current(&events, t(150))),
            Some(("a".into(), EventState::PreQueue))
        );
        assert_eq!(
            name(next(&events, t(150))),
            Some(("b".into(), EventState::Scheduled))
        );
        assert_eq!(
            name(current(&events, t(350))),
            Some(("b".into(), EventState::Scheduled))
        );
        assert_eq!(
            name(current(&events, t(600))),
            Some(("b".into(), EventState::Ended))
        );
        assert!(in_force(&events, t(350)).is_none());
        assert!(next(&events, t(600)).is_none());
    }

    #[test]
    fn draws_are_fixed_per_identity_and_keyed() {
        let e = event("launch", Some(100), 200, 300);
        let a = Identity::of_ip("192.0.2.1".parse().unwrap(), 64);
        let b = Identity::of_ip("192.0.2.2".parse().unwrap(), 64);
        let k1 = SigningKey::new("k1", b"0123456789abcdef0123456789abcdef");
        let k2 = SigningKey::new("k2", b"fedcba9876543210fedcba9876543210");
        assert_eq!(draw(&k1, &e, &a), draw(&k1, &e, &a));
        assert_ne!(draw(&k1, &e, &a), draw(&k1, &e, &b));
        assert_ne!(draw(&k1, &e, &a), draw(&k2, &e, &a));
        let other = event("other", Some(100), 200, 300);
        assert_ne!(draw(&k1, &e, &a), draw(&k1, &other, &a));
        // Uniform enough: the mean of many identities' places is near one half.
        let mean = (0..2000)
            .map(|i| {
                let uid =
                    Identity::of_ip(format!("10.0.{}.{}", i / 250, i % 250).parse().unwrap(), 64);
                draw(&k1, &e, &uid)
            })
            .sum::<f64>()
            / 2000.0;
        assert!((mean - 0.5).abs() < 0.03, "{mean}");
    }

    // Rooms with events, deciding as the proxy asks them to.
    use crate::config::Config;
    use crate::room::{CookieAction, Decision, Room};
    use std::path::Path;
    use std::sync::Arc;

    /// 2026-12-01T10:00:00Z: an event's start (a multiple of every period used here).
    const START: u64 = 1_796_119_200;

    fn room(toml: &str) -> Room {
        room_in(
            &(Arc::new(crate::store::local::LocalStore::new()) as _),
            toml,
        )
    }

    /// The first room of `toml`, counting in `store`.
    fn room_in(store: &Arc<dyn crate::store::CounterStore>, toml: &str) -> Room {
        let config = Config::parse(
            &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
            Path::new("/tmp/x.toml"),
            &crate::config::testing::Bare,
        )
        .unwrap();
        Room::new(config.rooms[0].clone(), store)
    }

    fn visitor(n: u32) -> Identity {
        Identity::of_ip(
            std::net::IpAddr::from([198, 51, (n >> 8) as u8, n as u8]),
            64,
        )
    }

    fn cookie(action: &CookieAction, held: &mut Option<String>) {
        if let CookieAction::Set(v) = action {
            *held = Some(v.to_string());
        }
    }

    fn ask(room: &Room, uid: &Identity, held: &mut Option<String>, at: u64) -> Decision {
        let ring = crate::keys::testing::ring();
        let values: Vec<&[u8]> = held.iter().map(|v| v.as_bytes()).collect();
        let o = room.decide(&ring, uid, &values, Timestamp::from_secs(at));
        cookie(&o.cookie, held);
        o.decision
    }

    fn claims(held: &Option<String>) -> crate::token::Claims {
        crate::token::Token::parse(held.as_deref().unwrap().as_bytes())
            .unwrap()
            .claims
    }

    #[test]
    fn a_lottery_event_prequeues_then_draws_at_its_own_percentage() {
        let r = room(
            "[[room]]\nallow_percentage = 0\nwait_period = \"10s\"\n\
             [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-12-01T09:30:00Z\"\n\
             start = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T11:00:00Z\"\n\
             shuffle_at_start = true\nallow_percentage = 50\n",
        );
        let (alice, mut a) = (visitor(1), None);
        // Before the pre-queue the room runs on its own settings: closed.
        assert_eq!(ask(&r, &alice, &mut a, START - 3600), Decision::Deny);
        // In the pre-queue: a token due within the first wait period, the same on every ask.
        let mut p = None;
        let o = r.decide(
            &crate::keys::testing::ring(),
            &alice,
            &[],
            Timestamp::from_secs(START - 600),
        );
        assert_eq!(o.decision, Decision::PreQueue);
        cookie(&o.cookie, &mut p);
        let due = claims(&p).exp;
        assert!((START..START + 10).contains(&due), "{due}");
        assert_eq!(o.refresh_secs, PREQUEUE_REFRESH_MAX);
        assert_eq!(ask(&r, &alice, &mut p, START - 5), Decision::PreQueue);
        assert_eq!(claims(&p).exp, due);
        // Someone waiting before the pre-queue opened is moved to it too.
        assert_eq!(ask(&r, &alice, &mut a, START - 60), Decision::PreQueue);
        assert_eq!(claims(&a).exp, due);
        // At their moment they are drawn, at the event's 50 %.
        let ring = crate::keys::testing::ring();
        let wins = crate::token::Token::parse(p.as_deref().unwrap().as_bytes())
            .unwrap()
            .draw(&ring)
            .unwrap()
            < 0.5;
        let drawn = ask(&r, &alice, &mut p, due);
        assert_eq!(
            drawn,
            if wins {
                Decision::Allow
            } else {
                Decision::Lost
            }
        );
        // Later arrivals come due a whole wait period after the start at the earliest.
        let (bob, mut b) = (visitor(2), None);
        assert_eq!(ask(&r, &bob, &mut b, START), Decision::Anon);
        assert!(claims(&b).exp >= START + 10);
        // After the end the room's own settings return; admitted visitors keep access.
        let end = START + 3600;
        if wins {
            assert_eq!(ask(&r, &alice, &mut p, end + 1), Decision::Allow);
        }
        let (carol, mut c) = (visitor(3), None);
        assert_eq!(ask(&r, &carol, &mut c, end + 1), Decision::Deny);
        assert_eq!(
            r.effective_allow_percentage(Timestamp::from_secs(START - 1)),
            0.0
        );
        assert_eq!(
            r.effective_allow_percentage(Timestamp::from_secs(START + 1)),
            50.0
        );
    }

    #[test]
    fn pre_queued_visitors_go_before_anyone_who_comes_after_the_start() {
        let r = room(
            "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1000\nrefresh = \"10s\"\n\
             rejoin_grace = \"1m\"\n\
             [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-12-01T09:00:00Z\"\n\
             start = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T11:00:00Z\"\n\
             new_users_per_minute = 2\n",
        );
        // Three visitors pre-queue, the first an hour before the start (longer ago than the
        // room's rejoin_grace: the pre-queue keeps their place anyway).
        let mut held: Vec<(Identity, Option<String>)> =
            (0..3).map(|i| (visitor(i), None)).collect();
        for (i, (uid, c)) in held.iter_mut().enumerate() {
            assert_eq!(
                ask(&r, uid, c, START - 3600 + i as u64 * 60),
                Decision::PreQueue
            );
            let t = claims(c);
            assert_eq!((t.chk, t.arr), (None, Some(START - 3600 + i as u64 * 60)));
            assert!((START..START + 10).contains(&t.exp));
        }
        // The pre-queued are the room's waiting users, each once, however often they ask.
        let waiting = |at: u64| r.figures(Timestamp::from_secs(at)).unwrap().waiting;
        assert_eq!(waiting(START - 3000), 3);
        let (uid, c) = &mut held[0];
        assert_eq!(ask(&r, uid, c, START - 30), Decision::PreQueue);
        assert_eq!(waiting(START - 20), 3);
        // At the start, a newcomer with free slots and nobody counted waiting yet still waits.
        let (late, mut l) = (visitor(99), None);
        assert_eq!(ask(&r, &late, &mut l, START), Decision::Anon);
        // The pre-queued come back at their moment, within the first refresh interval: each is
        // counted in line, and nobody is let in before every one of them could be (the
        // interval, and what a browser adds).
        for (uid, c) in &mut held {
            let due = claims(c).exp;
            assert_eq!(ask(&r, uid, c, due), Decision::Wait);
        }
        // Then the event's 2 a minute get in, in order.
        let mut decisions = Vec::new();
        for (uid, c) in &mut held {
            let next = claims(c).exp;
            decisions.push(ask(&r, uid, c, next.max(START + 13)));
        }
        assert_eq!(
            decisions,
            [Decision::Allow, Decision::Allow, Decision::Wait]
        );
        // The third keeps checking in; the newcomer is behind them, whatever the slots: next
        // minute, the third goes first.
        for t in [START + 22, START + 34, START + 46, START + 58] {
            let (uid, c) = &mut held[2];
            assert_eq!(ask(&r, uid, c, t), Decision::Wait);
        }
        assert_eq!(ask(&r, &late, &mut l, START + 60), Decision::Wait);
        let (uid, c) = &mut held[2];
        assert_eq!(ask(&r, uid, c, START + 72), Decision::Allow);
    }

    #[test]
    fn the_draw_at_the_start_ignores_arrival_order() {
        let r = room(
            "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1000\nrefresh = \"10s\"\n\
             [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-12-01T09:00:00Z\"\n\
             start = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T11:00:00Z\"\n\
             shuffle_at_start = true\nnew_users_per_minute = 1\n",
        );
        // 40 visitors pre-queue in arrival order; at the start each gets a drawn place: the
        // one let in first is whoever drew the earliest place, not who came first.
        let mut held: Vec<(Identity, Option<String>)> =
            (0..40).map(|i| (visitor(i), None)).collect();
        for (i, (uid, c)) in held.iter_mut().enumerate() {
            ask(&r, uid, c, START - 3000 + i as u64 * 60);
        }
        let ring = crate::keys::testing::ring();
        let event = &r.config.events[0];
        let place = |uid: &Identity| draw(ring.active(), event, uid);
        // They come back when their tokens say, all in the same second and in arrival order
        // where their tokens say the same (the worst case for a tie broken by check-in order).
        let mut admitted = Vec::new();
        for t in START..START + 60 {
            for (i, (uid, c)) in held.iter_mut().enumerate() {
                if c.is_some() && claims(c).exp == t && ask(&r, uid, c, t) == Decision::Allow {
                    admitted.push(i);
                    *c = None;
                }
            }
        }
        // One slot this minute, for the visitor who drew the first place (or one in the same
        // arrival bucket: 5 s of the pre-queue's 3,600).
        let first_drawn = (0..40)
            .min_by(|a, b| place(&held[*a].0).total_cmp(&place(&held[*b].0)))
            .unwrap();
        assert_eq!(admitted.len(), 1);
        let (got, first) = (place(&held[admitted[0]].0), place(&held[first_drawn].0));
        assert!(got - first < 5.0 / 3600.0, "{got} {first}");
        assert!(
            first_drawn > 1,
            "this key's draw puts a later arrival first"
        );
    }

    #[test]
    fn a_verifiable_draw_hands_out_receipts_and_orders_by_their_places() {
        let toml =
            "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1000\nrefresh = \"10s\"\n\
             [[room.event]]\nname = \"launch\"\nprequeue_start = \"2026-12-01T09:00:00Z\"\n\
             start = \"2026-12-01T10:00:00Z\"\nend = \"2026-12-01T11:00:00Z\"\n\
             shuffle_at_start = true\ndraw = \"verifiable\"\nnew_users_per_minute = 1\n";
        let store: Arc<dyn crate::store::CounterStore> =
            Arc::new(crate::store::local::LocalStore::new());
        let r = room_in(&store, toml);
        let event = r.config.events[0].clone();
        let ring = crate::keys::testing::ring();
        let at = Timestamp::from_secs;
        // No draw secret yet: no commitment, no receipt.
        assert!(r.draw(&event).is_none());
        let o = r.decide(&ring, &visitor(0), &[], at(START - 3000));
        assert_eq!((o.decision, o.receipt), (Decision::PreQueue, None));
        store.set_draw_secret([5; 32]);
        let d = r.draw(&event).expect("a draw once the secret is set");
        assert_eq!(d.commitment().len(), 64);
        // 40 visitors pre-queue: each gets a receipt, the same when they ask again.
        let mut held: Vec<(Identity, Option<String>, super::super::draw::Receipt)> = Vec::new();
        for i in 0..40u32 {
            let uid = visitor(i);
            let o = r.decide(&ring, &uid, &[], at(START - 3000 + u64::from(i) * 60));
            let receipt = o.receipt.expect("a receipt");
            let mut c = None;
            cookie(&o.cookie, &mut c);
            let values: Vec<&[u8]> = c.iter().map(|v| v.as_bytes()).collect();
            let again = r.decide(&ring, &uid, &values, at(START - 100));
            assert_eq!(again.receipt, Some(receipt));
            held.push((uid, c, receipt));
        }
        let mut receipts = r.receipts(&event, at(START - 1)).0;
        receipts.sort();
        receipts.dedup();
        assert_eq!(receipts.len(), 40);
        // The reveal checks out, and its places are the receipts' HMACs under the seed.
        let reveal = d.reveal(receipts.iter().copied());
        assert_eq!(
            super::super::draw::verify(&serde_json::to_vec(&reveal).unwrap()),
            Ok(40)
        );
        // At the start, the one slot goes to the lowest place (or one within the same arrival
        // bucket: 5 s of the pre-queue's 3,600).
        let mut admitted = Vec::new();
        for t in START..START + 60 {
            for (i, (uid, c, _)) in held.iter_mut().enumerate() {
                if c.is_some() && claims(c).exp == t && ask(&r, uid, c, t) == Decision::Allow {
                    admitted.push(i);
                    *c = None;
                }
            }
        }
        assert_eq!(admitted.len(), 1);
        let lowest = reveal.receipts[0].receipt.clone();
        let first = held.iter().position(|h| h.2.text() == lowest).unwrap();
        let frac = |i: usize| d.fraction(held[i].2);
        assert!(frac(admitted[0]) - frac(first) < 5.0 / 3600.0);
        // A keyed draw hands out no receipt.
        let keyed = room(&toml.replace("draw = \"verifiable\"\n", ""));
        let o = keyed.decide(&ring, &visitor(1), &[], at(START - 3000));
        assert_eq!((o.decision, o.receipt), (Decision::PreQueue, None));
        assert!(keyed.draw(&keyed.config.events[0]).is_none());
    }
}
