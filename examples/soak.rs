//! The soak benchmark's driver (`benches/soak.sh` builds and runs it): a real vestibule in front
//! of the real demo origin on loopback, under mixed traffic for a bounded time, with reloads, two
//! origin restarts and a burst of idle connections. It samples the proxy's RSS, open file
//! descriptors and p99 latency, writes them as CSV and a PNG chart, and exits non-zero on a 5xx
//! the origin did not cause, on leaks (RSS or fds not back near where they were once warm), on a
//! panic, or if the proxy died.
//!
//! Every loop is bounded by the run's deadline; all traffic goes to 127.0.0.1.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser, Debug)]
struct Args {
    /// The vestibule binary (release build).
    #[arg(long)]
    bin: PathBuf,
    /// Minutes of traffic.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Requests per second, all kinds together.
    #[arg(long, default_value_t = 300)]
    rate: u32,
    /// Seconds between config reloads.
    #[arg(long, default_value_t = 30)]
    reload_every: u64,
    /// Idle connections opened (and dropped) once, halfway.
    #[arg(long, default_value_t = 2000)]
    idle: usize,
    /// Seconds to wait after the traffic stops before the leak check.
    #[arg(long, default_value_t = 75)]
    settle: u64,
    /// Where to write the config, logs, CSV and chart.
    #[arg(long, default_value = "bench-results/soak")]
    out: PathBuf,
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("addr")
}

fn wait_for(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn spawn(bin: &Path, args: &[&str], log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("starts")
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

fn config(proxy: SocketAddr, admin: SocketAddr, origin: SocketAddr, dir: &Path, pct: u8) -> String {
    let pages = Path::new(env!("CARGO_MANIFEST_DIR")).join("pages");
    format!(
        r#"[server]
listen = ["{proxy}"]
threads = 2
pid_file = "{dir}/vestibule.pid"
upgrade_sock = "{dir}/vestibule.sock"
keepalive_timeout = "20s"
header_timeout = "5s"
[admin]
listen = "{admin}"
[identity]
trusted_proxies = ["127.0.0.1/32"]
[upstream]
peers = ["{origin}"]
health_check = "1s"
[log]
access = false
[[room]]
name = "open"
pages = "{pages}"
allow_percentage = 100
[[room]]
name = "lottery"
paths = ["/lottery"]
cookie_name = "wr_lottery"
pages = "{pages}"
allow_percentage = {pct}
wait_period = "2s"
[[room]]
name = "sale"
paths = ["/sale"]
cookie_name = "wr_sale"
pages = "{pages}"
admission = "fifo"
new_users_per_minute = 120
total_active_users = 300
session_duration = "1m"
refresh = "5s"
[[rate_limit]]
name = "api"
paths = ["/api"]
window = "1s"
limit = 5
penalty = "5s"
[[rate_limit]]
name = "bucket"
paths = ["/api"]
algorithm = "token_bucket"
limit = 50
period = "10s"
penalty = "0s"
[[rate_limit]]
name = "slots"
algorithm = "concurrency"
limit = 20
"#,
        dir = dir.display(),
        pages = pages.display(),
    )
}

/// What one sampling window saw.
#[derive(Default)]
struct Window {
    latencies_us: Vec<u32>,
    requests: u64,
    by_class: [u64; 6],
    unexplained_5xx: u64,
    client_errors: u64,
}

struct Shared {
    window: Mutex<Window>,
    /// Periods when the origin was down (plus the health check's catch-up), in seconds since
    /// the start.
    origin_down: Mutex<Vec<(f64, f64)>>,
    /// Cookies per (user, room cookie name).
    jars: Mutex<HashMap<(u32, &'static str), String>>,
    stop: AtomicBool,
    start: Instant,
    total_unexplained: AtomicU64,
    total_requests: AtomicU64,
}

impl Shared {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn origin_caused(&self, at: f64) -> bool {
        self.origin_down
            .lock()
            .unwrap()
            .iter()
            .any(|(from, to)| at >= *from && at <= *to)
    }
}

/// One request of a randomly chosen kind, as one of the simulated users.
async fn one_request(
    c: &reqwest::Client,
    shared: &Shared,
    proxy: SocketAddr,
    rng: &mut rand::rngs::StdRng,
) {
    let user: u32 = rng.gen_range(0..3000);
    let kind: u32 = rng.gen_range(0..100);
    let (path, jar, ip) = match kind {
        0..=39 => ("/__echo".to_owned(), None, user),
        40..=59 => ("/lottery/__echo".to_owned(), Some("wr_lottery"), user),
        60..=79 => ("/sale/__echo".to_owned(), Some("wr_sale"), user),
        80..=84 => ("/sale/__revoke".to_owned(), Some("wr_sale"), user),
        // A handful of clients hammering the API: rate limited.
        85..=94 => ("/api/__echo".to_owned(), None, 5000 + user % 5),
        _ => ("/__slow?ms=50".to_owned(), None, user),
    };
    let xff = format!("10.{}.{}.{}", ip >> 16 & 255, ip >> 8 & 255, ip & 255);
    let mut req = c
        .get(format!("http://{proxy}{path}"))
        .header("X-Forwarded-For", &xff)
        .header("Accept", "text/html");
    if let Some(name) = jar {
        if let Some(v) = shared.jars.lock().unwrap().get(&(user, name)) {
            req = req.header("Cookie", format!("{name}={v}"));
        }
    }
    let sent = Instant::now();
    let result = req.send().await;
    let latency = sent.elapsed();
    let at = shared.now();
    shared.total_requests.fetch_add(1, Ordering::Relaxed);
    let resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            let mut w = shared.window.lock().unwrap();
            w.requests += 1;
            w.client_errors += 1;
            // A request the proxy failed outright (reset, closed mid-answer) counts like an
            // unexplained 5xx unless the origin was down.
            if !shared.origin_caused(at) {
                w.unexplained_5xx += 1;
                shared.total_unexplained.fetch_add(1, Ordering::Relaxed);
            }
            eprintln!("{at:.1} s: client error on {path}: {e}");
            return;
        }
    };
    let status = resp.status().as_u16();
    {
        let mut w = shared.window.lock().unwrap();
        w.requests += 1;
        w.by_class[(status / 100).min(5) as usize] += 1;
        // The deliberately slow origin route would only measure its own sleep.
        if !path.starts_with("/__slow") {
            w.latencies_us
                .push(latency.as_micros().min(u128::from(u32::MAX)) as u32);
        }
        if status >= 500 && !(matches!(status, 502 | 504) && shared.origin_caused(at)) {
            w.unexplained_5xx += 1;
            shared.total_unexplained.fetch_add(1, Ordering::Relaxed);
            eprintln!("{at:.1} s: {status} on {path} outside an origin outage");
        }
    }
    if let Some(name) = jar {
        for v in resp.headers().get_all("set-cookie") {
            let Ok(v) = v.to_str() else { continue };
            if let Some(rest) = v.strip_prefix(&format!("{name}=")) {
                let value = rest.split(';').next().unwrap_or("").to_owned();
                let mut jars = shared.jars.lock().unwrap();
                if value == "deleted" {
                    jars.remove(&(user, name));
                } else {
                    jars.insert((user, name), value);
                }
            }
        }
    }
    let _ = resp.bytes().await;
}

/// Opens `n` connections, sends one request on each, reads the answer, holds them idle, drops.
async fn idle_burst(proxy: SocketAddr, n: usize, hold: Duration) -> usize {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut s) = tokio::net::TcpStream::connect(proxy).await else {
            continue;
        };
        if s.write_all(b"GET /__echo HTTP/1.1\r\nHost: soak\r\n\r\n")
            .await
            .is_err()
        {
            continue;
        }
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        held.push(s);
    }
    let opened = held.len();
    tokio::time::sleep(hold).await;
    drop(held);
    opened
}

