//! Crawls a local site of several hosts through hyper-util's client wrapped
//! in the AutoThrottle layer, showing each host's delay and concurrency
//! adapting live.
//!
//! ```text
//! cargo run --release --example crawl
//! cargo run --release --example crawl -- --urls urls.txt --json
//! ```
//!
//! Without `--urls` it starts four hyper servers on 127.0.0.1, each a host
//! with its own capacity (workers serving a FIFO queue) and service time,
//! and crawls them from their home pages, following links (each page links
//! to two more on its host and one on another host) until every page has
//! been fetched. No internet is needed.
//!
//! It prints the site (each host's workers, service time and pages) and a
//! legend, then every second a progress line and one row per host still
//! being crawled: pages fetched of the host's total, the learned delay and
//! concurrency beside the host's true workers, requests in flight and
//! waiting at the throttle (the crawler's own backlog), and the smoothed
//! latency. A host is reported once when it finishes. At the end: a table
//! with the same columns and a paragraph reading it.
//!
//! | flag | meaning | default |
//! |---|---|---|
//! | `--urls FILE` | fetch the URLs in FILE (one a line, `-` for stdin) instead; no links are followed | |
//! | `--json` | end with one JSON line on stdout (progress goes to stderr) | off |
//! | `--pages N` | pages of the local site, over all hosts | 2400 |
//! | `--policy NAME` | `adaptive` (the crate's default), `scrapy`, `scrapy-2012`, `aimd`, `vegas`, `gradient2` | adaptive |
//! | `--start-delay S` | the policy's start delay, seconds (adaptive, scrapy, scrapy-2012) | the policy's |
//! | `--check-period N` | responses per concurrency check (scrapy-2012) | 10 |
//! | `--max-concurrency N` | highest concurrency per host | the policy's |
//! | `--timeout S` | per-request timeout, seconds | 30 |
//! | `--quiet` | no live progress | off |
//!
//! The JSON line: `{"pages": N, "elapsed_secs": X, "statuses": {"200": N, ...},
//! "errors": N, "hosts": {"http://127.0.0.1:PORT": {"pages": N, "delay_secs": X,
//! "concurrency": N}, ...}}`, where `pages` counts responses (any status),
//! `errors` counts requests that got no response (connection errors,
//! timeouts), and `hosts` is keyed by slot.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};
use tower_autothrottle::policy::{
    Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas,
};
use tower_autothrottle::{AutoThrottleLayer, Config, SlotKey};

/// One local host: how many requests it serves at once and how long each takes.
#[derive(Clone, Copy, Debug)]
struct Site {
    name: &'static str,
    workers: usize,
    service_ms: u64,
    /// Share of the site's pages.
    share: f64,
}

const SITES: [Site; 4] = [
    Site {
        name: "big",
        workers: 8,
        service_ms: 8,
        share: 0.5,
    },
    Site {
        name: "medium",
        workers: 4,
        service_ms: 20,
        share: 0.25,
    },
    Site {
        name: "slow",
        workers: 2,
        service_ms: 60,
        share: 0.1,
    },
    Site {
        name: "fragile",
        workers: 1,
        service_ms: 15,
        share: 0.15,
    },
];

