use super::*;
use crate::room::tests::{presented, ring, store};

const T0: u64 = 1_700_000_040; // the start of a minute

fn capacity(order: QueueOrder, new_per_minute: u32, total: u32) -> Capacity {
    Capacity::new(
        "r",
        &CapacityConfig {
            order,
            new_users_per_minute: new_per_minute,
            total_active_users: total,
            session_duration: Duration::from_secs(300),
            refresh: Duration::from_secs(20),
            rejoin_grace: Duration::from_secs(300),
            max_waiting_users: 0,
            lanes: Vec::new(),
        },
        false,
        store(),
    )
}

fn user(i: u32) -> Identity {
    Identity::of_ip(std::net::IpAddr::from([10, 0, (i >> 8) as u8, i as u8]), 64)
}

fn at(secs: u64) -> Timestamp {
    Timestamp::from_secs(secs)
}

/// One simulated client: remembers its cookie.
struct Client {
    uid: Identity,
    cookie: Option<String>,
}

impl Client {
    fn new(i: u32) -> Client {
        Client {
            uid: user(i),
            cookie: None,
        }
    }

    fn request(&mut self, c: &Capacity, now: Timestamp) -> Outcome {
        let ring = ring();
        let p = presented(&ring, &self.uid, self.cookie.as_deref(), now);
        let o = c.decide(&ring, &self.uid, &p, now);
        match &o.cookie {
            CookieAction::Set(v) => self.cookie = Some(v.to_string()),
            CookieAction::Delete => self.cookie = None,
            CookieAction::Keep => {}
        }
        o
    }

    /// When this client's token lets it check in.
    fn next_check_in(&self) -> u64 {
        let t = Token::parse(self.cookie.as_ref().unwrap().as_bytes()).unwrap();
        t.claims.exp
    }
}

#[test]
fn new_users_per_minute_is_respected() {
    let c = capacity(QueueOrder::Fifo, 3, 0);
    let mut clients: Vec<Client> = (0..5).map(Client::new).collect();
    let decisions: Vec<Decision> = clients
        .iter_mut()
        .map(|u| u.request(&c, at(T0)).decision)
        .collect();
    assert_eq!(
        decisions,
        [
            Decision::Allow,
            Decision::Allow,
            Decision::Allow,
            Decision::Anon,
            Decision::Anon
        ]
    );
    // The two newcomers are counted apart until they come back.
    let view = c.view(at(T0 + 1));
    assert_eq!((view.active, view.waiting_total), (3, 0));
    assert_eq!(view.arrived.values().sum::<u64>(), 2);
    assert_eq!(view.expected_waiting(), 2.0);
    // Still this minute: checking in admits no one.
    let t = clients[3].next_check_in();
    assert!(t < T0 + 25);
    assert_eq!(clients[3].request(&c, at(t)).decision, Decision::Wait);
    // Next minute: the two waiting users get in at their check-ins.
    for u in &mut clients[3..] {
        let t = u.next_check_in().max(T0 + 60);
        assert_eq!(u.request(&c, at(t)).decision, Decision::Allow);
    }
    let v = c.view(at(T0 + 60));
    assert_eq!((v.active, v.waiting_total), (5, 0));
}

#[test]
fn arrivals_and_the_wait_of_each_admission_from_the_line_are_told() {
    let c = capacity(QueueOrder::Fifo, 1, 0);
    let mut first = Client::new(1);
    let mut second = Client::new(2);
    // Straight in: an arrival, admitted, with no wait to tell.
    let o = first.request(&c, at(T0 + 3));
    assert_eq!(o.decision, Decision::Allow);
    assert!(o.arrived && o.admitted);
    assert_eq!(o.waited_secs, None);
    // In line: an arrival, not admitted.
    let o = second.request(&c, at(T0 + 5));
    assert_eq!(o.decision, Decision::Anon);
    assert!(o.arrived && !o.admitted);
    // Checking in is no arrival; the admission next minute tells the wait since T0 + 5.
    let t = second.next_check_in().max(T0 + 60);
    let o = second.request(&c, at(t));
    assert_eq!(o.decision, Decision::Allow);
    assert!(o.admitted && !o.arrived);
    assert_eq!(o.waited_secs, Some(t - (T0 + 5)));
    // Coming back with the allow token: neither.
    let o = second.request(&c, at(t + 1));
    assert!(!o.admitted && !o.arrived);
    let counted = crate::decide::Counted::from(&o);
    assert_eq!(counted.waited_secs, None);
}