fn p99(mut v: Vec<u32>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64) * 0.99).ceil() as usize;
    f64::from(v[i.min(v.len()) - 1]) / 1000.0
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out).expect("out dir");
    let out = std::fs::canonicalize(&args.out).expect("out dir");
    let proxy = free_addr();
    let admin = free_addr();
    let origin_addr = free_addr();
    let keys = out.join("keys.toml");
    std::fs::write(
        &keys,
        "active = \"k1\"\n[ring]\nk1 = \"c29hay1rZXktc29hay1rZXktc29hay1rZXktc29hay1rZXktc29hay0wMA==\"\n",
    )
    .expect("keys");
    let conf = out.join("vestibule.toml");
    std::fs::write(&conf, config(proxy, admin, origin_addr, &out, 30)).expect("config");
    let origin_args = [
        "origin",
        "--listen",
        &origin_addr.to_string(),
        "--threads",
        "1",
    ];
    let mut origin = spawn(&args.bin, &origin_args, &out.join("origin.log"));
    assert!(
        wait_for(origin_addr, Duration::from_secs(10)),
        "origin did not start"
    );
    let vlog = out.join("vestibule.log");
    let mut vestibule = spawn(
        &args.bin,
        &["--config", conf.to_str().expect("utf-8")],
        &vlog,
    );
    assert!(
        wait_for(proxy, Duration::from_secs(15)),
        "vestibule did not start"
    );
    let pid = vestibule.id();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let shared = Arc::new(Shared {
        window: Mutex::new(Window::default()),
        origin_down: Mutex::new(Vec::new()),
        jars: Mutex::new(HashMap::new()),
        stop: AtomicBool::new(false),
        start: Instant::now(),
        total_unexplained: AtomicU64::new(0),
        total_requests: AtomicU64::new(0),
    });
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let deadline = Instant::now() + duration;
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");

    // Traffic: workers pacing themselves to `rate` in all.
    const WORKERS: u32 = 32;
    let per_worker = Duration::from_secs_f64(f64::from(WORKERS) / f64::from(args.rate.max(1)));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (shared, client) = (shared.clone(), client.clone());
        tasks.push(rt.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(w));
            let mut next = tokio::time::Instant::now();
            while !shared.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                one_request(&client, &shared, proxy, &mut rng).await;
                next += per_worker;
                tokio::time::sleep_until(next).await;
            }
        }));
    }

    let mut csv = String::from(
        "seconds,rss_kib,fds,p99_ms,requests,2xx,3xx,4xx,5xx,unexplained_5xx,client_errors\n",
    );
    let mut samples: Vec<(f64, u64, u64, f64)> = Vec::new();
    let mut events: Vec<(f64, String)> = Vec::new();
    let mut next_reload = Instant::now() + Duration::from_secs(args.reload_every);
    let mut reloads = 0u32;
    let restarts = [duration / 3, duration * 2 / 3];
    let mut restarted = 0;
    let mut idle_done = false;
    let mut idle_task = None;
    let mut pct = 30u8;
    let mut next_sample = Instant::now();
    let sample = |shared: &Shared, samples: &mut Vec<(f64, u64, u64, f64)>, csv: &mut String| {
        let w = std::mem::take(&mut *shared.window.lock().unwrap());
        let t = shared.now();
        let (rss, fd) = (rss_kib(pid), fds(pid));
        let p = p99(w.latencies_us);
        csv.push_str(&format!(
            "{t:.1},{rss},{fd},{p:.2},{},{},{},{},{},{},{}\n",
            w.requests,
            w.by_class[2],
            w.by_class[3],
            w.by_class[4],
            w.by_class[5],
            w.unexplained_5xx,
            w.client_errors
        ));
        samples.push((t, rss, fd, p));
    };
    while Instant::now() < deadline {
        let elapsed = shared.start.elapsed();
        if Instant::now() >= next_sample {
            sample(&shared, &mut samples, &mut csv);
            next_sample += Duration::from_secs(5);
        }
        if Instant::now() >= next_reload {
            pct = if pct == 30 { 40 } else { 30 };
            std::fs::write(&conf, config(proxy, admin, origin_addr, &out, pct)).expect("config");
            reloads += 1;
            next_reload += Duration::from_secs(args.reload_every);
        }
        if restarted < restarts.len() && elapsed >= restarts[restarted] {
            let down = shared.now();
            // Open-ended until the origin is back: answers during the outage are its doing.
            shared
                .origin_down
                .lock()
                .unwrap()
                .push((down, f64::INFINITY));
            let _ = origin.kill();
            let _ = origin.wait();
            events.push((down, "origin restart".into()));
            std::thread::sleep(Duration::from_secs(5));
            origin = spawn(&args.bin, &origin_args, &out.join("origin.log"));
            assert!(
                wait_for(origin_addr, Duration::from_secs(10)),
                "origin did not restart"
            );
            // The health check (1 s) needs a probe or two to see it back.
            let up = shared.now() + 4.0;
            if let Some(last) = shared.origin_down.lock().unwrap().last_mut() {
                last.1 = up;
            }
            restarted += 1;
        }
        if !idle_done && elapsed >= duration / 2 {
            idle_done = true;
            events.push((shared.now(), format!("{} idle connections", args.idle)));
            idle_task = Some(rt.spawn(idle_burst(proxy, args.idle, Duration::from_secs(10))));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = rt.block_on(t);
    }
    let opened = idle_task.map_or(0, |t| rt.block_on(t).unwrap_or(0));
    sample(&shared, &mut samples, &mut csv);
    let traffic_end = shared.now();
    events.push((traffic_end, "traffic stops".into()));
    let settle_until = Instant::now() + Duration::from_secs(args.settle);
    while Instant::now() < settle_until {
        std::thread::sleep(Duration::from_secs(5));
        sample(&shared, &mut samples, &mut csv);
    }
    let metrics = reqwest::blocking::Client::new()
        .get(format!("http://{admin}/metrics"))
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    let alive = matches!(vestibule.try_wait(), Ok(None));
    let log = std::fs::read_to_string(&vlog).unwrap_or_default();
    let _ = vestibule.kill();
    let _ = vestibule.wait();
    let _ = origin.kill();
    let _ = origin.wait();

    std::fs::write(out.join("soak.csv"), &csv).expect("csv");
    let secs = |s: &[(f64, u64, u64, f64)], f: fn(&(f64, u64, u64, f64)) -> f64| {
        s.iter().map(|x| (x.0, f(x))).collect::<Vec<_>>()
    };
    let chart = vestibule::plot::Chart {
        title: format!(
            "vestibule soak: {:.0} min at {} req/s, reload every {} s",
            args.minutes, args.rate, args.reload_every
        ),
        x_label: "seconds".into(),
        panels: vec![
            vestibule::plot::Panel {
                y_label: "RSS (MiB)".into(),
                series: vec![vestibule::plot::Series {
                    name: "RSS".into(),
                    points: secs(&samples, |x| x.1 as f64 / 1024.0),
                    color: 0,
                }],
                hlines: vec![],
            },
            vestibule::plot::Panel {
                y_label: "open fds".into(),
                series: vec![vestibule::plot::Series {
                    name: "fds".into(),
                    points: secs(&samples, |x| x.2 as f64),
                    color: 1,
                }],
                hlines: vec![],
            },
            vestibule::plot::Panel {
                y_label: "p99 (ms)".into(),
                series: vec![vestibule::plot::Series {
                    name: "p99 per 5 s (all but the slow route)".into(),
                    points: secs(&samples, |x| x.3),
                    color: 2,
                }],
                hlines: vec![],
            },
        ],
        events,
    };
    if let Err(e) = vestibule::plot::draw(&chart, &out.join("soak.png"), 1200, 260) {
        eprintln!("chart: {e}");
    }

    // Verdicts. "Warm" is the first sample two minutes in (or the median sample of a shorter
    // run): caches and pools are full by then.
    let warm = samples
        .iter()
        .find(|s| s.0 >= 120.0_f64.min(traffic_end / 2.0))
        .or(samples.first())
        .copied()
        .unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let peak_rss = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let peak_fds = samples.iter().map(|s| s.2).max().unwrap_or(0);
    let during: Vec<f64> = samples
        .iter()
        .filter(|s| s.0 <= traffic_end)
        .map(|s| s.3)
        .collect();
    let worst_p99 = during.iter().copied().fold(0.0, f64::max);
    let mut sorted = during.clone();
    sorted.sort_by(f64::total_cmp);
    let median_p99 = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    let unexplained = shared.total_unexplained.load(Ordering::Relaxed);
    let requests = shared.total_requests.load(Ordering::Relaxed);
    let reload_ok = metric(
        &metrics,
        "vestibule_config_reloads_total{result=\"success\"}",
    );
    let reload_failed = metric(
        &metrics,
        "vestibule_config_reloads_total{result=\"failure\"}",
    );
    let rss_limit = (warm.1 as f64 * 1.25).max(warm.1 as f64 + 24.0 * 1024.0);
    let mut failures = Vec::new();
    if !alive {
        failures.push("the proxy exited".to_owned());
    }
    if log.contains("panicked") {
        failures.push("the proxy log holds a panic".to_owned());
    }
    if unexplained > 0 {
        failures.push(format!(
            "{unexplained} 5xx answers or failed requests outside origin outages"
        ));
    }
    if last.1 as f64 > rss_limit {
        failures.push(format!(
            "RSS did not come back: {} KiB at the end, {} KiB warm (limit {rss_limit:.0})",
            last.1, warm.1
        ));
    }
    if last.2 > warm.2 + 16 {
        failures.push(format!(
            "fds did not come back: {} at the end, {} warm",
            last.2, warm.2
        ));
    }
    if reload_failed > 0.0 || reload_ok < f64::from(reloads) * 0.9 {
        failures.push(format!(
            "reloads: {reload_ok} succeeded, {reload_failed} failed, {reloads} edits"
        ));
    }
    println!(
        "soak: {requests} requests over {traffic_end:.0} s; {opened} idle connections; {} origin restarts; {reloads} reloads ({reload_ok} ok)",
        restarted
    );
    println!(
        "soak: RSS KiB warm {} peak {peak_rss} end {}; fds warm {} peak {peak_fds} end {}; p99 ms median {median_p99:.1} worst {worst_p99:.1}; unexplained 5xx {unexplained}",
        warm.1, last.1, warm.2, last.2
    );
    println!("soak: wrote {}/soak.csv and soak.png", out.display());
    if failures.is_empty() {
        println!("soak: pass");
        std::process::ExitCode::SUCCESS
    } else {
        for f in &failures {
            println!("soak: FAIL: {f}");
        }
        std::process::ExitCode::FAILURE
    }
}