struct Args {
    urls: Option<String>,
    json: bool,
    quiet: bool,
    pages: usize,
    policy: String,
    start_delay: Option<f64>,
    check_period: Option<usize>,
    max_concurrency: Option<usize>,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        urls: None,
        json: false,
        quiet: false,
        pages: 2400,
        policy: Adaptive::NAME.to_owned(),
        start_delay: None,
        check_period: None,
        max_concurrency: None,
        timeout: Duration::from_secs(30),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        fn num<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag}: {v:?} is not a valid number"))
        }
        match flag.as_str() {
            "--urls" => args.urls = Some(value()?),
            "--json" => args.json = true,
            "--quiet" => args.quiet = true,
            "--pages" => args.pages = num(&flag, value()?)?,
            "--policy" => args.policy = value()?,
            "--start-delay" => args.start_delay = Some(num(&flag, value()?)?),
            "--check-period" => args.check_period = Some(num(&flag, value()?)?),
            "--max-concurrency" => args.max_concurrency = Some(num(&flag, value()?)?),
            "--timeout" => {
                let secs: f64 = num(&flag, value()?)?;
                args.timeout = Duration::try_from_secs_f64(secs)
                    .map_err(|_| format!("--timeout: {secs} is not a valid duration"))?;
            }
            "-h" | "--help" => {
                println!("usage: crawl [--urls FILE|-] [--json] [--pages N] [--policy NAME] [--start-delay S] [--check-period N] [--max-concurrency N] [--timeout S] [--quiet]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crawl: {e}");
            return ExitCode::from(2);
        }
    };
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crawl: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let config = Config::builder()
        .policy(policy(&args)?)
        .build()
        .map_err(|e| e.to_string())?;
    let throttle = AutoThrottleLayer::new(config);
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let client = throttle.layer(client);

    // What to fetch first, and whether to follow links.
    let (seeds, follow, site_hosts) = match &args.urls {
        Some(path) => (read_urls(path)?, false, Vec::new()),
        None => {
            let hosts = start_site(args.pages).await?;
            let seeds = hosts
                .iter()
                .map(|(_, addr)| format!("http://{addr}/p/0"))
                .collect();
            (seeds, true, hosts)
        }
    };
    if !site_hosts.is_empty() && !args.quiet {
        let mut out = progress_out(args.json);
        let _ = writeln!(
            out,
            "A local site of {} hosts, each a FIFO queue in front of its workers:",
            site_hosts.len()
        );
        for (site, addr) in &site_hosts {
            let _ = writeln!(
                out,
                "  {:<8} http://{addr}  {:>2} workers, {:>3} ms a page, {:>4} pages",
                site.name,
                site.workers,
                site.service_ms,
                site_pages(args.pages, site)
            );
        }
        let _ = writeln!(out, "{LEGEND}");
    }

    let names: HashMap<String, &'static str> = site_hosts
        .iter()
        .map(|(site, addr)| (format!("http://{addr}"), site.name))
        .collect();
    let known: HashMap<String, (usize, u64)> = site_hosts
        .iter()
        .map(|(site, addr)| {
            let pages = site_pages(args.pages, site) as u64;
            (format!("http://{addr}"), (site.workers, pages))
        })
        .collect();
    // Rows in the site's order (by key for --urls).
    let order: Vec<String> = site_hosts
        .iter()
        .map(|(_, addr)| format!("http://{addr}"))
        .collect();
    let mut finished: HashSet<String> = HashSet::new();
    let started = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, Result<(u16, Vec<String>), String>)>();
    let mut seen: HashSet<String> = HashSet::new();
    let mut outstanding = 0usize;
    let fetch = |url: String, outstanding: &mut usize| {
        *outstanding += 1;
        let client = client.clone();
        let tx = tx.clone();
        let timeout = args.timeout;
        tokio::spawn(async move {
            let result = tokio::time::timeout(timeout, fetch_page(client, &url, follow)).await;
            let result = result.unwrap_or_else(|_| Err("timeout".to_owned()));
            let _ = tx.send((url, result));
        });
    };
    for url in seeds {
        if !follow || seen.insert(url.clone()) {
            fetch(url, &mut outstanding);
        }
    }

    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let mut errors = 0u64;
    let mut pages_by_host: HashMap<String, u64> = HashMap::new();
    let mut pages = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    while outstanding > 0 {
        tokio::select! {
            Some((url, result)) = rx.recv() => {
                outstanding -= 1;
                match result {
                    Ok((status, links)) => {
                        pages += 1;
                        *statuses.entry(status).or_default() += 1;
                        *pages_by_host.entry(host_key(&url)).or_default() += 1;
                        for link in links {
                            if seen.insert(link.clone()) {
                                fetch(link, &mut outstanding);
                            }
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        if !args.quiet {
                            let _ = writeln!(progress_out(args.json), "error {url}: {e}");
                        }
                    }
                }
            }
            _ = ticker.tick() => {
                if !args.quiet {
                    let view = View { throttle: &throttle, names: &names, known: &known, order: &order, pages_by_host: &pages_by_host };
                    view.progress(&mut progress_out(args.json), pages, args.pages, follow, &mut finished, started.elapsed());
                }
            }
        }
    }
    let elapsed = started.elapsed();

    if args.json {
        let hosts: serde_json::Map<String, serde_json::Value> = throttle
            .slots()
            .into_iter()
            .map(|s| {
                let value = serde_json::json!({
                    "pages": pages_by_host.get(s.key.as_str()).copied().unwrap_or(0),
                    "delay_secs": s.delay.as_secs_f64(),
                    "concurrency": s.concurrency,
                });
                (s.key.to_string(), value)
            })
            .collect();
        let statuses: serde_json::Map<String, serde_json::Value> = statuses
            .iter()
            .map(|(s, n)| (s.to_string(), (*n).into()))
            .collect();
        let summary = serde_json::json!({
            "pages": pages,
            "elapsed_secs": elapsed.as_secs_f64(),
            "statuses": statuses,
            "errors": errors,
            "hosts": hosts,
        });
        println!("{summary}");
    } else {
        let mut out = std::io::stdout();
        let _ = writeln!(
            out,
            "\ncrawled {pages} pages in {:.1} s ({errors} errors)",
            elapsed.as_secs_f64()
        );
        let statuses: Vec<String> = statuses.iter().map(|(s, n)| format!("{s}: {n}")).collect();
        let _ = writeln!(out, "statuses: {}", statuses.join(", "));
        let _ = writeln!(
            out,
            "{:<8} {:<24} {:>6} {:>10} {:>5} {:>8} {:>12}",
            "site", "host", "pages", "delay ms", "conc", "workers", "latency ms"
        );
        let view = View {
            throttle: &throttle,
            names: &names,
            known: &known,
            order: &order,
            pages_by_host: &pages_by_host,
        };
        for s in view.slots() {
            let workers = known
                .get(s.key.as_str())
                .map_or("-".to_owned(), |(w, _)| w.to_string());
            let _ = writeln!(
                out,
                "{:<8} {:<24} {:>6} {:>10.1} {:>5} {:>8} {:>12.1}",
                names.get(s.key.as_str()).copied().unwrap_or(""),
                s.key.as_str(),
                pages_by_host.get(s.key.as_str()).copied().unwrap_or(0),
                s.delay.as_secs_f64() * 1000.0,
                s.concurrency,
                workers,
                s.latency.map_or(0.0, |l| l.as_secs_f64() * 1000.0),
            );
        }
        if !known.is_empty() {
            let _ = writeln!(out, "\n{}", view.reading());
        }
    }
    Ok(())
}

