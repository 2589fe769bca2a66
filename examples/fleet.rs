//! A crawler fleet on one machine: N worker processes crawl a local site,
//! alone and then sharing their slots through Redis, next to one process.
//!
//! ```text
//! redis-server --port 6390 --save '' &
//! cargo run --release --example fleet --features redis -- --workers 4 --redis redis://127.0.0.1:6390/
//! ```
//!
//! The site has two hosts on 127.0.0.1: `quick` (5 ms, serves 8 at once
//! before slowing down) and `slow` (50 ms, 2 at once). Three runs, each
//! `--pages` requests (default 200) per host per worker, default policy:
//!
//! 1. one process;
//! 2. N processes, each with its own throttle: the site sees N times the
//!    load one process would send;
//! 3. N processes sharing their slots through Redis (fleet name from
//!    `--fleet`, default `fleet-demo-PID`).
//!
//! For each run and host it prints the requests per second the host saw
//! and the most it served at once. The workers are this same program,
//! started with `--worker`.
//!
//! `--min-delay MS` and `--max-concurrency N` give every slot of every
//! worker (and of the one process) that floor and that cap, as
//! `SlotSettings` for the pattern `*`: with them, a fleet should reach what
//! one process reaches.
//!
//! `--policy NAME` runs every worker (and the one process) with another
//! policy than the default: `scrapy`, `scrapy-2012`, `aimd`, `vegas` or
//! `gradient2`, with its defaults.
//!
//! `--one-429 N` makes the slow host answer its N-th request of each run
//! with `429 Too Many Requests` and `Retry-After: 1`, once, and report its
//! rate from 1 to 6 s after that answer next to its rate before it (give
//! `--pages` enough for the run to last 6 s past the 429: the line says
//! when it did not).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::policy::{
    Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas,
};
use tower_autothrottle::redis::Fleet;
use tower_autothrottle::{AutoThrottleLayer, BoxError, Config, SlotSettings};

#[derive(Default)]
struct Stats {
    active: AtomicUsize,
    max_active: AtomicUsize,
    arrivals: Mutex<Vec<Instant>>,
    /// Answer the request with this number (1 = the first) with a 429.
    refuse_nth: Option<usize>,
    /// When that 429 was sent.
    refused_at: Mutex<Option<Instant>>,
}

impl Stats {
    fn reset(&self) {
        self.max_active.store(0, Ordering::SeqCst);
        self.arrivals.lock().unwrap().clear();
        *self.refused_at.lock().unwrap() = None;
    }

    /// Requests per second from 1 to 6 s after the 429, against the rate
    /// before it.
    fn after_429(&self) -> Option<String> {
        self.refuse_nth?;
        let Some(at) = *self.refused_at.lock().unwrap() else {
            return Some("no 429 was sent (the run was shorter)".to_owned());
        };
        let arrivals = self.arrivals.lock().unwrap();
        let first = *arrivals.first()?;
        let before = arrivals.iter().filter(|&&t| t < at).count();
        let rate_before = before.saturating_sub(1) as f64 / (at - first).as_secs_f64();
        let (from, to) = (at + Duration::from_secs(1), at + Duration::from_secs(6));
        let after = arrivals.iter().filter(|&&t| t >= from && t < to).count();
        let rate_after = after as f64 / 5.0;
        let last = *arrivals.last()?;
        let short = if last < to {
            " (the run ended before 6 s after the 429: too few pages)"
        } else {
            ""
        };
        Some(format!(
            "after the 429: {rate_after:.1} requests/s from 1 to 6 s, {rate_before:.1} before: {:.0} %{short}",
            100.0 * rate_after / rate_before
        ))
    }

    fn report(&self, name: &str) -> String {
        let arrivals = self.arrivals.lock().unwrap();
        let span = match (arrivals.first(), arrivals.last()) {
            (Some(a), Some(b)) if b > a => (*b - *a).as_secs_f64(),
            _ => f64::NAN,
        };
        format!(
            "{name}: {:>5} requests, {:>7.1} requests/s, at most {:>2} at once",
            arrivals.len(),
            arrivals.len().saturating_sub(1) as f64 / span,
            self.max_active.load(Ordering::SeqCst)
        )
    }
}

