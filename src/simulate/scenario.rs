//! One run of one queueing method: the rooms of the simulated nodes, the users' arrivals, and the
//! event loop that sends every request through the real [`Room::decide_bringing`].

use super::*;

/// Simulated time starts on a minute boundary.
const EPOCH_SECS: u64 = 1_800_000_000;
/// Admitted users touch the site this often while browsing.
const BROWSE_EVERY_MS: u64 = 20_000;

/// Builds the room through the real config path, so the simulation validates like a file.
fn room(opts: &Options, order: QueueOrder, store: &Arc<dyn CounterStore>) -> Result<Room, String> {
    let mut toml = format!(
        "[upstream]\npeers = [\"127.0.0.1:1\"]\n[[room]]\nname = \"simulated\"\nadmission = \"{}\"\nnew_users_per_minute = {}\ntotal_active_users = {}\nsession_duration = \"{}s\"\nrefresh = \"{}s\"\n",
        order.as_str(),
        opts.new_users_per_minute,
        opts.total_active_users,
        opts.session_duration.as_secs(),
        opts.refresh.as_secs()
    );
    if opts.api && order == QueueOrder::Fifo {
        toml.push_str("api = true\n");
    }
    if !opts.lanes.is_empty() {
        let lanes: Vec<String> = opts
            .lanes
            .iter()
            .map(|l| format!("{} = {}", l.name, l.weight))
            .collect();
        let _ = writeln!(toml, "lanes = {{ {} }}", lanes.join(", "));
    }
    let config =
        crate::config::parse(&toml, Path::new("<simulation>")).map_err(|e| e.to_string())?;
    let room = config.rooms.into_iter().next().ok_or("no room")?;
    debug_assert!(matches!(room.admission, Admission::Capacity(_)));
    Ok(Room::new(room, store))
}

/// A key ring of one key derived from `seed`: the key shapes every draw and jitter, so a run
/// with the same seed repeats.
pub fn seeded_ring(seed: u64) -> Result<KeyRing, String> {
    use base64::Engine as _;
    let mut bytes = [0u8; 64];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut bytes[..]);
    let key = base64::engine::general_purpose::STANDARD.encode(bytes);
    KeyRing::from_entries("sim", &[("sim", &key)]).map_err(|e| e.to_string())
}