/// The policy named by `--policy`, with the flags that apply to it.
fn policy(args: &Args) -> Result<Box<dyn MakePolicy>, String> {
    if args.check_period.is_some() && args.policy != Scrapy2012::NAME {
        return Err(format!(
            "--check-period applies to scrapy-2012, not {}",
            args.policy
        ));
    }
    let delay = args.start_delay;
    let max = args.max_concurrency;
    Ok(match args.policy.as_str() {
        Adaptive::NAME | "default" => {
            let mut p = Adaptive::default();
            if let Some(d) = delay {
                p = p.start_delay_secs(d);
            }
            if let Some(m) = max {
                p = p.max_concurrency(m);
            }
            Box::new(p)
        }
        Scrapy::NAME => {
            let mut p = Scrapy::default();
            if let Some(d) = delay {
                p = p.start_delay_secs(d);
            }
            if let Some(m) = max {
                p = p.max_concurrency(m);
            }
            Box::new(p)
        }
        Scrapy2012::NAME => {
            let mut p = Scrapy2012::default();
            if let Some(d) = delay {
                p = p.start_delay_secs(d);
            }
            if let Some(c) = args.check_period {
                p = p.check_period(c);
            }
            if let Some(m) = max {
                p = p.max_concurrency(m);
            }
            Box::new(p)
        }
        Aimd::NAME => {
            Box::new(max.map_or_else(Aimd::default, |m| Aimd::default().max_concurrency(m)))
        }
        Vegas::NAME => {
            Box::new(max.map_or_else(Vegas::default, |m| Vegas::default().max_concurrency(m)))
        }
        Gradient2::NAME => Box::new(max.map_or_else(Gradient2::default, |m| {
            Gradient2::default().max_concurrency(m)
        })),
        other => return Err(format!("unknown policy {other:?}")),
    })
}

fn progress_out(json: bool) -> Box<dyn Write> {
    if json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    }
}

/// What the live rows and the final table show.
const LEGEND: &str = "\
Every second, one row per host: pages fetched (of the host's total), the
delay between two requests and the concurrency limit the throttle learned
(beside the host's true workers: the limit should come near them, since
more only queue at the server and fewer leave workers idle), requests in
flight, requests waiting at the throttle for a place (the crawler's own
backlog, held back so that the server does not queue them), and the
smoothed latency. A host is reported once when it is finished.";

/// `text` in lines of at most `width` characters (longer words alone).
fn wrap(text: &str, width: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines.join("\n")
}

