//! Micro benchmarks of the decision core: what vestibule adds to every request.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};

use vestibule::identity::Identity;
use vestibule::pages::Pages;
use vestibule::room::{Room, RoomSet};
use vestibule::time::Timestamp;
use vestibule::token::{Claims, Dec, Token};

use vestibule::keys::testing::ring;

fn rooms(toml: &str) -> RoomSet {
    let store: std::sync::Arc<dyn vestibule::store::CounterStore> =
        std::sync::Arc::new(vestibule::store::local::LocalStore::new());
    rooms_in(&store, toml)
}

/// The rooms of `toml`, counting in `store` (one store for all of them, as in the server).
fn rooms_in(store: &std::sync::Arc<dyn vestibule::store::CounterStore>, toml: &str) -> RoomSet {
    let config = vestibule::config::parse(
        &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
        Path::new("/tmp/bench.toml"),
    )
    .expect("config");
    RoomSet::new(
        config
            .rooms
            .into_iter()
            .map(|r| Room::new(r, store))
            .collect(),
    )
}

fn tokens(c: &mut Criterion) {
    let ring = ring();
    let uid = Identity::of_ip("203.0.113.7".parse().expect("ip"), 64);
    let now = Timestamp::from_secs(1_700_000_000);
    let value = Claims::new(Dec::Allow, 1_700_003_600, &uid, "key1").sign(ring.active());
    c.bench_function("token/parse+verify", |b| {
        b.iter(|| {
            let t = Token::parse(black_box(value.as_bytes())).expect("parse");
            t.verify(&ring, &uid, now).expect("valid");
        })
    });
    // What a request pays once the value was seen: a keyed-hash lookup and a constant-time
    // comparison of the bytes (the ring caches values whose signature checked out).
    ring.check(value.as_bytes()).expect("valid");
    c.bench_function("token/verify, cached", |b| {
        b.iter(|| {
            let t = ring.check(black_box(value.as_bytes())).expect("valid");
            t.check_binding(&uid, now).expect("bound");
        })
    });
    c.bench_function("token/sign", |b| {
        let claims = Claims::new(Dec::Wait, 1_700_000_060, &uid, "key1");
        b.iter(|| black_box(claims.sign(ring.active())))
    });
}

