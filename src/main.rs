//! The `vestibule` command: parse the command line, load the config, build services, run.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: vestibule::alloc::MiMalloc = vestibule::alloc::MiMalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use vestibule::app::App;
use vestibule::config::DEFAULT_PATH;
use vestibule::pages::{Estimates, PageKind};
use vestibule::room::{CookieAction, Decision, Outcome};
use vestibule::server::{self, RunOptions};
use vestibule::snapshot::Snapshot;
use vestibule::time::Timestamp;

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
    /// Print a fresh random 64-byte key, base64, for the key ring.
    Keygen,
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
        Some(Command::Keygen) => {
            println!("{}", vestibule::keys::generate());
            ExitCode::SUCCESS
        }
        Some(Command::Simulate(args)) => simulate(args),
        Some(Command::Probe { path, wait }) => probe(&cli.config, &path, wait),
        Some(Command::Invite(args)) => invite(&cli.config, &args),
        Some(Command::Origin {
            listen,
            threads,
            tls_cert,
            tls_key,
            model_capacity,
            model_base,
            model_window,
        }) => {
            use vestibule::demo::{DemoOrigin, ModelLoad};
            use vestibule::simulate::autopilot::ModelOrigin;
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

fn init(args: &InitArgs) -> ExitCode {
    use vestibule::init::{shell_word, InitOptions};
    let opts = InitOptions {
        dir: args.dir.clone(),
        origin: args.origin.clone(),
        listen: args.listen,
        admin: args.admin,
        title: args.title.clone(),
        force: args.force,
    };
    // The key's id says when it was made, which helps when rotating later.
    let date = Timestamp::now().rfc3339();
    let key_id = format!("k{}", date.get(..10).unwrap_or("1").replace('-', ""));
    match vestibule::init::init(&opts, &key_id) {
        Ok(config) => {
            let config = shell_word(&config);
            println!(
                "wrote {dir}: vestibule.toml, keys.toml (a fresh key, mode 0600), pages/ and state/",
                dir = args.dir.display()
            );
            println!("next:  vestibule --config {config}");
            let visitors = if args.listen.ip().is_unspecified() {
                SocketAddr::new([127, 0, 0, 1].into(), args.listen.port())
            } else {
                args.listen
            };
            println!(
                "  (visitors on http://{visitors}/, status page on http://{}/status.html; proxying to {}; \
                 with no origin there yet, `vestibule demo --config {config}` starts a built-in one on loopback)",
                args.admin, args.origin
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule init: {e}");
            ExitCode::FAILURE
        }
    }
}

/// vestibule(1), or the page of the subcommand at `path`, from the clap definition. The main page
/// lists the subcommands as vestibule-<name>(1), which `vestibule man <name>` prints.
fn man(path: &[String]) -> ExitCode {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // Building gives each subcommand its display name (`vestibule-init`) and usage line.
    cmd.build();
    for part in path {
        let found = cmd
            .get_subcommands()
            .find(|s| s.get_name() == part && !s.is_hide_set())
            .cloned();
        let Some(sub) = found else {
            let names: Vec<&str> = cmd
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name())
                .collect();
            eprintln!(
                "vestibule man: no subcommand \"{}\" (subcommands: {})",
                part.escape_default(),
                names.join(", ")
            );
            return ExitCode::FAILURE;
        };
        cmd = sub;
    }
    let title = cmd
        .get_display_name()
        .unwrap_or(cmd.get_name())
        .to_uppercase();
    let mut out = Vec::new();
    if let Err(e) = clap_mangen::Man::new(cmd)
        .title(title)
        .source(format!("vestibule {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out)
    {
        eprintln!("vestibule man: {e}");
        return ExitCode::FAILURE;
    }
    print_bytes(&out)
}

/// Writes to stdout; a closed pipe (`vestibule man | head`) ends the command without a panic.
fn print_bytes(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn check(path: &Path) -> ExitCode {
    match Snapshot::load(
        path,
        None,
        &vestibule::state::State::local(),
        Timestamp::now(),
    ) {
        Ok(snapshot) => {
            for w in &snapshot.warnings {
                eprintln!("warning: {w}");
            }
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            ExitCode::FAILURE
        }
    }
}

fn invite(path: &Path, args: &InviteArgs) -> ExitCode {
    use vestibule::invite::{self, Terms, MAX_USES};
    let fail = |m: String| {
        eprintln!("vestibule invite: {m}");
        ExitCode::FAILURE
    };
    let now = Timestamp::now();
    let snapshot = match Snapshot::load(path, None, &vestibule::state::State::local(), now) {
        Ok(s) => s,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let Some(room) = snapshot.rooms.iter().find(|r| r.name() == args.room) else {
        let names: Vec<&str> = snapshot.rooms.iter().map(|r| r.name()).collect();
        return fail(format!(
            "--room: no room is named \"{}\" (rooms: {})",
            args.room,
            names.join(", ")
        ));
    };
    let Some(ring) = &snapshot.keys else {
        return fail(format!(
            "{}: no key ring ([keys] ring): invitations are signed with it",
            path.display()
        ));
    };
    if !invite::is_valid_lane(&args.lane) {
        return fail(format!(
            "--lane: \"{}\" must be 1 to {} of a-z, 0-9, '_' and '-'",
            args.lane,
            invite::MAX_LANE_LEN
        ));
    }
    if !(1..=MAX_USES).contains(&args.uses) {
        return fail(format!("--uses: must be between 1 and {MAX_USES}"));
    }
    if !(1..=100_000).contains(&args.count) {
        return fail("--count: must be between 1 and 100000".into());
    }
    if args.expires.as_secs() == 0 {
        return fail("--expires: must be at least 1s".into());
    }
    let link = match &args.link {
        Some(url) => match url.parse::<http::Uri>() {
            Ok(uri) if uri.scheme().is_some() && !url.contains('#') => Some(url.clone()),
            _ => {
                return fail(format!(
                    "--link: \"{url}\" is not an absolute URL without a #fragment"
                ))
            }
        },
        None => None,
    };
    let terms = Terms {
        room: room.name().to_owned(),
        lane: args.lane.clone(),
        exp: now.secs().saturating_add(args.expires.as_secs()),
        uses: args.uses,
    };
    let mut out = String::new();
    for _ in 0..args.count {
        let code = invite::make(ring.active(), &terms);
        match &link {
            Some(url) => {
                let join = if url.contains('?') { '&' } else { '?' };
                out.push_str(&format!("{url}{join}{}={code}\n", invite::LINK_PARAMETER));
            }
            None => {
                out.push_str(&code);
                out.push('\n');
            }
        }
    }
    print!("{out}");
    eprintln!(
        "{} invitation(s) for room \"{}\", lane \"{}\", {} use(s) each, until {}: signed with key \"{}\"; keep it in the ring until then",
        args.count,
        room.name(),
        args.lane,
        args.uses,
        Timestamp::from_secs(terms.exp).rfc3339(),
        ring.active().id()
    );
    ExitCode::SUCCESS
}

fn render_page(
    path: &Path,
    room: &str,
    page: &str,
    lang: Option<&str>,
    state: &str,
    message: Option<String>,
) -> ExitCode {
    let snapshot = match Snapshot::load(
        path,
        None,
        &vestibule::state::State::local(),
        Timestamp::now(),
    ) {
        Ok(s) => s,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let fail = |m: String| {
        eprintln!("vestibule pages render: {m}");
        ExitCode::FAILURE
    };
    let Some(room) = snapshot.rooms.iter().find(|r| r.name() == room) else {
        let names: Vec<&str> = snapshot.rooms.iter().map(|r| r.name()).collect();
        return fail(format!(
            "no room is named \"{room}\" (rooms: {})",
            names.join(", ")
        ));
    };
    let pages: Vec<PageKind> = PageKind::ALL.to_vec();
    let Some(kind) = pages
        .iter()
        .copied()
        .find(|k| k.file_name().trim_end_matches(".html") == page)
    else {
        let names: Vec<&str> = pages
            .iter()
            .map(|k| k.file_name().trim_end_matches(".html"))
            .collect();
        return fail(format!("no page \"{page}\" (pages: {})", names.join(", ")));
    };
    // A pre-queue is shown as a visitor 1234 s before the start of the room's next event (or its
    // first) would see it; a room without events gets a sample one.
    let mut now = Timestamp::now();
    let prequeue = room
        .config
        .events
        .iter()
        .filter(|e| e.prequeue_start.is_some())
        .find(|e| e.end > now.secs())
        .or_else(|| {
            room.config
                .events
                .iter()
                .find(|e| e.prequeue_start.is_some())
        });
    if state == "prequeue" || kind == PageKind::PreQueue {
        if let Some(e) = prequeue {
            now = Timestamp::from_secs(e.start - 1234.min(e.start - e.opens()));
        }
    }
    let catalogs = room.pages_at(now).catalogs();
    let language = match lang {
        None => room.language_for(None, now),
        Some(tag) => {
            let index = catalogs.negotiate(Some(tag.as_bytes()), usize::MAX);
            if index == usize::MAX {
                let tags: Vec<&str> = catalogs.languages().map(|l| l.tag.as_str()).collect();
                return fail(format!(
                    "no catalog for \"{tag}\" (languages: {})",
                    tags.join(", ")
                ));
            }
            index
        }
    };
    let decision = match kind {
        PageKind::StartWaiting => Decision::Anon,
        PageKind::KeepWaiting => Decision::Wait,
        PageKind::Deny => Decision::Deny,
        PageKind::SoldOut => Decision::SoldOut,
        PageKind::QueueFull => Decision::QueueFull,
        PageKind::PreQueue => Decision::PreQueue,
        PageKind::Challenge => Decision::Challenge,
        PageKind::Invite => Decision::Uninvited,
        PageKind::RateLimited | PageKind::Error => Decision::Wait,
    };
    let mut outcome = Outcome::new(decision, CookieAction::Keep);
    outcome.refresh_secs = room.retry_after();
    let estimates = |p25, p50, p75| Estimates {
        p25: Some(p25),
        p50: Some(p50),
        p75: Some(p75),
    };
    match state {
        "wait" => {
            outcome.users_ahead = Some(1234);
            outcome.estimates = estimates(2.0, 3.0, 4.0);
        }
        "soon" => {
            outcome.users_ahead = Some(3);
            outcome.estimates = estimates(0.2, 0.4, 0.6);
        }
        "front" => {
            outcome.users_ahead = Some(0);
            outcome.estimates = estimates(0.1, 0.2, 0.3);
        }
        "unknown" | "prequeue" => {}
        "paused" => outcome.paused = true,
        // The invite page after a code was refused.
        "refused" => outcome.invitation = Some(Err(vestibule::invite::Refusal::UsedUp)),
        other => {
            return fail(format!(
            "no state \"{other}\" (states: wait, soon, front, unknown, paused, prequeue, refused)"
        ))
        }
    }
    if let Some(text) = message {
        match vestibule::controls::check_message(&text) {
            Ok(text) => outcome.message = Some(std::sync::Arc::new(text)),
            Err(e) => return fail(e),
        }
    }
    let mut ctx = room.page_context(&outcome, language, now);
    if ctx.event.is_none() && kind == PageKind::PreQueue {
        let start = now.secs() + 1234;
        ctx = ctx.with_event(
            "sample",
            "prequeue",
            (start, start + 3600),
            true,
            now.secs(),
        );
    }
    // A challenge page as the room would ask it (a sample value: its solution is never checked).
    let solution_cookie = format!("{}_pow", room.config.cookie.name);
    if kind == PageKind::Challenge {
        ctx.challenge_value = "p1~preview~0~16~0000000000000000~0";
        ctx.challenge_difficulty = room.config.challenge.map_or(16, |c| c.difficulty);
        ctx.solution_cookie = &solution_cookie;
        ctx.refresh_seconds = room.config.challenge.map_or(300, |c| c.ttl.as_secs());
    }
    if matches!(kind, PageKind::RateLimited | PageKind::Error) {
        ctx.retry_after = 30;
        ctx.rule = "per-ip";
        ctx.status = if kind == PageKind::Error { 502 } else { 429 };
    }
    let html = room.pages_at(now).render(kind, &ctx);
    print!("{}", String::from_utf8_lossy(&html));
    ExitCode::SUCCESS
}

fn inspect_token(path: &Path, value: &str, uid: Option<&str>) -> ExitCode {
    let loaded = vestibule::config::Config::load(path)
        .and_then(|config| vestibule::keys::load(&config.keys_file).map(|ring| (config, ring)));
    let (config, ring) = match loaded {
        Ok(loaded) => loaded,
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let uid = uid.map(|u| match u.parse::<std::net::IpAddr>() {
        Ok(ip) => vestibule::identity::Identity::of_ip(ip, config.identity.ipv6_prefix),
        Err(_) => vestibule::identity::Identity::from_encoded(u),
    });
    let (report, valid) = vestibule::inspect::inspect(value, &ring, uid.as_ref(), Timestamp::now());
    print!("{report}");
    if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn simulate_autopilot(args: &SimulateArgs) -> ExitCode {
    use vestibule::simulate::autopilot::{simulate, AutopilotOptions};
    let opts = AutopilotOptions {
        surge: args.surge.max(0.0),
        minutes: args.surge_minutes.max(1),
        seed: args.seed,
        out: args.out.clone(),
        ..AutopilotOptions::default()
    };
    let opts = match (&args.recovery, args.lottery_wait) {
        (Some(kind), _) => AutopilotOptions {
            seed: args.seed,
            out: args.out.clone(),
            ..AutopilotOptions::recovery(kind == "crowd")
        },
        (None, Some(wait)) => opts.lottery(wait.as_secs().max(1)),
        (None, None) => opts,
    };
    if let Some(spell) = opts.slow {
        println!(
            "the origin is slow (typically {} ms, whatever its load) for the first {} s, then as the model says",
            spell.latency * 1000.0,
            spell.secs
        );
    }
    println!(
        "simulating the autopilot: a model origin of {} users ({} ms alone; 503 past it), visitors for {} min at {}x the pace it sustains at a p95 of {} ms ({:.0} a minute), each browsing {} s; {}autopilot every {} s from {}{unit}, within {}..{}{unit}",
        opts.origin.capacity,
        opts.origin.base * 1000.0,
        opts.minutes,
        opts.surge,
        opts.settings.target_latency * 1000.0,
        opts.pace_at_target(),
        opts.browse_secs,
        opts.lottery_wait_secs.map_or(String::new(), |w| format!("a lottery room drawing every {w} s, ")),
        opts.interval_secs,
        opts.start,
        opts.settings.min,
        opts.settings.max,
        unit = if opts.lottery_wait_secs.is_some() { " %" } else { " a minute" },
    );
    match simulate(&opts) {
        Ok((reports, summary, png)) => {
            print!("{summary}");
            if let (Some(spell), Some(auto)) = (opts.slow, reports.first()) {
                use vestibule::simulate::autopilot::{recovered_at, timeline};
                print!("{}", timeline(&opts, auto, 10));
                match recovered_at(&opts, auto, 0.8) {
                    Some(at) => println!(
                        "the autopilot's admissions reached 80 % of the origin's pace at the target ({:.0} a minute) {} s after the origin turned fast",
                        opts.pace_at_target(),
                        at - spell.secs
                    ),
                    None => println!(
                        "the autopilot's admissions never reached 80 % of the origin's pace at the target ({:.0} a minute) after the origin turned fast",
                        opts.pace_at_target()
                    ),
                }
            }
            println!("wrote {}", png.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule simulate --autopilot: {e}");
            ExitCode::FAILURE
        }
    }
}

fn simulate_event(args: &SimulateArgs) -> ExitCode {
    use vestibule::simulate::event::{simulate, EventOptions};
    let opts = EventOptions {
        prequeue: args.prequeue_users,
        later: args.later_users,
        prequeue_minutes: args.prequeue_minutes.max(1),
        later_minutes: args.later_minutes.max(1),
        new_users_per_minute: args.new_users_per_minute,
        refresh_secs: args.refresh.as_secs(),
        seed: args.seed,
        out: args.out.clone(),
        ..EventOptions::default()
    };
    let opts = if args.short_prequeue {
        EventOptions {
            seed: args.seed,
            out: args.out.clone(),
            ..EventOptions::short_prequeue()
        }
    } else {
        opts
    };
    println!(
        "simulating an event: {} visitors over a {} min pre-queue{}, {} more over {} min after the start; fifo room, the event lets in {} a minute, refresh {} s",
        opts.prequeue,
        opts.prequeue_minutes,
        match (opts.arrival_gap_ms, opts.check_in_at_start_ms) {
            (Some(gap), Some(at)) => format!(
                " ({gap} ms apart, all back {at} ms after the start in arrival order)"
            ),
            _ => String::new(),
        },
        opts.later,
        opts.later_minutes,
        opts.new_users_per_minute,
        opts.refresh_secs
    );
    match simulate(&opts) {
        Ok((reports, png)) => {
            for r in &reports {
                print!("{}", r.summary(&opts));
            }
            println!("wrote {}", png.display());
            if args.seeds > 0 {
                match vestibule::simulate::event::over_seeds(&opts, args.seeds) {
                    Ok((tau, rank)) => println!(
                        "with shuffle_at_start over {} seeds: mean Kendall tau {tau:.3}; mean arrival rank of the first {} let in {rank:.2} (a fair draw: {:.1}; arrival order: {:.1})",
                        args.seeds,
                        opts.new_users_per_minute.min(opts.prequeue),
                        (f64::from(opts.prequeue) - 1.0) / 2.0,
                        (f64::from(opts.new_users_per_minute.min(opts.prequeue)) - 1.0) / 2.0,
                    ),
                    Err(e) => {
                        eprintln!("vestibule simulate --event: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule simulate --event: {e}");
            ExitCode::FAILURE
        }
    }
}

fn simulate(args: SimulateArgs) -> ExitCode {
    use vestibule::config::QueueOrder;
    if args.event {
        return simulate_event(&args);
    }
    if args.autopilot {
        return simulate_autopilot(&args);
    }
    let orders = match args.order.as_str() {
        "fifo" => vec![QueueOrder::Fifo],
        "random" => vec![QueueOrder::Random],
        _ => vec![QueueOrder::Fifo, QueueOrder::Random],
    };
    let lanes = match vestibule::simulate::parse_lanes(&args.lanes, &args.lane_share) {
        Ok(lanes) => lanes,
        Err(e) => {
            eprintln!("vestibule simulate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = vestibule::simulate::Options {
        users: args.users,
        minutes: args.minutes,
        browse: args.browse,
        new_users_per_minute: args.new_users_per_minute,
        total_active_users: args.total_active_users,
        session_duration: args.session_duration,
        refresh: args.refresh,
        orders,
        out: args.out,
        seed: args.seed,
        abandon: args.abandon,
        nodes: args.nodes.max(1),
        sync_interval: args.sync_interval,
        split: args.split,
        lanes,
    };
    if opts.nodes > 1 {
        let split: Vec<String> = opts
            .weights()
            .iter()
            .map(|w| format!("{:.0}%", w * 100.0))
            .collect();
        println!(
            "{} nodes sharing the room, syncing every {}; requests split {}",
            opts.nodes,
            humantime::format_duration(opts.sync_interval),
            split.join("/")
        );
    }
    println!(
        "simulating {} users arriving over {} min; room: new_users_per_minute {}, total_active_users {}, session {}, refresh {}; browsing {}",
        opts.users,
        opts.minutes,
        opts.new_users_per_minute,
        opts.total_active_users,
        humantime::format_duration(opts.session_duration),
        humantime::format_duration(opts.refresh),
        humantime::format_duration(opts.browse)
    );
    if !opts.lanes.is_empty() {
        let lanes: Vec<String> = opts
            .lanes
            .iter()
            .map(|l| {
                format!(
                    "{} (weight {}, {:.0}% of arrivals)",
                    l.name,
                    l.weight,
                    l.share * 100.0
                )
            })
            .collect();
        println!("lanes: {}", lanes.join(", "));
    }
    match vestibule::simulate::simulate(&opts) {
        Ok((reports, files, sweep)) => {
            for r in &reports {
                print!("{}", r.summary());
            }
            print!("{sweep}");
            for f in &files {
                println!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn start(path: &Path) -> Option<std::sync::Arc<App>> {
    match App::start(path) {
        Ok(app) => Some(app),
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{e}");
            }
            eprintln!(
                "vestibule: not started; fix the problems above (`vestibule --check` lists them)"
            );
            None
        }
    }
}

/// Every client connection is a file descriptor: take all the hard limit allows (as nginx's
/// `worker_rlimit_nofile` does), so a flood of connections meets the timeouts, not `EMFILE`.
fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => log::info!("file descriptors: up to {n}"),
        Err(e) => log::warn!("cannot raise the file descriptor limit: {e}"),
    }
}

fn run(path: &Path, options: RunOptions) -> ExitCode {
    let Some(app) = start(path) else {
        return ExitCode::FAILURE;
    };
    let snapshot = app.snapshot();
    vestibule::logging::init(&snapshot.config.log);
    raise_fd_limit();
    restore_overrides(&app, &snapshot);
    for w in &snapshot.warnings {
        log::warn!("{w}");
    }
    let server = server::build(app, &options);
    server.run_forever()
}

fn probe(config: &Path, path: &str, wait: Duration) -> ExitCode {
    use vestibule::probe::{wait_for_ok, Target};
    let outcome = Target::from_config(config).and_then(|t| wait_for_ok(&t, path, wait));
    match outcome {
        Ok(body) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vestibule probe: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Operator actions taken before the restart, and where the next ones are kept. Both `run` and
/// `demo` call it once logging is up (so a broken file is reported): without it, actions would
/// apply but be forgotten by a restart.
fn restore_overrides(app: &App, snapshot: &Snapshot) {
    app.state
        .controls
        .load(&snapshot.config.admin.state_file, &*app.state.store);
}

fn run_demo(path: &Path) -> ExitCode {
    let Some(app) = start(path) else {
        return ExitCode::FAILURE;
    };
    let snapshot = app.snapshot();
    let config = &snapshot.config;
    let origin = config
        .upstream
        .peers
        .first()
        .and_then(|p| p.addrs.first().copied());
    let mut options = RunOptions::default();
    let origin_note = match origin {
        Some(addr) if reachable(addr) => format!("your origin at {addr}"),
        Some(addr) if addr.ip().is_loopback() => {
            options.demo_origin = Some(addr);
            format!("the built-in demo origin on {addr}")
        }
        Some(addr) => {
            eprintln!(
                "vestibule demo: the configured origin {addr} is not reachable, and the demo origin only runs on loopback; \
                 point upstream.peers at 127.0.0.1 in {}",
                path.display()
            );
            return ExitCode::FAILURE;
        }
        None => unreachable!("validation requires at least one peer"),
    };
    let listen = config.server.listen.first().copied();
    let url = listen.map_or_else(String::new, |a| {
        let host = if a.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            a.ip().to_string()
        };
        format!("http://{host}:{}/", a.port())
    });
    // Warnings first, on stderr, where they are seen before the URL is opened: the sample
    // ring's published key above all, since anyone can forge cookies with it.
    for w in &snapshot.warnings {
        eprintln!("warning: {w}");
    }
    println!("vestibule demo: open {url}");
    println!("  proxying to {origin_note}");
    println!(
        "  status page: http://{admin}/status.html  (JSON: /status, metrics: /metrics)",
        admin = config.admin.listen
    );
    println!(
        "  operator overrides kept in {}",
        config.admin.state_file.display()
    );
    println!(
        "  edit {} to change the room; Ctrl-C to stop",
        path.display()
    );
    vestibule::logging::init(&config.log);
    raise_fd_limit();
    restore_overrides(&app, &snapshot);
    let server = server::build(app.clone(), &options);
    drop(snapshot);
    server.run_forever()
}

fn reachable(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

fn run_origin(
    origin: vestibule::demo::DemoOrigin,
    listen: SocketAddr,
    threads: usize,
    tls: Option<(PathBuf, PathBuf)>,
) -> ExitCode {
    vestibule::logging::init(&vestibule::config::LogConfig {
        level: log::LevelFilter::Warn,
        format: vestibule::config::LogFormat::Plain,
        access: false,
    });
    let mut server = pingora::server::Server::new_with_opt_and_conf(
        pingora::server::configuration::Opt::default(),
        pingora::server::configuration::ServerConf {
            grace_period_seconds: Some(0),
            graceful_shutdown_timeout_seconds: Some(1),
            ..Default::default()
        },
    );
    server.bootstrap();
    let mut origin = server::model_origin_service(origin, None, threads.max(1));
    match tls {
        None => origin.add_tcp(&listen.to_string()),
        Some((cert, key)) => {
            if let Err(e) = origin.add_tls(
                &listen.to_string(),
                &cert.to_string_lossy(),
                &key.to_string_lossy(),
            ) {
                eprintln!("vestibule origin: cannot use the TLS certificate or key: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    server.add_service(origin);
    server.run_forever()
}