/// The pages the local site gives `site`.
fn site_pages(total_pages: usize, site: &Site) -> usize {
    ((total_pages as f64 * site.share).round() as usize).max(1)
}

/// The throttle's slots, with what the demo knows of each host.
struct View<'a> {
    throttle: &'a AutoThrottleLayer,
    names: &'a HashMap<String, &'static str>,
    /// Workers and pages of each local host.
    known: &'a HashMap<String, (usize, u64)>,
    order: &'a [String],
    pages_by_host: &'a HashMap<String, u64>,
}

impl View<'_> {
    /// The slots, in the site's order (others after, by key).
    fn slots(&self) -> Vec<tower_autothrottle::SlotSnapshot> {
        let mut slots = self.throttle.slots();
        let rank = |key: &str| {
            self.order
                .iter()
                .position(|k| k == key)
                .unwrap_or(usize::MAX)
        };
        slots.sort_by(|a, b| {
            (rank(a.key.as_str()), a.key.as_str()).cmp(&(rank(b.key.as_str()), b.key.as_str()))
        });
        slots
    }

    fn done(&self, key: &str) -> u64 {
        self.pages_by_host.get(key).copied().unwrap_or(0)
    }

    fn progress(
        &self,
        out: &mut dyn Write,
        pages: u64,
        total: usize,
        follow: bool,
        finished: &mut HashSet<String>,
        elapsed: Duration,
    ) {
        let slots = self.slots();
        let in_flight: usize = slots.iter().map(|s| s.in_flight).sum();
        let waiting: usize = slots.iter().map(|s| s.queued).sum();
        let of = if follow {
            format!(" of {total}")
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "-- {:>5.1} s: {pages}{of} pages, {in_flight} in flight, {waiting} waiting at the throttle",
            elapsed.as_secs_f64()
        );
        for s in slots {
            let key = s.key.as_str();
            let name = self.names.get(key).copied().unwrap_or("");
            let done = self.done(key);
            let known = self.known.get(key).copied();
            let complete =
                known.is_some_and(|(_, pages)| done >= pages) && s.in_flight == 0 && s.queued == 0;
            if complete {
                if finished.insert(key.to_owned()) {
                    let _ = writeln!(
                        out,
                        "   {name:<8} {key:<24} finished: {done} pages; left at delay {:.1} ms, conc {}",
                        s.delay.as_secs_f64() * 1000.0,
                        s.concurrency
                    );
                }
                continue;
            }
            let (workers, pages) = known.map_or(("-".to_owned(), String::new()), |(w, p)| {
                (w.to_string(), format!("/{p}"))
            });
            let _ = writeln!(
                out,
                "   {name:<8} {key:<24} pages {done:>5}{pages:<6} delay {:>7.1} ms  conc {:>2} (workers {workers:>2})  in flight {:>2}  waiting {:>4}  latency {:>6.1} ms",
                s.delay.as_secs_f64() * 1000.0,
                s.concurrency,
                s.in_flight,
                s.queued,
                s.latency.map_or(0.0, |l| l.as_secs_f64() * 1000.0),
            );
        }
    }

    /// A paragraph reading the final table.
    fn reading(&self) -> String {
        let mut near = Vec::new();
        let mut below = Vec::new();
        let mut above = Vec::new();
        for s in self.slots() {
            let Some((workers, _)) = self.known.get(s.key.as_str()).copied() else {
                continue;
            };
            let name = self.names.get(s.key.as_str()).copied().unwrap_or("?");
            let entry = format!("{name} ({} for {workers})", s.concurrency);
            let slack = (workers / 4).max(1);
            if s.concurrency + slack < workers {
                below.push(entry);
            } else if s.concurrency > workers + slack {
                above.push(entry);
            } else {
                near.push(entry);
            }
        }
        let mut text = String::from(
            "Reading: each host's limit is what the throttle learned from latency alone; \
             it never saw the workers column.",
        );
        if !near.is_empty() {
            text.push_str(&format!(
                " Within one request (or a quarter) of their capacity: {}.",
                near.join(", ")
            ));
        }
        if !below.is_empty() {
            text.push_str(&format!(
                " Below it: {}; a host whose pages ran out while the throttle was still \
                 growing, or one whose latency rose early (each request then waits a whole \
                 service time), stops short, and a longer crawl (--pages) lets it reach more.",
                below.join(", ")
            ));
        }
        if !above.is_empty() {
            text.push_str(&format!(
                " Above it: {}; the extra requests wait in the server's queue, which the \
                 limit allows while the latency it adds stays within the host's noise.",
                above.join(", ")
            ));
        }
        text.push_str(
            " The delay spaces requests so that a host gets about its limit in flight \
             over one latency; 0 means the limit alone holds it back.",
        );
        wrap(&text, 76)
    }
}