#[test]
fn total_active_users_is_respected_and_sessions_end() {
    let c = capacity(QueueOrder::Fifo, 0, 2);
    let mut a = Client::new(1);
    let mut b = Client::new(2);
    let mut w = Client::new(3);
    assert_eq!(a.request(&c, at(T0)).decision, Decision::Allow);
    assert_eq!(b.request(&c, at(T0)).decision, Decision::Allow);
    assert_eq!(w.request(&c, at(T0)).decision, Decision::Anon);
    // `a` stays active; `b` goes idle. The cap holds meanwhile.
    let mut now = T0;
    while now < T0 + 240 {
        now += 20;
        a.request(&c, at(now));
        let check = w.next_check_in().max(now);
        assert_ne!(
            w.request(&c, at(check)).decision,
            Decision::Allow,
            "at {check}"
        );
        assert!(c.view(at(check)).active <= 2);
    }
    // After b's session (5 min of inactivity, counted per minute), w gets in.
    let mut admitted_at = None;
    while now < T0 + 600 && admitted_at.is_none() {
        now += 20;
        a.request(&c, at(now));
        let check = w.next_check_in().max(now);
        if w.request(&c, at(check)).decision == Decision::Allow {
            admitted_at = Some(check);
        }
    }
    let admitted_at = admitted_at.expect("w got in once b's session ended");
    assert!(admitted_at >= T0 + 300, "{}", admitted_at - T0);
    // b's cookie has expired with its session: b is a new arrival now.
    let o = b.request(&c, at(admitted_at + 1));
    assert_ne!(o.decision, Decision::Allow);
}

#[test]
fn active_users_count_once_per_minute_of_activity() {
    let c = capacity(QueueOrder::Fifo, 100, 0);
    let mut u = Client::new(1);
    assert_eq!(u.request(&c, at(T0)).decision, Decision::Allow);
    for minute in 1..10u64 {
        let o = u.request(&c, at(T0 + 60 * minute));
        assert_eq!(o.decision, Decision::Allow);
        // A new minute re-issues the cookie; a second request in it does not.
        assert!(matches!(o.cookie, CookieAction::Set(_)));
        assert_eq!(
            u.request(&c, at(T0 + 60 * minute + 5)).cookie,
            CookieAction::Keep
        );
        assert_eq!(
            c.view(at(T0 + 60 * minute + 6)).active,
            1,
            "minute {minute}"
        );
    }
    // Idle for the session: no longer counted.
    assert_eq!(c.view(at(T0 + 60 * 9 + 6 * 60 + 1)).active, 0);
}

#[test]
fn waiting_users_who_stop_checking_in_drop_out() {
    let c = capacity(QueueOrder::Fifo, 1, 0);
    // A 20 s refresh: at most 24 s between check-ins, plus 3 s of slack, in 5 s ticks: 30 s.
    assert_eq!(c.live_window(), Duration::from_secs(30));
    let mut first = Client::new(1);
    first.request(&c, at(T0));
    let new = |t| c.view(at(t)).arrived.values().sum::<u64>();
    let mut gone = Client::new(2);
    assert_eq!(gone.request(&c, at(T0)).decision, Decision::Anon);
    assert_eq!(new(T0 + 1), 1);
    // Never comes back: counted as a new arrival through its longest interval, gone right
    // after, and never holding a place.
    assert_eq!(new(T0 + 30), 1);
    assert_eq!(new(T0 + 35), 0);
    // One who came back once and then stopped: a place, for as long.
    let mut stopped = Client::new(3);
    stopped.request(&c, at(T0 + 40));
    let t = stopped.next_check_in();
    assert_eq!(stopped.request(&c, at(t)).decision, Decision::Wait);
    assert_eq!((c.view(at(t + 1)).waiting_total, new(t + 1)), (1, 0));
    assert_eq!(c.view(at(t + 25)).waiting_total, 1);
    assert_eq!(c.view(at(t + 36)).waiting_total, 0);
}