/// Runs one queueing method.
pub fn run(opts: &Options, order: QueueOrder) -> Result<Report, String> {
    let nodes = opts.nodes.max(1) as usize;
    let hub = MemoryHub::default();
    let sync_ms = (opts.sync_interval.as_millis() as u64).max(1);
    let (shared, rooms) = node_rooms(opts, order, nodes, sync_ms)?;
    let weights = opts.weights();
    // Nodes sync at staggered moments within the interval, as independent processes would.
    let mut next_sync: Vec<u64> = (0..nodes)
        .map(|n| sync_ms * n as u64 / nodes as u64)
        .collect();
    let room = &rooms[0];
    let (mut store_sent, mut store_received) = (0usize, 0usize);
    // Each node syncs as it starts (as the edge's sync service does), then every interval.
    for store in &shared {
        if let Some((sent, received)) = hub.sync_bytes(store, Timestamp::from_secs(EPOCH_SECS)) {
            store_sent += sent;
            store_received += received;
        }
    }
    let ring = seeded_ring(opts.seed ^ 0x005e_ed0f_7e57)?;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let span_ms = u64::from(opts.minutes.max(1)) * 60_000;
    let mut journeys = arrivals(opts, &mut rng, span_ms);
    let codes = invitation_codes(opts, &ring, span_ms);
    let ids: Vec<Identity> = (0..opts.users)
        .map(|i| {
            Identity::of_ip(
                std::net::IpAddr::from((0x0A00_0000u32 + i).to_be_bytes()),
                64,
            )
        })
        .collect();
    let mut cookies: Vec<Option<String>> = vec![None; opts.users as usize];
    let mut events: BinaryHeap<Reverse<(u64, u32)>> = journeys
        .iter()
        .enumerate()
        .map(|(i, j)| Reverse((j.arrival_ms, i as u32)))
        .collect();
    let browse_ms = opts.browse.as_millis() as u64;
    let deadline_ms = span_ms + 24 * 3_600_000;
    let mut admitted_per_minute: BTreeMap<u64, u32> = BTreeMap::new();
    let mut peak_active = 0;
    let mut sampled_sec = u64::MAX;
    // Per minute: (waiting, active) at its start.
    let mut minute_start: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut decisions = 0u64;
    let mut streams = 0u64;
    // The open stream of each visitor whose page holds one: the node holding it, and its watch.
    let mut watches: Vec<Option<(usize, Watch)>> = vec![None; opts.users as usize];

    while let Some(Reverse((t, i))) = events.pop() {
        if t > deadline_ms {
            break;
        }
        let now = Timestamp::from_millis(EPOCH_SECS * 1000 + t);
        for (n, store) in shared.iter().enumerate() {
            while next_sync[n] <= t {
                let at = Timestamp::from_millis(EPOCH_SECS * 1000 + next_sync[n]);
                if let Some((sent, received)) = hub.sync_bytes(store, at) {
                    store_sent += sent;
                    store_received += received;
                }
                next_sync[n] += sync_ms;
            }
        }
        if now.secs() != sampled_sec {
            sampled_sec = now.secs();
            if let Some(f) = room.figures(now) {
                peak_active = peak_active.max(f.active);
                minute_start
                    .entry(t / 60_000)
                    .or_insert((f.waiting, f.active));
            }
        }
        let uid = &ids[i as usize];
        // A second of a stream: it tells its visitor where they stand, or that it is their
        // turn; on a turn or an end, their page asks (after a browser's latency).
        if let Some((node, watch)) = watches[i as usize].as_mut() {
            match rooms[*node].tell(&ring, watch, now) {
                Tell::Wait { .. } => events.push(Reverse((t + 1000, i))),
                Tell::Turn | Tell::End => {
                    rooms[*node].unwatch(watch, now);
                    watches[i as usize] = None;
                    events.push(Reverse((t + rng.gen_range(0..800), i)));
                }
            }
            continue;
        }
        let values: Vec<&[u8]> = cookies[i as usize]
            .as_deref()
            .map(str::as_bytes)
            .into_iter()
            .collect();
        let node = if nodes == 1 {
            0
        } else {
            pick_node(&weights, nodes, &mut rng)
        };
        let invitation = codes
            .get(journeys[i as usize].lane)
            .and_then(|c| c.get(i as usize / crate::invite::MAX_USES as usize))
            .map(String::as_bytes);
        let brought = Brought {
            solution: None,
            invitation,
        };
        let outcome = rooms[node].decide_bringing(&ring, uid, &values, brought, now);
        decisions += 1;
        if journeys[i as usize].admitted_ms.is_none() {
            journeys[i as usize].requests += 1;
        }
        match &outcome.cookie {
            CookieAction::Set(v) => cookies[i as usize] = Some(v.to_string()),
            CookieAction::Delete => cookies[i as usize] = None,
            CookieAction::Keep => {}
        }
        let journey = &mut journeys[i as usize];
        if journey.queue_number.is_none() {
            journey.queue_number = outcome.queue_number;
        }
        let Some(next) = follow(
            journey,
            &outcome,
            t,
            browse_ms,
            &mut rng,
            &mut admitted_per_minute,
        ) else {
            continue;
        };
        // A waiting page that streams opens its stream once it has loaded, and reloads on its
        // timer only when the stream is refused.
        if journey.push && matches!(outcome.decision, Decision::Anon | Decision::Wait) {
            let opened_at = t + rng.gen_range(0..300);
            let at = Timestamp::from_millis(EPOCH_SECS * 1000 + opened_at);
            if let Some(cookie) = cookies[i as usize].as_deref() {
                if let Ok(watch) = rooms[node].watch(&ring, uid, &[cookie.as_bytes()], at) {
                    journey.streams += 1;
                    streams += 1;
                    watches[i as usize] = Some((node, watch));
                    events.push(Reverse((opened_at + 1000, i)));
                    continue;
                }
            }
        }
        events.push(Reverse((next, i)));
    }
    let tally = Tally {
        admitted_per_minute,
        minute_start,
        peak_active,
        sampled_sec,
        decisions,
        streams,
        store_sent,
        store_received,
    };
    Ok(report(
        opts, order, nodes, journeys, tally, span_ms, browse_ms,
    ))
}

/// The room of each simulated node: one on the in-process store, or one per node, each on its
/// own store synced through the hub.
fn node_rooms(
    opts: &Options,
    order: QueueOrder,
    nodes: usize,
    sync_ms: u64,
) -> Result<(Vec<Arc<SharedStore>>, Vec<Room>), String> {
    let mut shared: Vec<Arc<SharedStore>> = Vec::new();
    let mut rooms: Vec<Room> = Vec::new();
    if nodes == 1 {
        let store: Arc<dyn CounterStore> = Arc::new(LocalStore::new());
        rooms.push(room(opts, order, &store)?);
    } else {
        for n in 0..nodes {
            let s = Arc::new(SharedStore::new(
                &format!("node{n}"),
                "sim",
                sync_ms,
                OnStoreFailure::LastShare,
            ));
            let store: Arc<dyn CounterStore> = s.clone();
            rooms.push(room(opts, order, &store)?);
            shared.push(s);
        }
    }
    Ok((shared, rooms))
}

