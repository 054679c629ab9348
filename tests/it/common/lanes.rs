//! Visitors queued in priority lanes across proxies, and checking who got in.

use std::time::Duration;

use super::*;

/// Visitors queued in two priority lanes of a fifo room `sale` whose minute is full,
/// to be let in during the `measured` minute.
pub struct LaneQueue {
    pub measured: u64,
    pub public: Vec<User>,
    pub members: Vec<User>,
}

/// Fills this minute's `cap` slots (at most 4 × `cap` arrivals), then queues 12 of the public and, after them, 12 members
/// who open `link` (an invitation link of the `members` lane) as a browser would. Visitor `i`
/// goes to `nodes[i % n]`. Not in a minute's last seconds, so the next minute is measured
/// whole.
pub fn queue_in_lanes(nodes: &[&Vestibule], link: &str, cap: u32) -> LaneQueue {
    let into = unix_now() as u64 % 60;
    if into > 50 {
        std::thread::sleep(Duration::from_secs(60 - into + 1));
    }
    let measured = unix_now() as u64 / 60 + 1;
    let node = |i: usize| nodes[i % nodes.len()];
    // Arrivals spread over the nodes until the minute's slots are taken (in a cluster each node
    // gives its part of them; an arrival a node has no slot for gets an anonymous token and
    // walks away).
    let mut allowed = 0;
    for i in 0..4 * cap {
        if allowed < cap && User::new(i).decision(node(i as usize)).0 == "allow" {
            allowed += 1;
        }
    }
    assert_eq!(allowed, cap, "the minute's slots, taken straight in");
    // Every node learns of the full minute (a cluster syncs every 250 ms in these tests).
    std::thread::sleep(Duration::from_secs(1));
    let mut public: Vec<User> = (100..112).map(User::new).collect();
    for (i, u) in public.iter_mut().enumerate() {
        // A first visit is given an anonymous token; the place comes when it is shown back.
        assert_eq!(u.decision(node(i)).0, "anon");
        assert_eq!(u.decision(node(i)).0, "wait");
    }
    let mut members: Vec<User> = (200..212).map(User::new).collect();
    for (i, u) in members.iter_mut().enumerate() {
        // Opened in a browser: a place, and a redirect to the address without the code.
        let resp = client()
            .get(node(i).url(link))
            .header("X-Forwarded-For", &u.ip)
            .send()
            .expect("the proxy answers");
        assert_eq!(resp.status().as_u16(), 303, "the link gives a place");
        let token = room_cookie(&resp, &u.cookie_name).expect("a place with the redirect");
        assert!(
            token.contains("&ln=members&"),
            "the lane is signed in: {token}"
        );
        u.cookie = Some(token);
        assert_eq!(u.decision(node(i)).0, "wait");
    }
    LaneQueue {
        measured,
        public,
        members,
    }
}

/// Every queued visitor checks in when told, each time on the next node, until the measured
/// minute ends. Returns (lane, minute) of each admission, and (members, public) let in during
/// the measured minute.
pub fn check_in_lanes(
    nodes: &[&Vestibule],
    q: LaneQueue,
) -> (Vec<(&'static str, u64)>, (usize, usize)) {
    let measured = q.measured;
    let admitted = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (lane, users) in [("public", q.public), ("members", q.members)] {
            for (i, mut u) in users.into_iter().enumerate() {
                let admitted = &admitted;
                s.spawn(move || {
                    let deadline = (measured + 1) * 60 - 1;
                    let mut k = i;
                    while (unix_now() as u64) < deadline {
                        k += 1;
                        let (decision, body) = u.decision(nodes[k % nodes.len()]);
                        if decision == "allow" {
                            admitted
                                .lock()
                                .unwrap()
                                .push((lane, unix_now() as u64 / 60));
                            return;
                        }
                        let wait = body["refresh_seconds"].as_u64().unwrap_or(5);
                        std::thread::sleep(Duration::from_secs(wait));
                    }
                });
            }
        }
    });
    let admitted = admitted.into_inner().unwrap();
    let count = |lane: &str| {
        admitted
            .iter()
            .filter(|(l, m)| *l == lane && *m == measured)
            .count()
    };
    let split = (count("members"), count("public"));
    eprintln!(
        "lanes on {} node(s): minute {measured} let in members {}, public {}",
        nodes.len(),
        split.0,
        split.1
    );
    (admitted, split)
}