/// JWTs for an API gateway: signing one when a visitor is let through, and verifying one a
/// visitor presents, the first time (the signature) and again (a cache hit: the claims only).
fn jwts(c: &mut Criterion) {
    use vestibule::jwt::testing::{claims, expect, ring, NOW};
    use vestibule::jwt::Algorithm;
    let now = Timestamp::from_secs(NOW);
    let mut g = c.benchmark_group("jwt");
    let es = ring(Algorithm::Es256);
    let ed = ring(Algorithm::EdDsa);
    let claims = claims();
    g.bench_function("sign_es256", |b| {
        b.iter(|| black_box(es.sign(black_box(&claims))))
    });
    // Uncached: each iteration gets a ring built anew (outside the measurement), whose cache is
    // empty, so it checks the signature.
    for (name, keys) in [
        ("verify_es256_uncached", &es),
        ("verify_eddsa_uncached", &ed),
    ] {
        let token = keys.sign(&claims);
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let fresh = vestibule::jwt::JwtKeys::new(keys.keys().to_vec());
                    // Makes this thread's (empty) cache map, so that is not measured either.
                    let _ = fresh.verify("-", &expect(), now);
                    fresh
                },
                // The ring is returned, so it is dropped outside the measurement.
                |fresh| {
                    let claims = fresh.verify(black_box(&token), &expect(), now);
                    (claims.expect("valid"), fresh)
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    let token = es.sign(&claims);
    es.verify(&token, &expect(), now).expect("valid");
    g.bench_function("verify_es256_cached", |b| {
        b.iter(|| es.verify(black_box(&token), &expect(), now).expect("valid"))
    });
    g.finish();
}

/// Proof-of-work: what the server pays per challenge, against what a visitor pays
/// per solve (`benches/challenge.sh`).
fn challenges(c: &mut Criterion) {
    use vestibule::challenge;
    let ring = ring();
    let uid = Identity::of_ip("203.0.113.7".parse().expect("ip"), 64);
    let now = Timestamp::from_secs(1_700_000_000);
    let issued = challenge::issue(&ring, "sale", &uid, 16, 300, now);
    let solution = challenge::solve(&issued.value, 16, 1 << 30).expect("solvable");
    c.bench_function("challenge/check a solution", |b| {
        b.iter(|| {
            challenge::check(&ring, "sale", &uid, black_box(solution.as_bytes()), now)
                .expect("solved")
        })
    });
    let forged = solution.replacen("p1~key1~", "p1~key1~1", 1);
    c.bench_function("challenge/refuse a forged solution", |b| {
        b.iter(|| {
            challenge::check(&ring, "sale", &uid, black_box(forged.as_bytes()), now)
                .expect_err("forged")
        })
    });
    // What a native solver pays per try: one SHA-256 of `value:nonce` (2^difficulty tries on
    // average).
    c.bench_function("challenge/one try of a native solver", |b| {
        b.iter(|| challenge::check_work(black_box(solution.as_bytes())))
    });
    c.bench_function("challenge/issue, again within 10 s", |b| {
        b.iter(|| black_box(challenge::issue(&ring, "sale", &uid, 16, 300, now)))
    });
    let mut n = 0u32;
    c.bench_function("challenge/issue, a new identity", |b| {
        b.iter(|| {
            n = n.wrapping_add(1);
            let who = Identity::of_ip(std::net::IpAddr::from(n.to_be_bytes()), 64);
            black_box(challenge::issue(&ring, "sale", &who, 16, 300, now))
        })
    });
    let set = rooms("[[room]]\nallow_percentage = 50\nchallenge = \"pow\"\n");
    let room = set.iter().next().expect("room");
    c.bench_function("room/decide no cookie, pow room (a challenge)", |b| {
        b.iter(|| black_box(room.decide(&ring, &uid, &[], now)))
    });
}

/// Invitations: checking a code (one HMAC), refusing a forged one, and a whole
/// decision of an invite room for a visitor presenting theirs again (the check and the store's
/// memory of its holders).
fn invitations(c: &mut Criterion) {
    use vestibule::invite::{self, Terms};
    use vestibule::room::Brought;
    let ring = ring();
    let uid = Identity::of_ip("203.0.113.7".parse().expect("ip"), 64);
    let now = Timestamp::from_secs(1_700_000_000);
    let terms = Terms {
        room: "default".into(),
        lane: "members".into(),
        exp: now.secs() + 86_400,
        uses: 5,
    };
    let code = invite::make(ring.active(), &terms);
    c.bench_function("invite/check a code", |b| {
        b.iter(|| invite::check(&ring, "default", black_box(code.as_bytes()), now).expect("valid"))
    });
    let forged = code.replacen("~5~members~", "~6~members~", 1);
    c.bench_function("invite/refuse a forged code", |b| {
        b.iter(|| {
            invite::check(&ring, "default", black_box(forged.as_bytes()), now).expect_err("forged")
        })
    });
    c.bench_function("invite/make a code", |b| {
        b.iter(|| black_box(invite::make(ring.active(), &terms)))
    });
    let set = rooms("[[room]]\nallow_percentage = 50\naccess = \"invite\"\n");
    let room = set.iter().next().expect("room");
    let brought = Brought {
        solution: None,
        invitation: Some(code.as_bytes()),
    };
    c.bench_function("room/decide no cookie, invite room, a holder again", |b| {
        b.iter(|| black_box(room.decide_bringing(&ring, &uid, &[], brought, now)))
    });
    c.bench_function("room/decide no cookie, invite room, no invitation", |b| {
        b.iter(|| black_box(room.decide(&ring, &uid, &[], now)))
    });
}

/// Verifiable draws: a pre-queued visitor's decision with a keyed and with a verifiable draw
/// (a receipt: two HMACs and a mark), and the reveal of 10,000 receipts (an HMAC each, sorted),
/// which the edge makes at most once per 5 s per draw.
fn draws(c: &mut Criterion) {
    use vestibule::room::draw::{DrawSecret, Receipt};
    let ring = ring();
    let now = Timestamp::from_secs(1_800_000_000);
    let event = |draw: &str| {
        format!(
            "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 100\n\
             [[room.event]]\nname = \"launch\"\nprequeue_start = \"2027-01-15T07:00:00Z\"\n\
             start = \"2027-01-15T09:00:00Z\"\nend = \"2027-01-15T10:00:00Z\"\n\
             shuffle_at_start = true\ndraw = \"{draw}\"\n"
        )
    };
    for draw in ["keyed", "verifiable"] {
        let store: std::sync::Arc<dyn vestibule::store::CounterStore> =
            std::sync::Arc::new(vestibule::store::local::LocalStore::new());
        store.set_draw_secret([7; 32]);
        let set = rooms_in(&store, &event(draw));
        let room = set.iter().next().expect("room");
        let mut n = 0u32;
        c.bench_function(&format!("draw/pre-queue a newcomer, {draw} draw"), |b| {
            b.iter(|| {
                n = n.wrapping_add(1);
                let uid = Identity::of_ip(std::net::IpAddr::from(n.to_be_bytes()), 64);
                black_box(room.decide(&ring, &uid, &[], now))
            })
        });
    }
    let set = rooms(&event("verifiable"));
    let e = set.iter().next().expect("room").config.events[0].clone();
    let d = DrawSecret([7; 32]).draw("default", &e);
    let receipts: Vec<Receipt> = (0..10_000u64).map(|i| Receipt(i * 7919)).collect();
    c.bench_function("draw/reveal 10,000 receipts", |b| {
        b.iter(|| black_box(d.reveal(receipts.iter().copied())))
    });
}

/// A lottery room at 50 %, a visitor, a time, and that visitor's allow token of the current
/// allow bucket (verified, not re-signed).
fn room_and_allow_token() -> (
    vestibule::keys::KeyRing,
    RoomSet,
    Identity,
    Timestamp,
    String,
) {
    let ring = ring();
    let set = rooms("[[room]]\nallow_percentage = 50\n");
    let uid = Identity::of_ip("203.0.113.7".parse().expect("ip"), 64);
    let now = Timestamp::from_secs(1_700_000_000);
    let exp = vestibule::room::lottery::bucket_exp(now.secs(), 3600);
    let allow = Claims::new(Dec::Allow, exp, &uid, "key1").sign(ring.active());
    (ring, set, uid, now, allow)
}

/// A capacity room with room to spare, where the origin already ended 1,000 sessions (so the
/// revoked marks are there to look through), `visitors` admitted in it with their allow
/// tokens, and the time.
fn capacity_room_and_allow_tokens(
    visitors: usize,
) -> (RoomSet, Vec<(Identity, String)>, Timestamp) {
    use vestibule::room::CookieAction;
    let ring = ring();
    let set = rooms(
        "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1000000\ntotal_active_users = 1000000\n",
    );
    let room = set.iter().next().expect("room");
    let now = Timestamp::from_secs(1_700_000_000);
    let admit = |uid: &Identity| {
        let outcome = room.decide(&ring, uid, &[], now);
        match outcome.cookie {
            CookieAction::Set(value) => (value.to_string(), outcome.place),
            other => panic!("not admitted: {other:?}"),
        }
    };
    for i in 0..1_000u32 {
        let uid = Identity::of_ip(std::net::Ipv4Addr::from(0x0a00_0000 + i).into(), 64);
        let (_, place) = admit(&uid);
        room.revoke(place, now);
    }
    let admitted = (0..visitors)
        .map(|i| {
            let uid = Identity::of_ip([203, 0, 113, 10 + i as u8].into(), 64);
            let (allow, _) = admit(&uid);
            (uid, allow)
        })
        .collect();
    (set, admitted, now)
}

/// Three rules, one of each algorithm, none of which blocks below a million requests: a window
/// per client, a token bucket per client and `X-Api-Key`, and a concurrency cap.
fn three_rules() -> vestibule::ratelimit::RuleSet {
    use vestibule::ratelimit::{Rule, RuleSet, RuleStates};
    let config = vestibule::config::parse(
        "[upstream]\npeers = [\"127.0.0.1:1\"]\n\
         [[rate_limit]]\nname = \"per-ip\"\nwindow = \"10s\"\nlimit = 1000000\n\
         [[rate_limit]]\nname = \"api-key\"\nkey = [\"client_ip\", \"header:x-api-key\"]\nalgorithm = \"token_bucket\"\nlimit = 1000000\nperiod = \"1s\"\n\
         [[rate_limit]]\nname = \"slots\"\nalgorithm = \"concurrency\"\nlimit = 1000000\n",
        Path::new("/tmp/bench.toml"),
    )
    .expect("config");
    let states = RuleStates::default();
    let store: std::sync::Arc<dyn vestibule::store::CounterStore> =
        std::sync::Arc::new(vestibule::store::local::LocalStore::new());
    RuleSet::new(
        config
            .rate_limits
            .into_iter()
            .map(|r| Rule::new(r, &states, &store))
            .collect(),
    )
}

fn decisions(c: &mut Criterion) {
    let (ring, set, uid, now, allow) = room_and_allow_token();
    let room = set.iter().next().expect("room");
    c.bench_function("room/decide allow token", |b| {
        b.iter(|| black_box(room.decide(&ring, &uid, &[allow.as_bytes()], now)))
    });
    // An eligible wait token: verified, drawn, and a new token signed either way.
    let wait = Claims::new(Dec::Wait, now.secs() - 1, &uid, "key1").sign(ring.active());
    c.bench_function("room/decide eligible wait token", |b| {
        b.iter(|| black_box(room.decide(&ring, &uid, &[wait.as_bytes()], now)))
    });
    c.bench_function("room/decide no cookie", |b| {
        b.iter(|| black_box(room.decide(&ring, &uid, &[], now)))
    });
}

fn rate_limits(c: &mut Criterion) {
    use vestibule::config::Scope;
    use vestibule::ratelimit::RequestView;

    let rules = three_rules();
    let identity = Identity::of_ip("203.0.113.7".parse().expect("ip"), 64);
    let mut headers = http::HeaderMap::new();
    headers.insert("x-api-key", http::HeaderValue::from_static("k-123"));
    let view = RequestView {
        identity: &identity,
        client_ip: "203.0.113.7".parse().expect("ip"),
        host: "shop.example",
        path: "/products/42",
        method: &http::Method::GET,
        headers: &headers,
    };
    // The clock moves 1 ms per request (1,000 requests/s for one key): far under every limit,
    // so each iteration takes the full three-rule path (window count, bucket refill and take,
    // concurrency slot), never the short cut of a key already in a penalty box.
    let mut ms = 1_700_000_000_000u64;
    let mut out = vestibule::ratelimit::Checks::new();
    let check = |out: &mut vestibule::ratelimit::Checks, ms: &mut u64| {
        *ms += 1;
        out.clear();
        rules.check(Scope::All, &view, Timestamp::from_millis(*ms), out)
    };
    let passed = |out: &vestibule::ratelimit::Checks| {
        out.len() == 3
            && out
                .iter()
                .all(|c| c.check.outcome == vestibule::ratelimit::Outcome::Pass)
    };
    assert!(
        check(&mut out, &mut ms).is_none() && passed(&out),
        "first: {out:?}"
    );
    c.bench_function("ratelimit/check 3 rules", |b| {
        b.iter(|| black_box(check(&mut out, &mut ms)))
    });
    // The benchmark's last iteration took the same path as the first.
    assert!(passed(&out), "last: {out:?}");
}

fn pages(c: &mut Criterion) {
    use vestibule::pages::{PageContext, PageKind};
    let pages = Pages::builtin();
    let mut ctx = PageContext::plain("default", "anon", 42, 200);
    ctx.queueing = "lottery";
    c.bench_function("pages/render startwaiting", |b| {
        b.iter(|| black_box(pages.render(PageKind::StartWaiting, black_box(&ctx))))
    });
}

/// One access line, as `[log] access = true` writes it for every request: into a buffer that
/// has grown to a line's size, as the thread's buffer has.
fn access_line(c: &mut Criterion) {
    use vestibule::config::LogFormat;
    use vestibule::logging::AccessLine;
    let rules = [("per-ip", "pass"), ("per-path", "pass"), ("slots", "pass")];
    let line = AccessLine {
        client: Some("203.0.113.7".parse().unwrap()),
        method: "GET",
        path: "/checkout/pay",
        status: 200,
        room: Some("default"),
        decision: Some("allow"),
        rules: &rules,
        upstream: Some("10.0.0.5:8000".parse().unwrap()),
        upstream_ms: Some(12.43),
        ms: 13.07,
    };
    let mut buf = Vec::with_capacity(1024);
    for (name, format) in [("plain", LogFormat::Plain), ("json", LogFormat::Json)] {
        c.bench_function(&format!("access_line/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                black_box(&line).write_as(&mut buf, format);
                black_box(buf.len())
            })
        });
    }
}