/// The users: when each arrives, whether they walk away after their first page, and their lane.
fn arrivals(opts: &Options, rng: &mut ChaCha8Rng, span_ms: u64) -> Vec<Journey> {
    let mut journeys: Vec<Journey> = (0..opts.users)
        .map(|_| Journey {
            arrival_ms: rng.gen_range(0..span_ms),
            admitted_ms: None,
            check_ins: 0,
            abandoned: rng.gen_bool(opts.abandon.clamp(0.0, 1.0)),
            estimate: None,
            lane: 0,
            queue_number: None,
            push: false,
            streams: 0,
            requests: 0,
        })
        .collect();
    // Who streams is drawn apart too: a run with push has the same arrivals as one without.
    if opts.push > 0.0 {
        let mut push_rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x9054);
        for j in &mut journeys {
            j.push = push_rng.gen_bool(opts.push.clamp(0.0, 1.0));
        }
    }
    // Lanes are drawn apart, so a run with lanes has the same arrivals as one without.
    if opts.lanes.len() > 1 {
        let mut lane_rng = ChaCha8Rng::seed_from_u64(opts.seed ^ 0x1a4e);
        for j in &mut journeys {
            let u: f64 = lane_rng.gen();
            let mut acc = 0.0;
            j.lane = opts
                .lanes
                .iter()
                .position(|l| {
                    acc += l.share;
                    u < acc
                })
                .unwrap_or(0);
        }
    }
    journeys
}

/// The invitation links the users of each lane join with.
fn invitation_codes(opts: &Options, ring: &KeyRing, span_ms: u64) -> Vec<Vec<String>> {
    // One invitation link per lane other than public (and per million of its users).
    let exp = EPOCH_SECS + span_ms / 1000 + 2 * 86_400;
    let codes: Vec<Vec<String>> = opts
        .lanes
        .iter()
        .map(|l| {
            let n = if l.name == crate::invite::PUBLIC_LANE {
                0
            } else {
                opts.users.div_ceil(crate::invite::MAX_USES)
            };
            (0..n)
                .map(|_| {
                    crate::invite::make(
                        ring.active(),
                        &crate::invite::Terms {
                            room: "simulated".into(),
                            lane: l.name.clone(),
                            exp,
                            uses: crate::invite::MAX_USES,
                        },
                    )
                })
                .collect()
        })
        .collect();
    codes
}

/// The node a request goes to, drawn by the nodes' weights.
fn pick_node(weights: &[f64], nodes: usize, rng: &mut ChaCha8Rng) -> usize {
    let u: f64 = rng.gen();
    let mut acc = 0.0;
    weights
        .iter()
        .position(|w| {
            acc += w;
            u < acc
        })
        .unwrap_or(nodes - 1)
}

/// Follows a user's story past a decision at `t`: counts their admission or their wait, and
/// returns when they come back, if they do.
fn follow(
    journey: &mut Journey,
    outcome: &Outcome,
    t: u64,
    browse_ms: u64,
    rng: &mut ChaCha8Rng,
    admitted_per_minute: &mut BTreeMap<u64, u32>,
) -> Option<u64> {
    match outcome.decision {
        Decision::Allow => {
            let admitted = *journey.admitted_ms.get_or_insert(t);
            if admitted == t {
                *admitted_per_minute.entry(t / 60_000).or_insert(0) += 1;
            }
            let next = t + BROWSE_EVERY_MS;
            (next < admitted + browse_ms).then_some(next)
        }
        Decision::Anon | Decision::Wait | Decision::Lost | Decision::PreQueue => {
            journey.check_ins += 1;
            if journey.estimate.is_none() {
                let e = outcome.estimates;
                if let (Some(a), Some(b), Some(c)) = (e.p25, e.p50, e.p75) {
                    journey.estimate = Some([a, b, c]);
                }
            }
            if journey.abandoned {
                // Closed the tab after the first page.
                return None;
            }
            // The page reloads when its countdown ends; browsers add a little latency.
            let latency = rng.gen_range(0..800);
            Some(t + outcome.refresh_secs.max(1) * 1000 + latency)
        }
        // Simulated rooms ask no proof-of-work and no invitation.
        Decision::Deny
        | Decision::Bypass
        | Decision::SoldOut
        | Decision::QueueFull
        | Decision::Challenge
        | Decision::Uninvited => None,
    }
}

