//! A deterministic simulator: modelled servers driven through the real
//! `AutoThrottleLayer` on tokio's paused clock, with seeded randomness.
//!
//! Shared by `examples/simulate` and the tests (`tests/simulator.rs`).
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::ServiceExt;
use tower_autothrottle::policy::MakePolicy;
use tower_autothrottle::{AutoThrottleLayer, Config, SlotSnapshot};

#[path = "../../tests/support/rng.rs"]
mod rng;
pub use rng::Rng;

/// How long one request takes to serve, once a worker takes it.
#[derive(Clone, Copy, Debug)]
pub enum ServiceTime {
    /// `base × U(1 − spread, 1 + spread)`.
    Uniform { base: Duration, spread: f64 },
    /// `base × X`, X Pareto with shape `alpha` scaled to mean 1: heavy tails.
    Pareto { base: Duration, alpha: f64 },
}

impl ServiceTime {
    fn draw(&self, rng: &mut Rng) -> Duration {
        match *self {
            ServiceTime::Uniform { base, spread } => {
                base.mul_f64(1.0 + spread * (2.0 * rng.open_unit() - 1.0))
            }
            ServiceTime::Pareto { base, alpha } => {
                // x_m chosen so that the mean alpha*x_m/(alpha-1) is 1.
                let xm = (alpha - 1.0) / alpha;
                let x = xm / rng.open_unit().powf(1.0 / alpha);
                base.mul_f64(x.min(50.0))
            }
        }
    }
}

/// What a host does with requests.
#[derive(Clone, Debug)]
pub enum Model {
    /// `workers` requests are served at once, the rest wait in a FIFO queue.
    /// The number of workers may change at given times.
    Queue {
        workers: usize,
        service: ServiceTime,
        changes: Vec<(Duration, usize)>,
    },
    /// A token bucket of `rate` per second and `burst`: a request without a
    /// token is answered 429 at once, with `Retry-After` (whole seconds
    /// until a token is there); the others are served in `service`, with
    /// no limit on concurrency.
    RateLimited {
        rate: f64,
        burst: f64,
        service: Duration,
    },
}

/// One host of a scenario.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: &'static str,
    pub model: Model,
    pub requests: usize,
}

/// A scenario: hosts crawled at once.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub hosts: Vec<Host>,
}

/// The scenarios of the scoreboard.
pub fn scenarios() -> Vec<Scenario> {
    let ms = Duration::from_millis;
    vec![
        Scenario {
            name: "fixed",
            about: "8 workers, 100 ms ± 10 %, FIFO queue",
            hosts: vec![Host {
                name: "fixed",
                model: Model::Queue {
                    workers: 8,
                    service: ServiceTime::Uniform {
                        base: ms(100),
                        spread: 0.1,
                    },
                    changes: vec![],
                },
                requests: 2000,
            }],
        },
        Scenario {
            name: "drop",
            about: "16 workers, 50 ms; 4 workers from 10 s to 25 s",
            hosts: vec![Host {
                name: "drop",
                model: Model::Queue {
                    workers: 16,
                    service: ServiceTime::Uniform {
                        base: ms(50),
                        spread: 0.1,
                    },
                    changes: vec![(Duration::from_secs(10), 4), (Duration::from_secs(25), 16)],
                },
                requests: 6000,
            }],
        },
        Scenario {
            name: "heavy-tail",
            about: "8 workers, 100 ms mean, Pareto(1.5) service times",
            hosts: vec![Host {
                name: "heavy-tail",
                model: Model::Queue {
                    workers: 8,
                    service: ServiceTime::Pareto {
                        base: ms(100),
                        alpha: 1.5,
                    },
                    changes: vec![],
                },
                requests: 2000,
            }],
        },
        Scenario {
            name: "rate-limited",
            about: "20 requests/s (burst 5), 429 + Retry-After beyond",
            hosts: vec![Host {
                name: "rate-limited",
                model: Model::RateLimited {
                    rate: 20.0,
                    burst: 5.0,
                    service: ms(20),
                },
                requests: 1000,
            }],
        },
        Scenario {
            name: "multi-host",
            about: "4 hosts: 1×200 ms, 4×80 ms, 16×40 ms, 32×100 ms workers",
            hosts: vec![
                Host {
                    name: "tiny",
                    model: Model::Queue {
                        workers: 1,
                        service: ServiceTime::Uniform {
                            base: ms(200),
                            spread: 0.1,
                        },
                        changes: vec![],
                    },
                    requests: 100,
                },
                Host {
                    name: "small",
                    model: Model::Queue {
                        workers: 4,
                        service: ServiceTime::Uniform {
                            base: ms(80),
                            spread: 0.1,
                        },
                        changes: vec![],
                    },
                    requests: 500,
                },
                Host {
                    name: "medium",
                    model: Model::Queue {
                        workers: 16,
                        service: ServiceTime::Uniform {
                            base: ms(40),
                            spread: 0.1,
                        },
                        changes: vec![],
                    },
                    requests: 4000,
                },
                Host {
                    name: "large",
                    model: Model::Queue {
                        workers: 32,
                        service: ServiceTime::Uniform {
                            base: ms(100),
                            spread: 0.1,
                        },
                        changes: vec![],
                    },
                    requests: 3000,
                },
            ],
        },
        Scenario {
            name: "slow-huge",
            about: "unbounded workers, 1 s ± 10 % whatever the load",
            hosts: vec![Host {
                name: "slow-huge",
                model: Model::Queue {
                    workers: usize::MAX / 2,
                    service: ServiceTime::Uniform {
                        base: ms(1000),
                        spread: 0.1,
                    },
                    changes: vec![],
                },
                requests: 1000,
            }],
        },
    ]
}