/// Runs `clients` through their check-ins from `from` to `until` (each comes back when its
/// token says), in time order; returns when each was admitted.
fn run_until(c: &Capacity, clients: &mut [Client], from: u64, until: u64) -> Vec<Option<u64>> {
    let mut admitted: Vec<Option<u64>> = vec![None; clients.len()];
    let mut next: Vec<u64> = clients
        .iter()
        .map(|u| {
            u.cookie
                .as_ref()
                .map_or(from, |_| u.next_check_in())
                .max(from)
        })
        .collect();
    while let Some((i, t)) = next
        .iter()
        .enumerate()
        .filter(|(i, _)| admitted[*i].is_none())
        .map(|(i, t)| (i, *t))
        .min_by_key(|(_, t)| *t)
    {
        if t > until {
            break;
        }
        if clients[i].request(c, at(t)).decision == Decision::Allow {
            admitted[i] = Some(t);
        } else {
            next[i] = clients[i].next_check_in().max(t + 1);
        }
    }
    admitted
}

#[test]
fn fifo_reserves_slots_for_the_oldest_buckets() {
    let c = capacity(QueueOrder::Fifo, 4, 0);
    // Fill this minute; three users arrive now, three more a refresh interval later (the next
    // arrival bucket); everyone keeps checking in.
    for i in 0..4 {
        Client::new(100 + i).request(&c, at(T0));
    }
    let mut old: Vec<Client> = (0..3).map(Client::new).collect();
    let mut new: Vec<Client> = (10..13).map(Client::new).collect();
    for u in &mut old {
        assert_eq!(u.request(&c, at(T0 + 1)).decision, Decision::Anon);
    }
    for u in &mut new {
        assert_eq!(u.request(&c, at(T0 + 21)).decision, Decision::Anon);
    }
    let mut everyone: Vec<Client> = old.into_iter().chain(new).collect();
    let admitted = run_until(&c, &mut everyone, T0 + 22, T0 + 300);
    let minute = |t: Option<u64>| t.expect("admitted") / 60 - T0 / 60;
    let minutes: Vec<u64> = admitted.iter().map(|t| minute(*t)).collect();
    // Minute 1 has four slots: all three older users, and one newer.
    assert!(minutes[..3].iter().all(|m| *m == 1), "{minutes:?}");
    assert_eq!(
        minutes[3..].iter().filter(|m| **m == 1).count(),
        1,
        "{minutes:?}"
    );
    assert!(minutes[3..].iter().all(|m| *m <= 2), "{minutes:?}");
}

#[test]
fn fifo_estimates_users_ahead() {
    let c = capacity(QueueOrder::Fifo, 2, 0);
    for i in 0..2 {
        Client::new(100 + i).request(&c, at(T0));
    }
    let mut early: Vec<Client> = (0..5).map(Client::new).collect();
    for u in &mut early {
        u.request(&c, at(T0 + 1));
    }
    // The next arrival bucket (a refresh later): five ahead, itself alone in its bucket.
    let mut late = Client::new(50);
    let o = late.request(&c, at(T0 + 25));
    assert_eq!(o.users_ahead, Some(5));
    // This minute's two slots are taken, and with no history the pace is the configured 2 a
    // minute: the five ahead take the next two minutes' and one of the third's. So it is the
    // rest of this minute (35 s), two minutes, and a check-in into the third (0.3, 0.6 and
    // 0.9 × refresh at the quartiles: where a check-in falls once the minute starts). The head
    // holds more than a minute's slots, so no later passes are added.
    let minutes = |checkin: f64| 35.0 / 60.0 + 2.0 + checkin * 20.0 / 60.0;
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
    assert!(close(o.estimates.p25, minutes(0.3)), "{:?}", o.estimates);
    assert!(close(o.estimates.p50, minutes(0.6)), "{:?}", o.estimates);
    assert!(close(o.estimates.p75, minutes(0.9)), "{:?}", o.estimates);
    // Nobody waiting is told less than the time to their next check-in.
    let t = early[0].next_check_in();
    let o = early[0].request(&c, at(t));
    assert!(o.estimates.p25.unwrap() >= 16.0 / 60.0, "{:?}", o.estimates);
}

#[test]
fn early_check_ins_earn_nothing() {
    let c = capacity(QueueOrder::Random, 1, 0);
    Client::new(100).request(&c, at(T0));
    let mut u = Client::new(1);
    u.request(&c, at(T0));
    let exp = u.next_check_in();
    let before = u.cookie.clone();
    let o = u.request(&c, at(exp - 1));
    assert_eq!(
        (o.decision, &o.cookie),
        (Decision::Wait, &CookieAction::Keep)
    );
    assert_eq!(o.refresh_secs, 1);
    assert_eq!(u.cookie, before);
}