fn identity(c: &mut Criterion) {
    use vestibule::identity::IdentityPolicy;
    let policy = IdentityPolicy {
        trusted_proxies: vec![
            "10.0.0.0/8".parse().expect("cidr"),
            "192.168.0.0/16".parse().expect("cidr"),
        ],
        ..IdentityPolicy::default()
    };
    let peer: std::net::IpAddr = "10.0.0.2".parse().expect("ip");
    let xff: &[u8] = b"6.6.6.6, 203.0.113.7, 192.168.1.1";
    c.bench_function("identity/xff through trusted proxies", |b| {
        b.iter(|| {
            let ip = policy.client_ip(peer, [black_box(xff)]);
            black_box(policy.identify(ip, peer, None))
        })
    });
}

/// 1 thread, and 2 when the machine has 2 cores.
/// A shared window (`shared = true`) on node "a" of a two-node cluster synced in memory, after
/// node "b" counted keys 0..64 past the exchange threshold, and the time to read it at.
fn shared_window_with_counts_from_another_node() -> (
    std::sync::Arc<dyn vestibule::store::WindowCounter>,
    Timestamp,
) {
    use vestibule::config::OnStoreFailure;
    use vestibule::store::shared::{MemoryHub, SharedStore};
    use vestibule::store::{CounterStore, WindowSpec};
    let hub = MemoryHub::default();
    let a = SharedStore::new("a", "1", 1_000, OnStoreFailure::LastShare);
    let b = SharedStore::new("b", "1", 1_000, OnStoreFailure::LastShare);
    let spec = WindowSpec {
        name: "per-ip".into(),
        interval_ms: 10_000,
        max_keys: 16_384,
        shared: Some(1),
    };
    let now = Timestamp::from_secs(1_700_000_000);
    let on_b = b.window(&spec);
    for key in 0..64 {
        on_b.observe(key, 5, now);
    }
    assert!(hub.sync(&b, now) && hub.sync(&a, now));
    (a.window(&spec), now)
}