/// The server side of one host: its queue, workers and records.
struct HostState {
    model: Model,
    workers: usize,
    busy: usize,
    queue: VecDeque<oneshot::Sender<()>>,
    rng: Rng,
    tokens: f64,
    last_refill: Instant,
    /// No request should arrive before this (the last Retry-After sent).
    retry_deadline: Option<Instant>,
    early: u64,
    overloads: u64,
    served: u64,
    arrivals: u64,
}

impl HostState {
    fn start_waiting(&mut self) {
        while self.busy < self.workers {
            let Some(tx) = self.queue.pop_front() else {
                break;
            };
            if tx.send(()).is_ok() {
                self.busy += 1;
            }
        }
    }
}

/// A modelled host.
#[derive(Clone)]
struct HostServer(Arc<Mutex<HostState>>);

enum Admission {
    Now(Duration),
    Wait(oneshot::Receiver<()>),
    Reject(u64),
}

impl HostServer {
    fn new(model: Model, seed: u64, start: Instant) -> Self {
        let (workers, tokens) = match &model {
            Model::Queue { workers, .. } => (*workers, 0.0),
            Model::RateLimited { burst, .. } => (usize::MAX / 2, *burst),
        };
        HostServer(Arc::new(Mutex::new(HostState {
            model,
            workers,
            busy: 0,
            queue: VecDeque::new(),
            rng: Rng::new(seed),
            tokens,
            last_refill: start,
            retry_deadline: None,
            early: 0,
            overloads: 0,
            served: 0,
            arrivals: 0,
        })))
    }

    fn service_time(&self) -> Duration {
        let mut s = self.0.lock().unwrap();
        let s = &mut *s;
        match &s.model {
            Model::Queue { service, .. } => service.draw(&mut s.rng),
            Model::RateLimited { service, .. } => *service,
        }
    }

    async fn handle(self) -> Response<Empty<bytes::Bytes>> {
        let now = Instant::now();
        let admission = {
            let mut s = self.0.lock().unwrap();
            s.arrivals += 1;
            if s.retry_deadline.is_some_and(|d| now < d) {
                s.early += 1;
            }
            match s.model.clone() {
                Model::RateLimited { rate, burst, .. } => {
                    let elapsed = now.saturating_duration_since(s.last_refill).as_secs_f64();
                    s.tokens = (s.tokens + elapsed * rate).min(burst);
                    s.last_refill = now;
                    if s.tokens >= 1.0 {
                        s.tokens -= 1.0;
                        Admission::Now(Duration::ZERO)
                    } else {
                        let wait = ((1.0 - s.tokens) / rate).ceil().max(1.0) as u64;
                        s.overloads += 1;
                        let deadline = now + Duration::from_secs(wait);
                        s.retry_deadline =
                            Some(s.retry_deadline.map_or(deadline, |d| d.max(deadline)));
                        Admission::Reject(wait)
                    }
                }
                Model::Queue { .. } => {
                    if s.busy < s.workers && s.queue.is_empty() {
                        s.busy += 1;
                        Admission::Now(Duration::ZERO)
                    } else {
                        let (tx, rx) = oneshot::channel();
                        s.queue.push_back(tx);
                        Admission::Wait(rx)
                    }
                }
            }
        };
        match admission {
            Admission::Reject(wait) => {
                return Response::builder()
                    .status(StatusCode::TOO_MANY_REQUESTS)
                    .header("retry-after", wait.to_string())
                    .body(Empty::new())
                    .unwrap();
            }
            Admission::Wait(rx) => {
                let _ = rx.await;
            }
            Admission::Now(_) => {}
        }
        let service = self.service_time();
        tokio::time::sleep(service).await;
        {
            let mut s = self.0.lock().unwrap();
            s.served += 1;
            if matches!(s.model, Model::Queue { .. }) {
                s.busy -= 1;
                s.start_waiting();
            }
        }
        Response::new(Empty::new())
    }

