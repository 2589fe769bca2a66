//! Replays a recorded latency trace through a policy and prints what it
//! decides after each response.
//!
//! ```text
//! cargo run --example replay -- --policy scrapy-2012 [--start-delay S] [--check-period N] [--max-concurrency N] < trace.txt
//! ```
//!
//! Input: one response per line, `LATENCY_SECONDS STATUS` (blank lines and
//! `#` comments are skipped). Output: after each response, one line
//! `DELAY_SECONDS CONCURRENCY`, the delay with 6 decimals.
//!
//! | flag | policy | default |
//! |---|---|---|
//! | `--start-delay S` | scrapy-2012 | 5.0 |
//! | `--check-period N` | scrapy-2012 | 10 |
//! | `--max-concurrency N` | scrapy-2012 | 8 |

use std::collections::BTreeMap;
use std::io::{self, BufWriter};
use std::process::ExitCode;

use tower_autothrottle::policy::{replay, MakePolicy, Scrapy2012};

const USAGE: &str = "usage: replay --policy scrapy-2012 [--start-delay S] [--check-period N] [--max-concurrency N] < TRACE
  TRACE: lines `LATENCY_SECONDS STATUS`; prints `DELAY_SECONDS CONCURRENCY` after each";

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
    let mut flags = parse_flags(std::env::args().skip(1))?;
    let name = flags
        .remove("policy")
        .unwrap_or_else(|| Scrapy2012::NAME.to_owned());
    let policy: Box<dyn MakePolicy> = match name.as_str() {
        Scrapy2012::NAME => {
            let mut p = Scrapy2012::default();
            if let Some(v) = flags.remove("start-delay") {
                p = p.start_delay_secs(number(&v, "start-delay")?);
            }
            if let Some(v) = flags.remove("check-period") {
                p = p.check_period(number(&v, "check-period")?);
            }
            if let Some(v) = flags.remove("max-concurrency") {
                p = p.max_concurrency(number(&v, "max-concurrency")?);
            }
            Box::new(p)
        }
        other => {
            return Err(format!(
                "unknown policy {other:?}; known: {}\n{USAGE}",
                Scrapy2012::NAME
            ))
        }
    };
    if let Some(flag) = flags.keys().next() {
        return Err(format!("--{flag} does not apply to policy {name}\n{USAGE}"));
    }
    policy.validate().map_err(|e| e.to_string())?;
    let stdin = io::stdin().lock();
    let stdout = BufWriter::new(io::stdout().lock());
    replay(&*policy, stdin, stdout).map_err(|e| e.to_string())
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

fn number<T: std::str::FromStr>(value: &str, flag: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("--{flag}: {value:?} is not a valid number"))
}