/// A host answering after `latency`, slower for each request past `capacity`.
async fn host(latency: Duration, capacity: usize, stats: Arc<Stats>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let stats = Arc::clone(&stats);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    let stats = Arc::clone(&stats);
                    async move {
                        let arrived = Instant::now();
                        let n = {
                            let mut arrivals = stats.arrivals.lock().unwrap();
                            arrivals.push(arrived);
                            arrivals.len()
                        };
                        if stats.refuse_nth == Some(n) {
                            *stats.refused_at.lock().unwrap() = Some(arrived);
                            let response = http::Response::builder()
                                .status(429)
                                .header("retry-after", "1")
                                .body(Full::new(Bytes::from("slow down")))
                                .unwrap();
                            return Ok::<_, Infallible>(response);
                        }
                        let now = stats.active.fetch_add(1, Ordering::SeqCst) + 1;
                        stats.max_active.fetch_max(now, Ordering::SeqCst);
                        let over = now.saturating_sub(capacity) as u32;
                        tokio::time::sleep(latency * (1 + over)).await;
                        stats.active.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// One worker: `pages` requests to each site host, all queued at once.
async fn crawl(a: &Args, sites: &[String], fleet: Option<Fleet>) -> Result<(), BoxError> {
    let pages = a.pages;
    let mut config = Config::builder();
    if let Some(name) = &a.policy {
        config = config.policy(policy(name)?);
    }
    if a.min_delay.is_some() || a.max_concurrency.is_some() {
        let mut settings = SlotSettings::new();
        if let Some(ms) = a.min_delay {
            settings = settings.min_delay(Duration::from_millis(ms));
        }
        if let Some(n) = a.max_concurrency {
            settings = settings.max_concurrency(n);
        }
        config = config.slot("*", settings);
    }
    if let Some(fleet) = fleet {
        config = config.fleet(fleet);
    }
    let throttle = AutoThrottleLayer::new(config.build()?);
    let client = ServiceBuilder::new()
        .layer(throttle.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let mut tasks = Vec::new();
    for page in 0..pages {
        for site in sites {
            let (svc, url) = (client.clone(), format!("{site}/page/{page}"));
            tasks.push(tokio::spawn(async move {
                let request = http::Request::get(url).body(Empty::new())?;
                svc.oneshot(request).await?.into_body().collect().await?;
                Ok::<_, BoxError>(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    // Give the last places back before the process ends.
    throttle.flush().await;
    Ok(())
}

/// The policy named by `--policy`, with its defaults.
fn policy(name: &str) -> Result<Box<dyn MakePolicy>, BoxError> {
    Ok(match name {
        Adaptive::NAME | "default" => Box::new(Adaptive::default()),
        Scrapy::NAME => Box::new(Scrapy::default()),
        Scrapy2012::NAME => Box::new(Scrapy2012::default()),
        Aimd::NAME => Box::new(Aimd::default()),
        Vegas::NAME => Box::new(Vegas::default()),
        Gradient2::NAME => Box::new(Gradient2::default()),
        other => return Err(format!("unknown policy {other:?}").into()),
    })
}

struct Args {
    workers: usize,
    redis: Option<String>,
    fleet: String,
    pages: usize,
    worker: bool,
    sites: Vec<String>,
    min_delay: Option<u64>,
    max_concurrency: Option<usize>,
    one_429: Option<usize>,
    policy: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        workers: 4,
        redis: None,
        fleet: format!("fleet-demo-{}", std::process::id()),
        pages: 200,
        worker: false,
        sites: Vec::new(),
        min_delay: None,
        max_concurrency: None,
        one_429: None,
        policy: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--workers" => a.workers = value()?.parse().map_err(|_| "--workers: a number")?,
            "--redis" => a.redis = Some(value()?),
            "--fleet" => a.fleet = value()?,
            "--pages" => a.pages = value()?.parse().map_err(|_| "--pages: a number")?,
            "--sites" => a.sites = value()?.split(',').map(str::to_owned).collect(),
            "--worker" => a.worker = true,
            "--min-delay" => {
                a.min_delay = Some(value()?.parse().map_err(|_| "--min-delay: milliseconds")?)
            }
            "--max-concurrency" => {
                a.max_concurrency = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--max-concurrency: a number")?,
                )
            }
            "--policy" => a.policy = Some(value()?),
            "--one-429" => a.one_429 = Some(value()?.parse().map_err(|_| "--one-429: a number")?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// Starts `n` worker processes and waits for them.
fn workers(n: usize, a: &Args, sites: &str, redis: Option<&str>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let children: Vec<_> = (0..n)
        .map(|_| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--worker",
                "--sites",
                sites,
                "--pages",
                &a.pages.to_string(),
            ]);
            cmd.args(["--fleet", &a.fleet]);
            if let Some(ms) = a.min_delay {
                cmd.args(["--min-delay", &ms.to_string()]);
            }
            if let Some(n) = a.max_concurrency {
                cmd.args(["--max-concurrency", &n.to_string()]);
            }
            if let Some(name) = &a.policy {
                cmd.args(["--policy", name]);
            }
            if let Some(url) = redis {
                cmd.args(["--redis", url]);
            }
            cmd.spawn().map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    for mut child in children {
        let status = child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("a worker failed: {status}"));
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "tower_autothrottle=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "fleet: {e}\nusage: fleet --workers N --redis URL [--pages N] [--fleet NAME] [--min-delay MS] [--max-concurrency N] [--policy NAME] [--one-429 N]"
            );
            return ExitCode::from(2);
        }
    };
    if a.worker {
        let fleet = a
            .redis
            .as_ref()
            .map(|url| Fleet::new(url.as_str(), a.fleet.as_str()));
        return match crawl(&a, &a.sites, fleet).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(redis) = a.redis.clone() else {
        eprintln!(
            "fleet: --redis URL is needed (start one with: redis-server --port 6390 --save '')"
        );
        return ExitCode::from(2);
    };
    let stats = [
        Arc::new(Stats::default()),
        Arc::new(Stats {
            refuse_nth: a.one_429,
            ..Stats::default()
        }),
    ];
    let quick = host(Duration::from_millis(5), 8, Arc::clone(&stats[0])).await;
    let slow = host(Duration::from_millis(50), 2, Arc::clone(&stats[1])).await;
    let sites = format!("http://{quick},http://{slow}");
    let report = |title: &str, elapsed: Duration| {
        println!("{title} ({elapsed:.1?}):");
        println!("  {}", stats[0].report("quick"));
        println!("  {}", stats[1].report("slow "));
        if let Some(line) = stats[1].after_429() {
            println!("  slow : {line}");
        }
        stats.iter().for_each(|s| s.reset());
    };
    let n = a.workers;
    let started = Instant::now();
    if let Err(e) = crawl(
        &a,
        &[format!("http://{quick}"), format!("http://{slow}")],
        None,
    )
    .await
    {
        eprintln!("fleet: {e}");
        return ExitCode::FAILURE;
    }
    report("1 process", started.elapsed());
    for (title, url) in [
        (format!("{n} processes, each alone"), None),
        (
            format!("{n} processes sharing through Redis"),
            Some(redis.as_str()),
        ),
    ] {
        let started = Instant::now();
        let sites = sites.clone();
        let done = tokio::task::spawn_blocking({
            let a = Args {
                sites: Vec::new(),
                redis: None,
                fleet: a.fleet.clone(),
                policy: a.policy.clone(),
                ..a
            };
            let url = url.map(str::to_owned);
            move || workers(n, &a, &sites, url.as_deref())
        })
        .await;
        match done {
            Ok(Ok(())) => report(&title, started.elapsed()),
            Ok(Err(e)) => {
                eprintln!("fleet: {e}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("fleet: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