    fn set_workers(&self, workers: usize) {
        let mut s = self.0.lock().unwrap();
        s.workers = workers;
        s.start_waiting();
    }

    fn queue_len(&self) -> usize {
        self.0.lock().unwrap().queue.len()
    }

    fn workers(&self) -> usize {
        self.0.lock().unwrap().workers
    }
}

/// One sample of a host's state, every `SAMPLE` of simulated time.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub t: f64,
    pub delay: f64,
    pub concurrency: f64,
    pub in_flight: f64,
    /// Mean latency of the responses in the last interval, if any.
    pub latency: Option<f64>,
    pub queue: f64,
    pub completed: u64,
}

/// What a run measured for one host.
#[derive(Clone, Debug, Default)]
pub struct HostResult {
    pub name: &'static str,
    pub requests: usize,
    pub makespan: f64,
    pub sent: u64,
    pub overloads: u64,
    pub early: u64,
    pub mean_queue: f64,
    pub p95_queue: f64,
    pub series: Vec<Point>,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub makespan: f64,
    pub hosts: Vec<HostResult>,
}

pub const SAMPLE: Duration = Duration::from_millis(50);

/// How requests are limited in a run.
#[derive(Clone)]
pub enum Client {
    /// Through the AutoThrottle layer with this policy.
    Throttle(Arc<dyn MakePolicy>),
    /// The oracle's client: a fixed number of requests in flight per host,
    /// no delay, retries right away.
    Fixed(usize),
}

/// Runs a scenario on a fresh paused-clock runtime.
pub fn run(scenario: &Scenario, client: &Client, seed: u64) -> RunResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    rt.block_on(run_async(scenario.clone(), client.clone(), seed))
}

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