#[test]
fn jitter_averages_the_refresh() {
    let c = capacity(QueueOrder::Random, 1, 0);
    Client::new(100_000).request(&c, at(T0));
    let intervals: Vec<u64> = (0..2000)
        .map(|i| {
            let mut u = Client::new(i);
            u.request(&c, at(T0 + 1));
            u.next_check_in() - (T0 + 1)
        })
        .collect();
    let mean = intervals.iter().sum::<u64>() as f64 / intervals.len() as f64;
    assert!((mean - 20.0).abs() < 0.5, "mean {mean}");
    assert!(intervals.iter().all(|s| (16..=24).contains(s)));
    assert!(intervals.iter().any(|s| *s <= 17) && intervals.iter().any(|s| *s >= 23));
}

#[test]
fn queue_all_holds_everyone_but_the_admitted() {
    let store = store();
    let cfg = CapacityConfig {
        order: QueueOrder::Fifo,
        new_users_per_minute: 100,
        total_active_users: 0,
        session_duration: Duration::from_secs(300),
        refresh: Duration::from_secs(20),
        rejoin_grace: Duration::from_secs(300),
        max_waiting_users: 0,
        lanes: Vec::new(),
    };
    let open = Capacity::new("r", &cfg, false, store.clone());
    let mut admitted = Client::new(1);
    assert_eq!(admitted.request(&open, at(T0)).decision, Decision::Allow);
    let held = Capacity::new("r", &cfg, true, store);
    let mut newcomer = Client::new(2);
    assert_eq!(newcomer.request(&held, at(T0 + 1)).decision, Decision::Anon);
    let t = newcomer.next_check_in();
    assert_eq!(newcomer.request(&held, at(t)).decision, Decision::Wait);
    assert_eq!(
        admitted.request(&held, at(T0 + 70)).decision,
        Decision::Allow
    );
    let figures = held.figures(at(T0 + 70));
    assert_eq!(figures.admit_chance, 0.0);
    // No wait is promised while everyone is held.
    assert_eq!(figures.estimates.p50, None);
    assert_eq!(figures.estimates.p75, None);
}

#[test]
fn revoke_frees_the_slot() {
    let c = capacity(QueueOrder::Fifo, 0, 1);
    let mut a = Client::new(1);
    let o = a.request(&c, at(T0));
    assert_eq!(o.decision, Decision::Allow);
    assert_eq!(
        Client::new(2).request(&c, at(T0 + 1)).decision,
        Decision::Anon
    );
    c.revoke(o.place.unwrap(), at(T0 + 2));
    assert_eq!(c.view(at(T0 + 3)).active, 0);
}

#[test]
fn a_replayed_revoke_frees_the_place_once() {
    let c = capacity(QueueOrder::Fifo, 0, 2);
    let mut a = Client::new(1);
    let mut b = Client::new(2);
    assert_eq!(a.request(&c, at(T0)).decision, Decision::Allow);
    // A minute later: a's token is renewed; keep a copy of it.
    let o = a.request(&c, at(T0 + 65));
    let saved = a.cookie.clone();
    assert_eq!(b.request(&c, at(T0 + 66)).decision, Decision::Allow);
    assert_eq!(c.view(at(T0 + 67)).active, 2);
    c.revoke(o.place.unwrap(), at(T0 + 67));
    assert_eq!(c.view(at(T0 + 68)).active, 1);
    for i in 0..5 {
        // The saved cookie comes back: it is a new arrival now (and gets the free place), and a
        // revoke of what it presented frees nothing twice.
        a.cookie = saved.clone();
        let o = a.request(&c, at(T0 + 70 + i));
        assert_eq!(o.rejected, Some(Reject::Revoked));
        c.revoke(o.place.unwrap(), at(T0 + 70 + i));
        c.revoke(
            Place {
                session: session_of(
                    &Token::parse(saved.as_ref().unwrap().as_bytes())
                        .unwrap()
                        .claims,
                ),
                minute: at(T0 + 70).minute(),
            },
            at(T0 + 70 + i),
        );
    }
    assert_eq!(c.view(at(T0 + 80)).active, 1, "only b is active");
    let mut newcomers: Vec<Client> = (10..15).map(Client::new).collect();
    let admitted = newcomers
        .iter_mut()
        .map(|u| u.request(&c, at(T0 + 81)).decision)
        .filter(|d| *d == Decision::Allow)
        .count();
    assert_eq!(admitted, 1, "one place was free");
    assert_eq!(c.view(at(T0 + 82)).active, 2);
}

