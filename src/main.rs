//! The `vestibule` command: parse the command line, load the config, build services, run.
//!
//! This file is the command line's definition (clap) and the dispatch; each subcommand's body
//! is in `cli/`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod cli;

use cli::ctl::{ctl, CtlArgs};
use cli::init::{check, init};
use cli::invite::invite;
use cli::man::{man, print_bytes};
use cli::pages::render_page;
use cli::probe::probe;
use cli::report::report;
use cli::run::{run, run_demo, run_origin};
#[cfg(feature = "tools")]
use cli::simulate::simulate;
use cli::token::inspect_token;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: vestibule::alloc::MiMalloc = vestibule::alloc::MiMalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use vestibule::config::DEFAULT_PATH;
use vestibule::server::RunOptions;

#[derive(Parser, Debug)]
#[command(
    name = "vestibule",
    version,
    about = "An edge waiting room and rate limiter on Pingora"
)]
struct Cli {
    /// The config file.
    #[arg(short, long, global = true, default_value = DEFAULT_PATH)]
    config: PathBuf,
    /// Load and validate the config, key ring and pages; print `ok` or every problem.
    #[arg(long)]
    check: bool,
    /// Run in the background (Pingora daemonize).
    #[arg(short, long)]
    daemon: bool,
    /// Take over the listening sockets of a running instance (zero-downtime upgrade).
    #[arg(short, long)]
    upgrade: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a working config, a fresh key ring (0600) and editable pages into DIR, then print
    /// the command that runs it. Existing files are kept unless --force.
    Init(InitArgs),
    /// Print a fresh random 64-byte key, base64, for the key ring; with --jwt, write a JWT
    /// signing key (PKCS#8 PEM, 0600) to --out and print its [[jwt_key]] entry.
    Keygen {
        /// The JWT algorithm: ES256 or EdDSA.
        #[arg(long, value_name = "ALGORITHM", requires = "out")]
        jwt: Option<String>,
        /// Where the JWT key goes (a new file; an existing one is never overwritten).
        #[arg(long, value_name = "FILE", requires = "jwt")]
        out: Option<PathBuf>,
    },
    /// Run with the config, starting the built-in demo origin if the configured one is not
    /// reachable, and print the URL to open.
    Demo,
    /// Work with room cookies.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Preview the pages visitors get.
    Pages {
        #[command(subcommand)]
        command: PagesCommand,
    },
    /// Replay simulated users through the real admission core on a simulated clock; writes a
    /// CSV and a PNG heatmap per queueing method and prints a summary.
    Simulate(SimulateArgs),
    /// Write the post-event report of a room (report.html, report.json, minutes.csv into
    /// --out) from the per-minute history ([admin] history_dir) and the audit log; works with
    /// the proxy stopped. Exit 0 written, 1 nothing to report or unreadable, 2 usage.
    Report(ReportArgs),
    /// Check a verifiable draw after its start: the commitment is sha256(seed) (and the one
    /// noted before the start, with --commitment), every receipt's place is
    /// HMAC-SHA256(seed, receipt), listed lowest first (and your receipt is listed, with
    /// --receipt). Reads the draw's URL ({api_prefix}/rooms/<room>/draws/<event>) or a saved
    /// copy. Exit 0 all match, 1 the first mismatch is named, 2 the draw cannot be read.
    VerifyDraw {
        /// The draw's URL (http:// or https://).
        #[arg(long, conflicts_with = "file", required_unless_present = "file")]
        url: Option<String>,
        /// A saved copy of the draw's JSON.
        #[arg(long)]
        file: Option<std::path::PathBuf>,
        /// The commitment published before the start (64 hex digits, as the pre-queue page
        /// showed it): the revealed seed must match it.
        #[arg(long)]
        commitment: Option<String>,
        /// A receipt that must be in the draw (yours); its place and rank are printed. May be
        /// given more than once.
        #[arg(long)]
        receipt: Vec<String>,
    },
    /// Print invitation codes for a room, signed with the ring's active key, one per
    /// line. Visitors present one with `?vestibule_invite=<code>` or `Vestibule-Invite: <code>`.
    Invite(InviteArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell) to stdout.
    Completions {
        /// The shell the script is for.
        shell: clap_complete::Shell,
    },
    /// Print the man page, vestibule(1), as roff to stdout (`vestibule man | man -l -`); with a
    /// subcommand, its own page (`vestibule man init` prints vestibule-init(1)).
    Man {
        /// The subcommand, e.g. `init` or `token inspect`.
        command: Vec<String>,
    },
    /// Ask the running instance's admin listener (found in the config's [admin] table, token
    /// included) for /readyz; exit 0 on a 200, 1 otherwise. For systemd's ExecStartPost, a
    /// container HEALTHCHECK or a Kubernetes probe.
    Probe {
        /// The admin path to ask: /readyz (a healthy origin peer) or /healthz (the process
        /// serves).
        #[arg(long, default_value = "/readyz", value_parser = ["/readyz", "/healthz"])]
        path: String,
        /// Keep asking until a 200 or this much time has passed, e.g. "30s" (default: once).
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        wait: std::time::Duration,
    },
    /// Call a running instance's admin API: status, the operator actions, the pace override,
    /// the serving counter, the audit log. Exit 0 done, 1 refused or failed, 2 usage. The token
    /// comes from --token-file or VESTIBULE_ADMIN_TOKEN, never the command line.
    Ctl(CtlArgs),
    /// Run only the built-in demo origin (tests and benchmarks use it).
    #[command(hide = true)]
    Origin {
        #[arg(long, default_value = "127.0.0.1:8000")]
        listen: SocketAddr,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Serve TLS with this PEM certificate chain (needs --tls-key).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Behave like an origin under load (for the autopilot): latency grows with the users
        /// seen in the last --model-window, 503 past this many.
        #[arg(long)]
        model_capacity: Option<u32>,
        /// --model-capacity: the latency with nobody else on it.
        #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
        model_base: std::time::Duration,
        /// --model-capacity: how long a user counts after their last request.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        model_window: std::time::Duration,
    },
}