async fn run_async(scenario: Scenario, client: Client, seed: u64) -> RunResult {
    let start = Instant::now();
    let servers: BTreeMap<String, HostServer> = scenario
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let key = format!("http://{}.sim", h.name);
            (
                key,
                HostServer::new(
                    h.model.clone(),
                    seed ^ (i as u64 + 1).wrapping_mul(0x5851_F42D_4C95_7F2D),
                    start,
                ),
            )
        })
        .collect();
    let servers = Arc::new(servers);

    // Capacity changes.
    for (i, h) in scenario.hosts.iter().enumerate() {
        if let Model::Queue { changes, .. } = &h.model {
            let server = servers[&format!("http://{}.sim", h.name)].clone();
            for &(at, workers) in changes {
                let server = server.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + at).await;
                    server.set_workers(workers);
                });
            }
            let _ = i;
        }
    }

    // Per host: completions and latencies, for the series.
    #[derive(Default)]
    struct Tally {
        completed: u64,
        sent: u64,
        overloads: u64,
        latency_sum: f64,
        latency_n: u64,
        done_at: Option<Instant>,
    }
    let tallies: Arc<Mutex<BTreeMap<String, Tally>>> = Arc::new(Mutex::new(
        servers
            .keys()
            .map(|k| (k.clone(), Tally::default()))
            .collect(),
    ));

    // The server as the client sees it; it also records each latency.
    let inner = {
        let servers = Arc::clone(&servers);
        let tallies = Arc::clone(&tallies);
        tower::service_fn(move |req: Request<()>| {
            let key = format!("http://{}", req.uri().authority().unwrap());
            let server = servers[&key].clone();
            let tallies = Arc::clone(&tallies);
            async move {
                let sent = Instant::now();
                let response = server.handle().await;
                let latency = (Instant::now() - sent).as_secs_f64();
                let mut t = tallies.lock().unwrap();
                let tally = t.get_mut(&key).unwrap();
                tally.latency_sum += latency;
                tally.latency_n += 1;
                Ok::<_, Infallible>(response)
            }
        })
    };

    let layer = match &client {
        Client::Throttle(policy) => Some(AutoThrottleLayer::new(
            Config::builder()
                .policy(Arc::clone(policy))
                .build()
                .expect("valid policy"),
        )),
        Client::Fixed(_) => None,
    };

    let mut tasks = Vec::new();
    for h in &scenario.hosts {
        let key = format!("http://{}.sim", h.name);
        let fixed = match &client {
            Client::Fixed(k) => Some((
                Arc::new(tokio::sync::Semaphore::new(*k)),
                Arc::new(Mutex::new(None::<Instant>)),
            )),
            Client::Throttle(_) => None,
        };
        for _ in 0..h.requests {
            let tallies = Arc::clone(&tallies);
            let key = key.clone();
            let fixed = fixed.clone();
            let layer = layer.clone();
            let inner = inner.clone();
            let fut: BoxFut<()> = Box::pin(async move {
                loop {
                    let req = Request::get(format!("{key}/page")).body(()).unwrap();
                    let status = match (&layer, &fixed) {
                        (Some(layer), _) => {
                            let svc = tower::Layer::layer(layer, inner.clone());
                            let resp = svc
                                .oneshot(req)
                                .await
                                .expect("the simulated server never fails");
                            resp.status()
                        }
                        (None, Some((sem, paused))) => {
                            // The oracle's client honours Retry-After for
                            // the whole host, as a careful crawler would.
                            loop {
                                let until = *paused.lock().unwrap();
                                match until {
                                    Some(t) if t > Instant::now() => {
                                        tokio::time::sleep_until(t).await
                                    }
                                    _ => break,
                                }
                            }
                            let permit = sem.acquire().await.unwrap();
                            let resp = inner.clone().oneshot(req).await.unwrap();
                            drop(permit);
                            let wait = resp
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                            if let Some(wait) = wait {
                                let until = Instant::now() + Duration::from_secs(wait);
                                let mut p = paused.lock().unwrap();
                                *p = Some(p.map_or(until, |u| u.max(until)));
                            }
                            resp.status()
                        }
                        _ => unreachable!(),
                    };
                    let now = Instant::now();
                    let mut t = tallies.lock().unwrap();
                    let tally = t.get_mut(&key).unwrap();
                    tally.sent += 1;
                    if status == StatusCode::TOO_MANY_REQUESTS
                        || status == StatusCode::SERVICE_UNAVAILABLE
                    {
                        tally.overloads += 1;
                        continue;
                    }
                    tally.completed += 1;
                    tally.done_at = Some(now);
                    break;
                }
            });
            tasks.push(tokio::spawn(fut));
        }
    }

    // The sampler.
    let total: u64 = scenario.hosts.iter().map(|h| h.requests as u64).sum();
    let mut series: BTreeMap<String, Vec<Point>> =
        servers.keys().map(|k| (k.clone(), Vec::new())).collect();
    let mut interval = tokio::time::interval_at(start + SAMPLE, SAMPLE);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_latency: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    loop {
        interval.tick().await;
        let t = (Instant::now() - start).as_secs_f64();
        let snaps: BTreeMap<String, SlotSnapshot> = layer
            .as_ref()
            .map(|l| {
                l.slots()
                    .into_iter()
                    .map(|s| (s.key.to_string(), s))
                    .collect()
            })
            .unwrap_or_default();
        let done = {
            let tallies = tallies.lock().unwrap();
            for (key, server) in servers.iter() {
                let tally = &tallies[key];
                let prev = last_latency.entry(key.clone()).or_insert((0.0, 0));
                let latency = (tally.latency_n > prev.1)
                    .then(|| (tally.latency_sum - prev.0) / (tally.latency_n - prev.1) as f64);
                *prev = (tally.latency_sum, tally.latency_n);
                let (delay, concurrency, in_flight) = match (snaps.get(key), &client) {
                    (Some(s), _) => (
                        s.delay.as_secs_f64(),
                        s.concurrency as f64,
                        s.in_flight as f64,
                    ),
                    (None, Client::Fixed(k)) => (0.0, *k as f64, 0.0),
                    (None, _) => (0.0, 0.0, 0.0),
                };
                series.get_mut(key).unwrap().push(Point {
                    t,
                    delay,
                    concurrency,
                    in_flight,
                    latency,
                    queue: server.queue_len() as f64,
                    completed: tally.completed,
                });
            }
            tallies.values().map(|t| t.completed).sum::<u64>() >= total
        };
        if done || t > 3600.0 {
            break;
        }
    }
    for t in tasks {
        t.abort();
    }

    let tallies = tallies.lock().unwrap();
    let mut hosts = Vec::new();
    for h in &scenario.hosts {
        let key = format!("http://{}.sim", h.name);
        let tally = &tallies[&key];
        let server = servers[&key].0.lock().unwrap();
        let points = &series[&key];
        let makespan = tally
            .done_at
            .map_or(f64::INFINITY, |d| (d - start).as_secs_f64());
        // Queue statistics while the host still had work.
        let active: Vec<f64> = points
            .iter()
            .filter(|p| p.t <= makespan + 1e-9)
            .map(|p| p.queue)
            .collect();
        let mean_queue = if active.is_empty() {
            0.0
        } else {
            active.iter().sum::<f64>() / active.len() as f64
        };
        let mut sorted = active.clone();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let p95_queue = if sorted.is_empty() {
            0.0
        } else {
            sorted[((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len()) - 1]
        };
        hosts.push(HostResult {
            name: h.name,
            requests: h.requests,
            makespan,
            sent: tally.sent,
            overloads: server.overloads.max(tally.overloads),
            early: server.early,
            mean_queue,
            p95_queue,
            series: points.clone(),
        });
    }
    let makespan = hosts.iter().map(|h| h.makespan).fold(0.0, f64::max);
    RunResult { makespan, hosts }
}