/// A new visitor (the `n`th) arriving in `line` at `now`, and waiting.
fn arrive(line: &Room, ring: &vestibule::keys::KeyRing, now: Timestamp, n: &mut u32) {
    *n += 1;
    let uid = Identity::of_ip(std::net::Ipv4Addr::from(0x0b00_0000 ^ *n).into(), 64);
    let outcome = line.decide(ring, &uid, &[], now);
    assert!(outcome.decision == vestibule::room::Decision::Anon);
    black_box(outcome);
}

fn thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1];
    if cores >= 2 {
        counts.push(2);
    }
    counts
}

/// Runs `iters` calls of `update` on each of `threads` threads started together, and returns
/// the slowest thread's time: with one thread, the uncontended cost of a call.
fn run_at_once(threads: usize, iters: u64, update: &(dyn Fn() + Sync)) -> std::time::Duration {
    run_at_once_with(threads, iters, &|_| (), &|_: &mut ()| update())
}

/// As [`run_at_once`], with state of each thread's own: `setup(0)`, `setup(1)`, … made in
/// that order before the threads start, then `iters` calls of `step` on it.
fn run_at_once_with<S: Send>(
    threads: usize,
    iters: u64,
    setup: &dyn Fn(usize) -> S,
    step: &(dyn Fn(&mut S) + Sync),
) -> std::time::Duration {
    use std::time::{Duration, Instant};
    let start = std::sync::Barrier::new(threads);
    let elapsed = std::sync::Mutex::new(Duration::ZERO);
    let states: Vec<S> = (0..threads).map(setup).collect();
    std::thread::scope(|s| {
        for mut state in states {
            let (start, elapsed) = (&start, &elapsed);
            s.spawn(move || {
                start.wait();
                let t = Instant::now();
                for _ in 0..iters {
                    step(&mut state);
                }
                let e = t.elapsed();
                let mut max = elapsed.lock().unwrap();
                *max = (*max).max(e);
            });
        }
    });
    elapsed.into_inner().unwrap()
}