#[derive(clap::Args, Debug)]
struct InitArgs {
    /// The folder to write into (made if missing).
    dir: PathBuf,
    /// The origin to proxy to, host:port. The default is where `vestibule demo` starts its
    /// built-in origin, so `demo --config DIR/vestibule.toml` works before a real one exists.
    #[arg(long, default_value = vestibule::init::DEFAULT_ORIGIN)]
    origin: String,
    /// Where visitors connect (loopback until you choose otherwise: put the address your load
    /// balancer or visitors reach here).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The admin listener (status page, metrics); keep it on loopback.
    #[arg(long, default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// What visitors are told they wait for ("<title> is very busy right now").
    #[arg(long, default_value = "This site")]
    title: String,
    /// Write into a folder that is not empty, replacing the files init writes (the key ring
    /// too, which signs every visitor out).
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// The room reported on.
    #[arg(long)]
    room: String,
    /// A scheduled event of the room: from its pre-queue's opening (else its start) to its end.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    event: Option<String>,
    /// The span's start, RFC 3339 (2026-11-27T20:00:00Z), included.
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// The span's end, RFC 3339, excluded.
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// The folder the report is written into (made if missing).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
struct InviteArgs {
    /// The room the invitations are for.
    #[arg(long)]
    room: String,
    /// How many codes to print (each a distinct invitation).
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// The priority lane their holders wait in.
    #[arg(long, default_value = vestibule::invite::PUBLIC_LANE)]
    lane: String,
    /// How long the codes work, from now.
    #[arg(long, default_value = "48h", value_parser = humantime::parse_duration)]
    expires: Duration,
    /// How many identities may join with each code.
    #[arg(long, default_value_t = 1)]
    uses: u32,
    /// Print each code as a link: this URL with `vestibule_invite=<code>` added to its query.
    #[arg(long)]
    link: Option<String>,
}

#[derive(clap::Args, Debug)]
struct SimulateArgs {
    /// Users arriving.
    #[arg(long, default_value_t = 10_000)]
    users: u32,
    /// Minutes over which they arrive (uniformly).
    #[arg(long, default_value_t = 30)]
    minutes: u32,
    /// How long an admitted user browses before leaving.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    browse: Duration,
    /// The room's new_users_per_minute (0 = no limit).
    #[arg(long, default_value_t = 250)]
    new_users_per_minute: u32,
    /// The room's total_active_users (0 = no limit).
    #[arg(long, default_value_t = 1_500)]
    total_active_users: u32,
    /// The room's session_duration.
    #[arg(long, default_value = "3m", value_parser = humantime::parse_duration)]
    session_duration: Duration,
    /// The room's refresh.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    refresh: Duration,
    /// Queueing methods to run: fifo, random or both.
    #[arg(long, default_value = "both", value_parser = ["fifo", "random", "both"])]
    order: String,
    /// Folder for the CSV files and heatmaps.
    #[arg(long, default_value = "simulation")]
    out: PathBuf,
    /// Seed of the arrival times.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Share (0-1) of arrivals who leave after their first page and never come back.
    #[arg(long, default_value_t = 0.0)]
    abandon: f64,
    /// Nodes sharing the room through a store (an in-memory one with the Redis script's
    /// semantics); more than 1 also sweeps the sync interval and plots the overshoot.
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// How often each node syncs with the store.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    sync_interval: Duration,
    /// How requests spread over the nodes, e.g. "60,30,10" (default: 60/30/10 for three
    /// nodes, halving from node to node otherwise).
    #[arg(long, value_delimiter = ',')]
    split: Vec<f64>,
    /// Priority lanes with their weights, e.g. "members=3,public=1"; users of a lane
    /// other than public join with an invitation link of that lane.
    #[arg(long, value_delimiter = ',')]
    lanes: Vec<String>,
    /// The share of arrivals in a lane, e.g. "members=0.2"; lanes without one split the rest
    /// equally.
    #[arg(long, value_delimiter = ',')]
    lane_share: Vec<String>,
    /// Give arrivals queue numbers (a room with the queue API; fifo only) and report how far
    /// they stray from the order of arrival.
    #[arg(long)]
    api: bool,
    /// Share (0-1) of waiting pages that hold a stream (`/rooms/<room>/stream`) instead of
    /// reloading on their timer. Each method then runs twice, all polling and with push, and
    /// the two are compared: who gets in, the order, the wait, and requests per admission.
    #[arg(long, default_value_t = 0.0)]
    push: f64,
    /// Simulate a scheduled event instead: a pre-queue, then its start, run without
    /// and with `shuffle_at_start` (uses --new-users-per-minute, --refresh, --seed, --out).
    #[arg(long)]
    event: bool,
    /// --event: visitors arriving during the pre-queue.
    #[arg(long, default_value_t = 2_000)]
    prequeue_users: u32,
    /// --event: visitors arriving after the start.
    #[arg(long, default_value_t = 1_000)]
    later_users: u32,
    /// --event: how long the pre-queue lasts, minutes.
    #[arg(long, default_value_t = 30)]
    prequeue_minutes: u32,
    /// --event: over how many minutes after the start the later visitors arrive.
    #[arg(long, default_value_t = 10)]
    later_minutes: u32,
    /// --event: a short pre-queue whose visitors all ask again at the start: 40 visitors
    /// 0.15 s apart in a 1-minute pre-queue, each back 0.5 s after the start in arrival order
    /// and then exactly when told; 10 a minute, refresh 5 s (overrides the other --event
    /// figures but --seed and --seeds).
    #[arg(long)]
    short_prequeue: bool,
    /// --event: also write the shuffled run's per-minute history into this folder (room
    /// "simulated", as a node would have kept it), for `vestibule report`.
    #[arg(long, value_name = "DIR")]
    history: Option<PathBuf>,
    /// --event: also run the shuffled event over this many seeds (a draw each) and report the
    /// mean Kendall tau and the first minute's mean arrival rank.
    #[arg(long, default_value_t = 0)]
    seeds: u64,
    /// Simulate the autopilot instead: a surge against a model origin, steered
    /// beside fixed settings too low, right and too high (uses --seed, --out).
    #[arg(long)]
    autopilot: bool,
    /// --autopilot: visitors arrive at this many times the pace the origin sustains.
    #[arg(long, default_value_t = 10.0)]
    surge: f64,
    /// --autopilot: how long the surge lasts, minutes.
    #[arg(long, default_value_t = 60)]
    surge_minutes: u32,
    /// --autopilot: a lottery room with this wait_period instead of a capacity room (its
    /// autopilot steers allow_percentage); writes autopilot-lottery.png.
    #[arg(long, value_parser = humantime::parse_duration)]
    lottery_wait: Option<std::time::Duration>,
    /// --autopilot: a lottery room whose origin is slow for 2 minutes, then fast: "crowd" (a
    /// large crowd against an origin of 1,000 users) or "small" (a small site: an origin of
    /// 60, a few answers a second). Shows how the percentage recovers (overrides --surge,
    /// --surge-minutes and --lottery-wait).
    #[arg(long, value_parser = ["crowd", "small"])]
    recovery: Option<String>,
}

#[derive(Subcommand, Debug)]
enum PagesCommand {
    /// Print the page a visitor of a room would get, with sample figures, in a language.
    Render {
        /// The room's name.
        #[arg(long)]
        room: String,
        /// startwaiting, keepwaiting, deny, soldout, queuefull, ratelimited or error.
        #[arg(long)]
        page: String,
        /// A language tag (default: the room's `default_language`); negotiated like an
        /// `Accept-Language` header, so `de-AT` gives `de`.
        #[arg(long)]
        lang: Option<String>,
        /// The figures shown: wait (people ahead and a wait estimate), soon, front, unknown
        /// (no estimate) or paused (the line paused by an operator).
        #[arg(long, default_value = "wait")]
        state: String,
        /// An operator's notice to show on the page.
        #[arg(long)]
        message: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Decode a cookie value, check its signature with the config's key ring, print its fields
    /// and verdict. Exits 0 when valid, 1 when not.
    Inspect {
        /// The cookie value (`dec=...&sig=0x...`), or `name=value` as copied from a browser.
        value: String,
        /// Also check that the token belongs to this identity (e.g. `203.0.113.7` or
        /// `2001:db8::/64`).
        #[arg(long)]
        uid: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Init(args)) => init(&args),
        Some(Command::Completions { shell }) => {
            // Into memory first: clap_complete panics on a failed write, and a closed pipe
            // (`vestibule completions bash | head`) should only end the command.
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "vestibule", &mut out);
            print_bytes(&out)
        }
        Some(Command::Man { command }) => man(&command),
        Some(Command::Keygen { jwt: None, .. }) => {
            println!("{}", vestibule::keys::generate());
            ExitCode::SUCCESS
        }
        Some(Command::Keygen {
            jwt: Some(algorithm),
            out,
        }) => jwt_keygen(&algorithm, out.as_deref()),
        Some(Command::Simulate(args)) => simulate(args),
        Some(Command::Probe { path, wait }) => probe(&cli.config, &path, wait),
        Some(Command::Ctl(args)) => ctl(args),
        Some(Command::Invite(args)) => invite(&cli.config, &args),
        Some(Command::Report(args)) => report(&cli.config, &args),
        Some(Command::VerifyDraw {
            url,
            file,
            commitment,
            receipt,
        }) => cli::verify_draw::run(
            url.as_deref(),
            file.as_deref(),
            vestibule::room::draw::Expect {
                commitment,
                receipts: receipt,
            },
        ),
        Some(Command::Origin {
            listen,
            threads,
            tls_cert,
            tls_key,
            model_capacity,
            model_base,
            model_window,
        }) => {
            use vestibule::demo::ModelOrigin;
            use vestibule::demo::{DemoOrigin, ModelLoad};
            let origin = match model_capacity {
                Some(capacity) => DemoOrigin::with_model(ModelLoad::new(
                    ModelOrigin {
                        capacity: f64::from(capacity.max(1)),
                        base: model_base.as_secs_f64(),
                    },
                    model_window,
                )),
                None => DemoOrigin::default(),
            };
            run_origin(origin, listen, threads, tls_cert.zip(tls_key))
        }
        Some(Command::Demo) => run_demo(&cli.config),
        Some(Command::Token {
            command: TokenCommand::Inspect { value, uid },
        }) => inspect_token(&cli.config, &value, uid.as_deref()),
        Some(Command::Pages {
            command:
                PagesCommand::Render {
                    room,
                    page,
                    lang,
                    state,
                    message,
                },
        }) => render_page(&cli.config, &room, &page, lang.as_deref(), &state, message),
        None if cli.check => check(&cli.config),
        None => run(
            &cli.config,
            RunOptions {
                daemon: cli.daemon,
                upgrade: cli.upgrade,
                demo_origin: None,
            },
        ),
    }
}

