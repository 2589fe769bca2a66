//! Replays a recorded latency trace through a policy and prints what it
//! decides after each response.
//!
//! ```text
//! cargo run --example replay -- --policy scrapy-2012 [--start-delay S] [--check-period N] [--max-concurrency N] < trace.txt
//! ```
//!
//! Input: one response per line, `LATENCY_SECONDS STATUS [IN_FLIGHT]`
//! (blank lines and `#` comments are skipped; `STATUS` may also be
//! `timeout` or `error`; without `IN_FLIGHT` the policy's current limit is
//! assumed). Output: after each response, one line
//! `DELAY_SECONDS CONCURRENCY`, the delay with 6 decimals.
//!
//! This shows a policy's own rules. The layer's handling of overload and
//! `Retry-After`, which acts on top of any policy, is not part of it.
//!
//! | policy | flags (defaults) |
//! |---|---|
//! | `adaptive` (also `default`) | `--start-delay 0 --min-delay 0 --max-delay 60 --initial-concurrency 1 --max-concurrency 64` |
//! | `scrapy` | `--start-delay 5 --min-delay 0 --max-delay 60 --target-concurrency 1 --max-concurrency 8` |
//! | `scrapy-2012` | `--start-delay 5 --check-period 10 --max-concurrency 8` |
//! | `aimd` | `--initial-limit 20 --min-limit 20 --max-limit 200 --backoff-ratio 0.9 --timeout 5 --min-delay 0` |
//! | `vegas` | `--initial-limit 20 --max-limit 1000 --smoothing 1 --probe-multiplier 30 --min-delay 0 --seed 0` |
//! | `gradient2` | `--initial-limit 20 --min-limit 20 --max-limit 200 --smoothing 0.2 --queue-size 4 --long-window 600 --rtt-tolerance 1.5 --min-delay 0` |
//!
//! Every policy accepts the common flags `--start-delay --min-delay
//! --max-delay --target-concurrency --max-concurrency`; for the Netflix
//! policies `--max-concurrency` sets `--max-limit`, and a common flag a
//! policy has no use for is ignored with a note on standard error. Other
//! flags a policy does not know are an error.

use std::collections::BTreeMap;
use std::io::{self, BufWriter};
use std::process::ExitCode;

use tower_autothrottle::policy::{
    replay, Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas,
};

const USAGE: &str = "usage: replay --policy NAME [--FLAG VALUE]... < TRACE
  NAME: adaptive (default), scrapy, scrapy-2012, aimd, vegas, gradient2
  TRACE: lines `LATENCY_SECONDS STATUS [IN_FLIGHT]`; prints `DELAY_SECONDS CONCURRENCY` after each";

const COMMON: [&str; 5] = [
    "start-delay",
    "min-delay",
    "max-delay",
    "target-concurrency",
    "max-concurrency",
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("replay: {message}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let mut flags = Flags(parse_flags(std::env::args().skip(1))?);
    let name = flags
        .0
        .remove("policy")
        .unwrap_or_else(|| Adaptive::NAME.to_owned());
    let policy = build(&name, &mut flags)?;
    for (flag, _) in flags.0 {
        if COMMON.contains(&flag.as_str()) {
            eprintln!("replay: note: --{flag} does not apply to {name}; ignored");
        } else {
            return Err(format!("--{flag} does not apply to policy {name}\n{USAGE}"));
        }
    }
    policy.validate().map_err(|e| e.to_string())?;
    let stdin = io::stdin().lock();
    let stdout = BufWriter::new(io::stdout().lock());
    replay(&*policy, stdin, stdout).map_err(|e| e.to_string())
}

/// Applies each `--flag` given to a policy builder, with its method.
macro_rules! with_flags {
    ($f:expr, $policy:expr, { $($flag:literal => $method:ident),* $(,)? }) => {{
        let mut policy = $policy;
        $(
            if let Some(value) = $f.num($flag)? {
                policy = policy.$method(value);
            }
        )*
        policy
    }};
}

fn build(name: &str, f: &mut Flags) -> Result<Box<dyn MakePolicy>, String> {
    Ok(match name {
        Adaptive::NAME | "default" => Box::new(with_flags!(f, Adaptive::default(), {
            "start-delay" => start_delay_secs,
            "min-delay" => min_delay_secs,
            "max-delay" => max_delay_secs,
            "initial-concurrency" => initial_concurrency,
            "max-concurrency" => max_concurrency,
        })),
        Scrapy::NAME => Box::new(with_flags!(f, Scrapy::default(), {
            "start-delay" => start_delay_secs,
            "min-delay" => min_delay_secs,
            "max-delay" => max_delay_secs,
            "target-concurrency" => target_concurrency,
            "max-concurrency" => max_concurrency,
        })),
        Scrapy2012::NAME => Box::new(with_flags!(f, Scrapy2012::default(), {
            "start-delay" => start_delay_secs,
            "check-period" => check_period,
            "max-concurrency" => max_concurrency,
        })),
        Aimd::NAME => {
            let p = with_flags!(f, Aimd::default(), {
                "initial-limit" => initial_concurrency,
                "min-limit" => min_concurrency,
                "backoff-ratio" => backoff_ratio,
                "timeout" => timeout_secs,
                "min-delay" => min_delay_secs,
            });
            Box::new(match f.limit_max()? {
                Some(max) => p.max_concurrency(max),
                None => p,
            })
        }
        Vegas::NAME => {
            let p = with_flags!(f, Vegas::default(), {
                "initial-limit" => initial_concurrency,
                "smoothing" => smoothing,
                "probe-multiplier" => probe_multiplier,
                "min-delay" => min_delay_secs,
                "seed" => seed,
            });
            Box::new(match f.limit_max()? {
                Some(max) => p.max_concurrency(max),
                None => p,
            })
        }
        Gradient2::NAME => {
            let p = with_flags!(f, Gradient2::default(), {
                "initial-limit" => initial_concurrency,
                "min-limit" => min_concurrency,
                "smoothing" => smoothing,
                "queue-size" => queue_size,
                "long-window" => long_window,
                "rtt-tolerance" => rtt_tolerance,
                "min-delay" => min_delay_secs,
            });
            Box::new(match f.limit_max()? {
                Some(max) => p.max_concurrency(max),
                None => p,
            })
        }
        other => return Err(format!("unknown policy {other:?}\n{USAGE}")),
    })
}

struct Flags(BTreeMap<String, String>);

impl Flags {
    /// Takes a flag's value, parsed.
    fn num<T: std::str::FromStr>(&mut self, flag: &str) -> Result<Option<T>, String> {
        match self.0.remove(flag) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("--{flag}: {v:?} is not a valid value")),
        }
    }

    /// `--max-limit`, or the common `--max-concurrency` for it.
    fn limit_max(&mut self) -> Result<Option<usize>, String> {
        let limit = self.num("max-limit")?;
        let concurrency = self.num("max-concurrency")?;
        Ok(limit.or(concurrency))
    }
}

/// `--name VALUE` and `--name=VALUE` pairs.
fn parse_flags(args: impl Iterator<Item = String>) -> Result<BTreeMap<String, String>, String> {
    let mut flags = BTreeMap::new();
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?}\n{USAGE}"));
        };
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), v.to_owned()),
            None => {
                let value = args
                    .next()
                    .ok_or_else(|| format!("--{flag} needs a value\n{USAGE}"))?;
                (flag.to_owned(), value)
            }
        };
        if flags.insert(name.clone(), value).is_some() {
            return Err(format!("--{name} given twice"));
        }
    }
    Ok(flags)
}