/// For rate-limited hosts, the makespan of a client that sends exactly at
/// the allowed rate (after spending the burst).
pub fn ideal(scenario: &Scenario) -> Option<f64> {
    scenario
        .hosts
        .iter()
        .filter_map(|h| match h.model {
            Model::RateLimited {
                rate,
                burst,
                service,
            } => Some((h.requests as f64 - burst).max(0.0) / rate + service.as_secs_f64()),
            Model::Queue { .. } => None,
        })
        .reduce(f64::max)
}

/// The concurrencies the oracle tries.
pub const SWEEP: [usize; 14] = [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64];

/// The oracle: for each host alone, the best fixed concurrency; the
/// scenario's oracle makespan is the slowest host's best.
pub fn oracle(scenario: &Scenario, seed: u64) -> (f64, Vec<(&'static str, usize, f64)>) {
    let mut per_host = Vec::new();
    for host in &scenario.hosts {
        let alone = Scenario {
            name: scenario.name,
            about: scenario.about,
            hosts: vec![host.clone()],
        };
        let best = SWEEP
            .iter()
            .map(|&k| (k, run(&alone, &Client::Fixed(k), seed).makespan))
            .fold(
                (0, f64::INFINITY),
                |best, x| if x.1 < best.1 { x } else { best },
            );
        per_host.push((host.name, best.0, best.1));
    }
    let makespan = per_host.iter().map(|h| h.2).fold(0.0, f64::max);
    (makespan, per_host)
}

/// A wider grid of queue servers, for checking that a policy holds up
/// beyond the scoreboard's scenarios: every combination of workers, service
/// time and noise, each sized to about 30 s at full speed.
pub fn wide_scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    for workers in [1usize, 3, 8, 24] {
        for base_ms in [10u64, 100, 1000] {
            let noises: [(&'static str, ServiceTime); 4] = [
                (
                    "u10",
                    ServiceTime::Uniform {
                        base: Duration::from_millis(base_ms),
                        spread: 0.1,
                    },
                ),
                (
                    "u50",
                    ServiceTime::Uniform {
                        base: Duration::from_millis(base_ms),
                        spread: 0.5,
                    },
                ),
                (
                    "p2.5",
                    ServiceTime::Pareto {
                        base: Duration::from_millis(base_ms),
                        alpha: 2.5,
                    },
                ),
                (
                    "p1.5",
                    ServiceTime::Pareto {
                        base: Duration::from_millis(base_ms),
                        alpha: 1.5,
                    },
                ),
            ];
            for (noise, service) in noises {
                let rate = workers as f64 * 1000.0 / base_ms as f64;
                let requests = ((rate * 30.0) as usize).clamp(100, 6000);
                let name: &'static str =
                    Box::leak(format!("w{workers}-{base_ms}ms-{noise}").into_boxed_str());
                out.push(Scenario {
                    name,
                    about: "wide grid",
                    hosts: vec![Host {
                        name,
                        model: Model::Queue {
                            workers,
                            service,
                            changes: vec![],
                        },
                        requests,
                    }],
                });
            }
        }
    }
    out
}