/// vestibule's own part of an allowed request and of three rate-limit rules, on every worker
/// thread at once. What still grows from 1 to 2 threads is what the threads share: with one
/// client key for all of them, the rules' counters of that key (a rate limit must count a key's
/// requests whichever thread serves them); with a key per thread, nothing of the rules' own
/// but the sketch's table.
fn contended_decisions(c: &mut Criterion) {
    use vestibule::config::Scope;
    use vestibule::ratelimit::{Checks, RequestView};
    let (ring, set, uid, now, allow) = room_and_allow_token();
    let room = set.iter().next().expect("room");
    let (cap_set, cap_visitors, cap_now) = capacity_room_and_allow_tokens(2);
    let capacity = cap_set.iter().next().expect("room");
    let rules = three_rules();
    let (shared_window, shared_now) = shared_window_with_counts_from_another_node();
    let mut headers = http::HeaderMap::new();
    headers.insert("x-api-key", http::HeaderValue::from_static("k-123"));
    // Each thread: its client (the same one for all, or its own), its clock and its checks.
    // The clocks move 1 ms per request, so the rules see each thread's requests in order; every
    // run starts them together, a day after the last run began (a run is far shorter than a
    // day of requests), so time never goes back.
    let clock = std::cell::Cell::new(1_700_000_000_000u64);
    let setup = |shared_key: bool| {
        let clock = &clock;
        move |i: usize| {
            if i == 0 {
                clock.set(clock.get() + 86_400_000);
            }
            let ip: std::net::IpAddr = if shared_key {
                [203, 0, 113, 7].into()
            } else {
                [203, 0, 113, 10 + i as u8].into()
            };
            (Identity::of_ip(ip, 64), ip, clock.get(), Checks::new())
        }
    };
    let check = |(identity, ip, ms, out): &mut (Identity, std::net::IpAddr, u64, Checks)| {
        *ms += 1;
        out.clear();
        let view = RequestView {
            identity,
            client_ip: *ip,
            host: "shop.example",
            path: "/products/42",
            method: &http::Method::GET,
            headers: &headers,
        };
        let limited = rules.check(Scope::All, &view, Timestamp::from_millis(*ms), out);
        assert!(
            limited.is_none() && out.len() == 3,
            "every rule passes: {limited:?} {out:?}"
        );
    };
    for threads in thread_counts() {
        let mut g = c.benchmark_group(format!("decisions_{threads}_threads"));
        g.bench_function("allow_token", |b| {
            b.iter_custom(|iters| {
                run_at_once(threads, iters, &|| {
                    black_box(room.decide(&ring, &uid, &[allow.as_bytes()], now));
                })
            })
        });
        // A surge's arrivals: a line has formed, and each thread's visitors arrive without a
        // cookie (a visitor of its own per call), join the line and get its waiting answer.
        let line = rooms(
            "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1\ntotal_active_users = 1\n",
        );
        let line = line.iter().next().expect("room");
        for i in 0..100u32 {
            let uid = Identity::of_ip(std::net::Ipv4Addr::from(0x0a00_0000 + i).into(), 64);
            line.decide(&ring, &uid, &[], cap_now);
        }
        g.bench_function("capacity_arrival_in_line", |b| {
            b.iter_custom(|iters| {
                run_at_once_with(threads, iters, &|i| (i as u32) << 24, &|n| {
                    arrive(line, &ring, cap_now, n)
                })
            })
        });
        // The same, with the store (one for every room, as in the server) also holding the
        // queues of 10 other rooms in long lines: 2,000 live counters each (waiting visitors by
        // tick and arrival bucket).
        let store: std::sync::Arc<dyn vestibule::store::CounterStore> =
            std::sync::Arc::new(vestibule::store::local::LocalStore::new());
        let crowded = rooms_in(
            &store,
            "[[room]]\nadmission = \"fifo\"\nnew_users_per_minute = 1\ntotal_active_users = 1\n",
        );
        let crowded = crowded.iter().next().expect("room");
        for i in 0..100u32 {
            let uid = Identity::of_ip(std::net::Ipv4Addr::from(0x0a00_0000 + i).into(), 64);
            crowded.decide(&ring, &uid, &[], cap_now);
        }
        for room in 0..10 {
            let scope: std::sync::Arc<str> = format!("other-room-{room}").into();
            for (kind, n) in [
                (vestibule::store::CounterKind::Waiting, 1_600),
                (vestibule::store::CounterKind::Arrived, 400),
            ] {
                for c in 0..n {
                    let key = vestibule::store::CounterKey {
                        scope: scope.clone(),
                        kind,
                        slot: cap_now.secs() / 5 - c % 12,
                        id: c,
                    };
                    store.add(&key, 3, cap_now, Timestamp::from_secs(cap_now.secs() + 600));
                }
            }
        }
        g.bench_function("capacity_arrival_beside_10_long_lines", |b| {
            b.iter_custom(|iters| {
                run_at_once_with(threads, iters, &|i| (i as u32) << 24, &|n| {
                    arrive(crowded, &ring, cap_now, n)
                })
            })
        });
        // A shared rule's window on a cluster node, each thread a key of its own that another
        // node counted too: the others' counts are looked up on every request.
        g.bench_function("shared_window_peek", |b| {
            b.iter_custom(|iters| {
                run_at_once_with(threads, iters, &|i| i as u64, &|key| {
                    let s = shared_window.peek(*key, shared_now);
                    assert!(s.curr >= 5, "the other node's counts: {s:?}");
                    black_box(s);
                })
            })
        });
        // Each thread an admitted visitor of its own, as in a surge.
        g.bench_function("capacity_allow_token", |b| {
            b.iter_custom(|iters| {
                run_at_once_with(threads, iters, &|i| &cap_visitors[i], &|(uid, allow)| {
                    let outcome = capacity.decide(&ring, uid, &[allow.as_bytes()], cap_now);
                    assert!(outcome.decision == vestibule::room::Decision::Allow);
                    black_box(outcome);
                })
            })
        });
        for (name, shared_key) in [
            ("ratelimit_3_rules_one_key", true),
            ("ratelimit_3_rules_own_keys", false),
        ] {
            let setup = setup(shared_key);
            g.bench_function(name, |b| {
                b.iter_custom(|iters| run_at_once_with(threads, iters, &setup, &check))
            });
        }
        g.finish();
    }
}