/// What the event loop counted besides the users' journeys.
struct Tally {
    admitted_per_minute: BTreeMap<u64, u32>,
    /// Per minute: (waiting, active) at its start.
    minute_start: BTreeMap<u64, (u64, u64)>,
    peak_active: u64,
    /// The second of the last event.
    sampled_sec: u64,
    decisions: u64,
    streams: u64,
    store_sent: usize,
    store_received: usize,
}

/// What the run found, from the journeys and the tally.
fn report(
    opts: &Options,
    order: QueueOrder,
    nodes: usize,
    journeys: Vec<Journey>,
    tally: Tally,
    span_ms: u64,
    browse_ms: u64,
) -> Report {
    let Tally {
        admitted_per_minute,
        minute_start,
        peak_active,
        sampled_sec,
        decisions,
        streams,
        store_sent,
        store_received,
    } = tally;
    let target = opts.new_users_per_minute;
    let live_at = |ms: u64| journeys.iter().filter(|j| waiting_at(j, ms)).count() as u64;
    let saturated_minutes = minute_start
        .iter()
        .filter(|(m, (_, active))| {
            let queue_long = live_at(**m * 60_000) >= u64::from(target.max(1))
                && live_at((**m + 1) * 60_000) > 0;
            let new_binding = opts.total_active_users == 0
                || active + u64::from(target) <= u64::from(opts.total_active_users);
            target > 0 && queue_long && new_binding
        })
        .map(|(m, _)| *m)
        .collect();
    // Order is a promise within a lane: lanes let members past the public line on purpose.
    let lanes: Vec<Vec<Journey>> = (0..opts.lanes.len().max(1))
        .map(|lane| {
            journeys
                .iter()
                .filter(|j| j.lane == lane)
                .cloned()
                .collect()
        })
        .collect();
    let tau = lanes
        .iter()
        .map(|lane| {
            let (x, y): (Vec<f64>, Vec<f64>) = lane
                .iter()
                .filter_map(|j| j.admitted_ms.map(|a| (j.arrival_ms as f64, a as f64)))
                .unzip();
            kendall_tau_b(&x, &y)
        })
        .fold(f64::INFINITY, f64::min);
    let same_time_correlation = lanes
        .iter()
        .map(|lane| waiting_together_correlation(lane, span_ms))
        .fold(0.0, |a: f64, b: f64| if b.abs() > a.abs() { b } else { a });
    let last_minute = admitted_per_minute.keys().copied().max().unwrap_or(0);
    let live_minutes = (0..last_minute)
        .filter_map(|m| {
            let start = m * 60_000;
            let live = live_at(start) as u32;
            (live > 0).then(|| (m, live, admitted_per_minute.get(&m).copied().unwrap_or(0)))
        })
        .collect();
    let calibration = calibration(&journeys);
    // The sync ran from the start to the last event.
    let span_secs = sampled_sec.saturating_sub(EPOCH_SECS) as f64;
    // Active users from their stories: from admission to a session after the last touch.
    let mut delta: BTreeMap<u64, i64> = BTreeMap::new();
    let session_ms = opts.session_duration.as_millis() as u64;
    for j in &journeys {
        if let Some(a) = j.admitted_ms {
            let touches = browse_ms.saturating_sub(1) / BROWSE_EVERY_MS;
            let last = a + touches * BROWSE_EVERY_MS;
            *delta.entry(a / 1000).or_insert(0) += 1;
            *delta.entry((last + session_ms) / 1000).or_insert(0) -= 1;
        }
    }
    let mut running = 0i64;
    let mut true_peak_active = 0i64;
    for d in delta.values() {
        running += d;
        true_peak_active = true_peak_active.max(running);
    }
    let worst_inversion_secs =
        lanes.iter().map(|l| worst_inversion(l)).max().unwrap_or(0) as f64 / 1000.0;
    let worst_lag_secs = lanes.iter().map(|l| worst_lag(l)).max().unwrap_or(0) as f64 / 1000.0;
    Report {
        order,
        journeys,
        admitted_per_minute,
        saturated_minutes,
        peak_active,
        target,
        cap: opts.total_active_users,
        kendall_tau: tau,
        same_time_correlation,
        decisions,
        streams,
        live_minutes,
        worst_inversion_secs,
        worst_lag_secs,
        refresh_secs: opts.refresh.as_secs_f64(),
        calibration,
        nodes: nodes as u32,
        sync_interval_secs: opts.sync_interval.as_secs_f64(),
        true_peak_active: true_peak_active.max(0) as u64,
        store_bytes_per_node_sec: {
            let node_secs = (nodes as f64 * span_secs).max(1.0);
            (
                store_sent as f64 / node_secs,
                store_received as f64 / node_secs,
            )
        },
        lanes: opts
            .lanes
            .iter()
            .map(|l| (l.name.clone(), l.weight))
            .collect(),
    }
}