#[test]
fn random_admissions_spread_over_the_minute() {
    // 300 waiting users checking in every ~20 s; 30 slots a minute.
    let c = capacity(QueueOrder::Random, 30, 0);
    let start = at(T0).minute() * 60 + 60;
    for i in 0..30 {
        Client::new(10_000 + i).request(&c, at(start - 50));
    }
    let mut users: Vec<Client> = (0..300).map(Client::new).collect();
    for u in &mut users {
        u.request(&c, at(start - 45));
    }
    let mut admitted_at: Vec<u64> = Vec::new();
    let mut admitted_per_minute = std::collections::BTreeMap::new();
    for t in start..start + 300 {
        for u in users.iter_mut() {
            let is_waiting = u
                .cookie
                .as_deref()
                .is_some_and(|c| c.starts_with("dec=wait"));
            if is_waiting
                && u.next_check_in() <= t
                && u.request(&c, at(t)).decision == Decision::Allow
            {
                admitted_at.push(t);
                *admitted_per_minute.entry(t / 60).or_insert(0) += 1;
            }
        }
    }
    // Never more than 30 a minute, and close to it while the queue is long.
    for (m, n) in &admitted_per_minute {
        assert!(*n <= 30, "minute {m}: {n}");
    }
    let full: Vec<u32> = admitted_per_minute.values().take(4).copied().collect();
    assert!(full.iter().all(|n| *n >= 24), "{full:?}");
    // Spread: in every full minute, the first 20 s take well under all the slots.
    let early = admitted_at
        .iter()
        .filter(|t| (*t - start) % 60 < 20)
        .count();
    let share = early as f64 / admitted_at.len() as f64;
    assert!(
        share < 0.6,
        "{:.2} of admissions in the first third of each minute",
        share
    );
}

#[test]
fn random_estimate_formula() {
    // Cloudflare's example: P(in within a minute) = 10 %, median wait 6 min 35 s.
    let n = random_wait_minutes(0.5, 0.1);
    assert!((n - 6.579).abs() < 0.01, "{n}");
    assert!(random_wait_minutes(0.25, 0.1) < n && n < random_wait_minutes(0.75, 0.1));
    // A queue of 100 that 10 join and 10 leave each minute keeps P = 10 %: the same answer.
    let steady = random_wait_quantiles(100.0, 10.0, 10.0);
    for (got, p) in steady.iter().zip([0.25, 0.5, 0.75]) {
        let want = random_wait_minutes(p, 0.1);
        assert!((got.unwrap() - want).abs() < 0.01, "{got:?} vs {want}");
    }
    // One that grows by 20 a minute thins the chance: everyone waits longer.
    let growing = random_wait_quantiles(100.0, 30.0, 10.0);
    for (g, s) in growing.iter().zip(steady) {
        assert!(g.unwrap() > s.unwrap() + 0.5, "{growing:?} vs {steady:?}");
    }
    // One that drains: shorter, and never past the minute the last user gets in.
    let draining = random_wait_quantiles(100.0, 0.0, 10.0);
    assert!(draining[2].unwrap() < steady[2].unwrap());
    assert!(draining[2].unwrap() <= 10.0);
    // Nobody let in: nothing to promise.
    assert_eq!(random_wait_quantiles(100.0, 10.0, 0.0), [None, None, None]);
}

#[test]
fn switching_methods_keeps_arrival_order() {
    let s = store();
    let cfg = |order| CapacityConfig {
        order,
        new_users_per_minute: 1,
        total_active_users: 0,
        session_duration: Duration::from_secs(300),
        refresh: Duration::from_secs(20),
        rejoin_grace: Duration::from_secs(300),
        max_waiting_users: 0,
        lanes: Vec::new(),
    };
    let fifo = Capacity::new("r", &cfg(QueueOrder::Fifo), false, s.clone());
    let random = Capacity::new("r", &cfg(QueueOrder::Random), false, s);
    Client::new(100).request(&fifo, at(T0));
    let mut first = Client::new(1);
    first.request(&fifo, at(T0 + 1));
    let mut second = Client::new(2);
    second.request(&random, at(T0 + 21));
    // Under random, both are counted by their arrival buckets...
    let v = random.view(at(T0 + 22));
    assert_eq!(v.arrived.values().copied().collect::<Vec<_>>(), [1, 1]);
    // ...so back under fifo, the first arrival is still ahead of the second, and the next
    // minute's one slot is the first's.
    let mut both = [first, second];
    let admitted = run_until(&fifo, &mut both, T0 + 22, T0 + 119);
    assert!(admitted[0].is_some_and(|t| t >= T0 + 60), "{admitted:?}");
    assert_eq!(admitted[1], None, "{admitted:?}");
}