/// What a waiting-page answer costs in the page set's caches when every worker thread answers
/// at once: the rendered page found again, and the visitor's `Accept-Language` negotiated
/// again (both hits, as during a surge).
fn contended_pages(c: &mut Criterion) {
    use vestibule::pages::{PageContext, PageKind};
    let pages = Pages::builtin();
    let mut ctx = PageContext::plain("default", "anon", 42, 200);
    ctx.queueing = "lottery";
    let accept_language: &[u8] = b"de-CH,de;q=0.9,fr;q=0.8,en;q=0.7";
    for threads in thread_counts() {
        let mut g = c.benchmark_group(format!("page_answers_{threads}_threads"));
        g.bench_function("render_hit", |b| {
            b.iter_custom(|iters| {
                run_at_once(threads, iters, &|| {
                    black_box(pages.render(PageKind::StartWaiting, black_box(&ctx)));
                })
            })
        });
        g.bench_function("negotiate_hit", |b| {
            b.iter_custom(|iters| {
                run_at_once(threads, iters, &|| {
                    black_box(
                        pages
                            .catalogs()
                            .negotiate(Some(black_box(accept_language)), 0),
                    );
                })
            })
        });
        g.finish();
    }
}

/// What one counter increment and one histogram observation cost when every worker thread
/// updates the same series: `prometheus`'s (one atomic, or five, that every thread writes)
/// against the per-thread slots of `vestibule::metrics::sharded`. Each iteration is one update
/// on each of `threads` threads running at once; with one thread it is the uncontended cost.
fn contended_metrics(c: &mut Criterion) {
    use vestibule::metrics::sharded;

    let theirs = prometheus::IntCounter::new("b_total", "Bench.").unwrap();
    let ours = sharded::CounterVec::new("c_total", "Bench.", &["x"]).with_label_values(&["a"]);
    let bounds = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
    let their_histogram = prometheus::Histogram::with_opts(
        prometheus::HistogramOpts::new("b_seconds", "Bench.").buckets(bounds.to_vec()),
    )
    .unwrap();
    let our_histogram = sharded::Histogram::new("c_seconds", "Bench.", &bounds);
    for threads in thread_counts() {
        let mut g = c.benchmark_group(format!("metrics_{threads}_threads"));
        g.bench_function("prometheus_counter_inc", |b| {
            b.iter_custom(|iters| run_at_once(threads, iters, &|| theirs.inc()))
        });
        g.bench_function("sharded_counter_inc", |b| {
            b.iter_custom(|iters| run_at_once(threads, iters, &|| ours.inc()))
        });
        g.bench_function("prometheus_histogram_observe", |b| {
            b.iter_custom(|iters| {
                run_at_once(threads, iters, &|| {
                    their_histogram.observe(black_box(0.003))
                })
            })
        });
        g.bench_function("sharded_histogram_observe", |b| {
            b.iter_custom(|iters| {
                run_at_once(threads, iters, &|| our_histogram.observe(black_box(0.003)))
            })
        });
        g.finish();
    }
}

