//! The scoreboard: every policy on every modelled server, against the best
//! fixed concurrency (the oracle), on tokio's paused clock.
//!
//! ```text
//! cargo run --release --example simulate
//! cargo run --release --example simulate -- --plot plots
//! ```
//!
//! | flag | meaning | default |
//! |---|---|---|
//! | `--plot DIR` | write an SVG per scenario and host: delay, concurrency, latency and server queue over time, one line per policy, scaled to the first policy (the default): others are clipped at the top | |
//! | `--csv DIR` | write the same series as CSV, one file per scenario, host and policy | |
//! | `--seed N` | the seed of the servers' randomness | 1 |
//! | `--policy NAME` | only this policy (repeatable) | all |
//! | `--scenario NAME` | only this scenario (repeatable) | all |
//! | `--wide` | instead, a grid of 48 queue servers (1–24 workers, 10 ms–1 s, four noise shapes): each policy's throughput share of the oracle and mean queue, and a summary | |
//!
//! Columns: `makespan` (time until every page was fetched, 429/503 answers
//! retried), `oracle` (the same with the best fixed concurrency, per host),
//! `thr%` (oracle makespan / makespan), `queue` and `p95q` (server queue:
//! requests waiting beyond the busy workers, mean and 95th percentile over
//! samples every 50 ms, worst host), `overload` (429/503 received, and their
//! share of requests sent), `early` (requests that reached the server before
//! a `Retry-After` deadline it had sent), `conv` (first time the completion
//! rate over the last second reached 90 % of the oracle's), `react` (after
//! the capacity drop, time until the queue is at most 1 and stays so for a
//! second).
//!
//! Two runs with the same seed print the same scoreboard.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tower_autothrottle::policy::{
    Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas,
};

mod sim;

use sim::{Client, HostResult, Scenario, SAMPLE};

fn policies() -> Vec<(&'static str, Arc<dyn MakePolicy>)> {
    vec![
        ("default", Arc::new(Adaptive::default())),
        ("scrapy", Arc::new(Scrapy::default())),
        ("scrapy-2012", Arc::new(Scrapy2012::default())),
        ("aimd", Arc::new(Aimd::default())),
        ("vegas", Arc::new(Vegas::default())),
        ("gradient2", Arc::new(Gradient2::default())),
    ]
}