#[test]
fn apportion_splits_by_weight_and_passes_on_what_is_not_asked() {
    let close = |a: Vec<f64>, b: &[f64]| {
        assert!(
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9),
            "{a:?} != {b:?}"
        );
    };
    let all = f64::INFINITY;
    close(apportion(60.0, &[(3.0, all), (1.0, all)]), &[45.0, 15.0]);
    // A lane asking less than its share gives the rest to the others.
    close(apportion(60.0, &[(3.0, 10.0), (1.0, all)]), &[10.0, 50.0]);
    // A lane nobody waits in gives all of it.
    close(apportion(60.0, &[(3.0, 0.0), (1.0, all)]), &[0.0, 60.0]);
    close(
        apportion(100.0, &[(5.0, all), (3.0, 6.0), (2.0, all)]),
        &[94.0 * 5.0 / 7.0, 6.0, 94.0 * 2.0 / 7.0],
    );
    // Everyone asks less than there is: everyone gets what they ask.
    close(apportion(60.0, &[(3.0, 4.0), (1.0, 7.0)]), &[4.0, 7.0]);
    close(apportion(0.0, &[(3.0, 4.0), (1.0, 7.0)]), &[0.0, 0.0]);
}

proptest::proptest! {
    #[test]
    fn apportion_never_gives_more_than_there_is_or_than_is_asked(
        total in 0.0f64..10_000.0,
        parties in proptest::collection::vec((1u32..1000, 0u32..5000), 1..8),
    ) {
        let parties: Vec<(f64, f64)> =
            parties.iter().map(|(w, a)| (f64::from(*w), f64::from(*a))).collect();
        let parts = apportion(total, &parties);
        let given: f64 = parts.iter().sum();
        proptest::prop_assert!(given <= total + 1e-6);
        for (part, (_, ask)) in parts.iter().zip(&parties) {
            proptest::prop_assert!(*part >= 0.0 && *part <= ask + 1e-6);
        }
        // Nothing is left over while someone asks for more.
        let asked: f64 = parties.iter().map(|p| p.1).sum();
        proptest::prop_assert!((given - total.min(asked)).abs() < 1e-6);
    }
}

fn laned(order: QueueOrder, new_per_minute: u32) -> Capacity {
    laned_on(order, new_per_minute, store())
}

fn laned_on(order: QueueOrder, new_per_minute: u32, store: Arc<dyn CounterStore>) -> Capacity {
    let lane = |name: &str, weight| crate::config::Lane {
        name: Arc::from(name),
        weight,
    };
    Capacity::new(
        "r",
        &CapacityConfig {
            order,
            new_users_per_minute: new_per_minute,
            total_active_users: 0,
            session_duration: Duration::from_secs(300),
            refresh: Duration::from_secs(20),
            rejoin_grace: Duration::from_secs(300),
            max_waiting_users: 0,
            lanes: vec![lane("public", 1), lane("members", 3)],
        },
        false,
        store,
    )
}