/// A cluster node's own side of a sync (the request path never waits on it, but it runs every
/// `sync_interval` on every node): reading back a reply of 10,000 counters in 4 rooms, and
/// preparing a request when none of its own 10,000 counters changed since the last push.
fn cluster_sync(c: &mut Criterion) {
    use vestibule::config::OnStoreFailure;
    use vestibule::store::shared::{MemoryHub, SharedStore};
    use vestibule::store::{CounterKey, CounterKind, CounterStore};
    let hub = MemoryHub::default();
    let node = |name| SharedStore::new(name, "1", 1_000, OnStoreFailure::LastShare);
    let (a, b) = (node("a"), node("b"));
    let now = Timestamp::from_secs(1_700_000_000);
    let rooms: Vec<std::sync::Arc<str>> = (0..4).map(|r| format!("room-{r}").into()).collect();
    for i in 0..10_000u64 {
        let key = CounterKey {
            scope: rooms[i as usize % 4].clone(),
            kind: CounterKind::Waiting,
            slot: i / 4,
            id: 0,
        };
        let until = Timestamp::from_secs(now.secs() + 600);
        a.add(&key, 1, now, until);
        b.add(&key, 1, now, until);
    }
    assert!(hub.sync(&a, now) && hub.sync(&b, now) && hub.sync(&a, now));
    let mut g = c.benchmark_group("cluster_sync");
    g.bench_function("prepare_10000_unchanged", |bench| {
        bench.iter(|| {
            let req = a.prepare(now);
            assert!(
                req.counters.is_empty(),
                "nothing changed since the last push"
            );
            black_box(req)
        })
    });
    let req = a.prepare(now);
    let reply = hub.exchange(&req).expect("the hub is up");
    assert_eq!(reply.counters.len(), 10_000);
    g.bench_function("apply_10000_counters", |bench| {
        bench.iter_batched(
            || (req.clone(), reply.clone()),
            |(req, reply)| black_box(a.apply(req, reply, now)),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// A kept-alive client connection, served by an echo task on runtime B: the client's end, once
/// B holds the socket. `here`: B accepted it itself, as each worker thread does on its own
/// socket. Otherwise runtime A accepted it and handed it over, as Pingora's listener does, so
/// the socket stays registered with A's reactor (A is otherwise idle).
fn echo_connection(here: bool) -> std::net::TcpStream {
    use pingora::protocols::l4::stream::Stream as L4Stream;
    use pingora::protocols::{GetSocketDigest, SocketDigest, Stream};
    use std::os::fd::AsRawFd;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let accept = |listener: std::net::TcpListener| async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut l4 = L4Stream::from(tcp);
        let digest = SocketDigest::from_raw_fd(l4.as_raw_fd());
        l4.set_socket_digest(digest);
        let stream: Stream = Box::new(vestibule::listen::home::Homed::new(l4, 8192));
        stream
    };
    let (accepted_tx, accepted_rx) = std::sync::mpsc::channel::<Stream>();
    let mut listener = Some(listener);
    if !here {
        // Runtime A: accepts, hands the connection over, then idles on its reactor (for good:
        // the bench process ends with it).
        let listener = listener.take().unwrap();
        std::thread::spawn(move || {
            runtime().block_on(async {
                accepted_tx.send(accept(listener).await).unwrap();
                std::future::pending::<()>().await
            })
        });
    }
    // Runtime B: serves the connection until the client closes it.
    std::thread::spawn(move || {
        runtime().block_on(async {
            let mut stream = match listener {
                Some(listener) => accept(listener).await,
                None => accepted_rx.recv().unwrap(),
            };
            let mut buf = [0u8; 64];
            while let Ok(n @ 1..) = stream.read(&mut buf).await {
                if stream.write_all(&buf[..n]).await.is_err() || stream.flush().await.is_err() {
                    break;
                }
            }
        })
    });
    let client = std::net::TcpStream::connect(addr).unwrap();
    client.set_nodelay(true).unwrap();
    client
}

/// The CPU time of this process so far, every thread's.
fn process_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "CLOCK_PROCESS_CPUTIME_ID");
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One request and response on a kept-alive connection (64 bytes each way), by which thread
/// accepted the connection, and so with which reactor its socket is registered: what accepting
/// on the serving thread saves per request. `wall` is the round trip's time; `cpu` is the CPU
/// time it took in the whole process (the client's thread, the serving runtime's and the
/// accepting runtime's).
fn edge_round_trip(c: &mut Criterion) {
    use std::io::{Read, Write};
    let mut g = c.benchmark_group("edge_round_trip");
    for (name, here) in [
        ("accepted_on_another_thread", false),
        ("accepted_where_served", true),
    ] {
        let mut client = echo_connection(here);
        let mut buf = [7u8; 64];
        let mut round_trip = move || {
            client.write_all(&buf).unwrap();
            client.read_exact(&mut buf).unwrap();
        };
        g.bench_function(format!("{name}/wall"), |b| b.iter(&mut round_trip));
        g.bench_function(format!("{name}/cpu"), |b| {
            b.iter_custom(|iters| {
                let start = process_cpu();
                for _ in 0..iters {
                    round_trip();
                }
                process_cpu() - start
            })
        });
    }
    g.finish();
}

/// One exchange over a pooled origin connection (64 bytes each way), taken from Pingora's
/// connection pool and given back, on thread 0 of a Pingora worker pool without work stealing:
/// what a proxied request does with its origin connection. Given back, the connection is
/// watched by a task that Pingora spawns on `current_handle()`: a random thread of the pool.
/// The next request that takes it wakes that task and waits for it to let go. With a pool of
/// `threads` = 2 (one service for all worker threads, as Pingora runs them) the task lands on
/// the other thread half of the time; with 1 (a service per worker thread, as vestibule runs
/// them) it never does. `cpu` is the whole process's CPU time per exchange (the echo origin's
/// thread included).
fn origin_reuse(c: &mut Criterion) {
    use pingora::connectors::TransportConnector;
    use pingora::upstreams::peer::{BasicPeer, Peer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The origin: echoes on every connection, on a thread of its own.
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = origin.local_addr().unwrap();
    origin.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let origin = tokio::net::TcpListener::from_std(origin).unwrap();
            loop {
                let (mut s, _) = origin.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        })
    });
    let mut g = c.benchmark_group("origin_reuse");
    for threads in [2, 1] {
        let pool = pingora_runtime::Runtime::new_no_steal(threads, "bench");
        let pingora_runtime::Runtime::NoSteal(pool) = pool else {
            unreachable!("a pool without work stealing")
        };
        // Thread 0 of the pool runs the exchanges it is asked for and says when they are done.
        let (ask, asked) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        pool.get_runtime_at(0).spawn(async move {
            let mut asked = asked;
            let connector = TransportConnector::new(None);
            let peer = BasicPeer::new(&addr.to_string());
            while let Some(n) = asked.recv().await {
                for _ in 0..n {
                    let mut s = match connector.reused_stream(&peer).await {
                        Some(s) => s,
                        None => connector.new_stream(&peer).await.unwrap(),
                    };
                    let mut buf = [7u8; 64];
                    s.write_all(&buf).await.unwrap();
                    s.flush().await.unwrap();
                    s.read_exact(&mut buf).await.unwrap();
                    connector.release_stream(s, peer.reuse_hash(), None);
                }
                done_tx.send(()).unwrap();
            }
        });
        let name = if threads == 1 {
            "watched_on_its_own_thread"
        } else {
            "watched_on_a_random_thread_of_2"
        };
        g.bench_function(format!("{name}/cpu"), |b| {
            b.iter_custom(|iters| {
                let start = process_cpu();
                ask.send(iters).unwrap();
                done.recv().unwrap();
                process_cpu() - start
            })
        });
        drop(ask);
        // The pool's threads end with the process.
        std::mem::forget(pool);
    }
    g.finish();
}

criterion_group!(
    benches,
    tokens,
    jwts,
    challenges,
    invitations,
    draws,
    decisions,
    rate_limits,
    pages,
    access_line,
    identity,
    contended_metrics,
    contended_pages,
    contended_decisions,
    cluster_sync,
    edge_round_trip,
    origin_reuse
);
criterion_main!(benches);
