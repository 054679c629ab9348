//! `vestibule simulate`: the admission, autopilot and event simulations, with their files.

use std::process::ExitCode;

use crate::SimulateArgs;

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
            // The history of the run with the (keyed) shuffle.
            if let (Some(dir), Some(shuffled)) = (&args.history, reports.get(1)) {
                let records = vestibule::simulate::event::history(shuffled, &opts);
                if let Err(e) = vestibule::history::write_records(dir, &records) {
                    eprintln!("vestibule simulate --event: {}: {e}", dir.display());
                    return ExitCode::FAILURE;
                }
                println!(
                    "wrote {} minutes of history into {}",
                    records.len(),
                    dir.display()
                );
            }
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

pub fn simulate(args: SimulateArgs) -> ExitCode {
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
        api: args.api,
        push: args.push.clamp(0.0, 1.0),
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
            if opts.push > 0.0 {
                for order in &opts.orders {
                    match vestibule::simulate::push::compare(&opts, *order) {
                        Ok(c) => print!("{}", c.text()),
                        Err(e) => {
                            eprintln!("vestibule simulate --push: {e}");
                            return ExitCode::FAILURE;
                        }
                    }
                }
            }
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