/// Lets a full minute in at `T0`, then `members` members and `public` others arrive; every one
/// checks in when their token says, until `until`. Returns, by minute from `T0`, who got in:
/// (members, others).
fn run_lanes(c: &Capacity, members: u32, public: u32, until: u64) -> BTreeMap<u64, (u32, u32)> {
    let ring = ring();
    for i in 0..8 {
        assert_eq!(
            Client::new(1000 + i).request(c, at(T0)).decision,
            Decision::Allow
        );
    }
    let mut waiting: Vec<(Client, bool)> = Vec::new();
    for i in 0..members + public {
        let mut client = Client::new(i);
        let member = i < members;
        let hold = Hold {
            lane: member.then_some("members"),
            ..Hold::NONE
        };
        let now = at(T0 + 1 + u64::from(i) % 20);
        let p = presented(&ring, &client.uid, None, now);
        let o = c.decide_held(&ring, &client.uid, &p, &hold, now);
        assert_eq!(o.decision, Decision::Anon);
        let CookieAction::Set(v) = o.cookie else {
            panic!("no wait token")
        };
        let lane = Token::parse(v.as_bytes()).unwrap().claims.lane;
        assert_eq!(lane.as_deref(), member.then_some("members"), "{v}");
        client.cookie = Some(v.to_string());
        waiting.push((client, member));
    }
    let mut admitted = BTreeMap::new();
    for t in T0 + 21..until {
        for (client, member) in waiting.iter_mut() {
            if client
                .cookie
                .as_deref()
                .is_some_and(|v| v.starts_with("dec=allow"))
            {
                continue;
            }
            if client.next_check_in() > t {
                continue;
            }
            let o = client.request(c, at(t));
            if o.decision == Decision::Allow {
                assert!(o.admitted);
                // The lane it was let in from (for `admission.granted`); none for public.
                assert_eq!(o.lane.as_deref(), member.then_some("members"));
                let e = admitted.entry((t - T0) / 60).or_insert((0, 0));
                if *member {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
            }
        }
    }
    admitted
}

#[test]
fn lanes_split_the_free_slots_by_weight_and_an_empty_lane_gives_its_share() {
    let c = laned(QueueOrder::Fifo, 8);
    let admitted = run_lanes(&c, 12, 12, T0 + 240);
    // 3 : 1 of 8 while both lanes wait; once the members are all in, everything to the others.
    assert_eq!(
        admitted.into_iter().collect::<Vec<_>>(),
        [(1, (6, 2)), (2, (6, 2)), (3, (0, 8))]
    );
    let f = c.figures(at(T0 + 240));
    assert_eq!(f.lanes.len(), 2);
    assert_eq!((&*f.lanes[1].name, f.lanes[1].weight), ("members", 3));
    assert_eq!((f.lanes[0].waiting, f.lanes[1].waiting), (0, 0));
}

/// Two nodes of a cluster that do not sync within the measured minute: each gives at most its
/// own part of each lane's part, so the minute still goes 6 : 2 (each node giving a lane its
/// whole part, as before, made it 5 : 3 here, and 4 : 4 in the end-to-end test).
#[test]
fn cluster_nodes_give_a_lane_only_their_part_of_it() {
    use crate::config::OnStoreFailure;
    use crate::store::shared::{MemoryHub, SharedStore};
    let hub = MemoryHub::default();
    let stores: Vec<Arc<SharedStore>> = (0..2)
        .map(|n| {
            let name = format!("n{n}");
            Arc::new(SharedStore::new(
                &name,
                "c",
                1000,
                OnStoreFailure::LastShare,
            ))
        })
        .collect();
    let sync = |t: u64| {
        for _ in 0..2 {
            for s in &stores {
                assert!(hub.sync(s, at(t)));
            }
        }
    };
    let nodes: Vec<Capacity> = stores
        .iter()
        .map(|s| laned_on(QueueOrder::Fifo, 8, s.clone()))
        .collect();
    sync(T0 - 1);
    // Each node lets its 4 of the minute in; then 12 members and 12 others queue, half on each.
    for i in 0..8 {
        let decision = Client::new(1000 + i).request(&nodes[i as usize % 2], at(T0));
        assert_eq!(decision.decision, Decision::Allow);
    }
    let ring = ring();
    let mut waiting: Vec<(Client, bool)> = Vec::new();
    for i in 0..24u32 {
        let mut client = Client::new(i);
        let member = i % 2 == 0;
        let hold = Hold {
            lane: member.then_some("members"),
            ..Hold::NONE
        };
        let now = at(T0 + 1 + u64::from(i) % 20);
        let p = presented(&ring, &client.uid, None, now);
        let o = nodes[i as usize / 2 % 2].decide_held(&ring, &client.uid, &p, &hold, now);
        let CookieAction::Set(v) = o.cookie else {
            panic!("no wait token")
        };
        client.cookie = Some(v.to_string());
        waiting.push((client, member));
    }
    let mut admitted = (0, 0);
    let mut k = 0;
    for t in T0 + 21..T0 + 120 {
        if t == T0 + 30 || t == T0 + 59 {
            sync(t);
        }
        for (client, member) in waiting.iter_mut() {
            let done = client
                .cookie
                .as_deref()
                .is_some_and(|v| v.starts_with("dec=allow"));
            if done || client.next_check_in() > t {
                continue;
            }
            k += 1;
            if client.request(&nodes[k % 2], at(t)).decision == Decision::Allow {
                assert!(t >= T0 + 60, "the first minute was full");
                if *member {
                    admitted.0 += 1;
                } else {
                    admitted.1 += 1;
                }
            }
        }
    }
    assert_eq!(
        admitted,
        (6, 2),
        "(members, others) let in the minute after"
    );
}

#[test]
fn random_lanes_split_the_free_slots_by_weight() {
    let c = laned(QueueOrder::Random, 8);
    let admitted = run_lanes(&c, 30, 30, T0 + 60 * 4);
    let (members, public) = (1..4)
        .map(|m| admitted.get(&m).copied().unwrap_or_default())
        .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
    // Three minutes of 8 slots, at most one lost to the draw; about 3 : 1 (18 : 6).
    assert!(members + public >= 23, "{admitted:?}");
    assert!((16..=20).contains(&members), "{admitted:?}");
}

#[test]
fn a_lane_the_room_no_longer_has_waits_in_public() {
    let c = laned(QueueOrder::Fifo, 8);
    let ring = ring();
    let hold = Hold {
        lane: Some("gold"),
        ..Hold::NONE
    };
    for i in 0..9 {
        let uid = user(i);
        let o = c.decide_held(
            &ring,
            &uid,
            &presented(&ring, &uid, None, at(T0)),
            &hold,
            at(T0),
        );
        if i == 8 {
            let CookieAction::Set(v) = o.cookie else {
                panic!("no wait token")
            };
            assert_eq!(Token::parse(v.as_bytes()).unwrap().claims.lane, None);
        }
    }
    let f = c.figures(at(T0 + 1));
    assert_eq!((f.lanes[0].waiting, f.lanes[1].waiting), (1, 0));
}

/// A visitor's stream checks in for them, holding their place while they send nothing; when it
/// ends, the queue is exactly as if they had sent nothing at all, so their next request counts
/// as it would have. Two worlds run the same requests; in one, the visitor streams in between.
#[test]
fn a_stream_holds_a_place_and_leaves_the_queue_as_the_visitor_s_own_requests_would() {
    use crate::room::watch::Tell;
    let ring = ring();
    for checked_in_before in [false, true] {
        // Streams that end within the counts' live window of the visitor's last request, and
        // long after it.
        for streamed_for in [3, 70] {
            let mut views = Vec::new();
            let mut answers = Vec::new();
            for streams in [false, true] {
                // One active place, taken: nobody is let in while the stream runs.
                let c = capacity(QueueOrder::Fifo, 100, 1);
                let mut first = Client::new(0);
                assert_eq!(first.request(&c, at(T0)).decision, Decision::Allow);
                let mut v = Client::new(1);
                assert_eq!(v.request(&c, at(T0 + 1)).decision, Decision::Anon);
                let mut other = Client::new(2);
                other.request(&c, at(T0 + 2));
                let mut t = T0 + 1;
                if checked_in_before {
                    t = v.next_check_in();
                    assert_eq!(v.request(&c, at(t)).decision, Decision::Wait);
                }
                let due = v.next_check_in();
                let end = due + streamed_for;
                if streams {
                    let token = presented(&ring, &v.uid, v.cookie.as_deref(), at(t))
                        .valid
                        .unwrap();
                    let mut w = c.watch(&v.uid, &token, at(t)).expect("a waiting visitor");
                    for s in t..end {
                        let told = c.tell(&ring, &mut w, &Hold::NONE, at(s));
                        assert!(matches!(told, Tell::Wait { .. }), "{told:?} at {s}");
                    }
                    // Held: counted as waiting at `end`, though they sent nothing since `t`.
                    let held = c.compute_view(0, at(end));
                    assert_eq!(held.waiting_total, 1, "{held:?}");
                    c.unwatch(&w, at(end));
                }
                views.push(c.compute_view(0, at(end)));
                // Their request after the stream: the same answer, the same queue after it.
                let o = v.request(&c, at(end));
                answers.push((o.decision, o.users_ahead, v.cookie.clone()));
                views.push(c.compute_view(0, at(end)));
            }
            let case = format!("checked in before: {checked_in_before}, streamed {streamed_for} s");
            assert_eq!(views[0], views[2], "{case}: after the stream");
            assert_eq!(views[1], views[3], "{case}: after their request");
            assert_eq!(answers[0], answers[1], "{case}");
        }
    }
}