/// The slot key of a URL, as the layer computes it by default.
fn host_key(url: &str) -> String {
    url.parse::<Uri>()
        .ok()
        .and_then(|u| {
            u.authority()
                .map(|a| SlotKey::from_authority(u.scheme(), a).to_string())
        })
        .unwrap_or_else(|| SlotKey::fallback().to_string())
}

/// Fetches one page; returns its status and, when following, its links.
async fn fetch_page<S>(client: S, url: &str, follow: bool) -> Result<(u16, Vec<String>), String>
where
    S: tower::Service<
        Request<Empty<Bytes>>,
        Response = Response<tower_autothrottle::ThrottleBody<Incoming>>,
    >,
    S::Error: std::fmt::Display,
{
    let uri: Uri = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    let request = Request::get(uri.clone())
        .header("user-agent", "tower-autothrottle-crawl-demo")
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let response = client.oneshot(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let links = if follow {
        links(&uri, &body)
    } else {
        Vec::new()
    };
    Ok((status, links))
}

/// Absolute `href="..."` links of a page.
fn links(base: &Uri, body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let origin = match (base.scheme_str(), base.authority()) {
        (Some(s), Some(a)) => format!("{s}://{a}"),
        _ => return Vec::new(),
    };
    text.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|href| {
            if href.starts_with('/') {
                format!("{origin}{href}")
            } else {
                href.to_owned()
            }
        })
        .collect()
}

fn read_urls(path: &str) -> Result<Vec<String>, String> {
    let reader: Box<dyn BufRead> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut urls = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(|e| format!("{path}: {e}"))?;
        let url = line.trim();
        if !url.is_empty() && !url.starts_with('#') {
            urls.push(url.to_owned());
        }
    }
    Ok(urls)
}

/// Starts the local site: one server per host, pages split by share.
async fn start_site(total_pages: usize) -> Result<Vec<(Site, SocketAddr)>, String> {
    let mut listeners = Vec::new();
    for site in SITES {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        listeners.push((site, listener, addr));
    }
    let addrs: Vec<SocketAddr> = listeners.iter().map(|(_, _, a)| *a).collect();
    let mut hosts = Vec::new();
    for (index, (site, listener, addr)) in listeners.into_iter().enumerate() {
        let pages = site_pages(total_pages, &site);
        let other = addrs[(index + 1) % addrs.len()];
        let other_pages = site_pages(total_pages, &SITES[(index + 1) % SITES.len()]);
        let workers = Arc::new(Semaphore::new(site.workers));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let workers = Arc::clone(&workers);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let workers = Arc::clone(&workers);
                        async move {
                            // A FIFO queue in front of `workers` workers.
                            let _worker = workers.acquire().await;
                            tokio::time::sleep(Duration::from_millis(site.service_ms)).await;
                            Ok::<_, Infallible>(page(req.uri().path(), pages, other, other_pages))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        hosts.push((site, addr));
    }
    Ok(hosts)
}

/// Page `i` of a host links to pages `2i + 1` and `2i + 2` of its host and
/// to one page of the next host.
fn page(path: &str, pages: usize, other: SocketAddr, other_pages: usize) -> Response<Full<Bytes>> {
    let index = path
        .strip_prefix("/p/")
        .and_then(|i| i.parse::<usize>().ok());
    let Some(i) = index.filter(|&i| i < pages) else {
        return Response::builder()
            .status(404)
            .body(Full::new(Bytes::from_static(b"not found")))
            .expect("static response");
    };
    let mut html = format!("<html><body><h1>page {i}</h1>");
    for child in [2 * i + 1, 2 * i + 2] {
        if child < pages {
            html.push_str(&format!("<a href=\"/p/{child}\">{child}</a> "));
        }
    }
    html.push_str(&format!(
        "<a href=\"http://{other}/p/{}\">elsewhere</a>",
        (i * 7) % other_pages
    ));
    html.push_str(&"<p>lorem ipsum</p>".repeat(20));
    html.push_str("</body></html>");
    Response::new(Full::new(Bytes::from(html)))
}