struct Args {
    plot: Option<PathBuf>,
    csv: Option<PathBuf>,
    seed: u64,
    policies: Vec<String>,
    scenarios: Vec<String>,
    wide: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        plot: None,
        csv: None,
        seed: 1,
        policies: Vec::new(),
        scenarios: Vec::new(),
        wide: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--plot" => args.plot = Some(PathBuf::from(value()?)),
            "--csv" => args.csv = Some(PathBuf::from(value()?)),
            "--seed" => {
                let v = value()?;
                args.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: {v:?} is not a number"))?;
            }
            "--policy" => args.policies.push(value()?),
            "--scenario" => args.scenarios.push(value()?),
            "--wide" => args.wide = true,
            "-h" | "--help" => {
                println!("usage: simulate [--plot DIR] [--seed N] [--policy NAME]... [--scenario NAME]...");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulate: {e}");
            return ExitCode::from(2);
        }
    };
    let policies: Vec<_> = policies()
        .into_iter()
        .filter(|(name, _)| args.policies.is_empty() || args.policies.iter().any(|p| p == name))
        .collect();
    let scenarios: Vec<Scenario> = sim::scenarios()
        .into_iter()
        .filter(|s| args.scenarios.is_empty() || args.scenarios.iter().any(|n| n == s.name))
        .collect();
    if policies.is_empty() || scenarios.is_empty() {
        eprintln!("simulate: no such policy or scenario");
        return ExitCode::from(2);
    }
    for dir in args.plot.iter().chain(&args.csv) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("simulate: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }

    println!("seed {}", args.seed);
    if args.wide {
        wide(&policies, args.seed);
        return ExitCode::SUCCESS;
    }
    for scenario in &scenarios {
        let (oracle, per_host) = sim::oracle(scenario, args.seed);
        let best: Vec<String> = per_host
            .iter()
            .map(|(h, k, _)| format!("{h}: {k}"))
            .collect();
        println!();
        println!("== {} ({})", scenario.name, scenario.about);
        println!(
            "   oracle {:.1} s, best fixed concurrency {}",
            oracle,
            best.join(", ")
        );
        if let Some(ideal) = sim::ideal(scenario) {
            println!("   ideal {ideal:.1} s: the server's rate limit, met exactly");
        }
        println!(
            "   {:<12} {:>9} {:>6} {:>6} {:>6} {:>14} {:>6} {:>7} {:>7}",
            "policy", "makespan", "thr%", "queue", "p95q", "overload", "early", "conv", "react"
        );
        let mut runs = Vec::new();
        for (name, policy) in &policies {
            let result = sim::run(scenario, &Client::Throttle(Arc::clone(policy)), args.seed);
            let row = score(scenario, &result.hosts, &per_host, oracle, result.makespan);
            println!("   {:<12} {}", name, row);
            runs.push((*name, result));
        }
        if let Some(dir) = &args.csv {
            for (name, result) in &runs {
                for host in &result.hosts {
                    let file = dir.join(format!("{}-{}-{}.csv", scenario.name, host.name, name));
                    let mut text = String::from(
                        "t,delay_ms,concurrency,in_flight,latency_ms,queue,completed\n",
                    );
                    for p in &host.series {
                        let _ = writeln!(
                            text,
                            "{:.3},{:.3},{},{},{},{},{}",
                            p.t,
                            p.delay * 1000.0,
                            p.concurrency,
                            p.in_flight,
                            p.latency
                                .map_or_else(String::new, |l| format!("{:.3}", l * 1000.0)),
                            p.queue,
                            p.completed
                        );
                    }
                    if let Err(e) = std::fs::write(&file, text) {
                        eprintln!("simulate: {}: {e}", file.display());
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        if let Some(dir) = &args.plot {
            for (i, host) in scenario.hosts.iter().enumerate() {
                let file = if scenario.hosts.len() == 1 {
                    dir.join(format!("{}.svg", scenario.name))
                } else {
                    dir.join(format!("{}-{}.svg", scenario.name, host.name))
                };
                let lines: Vec<(&str, &HostResult)> =
                    runs.iter().map(|(n, r)| (*n, &r.hosts[i])).collect();
                let title = format!("{}: {} ({})", scenario.name, host.name, scenario.about);
                if let Err(e) = std::fs::write(&file, svg(&title, &lines)) {
                    eprintln!("simulate: {}: {e}", file.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}

/// The wide grid: per scenario and policy, throughput share and mean queue.
fn wide(policies: &[(&'static str, Arc<dyn MakePolicy>)], seed: u64) {
    let mut shares: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
    let mut queues: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
    print!("{:<20} {:>7}", "scenario", "oracle");
    for (name, _) in policies {
        print!(" {:>16}", name);
    }
    println!();
    for scenario in sim::wide_scenarios() {
        let (oracle, _) = sim::oracle(&scenario, seed);
        print!("{:<20} {:>6.1}s", scenario.name, oracle);
        for (i, (_, policy)) in policies.iter().enumerate() {
            let run = sim::run(&scenario, &Client::Throttle(Arc::clone(policy)), seed);
            let share = oracle / run.makespan;
            let queue = run.hosts[0].mean_queue;
            shares[i].push(share);
            queues[i].push(queue);
            print!(" {:>9.0}% q{:<5.1}", 100.0 * share, queue);
        }
        println!();
    }
    println!();
    for (i, (name, _)) in policies.iter().enumerate() {
        let mut s = shares[i].clone();
        s.sort_by(f64::total_cmp);
        let below = s.iter().filter(|x| **x < 0.9).count();
        let q_over = queues[i].iter().filter(|q| **q > 1.0).count();
        println!(
            "{name:<12} throughput: min {:.0}%, median {:.0}%, {below}/{} below 90%; mean queue above 1 in {q_over}",
            100.0 * s[0],
            100.0 * s[s.len() / 2],
            s.len()
        );
    }
}

/// One scoreboard row.
fn score(
    scenario: &Scenario,
    hosts: &[HostResult],
    oracle_hosts: &[(&'static str, usize, f64)],
    oracle: f64,
    makespan: f64,
) -> String {
    let sent: u64 = hosts.iter().map(|h| h.sent).sum();
    let overloads: u64 = hosts.iter().map(|h| h.overloads).sum();
    let early: u64 = hosts.iter().map(|h| h.early).sum();
    let queue = hosts.iter().map(|h| h.mean_queue).fold(0.0, f64::max);
    let p95 = hosts.iter().map(|h| h.p95_queue).fold(0.0, f64::max);
    // Convergence: the slowest host's.
    let conv = hosts
        .iter()
        .zip(oracle_hosts)
        .map(|(h, (_, _, best))| converge(h, h.requests as f64 / best))
        .try_fold(0.0, |acc, c| c.map(|c| f64::max(acc, c)));
    let react = drop_reaction(scenario, hosts);
    format!(
        "{:>8.1}s {:>5.0}% {:>6.2} {:>6.1} {:>6} {:>6.2}% {:>6} {:>7} {:>7}",
        makespan,
        100.0 * oracle / makespan,
        queue,
        p95,
        overloads,
        if sent == 0 {
            0.0
        } else {
            100.0 * overloads as f64 / sent as f64
        },
        early,
        opt(conv),
        opt(react),
    )
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}s"))
}

/// First time the completion rate over the last second reached 90 % of
/// `rate`.
pub(crate) fn converge(host: &HostResult, rate: f64) -> Option<f64> {
    let per_second = (1.0 / SAMPLE.as_secs_f64()).round() as usize;
    host.series
        .windows(per_second + 1)
        .find(|w| (w[per_second].completed - w[0].completed) as f64 >= 0.9 * rate)
        .map(|w| w[per_second].t)
        .or_else(|| {
            (host.series.last()?.completed as usize >= host.requests).then_some(host.makespan)
        })
}

/// After the first capacity drop, the time until the server queue is at
/// most 1 and stays so for a second (or until the capacity comes back).
fn drop_reaction(scenario: &Scenario, hosts: &[HostResult]) -> Option<f64> {
    let (host, changes) = scenario
        .hosts
        .iter()
        .zip(hosts)
        .find_map(|(h, r)| match &h.model {
            sim::Model::Queue { changes, .. } if !changes.is_empty() => Some((r, changes)),
            _ => None,
        })?;
    let drop_at = changes[0].0.as_secs_f64();
    let until = changes.get(1).map_or(f64::INFINITY, |c| c.0.as_secs_f64());
    let after: Vec<_> = host
        .series
        .iter()
        .filter(|p| p.t > drop_at && p.t <= until)
        .collect();
    let per_second = (1.0 / SAMPLE.as_secs_f64()).round() as usize;
    (0..after.len())
        .find(|&i| after[i..].iter().take(per_second).all(|p| p.queue <= 1.0))
        .map(|i| after[i].t - drop_at)
}

const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// Four stacked panels (delay, concurrency, latency, server queue) with
/// one line per policy.
fn svg(title: &str, lines: &[(&str, &HostResult)]) -> String {
    let (w, ph, left, top) = (900.0, 160.0, 70.0, 40.0);
    // Scaled to the first line (the default policy): its run, and a bit
    // more; other lines are cut at the right and clipped at the top.
    let t_max = lines.first().map_or(1.0, |(_, h)| {
        let end = h.series.last().map_or(1.0, |p| p.t);
        (end * 1.3).max(1.0)
    });
    type Get = fn(&sim::Point) -> Option<f64>;
    let panels: [(&str, Get); 4] = [
        ("delay (ms)", |p| Some(p.delay * 1000.0)),
        ("concurrency limit", |p| Some(p.concurrency)),
        ("latency (ms)", |p| p.latency.map(|l| l * 1000.0)),
        ("server queue", |p| Some(p.queue)),
    ];
    let height = top + panels.len() as f64 * (ph + 30.0) + 40.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="20" font-size="14">{}</text>"#,
        escape(title)
    );
    for (i, (name, _)) in lines.iter().enumerate() {
        let x = left + 110.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="{}" width="12" height="3" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            height - 18.0,
            COLORS[i % COLORS.len()],
            x + 16.0,
            height - 13.0,
            escape(name)
        );
    }
    for (pi, (label, get)) in panels.iter().enumerate() {
        let y0 = top + pi as f64 * (ph + 30.0);
        let pw = w - left - 20.0;
        let max_of = |h: &HostResult| {
            h.series
                .iter()
                .filter(|p| p.t <= t_max)
                .filter_map(get)
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max)
        };
        let first = lines.first().map_or(0.0, |(_, h)| max_of(h));
        let all = lines.iter().map(|(_, h)| max_of(h)).fold(0.0, f64::max);
        let v_max = all.min(3.0 * first.max(1e-9)).max(1e-9) * 1.05;
        let _ = writeln!(
            out,
            r##"<rect x="{left}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
        );
        let _ = writeln!(out, r#"<text x="{left}" y="{}">{label}</text>"#, y0 - 4.0);
        let _ = writeln!(out, r#"<text x="4" y="{}">{:.0}</text>"#, y0 + 10.0, v_max);
        let _ = writeln!(out, r#"<text x="4" y="{}">0</text>"#, y0 + ph);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{:.0} s</text>"#,
            left + pw,
            y0 + ph + 12.0,
            t_max
        );
        for (i, (_, h)) in lines.iter().enumerate() {
            let mut points = String::new();
            // At most about 300 points a line.
            let every = h.series.len().div_ceil(300).max(1);
            for p in h.series.iter().filter(|p| p.t <= t_max).step_by(every) {
                if let Some(v) = get(p).filter(|v| v.is_finite()) {
                    let x = left + pw * p.t / t_max;
                    let y = y0 + ph - ph * (v / v_max).min(1.0);
                    let _ = write!(points, "{x:.1},{y:.1} ");
                }
            }
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.2" points="{}"/>"#,
                COLORS[i % COLORS.len()],
                points.trim_end()
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