/// `keygen --jwt`: a new JWT signing key in `out`, and the ring entry that uses it.
fn jwt_keygen(algorithm: &str, out: Option<&Path>) -> ExitCode {
    let (Some(algorithm), Some(out)) = (vestibule::jwt::Algorithm::parse(algorithm), out) else {
        eprintln!("vestibule: --jwt takes ES256 or EdDSA, with --out FILE");
        return ExitCode::from(2);
    };
    match vestibule::keys::write_jwt_key(out, algorithm) {
        Ok(kid) => {
            // The ring resolves a relative path against its own folder: print the full path.
            let full = std::fs::canonicalize(out).unwrap_or_else(|_| out.to_path_buf());
            let quoted = serde_json::to_string(&full.to_string_lossy()).unwrap_or_default();
            println!(
                "[[jwt_key]]\nkid = \"{kid}\"\nalgorithm = \"{}\"\nprivate_key = {quoted}",
                algorithm.as_str()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule: {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

/// `vestibule simulate` in an edge built without the `tools` feature (as the packages are).
#[cfg(not(feature = "tools"))]
fn simulate(_: SimulateArgs) -> ExitCode {
    eprintln!(
        "vestibule simulate: this build has no simulator (built without the `tools` feature); \
         run it from a default build: cargo run --release -- simulate"
    );
    ExitCode::from(2)
}
