//! A deterministic simulator: modelled servers driven through the real
//! `AutoThrottleLayer` on tokio's paused clock, with seeded randomness.
//!
//! Shared by `examples/simulate` and the tests (`tests/simulator.rs`).
//!
//! A server ([`Model`]) is either a FIFO queue in front of a number of
//! workers (with service times of several shapes, changes of capacity and
//! latency at given times, random 503s that do not depend on load, and 503s
//! beyond a bounded queue, which do), or a token-bucket rate limit answering
//! 429 + `Retry-After` (optionally to everything during a storm at the
//! start). Each host draws from its own seeded generators (from the seed
//! and its index in its scenario): one for service times, in the order the
//! workers take requests, one for random errors, in the order requests
//! arrive; the oracle's run of a host alone sees the same draws.
//!
//! Measured per host ([`HostResult`]): the makespan, the server queue's
//! exact time average (integrated at every change of the queue, not
//! sampled), per regime and per 50-ms sample too, the answers that load
//! caused and those it did not, requests that arrived before a
//! `Retry-After` deadline the server had sent, and the settle time after
//! each change ([`settle`]).
//!
//! The oracle ([`oracle_host`]) is, per host alone, the fastest *polite*
//! client among fixed concurrencies (one per regime for a host that
//! changes, a fixed start rate too for a rate limit): mean server queue at
//! most 1, nothing sent before a `Retry-After` deadline, load-caused
//! overload answers under 2 % (the goals a policy is held to). It tries the
//! powers of two up to [`SWEEP_MAX`] (1 024), then searches between the
//! best polite power and the next.
//!
//! Both clients retry a 429/503 at once, [`RETRY_GAP`] (1 ms) after it; a
//! run stops after [`MAX_TIME`] of simulated time or once its clients sent
//! [`SENT_PER_PAGE`] requests per page plus [`SENT_SLACK`], so every run
//! ends, whatever the policy. The cost is O(1) per request and O(hosts) per
//! 50-ms sample: about 3 µs per request through the layer, with 4 000
//! requests in flight as with 8.
#![allow(dead_code)]

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// How long one request takes to serve, once a worker takes it (before the
/// host's latency scale, see [`Change::Latency`]).
#[derive(Clone, Copy, Debug)]
pub enum ServiceTime {
    /// `base × U(1 − spread, 1 + spread)`.
    Uniform { base: Duration, spread: f64 },
    /// `base × X`, X Pareto with shape `alpha` scaled to mean 1: heavy tails
    /// (cut at 50).
    Pareto { base: Duration, alpha: f64 },
    /// `mean × X`, X log-normal with parameter `sigma`, scaled to mean 1
    /// (cut at 50).
    LogNormal { mean: Duration, sigma: f64 },
    /// `slow` with probability `p_slow`, else `fast`: a mixture of two
    /// kinds of pages.
    Bimodal {
        fast: Duration,
        slow: Duration,
        p_slow: f64,
    },
}

impl ServiceTime {
    /// One draw, in seconds.
    fn draw(&self, rng: &mut Rng) -> f64 {
        match *self {
            ServiceTime::Uniform { base, spread } => {
                base.as_secs_f64() * (1.0 + spread * (2.0 * rng.open_unit() - 1.0))
            }
            ServiceTime::Pareto { base, alpha } => {
                // x_m chosen so that the mean alpha*x_m/(alpha-1) is 1.
                let xm = (alpha - 1.0) / alpha;
                let x = xm / rng.open_unit().powf(1.0 / alpha);
                base.as_secs_f64() * x.min(50.0)
            }
            ServiceTime::LogNormal { mean, sigma } => {
                // Box–Muller; mu = −sigma²/2 makes the mean 1.
                let (u1, u2) = (rng.open_unit(), rng.open_unit());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let x = (sigma * z - sigma * sigma / 2.0).exp();
                mean.as_secs_f64() * x.min(50.0)
            }
            ServiceTime::Bimodal { fast, slow, p_slow } => {
                if rng.unit() < p_slow {
                    slow.as_secs_f64()
                } else {
                    fast.as_secs_f64()
                }
            }
        }
    }

    /// The mean service time, in seconds (the cut of the heavy tails
    /// ignored).
    pub fn mean(&self) -> f64 {
        match *self {
            ServiceTime::Uniform { base, .. } | ServiceTime::Pareto { base, .. } => {
                base.as_secs_f64()
            }
            ServiceTime::LogNormal { mean, .. } => mean.as_secs_f64(),
            ServiceTime::Bimodal { fast, slow, p_slow } => {
                p_slow * slow.as_secs_f64() + (1.0 - p_slow) * fast.as_secs_f64()
            }
        }
    }
}

/// A change of a queue server at a given time.
#[derive(Clone, Copy, Debug)]
pub enum Change {
    /// The number of workers becomes this (requests already being served
    /// finish).
    Workers(usize),
    /// The latency scale is multiplied by this: service times drawn from
    /// then on are this much longer (×10) or shorter (×0.1).
    Latency(f64),
}

/// What a host does with requests.
#[derive(Clone, Debug)]
pub enum Model {
    /// `workers` requests are served at once, the rest wait in a FIFO queue.
    /// The number of workers or the latency may change at given times.
    /// `random_errors`: the share of arrivals answered 503 at once whatever
    /// the load (not an overload). `max_queue`: a request that would wait
    /// behind this many is answered 503 at once (an overload: load causes
    /// it). Neither 503 carries `Retry-After`.
    Queue {
        workers: usize,
        service: ServiceTime,
        changes: Vec<(Duration, Change)>,
        max_queue: Option<usize>,
        random_errors: f64,
    },
    /// A token bucket of `rate` per second and `burst`: a request without a
    /// token is answered 429 at once, with `Retry-After` (whole seconds
    /// until a token is there, at least 1); the others are served in
    /// `service`, with no limit on concurrency. Before `storm_until`, every
    /// request is answered 429 + `Retry-After: 1` (a storm that load did
    /// not cause) and takes no token. Without `retry_after`, a request
    /// without a token is answered 503 with no header instead (nginx's
    /// `limit_req` with `nodelay`, its stock status).
    RateLimited {
        rate: f64,
        burst: f64,
        service: ServiceTime,
        storm_until: Option<Duration>,
        retry_after: bool,
    },
}

impl Model {
    /// A steady FIFO queue server.
    pub fn queue(workers: usize, service: ServiceTime) -> Model {
        Model::Queue {
            workers,
            service,
            changes: Vec::new(),
            max_queue: None,
            random_errors: 0.0,
        }
    }

    /// A token-bucket rate limit, without a storm.
    pub fn rate_limited(rate: f64, burst: f64, service: ServiceTime) -> Model {
        Model::RateLimited {
            rate,
            burst,
            service,
            storm_until: None,
            retry_after: true,
        }
    }

    /// A rate limit that answers 503 without `Retry-After` beyond it.
    pub fn without_retry_after(mut self) -> Model {
        if let Model::RateLimited { retry_after, .. } = &mut self {
            *retry_after = false;
        }
        self
    }

    pub fn with_changes(mut self, new: Vec<(Duration, Change)>) -> Model {
        if let Model::Queue { changes, .. } = &mut self {
            *changes = new;
        }
        self
    }

    pub fn with_max_queue(mut self, n: usize) -> Model {
        if let Model::Queue { max_queue, .. } = &mut self {
            *max_queue = Some(n);
        }
        self
    }

    pub fn with_random_errors(mut self, p: f64) -> Model {
        if let Model::Queue { random_errors, .. } = &mut self {
            *random_errors = p;
        }
        self
    }

    pub fn with_storm(mut self, until: Duration) -> Model {
        if let Model::RateLimited { storm_until, .. } = &mut self {
            *storm_until = Some(until);
        }
        self
    }

    /// The times (s from the start) of the changes of capacity or latency.
    pub fn change_times(&self) -> Vec<f64> {
        match self {
            Model::Queue { changes, .. } => changes.iter().map(|c| c.0.as_secs_f64()).collect(),
            Model::RateLimited { .. } => Vec::new(),
        }
    }

    /// The share of requests answered 503 whatever the load.
    pub fn random_errors(&self) -> f64 {
        match self {
            Model::Queue { random_errors, .. } => *random_errors,
            Model::RateLimited { .. } => 0.0,
        }
    }

    /// Whether load can cause overload answers (a rate limit, a bounded
    /// queue).
    pub fn load_errors(&self) -> bool {
        match self {
            Model::Queue { max_queue, .. } => max_queue.is_some(),
            Model::RateLimited { .. } => true,
        }
    }

    /// The storm's end, if any.
    pub fn storm(&self) -> Option<Duration> {
        match self {
            Model::RateLimited { storm_until, .. } => *storm_until,
            Model::Queue { .. } => None,
        }
    }
}

/// One host of a scenario.
#[derive(Clone, Debug)]
pub struct Host {
    /// Unique in its scenario; it also seeds the host's randomness.
    pub name: &'static str,
    pub model: Model,
    pub requests: usize,
    /// `None`: one task per request, all spawned at the start (every
    /// request waits in the client at once). `Some(n)`: a crawler pool of
    /// `n` tasks taking the host's requests one after another (the oracle's
    /// client uses at least its concurrency).
    pub tasks: Option<usize>,
    /// The host's random streams: those of this index in a scenario
    /// (`None`: its own index). The oracle runs a host alone with its
    /// index in its scenario, so that it sees the same draws.
    pub stream: Option<usize>,
}

impl Host {
    /// One task per request.
    pub fn new(name: &'static str, model: Model, requests: usize) -> Host {
        Host {
            name,
            model,
            requests,
            tasks: None,
            stream: None,
        }
    }

    /// A pool of `tasks` tasks.
    pub fn pool(mut self, tasks: usize) -> Host {
        self.tasks = Some(tasks);
        self
    }
}

/// A scenario: hosts crawled at once.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub hosts: Vec<Host>,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn uniform(base_ms: u64) -> ServiceTime {
    ServiceTime::Uniform {
        base: ms(base_ms),
        spread: 0.1,
    }
}

fn single(name: &'static str, about: &'static str, model: Model, requests: usize) -> Scenario {
    Scenario {
        name,
        about,
        hosts: vec![Host::new(name, model, requests)],
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The scenarios of the scoreboard.
///
/// Sizes: every host runs for tens of its round trips at least, and long
/// enough that a ramp of about 10 round trips costs under 10 % of the
/// oracle's time and that a change is followed by at least 10 s of the new
/// regime (see each scenario).
pub fn scenarios() -> Vec<Scenario> {
    vec![
        single(
            "fixed",
            "8 workers, 100 ms ± 10 %, FIFO queue",
            Model::queue(8, uniform(100)),
            2000,
        ),
        single(
            "drop",
            "16 workers, 50 ms; 4 workers from 10 s to 25 s",
            Model::queue(16, uniform(50)).with_changes(vec![
                (secs(10), Change::Workers(4)),
                (secs(25), Change::Workers(16)),
            ]),
            6000,
        ),
        single(
            "heavy-tail",
            "8 workers, 100 ms mean, Pareto(1.5) service times",
            Model::queue(
                8,
                ServiceTime::Pareto {
                    base: ms(100),
                    alpha: 1.5,
                },
            ),
            2000,
        ),
        single(
            "rate-limited",
            "20 requests/s (burst 5), 429 + Retry-After beyond",
            Model::rate_limited(
                20.0,
                5.0,
                ServiceTime::Uniform {
                    base: ms(20),
                    spread: 0.0,
                },
            ),
            1000,
        ),
        single(
            "limit-req",
            "20 requests/s (burst 5), 503 without Retry-After beyond (nginx's limit_req, nodelay)",
            Model::rate_limited(
                20.0,
                5.0,
                ServiceTime::Uniform {
                    base: ms(20),
                    spread: 0.0,
                },
            )
            .without_retry_after(),
            1000,
        ),
        single(
            "limit-req-fast",
            "20 requests/s (burst 5), 503 without Retry-After beyond, 1.5 ms ± 50 % (nginx's limit_req before a static file)",
            Model::rate_limited(
                20.0,
                5.0,
                ServiceTime::Uniform {
                    base: Duration::from_micros(1500),
                    spread: 0.5,
                },
            )
            .without_retry_after(),
            1000,
        ),
        single(
            "limit-req-stock",
            "20 requests/s, no burst, 503 beyond, 1.5 ms ± 50 % (nginx's limit_req as it comes: a bucket of one token)",
            Model::rate_limited(
                20.0,
                1.0,
                ServiceTime::Uniform {
                    base: Duration::from_micros(1500),
                    spread: 0.5,
                },
            )
            .without_retry_after(),
            1000,
        ),
        single(
            "limit-conn",
            "8 workers, 50 ms ± 10 %; 503 beyond 8 in service (nginx's limit_conn)",
            Model::queue(8, uniform(50)).with_max_queue(0),
            4800,
        ),
        Scenario {
            name: "multi-host",
            about: "4 hosts: 1×200 ms, 4×80 ms, 16×40 ms, 32×100 ms workers",
            hosts: vec![
                Host::new("tiny", Model::queue(1, uniform(200)), 100),
                Host::new("small", Model::queue(4, uniform(80)), 500),
                Host::new("medium", Model::queue(16, uniform(40)), 4000),
                Host::new("large", Model::queue(32, uniform(100)), 3000),
            ],
        },
        Scenario {
            name: "slow-huge",
            about: "unbounded workers, 1 s ± 10 % whatever the load; 100 000 requests, 4 096 tasks",
            hosts: vec![Host::new(
                "slow-huge",
                Model::queue(usize::MAX / 2, uniform(1000)),
                100_000,
            )
            .pool(4096)],
        },
        single(
            "lognormal",
            "8 workers, 100 ms mean, log-normal(σ 0.8) service times",
            Model::queue(
                8,
                ServiceTime::LogNormal {
                    mean: ms(100),
                    sigma: 0.8,
                },
            ),
            3000,
        ),
        single(
            "bimodal",
            "8 workers, 90 % 50 ms / 10 % 500 ms (95 ms mean)",
            Model::queue(
                8,
                ServiceTime::Bimodal {
                    fast: ms(50),
                    slow: ms(500),
                    p_slow: 0.1,
                },
            ),
            3000,
        ),
        single(
            "drift-up",
            "8 workers, 100 ms ± 10 %; latency ×10 at 10 s",
            Model::queue(8, uniform(100)).with_changes(vec![(secs(10), Change::Latency(10.0))]),
            1040,
        ),
        single(
            "drift-down",
            "8 workers, 1 s ± 10 %; latency ÷10 at 20 s",
            Model::queue(8, uniform(1000)).with_changes(vec![(secs(20), Change::Latency(0.1))]),
            1760,
        ),
        single(
            "errors-2",
            "32 workers, 100 ms ± 10 %; 2 % of requests answered 503 at once, whatever the load",
            Model::queue(32, uniform(100)).with_random_errors(0.02),
            10_000,
        ),
        single(
            "errors-0.5",
            "32 workers, 100 ms ± 10 %; 0.5 % of requests answered 503 at once, whatever the load",
            Model::queue(32, uniform(100)).with_random_errors(0.005),
            10_000,
        ),
        single(
            "queue-503",
            "16 workers, 50 ms ± 10 %; 503 beyond a queue of 4",
            Model::queue(16, uniform(50)).with_max_queue(4),
            9600,
        ),
        single(
            "storm",
            "429 + Retry-After: 1 to everything until 1.5 s, then 400 requests/s (burst 20), 429 + Retry-After beyond; 20 ms ± 10 %",
            Model::rate_limited(400.0, 20.0, uniform(20)).with_storm(ms(1500)),
            4000,
        ),
        Scenario {
            name: "huge",
            about: "1 000 workers, 400 ms ± 10 %; 500 000 requests, 4 096 tasks",
            hosts: vec![Host::new("huge", Model::queue(1000, uniform(400)), 500_000).pool(4096)],
        },
        Scenario {
            name: "bdp",
            about: "256 workers, 1 s ± 10 % (a large bandwidth-delay product); 40 000 requests, 4 096 tasks",
            hosts: vec![Host::new("bdp", Model::queue(256, uniform(1000)), 40_000).pool(4096)],
        },
        Scenario {
            name: "tiny-400",
            about: "400 hosts of 1 worker, 200 ms ± 10 %, 25 requests each, one task per request",
            hosts: (0..400)
                .map(|i| Host::new(leak(format!("t{i:03}")), Model::queue(1, uniform(200)), 25))
                .collect(),
        },
        Scenario {
            name: "three-hosts",
            about: "2 workers × 500 ms, 32 × 10 ms, 8 × 50 ms; one task per request",
            hosts: vec![
                Host::new("w2-500ms", Model::queue(2, uniform(500)), 120),
                Host::new("w32-10ms", Model::queue(32, uniform(10)), 32_000),
                Host::new("w8-50ms", Model::queue(8, uniform(50)), 4800),
            ],
        },
        Scenario {
            name: "drop-large",
            about: "256 workers, 100 ms ± 10 %; 64 workers from 10 s to 25 s; 1 024 tasks",
            hosts: vec![Host::new(
                "drop-large",
                Model::queue(256, uniform(100)).with_changes(vec![
                    (secs(10), Change::Workers(64)),
                    (secs(25), Change::Workers(256)),
                ]),
                60_000,
            )
            .pool(1024)],
        },
    ]
}

/// The server side of one host: its queue, workers and records.
struct HostState {
    model: Model,
    workers: usize,
    busy: usize,
    queue: VecDeque<oneshot::Sender<()>>,
    /// The latency scale (changed by [`Change::Latency`]).
    scale: f64,
    /// Service times, in the order the workers take requests.
    rng: Rng,
    /// Random errors, in the order requests arrive.
    errors_rng: Rng,
    tokens: f64,
    last_refill: Instant,
    storm_end: Option<Instant>,
    /// No request should arrive before this (the last Retry-After sent).
    retry_deadline: Option<Instant>,
    early: u64,
    /// Answers caused by load (beyond the rate limit or the queue bound).
    load_overloads: u64,
    /// 429/503 answers that load did not cause (random 503s, the storm).
    other_errors: u64,
    served: u64,
    arrivals: u64,
    /// The integral of the queue length over time (request·s), up to
    /// `area_at`.
    area: f64,
    area_at: Instant,
    /// The integral at each change, in order.
    marks: Vec<f64>,
}

impl HostState {
    /// Brings the queue's integral up to `now` (before the queue changes).
    fn touch(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.area_at).as_secs_f64();
        self.area += self.queue.len() as f64 * dt;
        self.area_at = now;
    }

    fn area_now(&self, now: Instant) -> f64 {
        self.area
            + self.queue.len() as f64 * now.saturating_duration_since(self.area_at).as_secs_f64()
    }

    fn start_waiting(&mut self, now: Instant) {
        self.touch(now);
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
    Now,
    Wait(oneshot::Receiver<()>),
    Reject(StatusCode, Option<u64>),
}

/// The seed of a host's randomness: the run's seed and the host's index
/// in its scenario (see [`Host::stream`]).
fn host_seed(seed: u64, index: usize) -> u64 {
    seed ^ (index as u64 + 1).wrapping_mul(0x5851_F42D_4C95_7F2D)
}

impl HostServer {
    fn new(model: Model, seed: u64, start: Instant) -> Self {
        let (workers, tokens) = match &model {
            Model::Queue { workers, .. } => (*workers, 0.0),
            Model::RateLimited { burst, .. } => (usize::MAX / 2, *burst),
        };
        let storm_end = model.storm().map(|d| start + d);
        let mut errors_rng = Rng::new(seed ^ 0x2545_F491_4F6C_DD1D);
        errors_rng.next_u64();
        HostServer(Arc::new(Mutex::new(HostState {
            model,
            workers,
            busy: 0,
            queue: VecDeque::new(),
            scale: 1.0,
            rng: Rng::new(seed),
            errors_rng,
            tokens,
            last_refill: start,
            storm_end,
            retry_deadline: None,
            early: 0,
            load_overloads: 0,
            other_errors: 0,
            served: 0,
            arrivals: 0,
            area: 0.0,
            area_at: start,
            marks: Vec::new(),
        })))
    }

    fn service_time(&self) -> Duration {
        let mut s = self.0.lock().unwrap();
        let s = &mut *s;
        match &s.model {
            Model::Queue { service, .. } | Model::RateLimited { service, .. } => {
                Duration::from_secs_f64((service.draw(&mut s.rng) * s.scale).max(0.0))
            }
        }
    }

    async fn handle(self) -> Response<Empty<bytes::Bytes>> {
        let now = Instant::now();
        let admission = {
            let mut guard = self.0.lock().unwrap();
            let s = &mut *guard;
            s.arrivals += 1;
            // Early: the server had sent a Retry-After deadline (to a
            // request answered before this one was sent) and it has not
            // passed.
            if s.retry_deadline.is_some_and(|d| now < d) {
                s.early += 1;
            }
            let pause = |s: &mut HostState, wait: u64| {
                let deadline = now + Duration::from_secs(wait);
                s.retry_deadline = Some(s.retry_deadline.map_or(deadline, |d| d.max(deadline)));
                Admission::Reject(StatusCode::TOO_MANY_REQUESTS, Some(wait))
            };
            match s.model.clone() {
                Model::RateLimited {
                    rate,
                    burst,
                    retry_after,
                    ..
                } => {
                    if s.storm_end.is_some_and(|end| now < end) {
                        s.other_errors += 1;
                        pause(s, 1)
                    } else {
                        let elapsed = now.saturating_duration_since(s.last_refill).as_secs_f64();
                        s.tokens = (s.tokens + elapsed * rate).min(burst);
                        s.last_refill = now;
                        if s.tokens >= 1.0 {
                            s.tokens -= 1.0;
                            Admission::Now
                        } else if retry_after {
                            let wait = ((1.0 - s.tokens) / rate).ceil().max(1.0) as u64;
                            s.load_overloads += 1;
                            pause(s, wait)
                        } else {
                            s.load_overloads += 1;
                            Admission::Reject(StatusCode::SERVICE_UNAVAILABLE, None)
                        }
                    }
                }
                Model::Queue {
                    max_queue,
                    random_errors,
                    ..
                } => {
                    // Drawn for every arrival, so the n-th arrival's fate
                    // does not depend on the client.
                    let unlucky = random_errors > 0.0 && s.errors_rng.unit() < random_errors;
                    if unlucky {
                        s.other_errors += 1;
                        Admission::Reject(StatusCode::SERVICE_UNAVAILABLE, None)
                    } else if s.busy < s.workers && s.queue.is_empty() {
                        s.busy += 1;
                        Admission::Now
                    } else if max_queue.is_some_and(|m| s.queue.len() >= m) {
                        s.load_overloads += 1;
                        Admission::Reject(StatusCode::SERVICE_UNAVAILABLE, None)
                    } else {
                        let (tx, rx) = oneshot::channel();
                        s.touch(now);
                        s.queue.push_back(tx);
                        Admission::Wait(rx)
                    }
                }
            }
        };
        match admission {
            Admission::Reject(status, wait) => {
                let mut response = Response::builder().status(status);
                if let Some(wait) = wait {
                    response = response.header("retry-after", wait.to_string());
                }
                return response.body(Empty::new()).unwrap();
            }
            Admission::Wait(rx) => {
                let _ = rx.await;
            }
            Admission::Now => {}
        }
        let service = self.service_time();
        tokio::time::sleep(service).await;
        {
            let mut s = self.0.lock().unwrap();
            s.served += 1;
            if matches!(s.model, Model::Queue { .. }) {
                s.busy -= 1;
                s.start_waiting(Instant::now());
            }
        }
        Response::new(Empty::new())
    }

    fn change(&self, change: Change) {
        let mut s = self.0.lock().unwrap();
        let now = Instant::now();
        let mark = s.area_now(now);
        s.marks.push(mark);
        match change {
            Change::Workers(workers) => {
                s.workers = workers;
                s.start_waiting(Instant::now());
            }
            Change::Latency(factor) => s.scale *= factor,
        }
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
    /// The server queue at the sample.
    pub queue: f64,
    /// The server queue's time average over the interval since the last
    /// sample.
    pub queue_avg: f64,
    pub completed: u64,
    /// Requests sent so far, refused ones included.
    pub sent: u64,
}

/// What a run measured for one host.
#[derive(Clone, Debug, Default)]
pub struct HostResult {
    pub name: &'static str,
    pub requests: usize,
    /// Until the host's last page was fetched (infinite if it was not
    /// within [`MAX_TIME`]).
    pub makespan: f64,
    /// Requests sent, retries included.
    pub sent: u64,
    /// All 429/503 answers.
    pub overloads: u64,
    /// The 429/503 answers that load caused (beyond a rate limit or a
    /// queue bound).
    pub load_overloads: u64,
    /// The 429/503 answers that load did not cause (random 503s, a storm).
    pub other_errors: u64,
    /// Requests that reached the server before a `Retry-After` deadline it
    /// had sent.
    pub early: u64,
    /// The server queue's time average until the makespan.
    pub mean_queue: f64,
    /// The 95th percentile of the queue samples until the makespan.
    pub p95_queue: f64,
    /// The server queue's time average in each regime (from the start or a
    /// change to the next change or the makespan) that began before the
    /// makespan.
    pub regime_queues: Vec<f64>,
    /// Per change of capacity or latency: its time, and how long after it
    /// the host settled (see [`settle`]); `None`: never before the next
    /// change or the end.
    pub settle: Vec<(f64, Option<f64>)>,
    pub series: Vec<Point>,
}

impl HostResult {
    /// The load-caused overload answers' share of the requests the load
    /// rule judged (those not answered by a random error or a storm).
    pub fn load_share(&self) -> f64 {
        let judged = self.sent.saturating_sub(self.other_errors);
        if judged == 0 {
            0.0
        } else {
            self.load_overloads as f64 / judged as f64
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub makespan: f64,
    pub hosts: Vec<HostResult>,
}

pub const SAMPLE: Duration = Duration::from_millis(50);

/// Both clients retry a 429/503 this long after its answer, at the
/// earliest (the crawler's own scheduling; the throttle may wait longer).
pub const RETRY_GAP: Duration = Duration::from_millis(1);

/// A run stops once its clients have sent this many requests per page plus
/// [`SENT_SLACK`] (a client retrying errors as fast as it can): unfinished
/// hosts get an infinite makespan.
pub const SENT_PER_PAGE: u64 = 10;
pub const SENT_SLACK: u64 = 10_000;

/// A run stops after this much simulated time (s); unfinished hosts get an
/// infinite makespan.
pub const MAX_TIME: f64 = 3600.0;

/// How requests are limited in a run.
#[derive(Clone)]
pub enum Client {
    /// Through the AutoThrottle layer with this policy.
    Throttle(Arc<dyn MakePolicy>),
    /// The oracle's client: a fixed number of requests in flight per host,
    /// no delay, errors retried right away, and `Retry-After` honoured for
    /// the whole host (checked again after a place is free, just before
    /// sending).
    Fixed(usize),
    /// As `Fixed`, with one concurrency per regime of a host that changes:
    /// `k[0]` from the start, `k[i]` from its `i`-th change on (the last
    /// one if there are fewer).
    Schedule(Vec<usize>),
    /// The oracle's client for rate limits: requests started at this rate
    /// (per second, start to start), with no limit on concurrency, errors
    /// retried, `Retry-After` honoured as by `Fixed`.
    Paced(f64),
}

/// The oracle's client for one host: a limit on requests in flight (or a
/// start rate), and the host's pause.
struct OracleGate {
    /// `None`: a limit; `Some(d)`: starts spaced by `d`.
    spacing: Option<Duration>,
    state: Mutex<GateState>,
    notify: tokio::sync::Notify,
}

struct GateState {
    limit: usize,
    in_flight: usize,
    next: Instant,
    paused: Option<Instant>,
}

impl OracleGate {
    fn new(limit: usize, spacing: Option<Duration>, start: Instant) -> Self {
        OracleGate {
            spacing,
            state: Mutex::new(GateState {
                limit,
                in_flight: 0,
                next: start,
                paused: None,
            }),
            notify: tokio::sync::Notify::new(),
        }
    }

    fn paused_until(&self, now: Instant) -> Option<Instant> {
        self.state.lock().unwrap().paused.filter(|t| *t > now)
    }

    async fn wait_pause(&self) {
        while let Some(t) = self.paused_until(Instant::now()) {
            tokio::time::sleep_until(t).await;
        }
    }

    /// Waits for a place (or a start time), then for the end of any
    /// pause: nothing is sent before a deadline the client knows.
    async fn admit(&self) {
        match self.spacing {
            None => {
                loop {
                    let notified = self.notify.notified();
                    {
                        let mut s = self.state.lock().unwrap();
                        if s.in_flight < s.limit {
                            s.in_flight += 1;
                            break;
                        }
                    }
                    notified.await;
                }
                self.wait_pause().await;
            }
            Some(spacing) => loop {
                self.wait_pause().await;
                let at = {
                    let mut s = self.state.lock().unwrap();
                    let at = s.next.max(Instant::now());
                    s.next = at + spacing;
                    at
                };
                tokio::time::sleep_until(at).await;
                if self.paused_until(Instant::now()).is_none() {
                    self.state.lock().unwrap().in_flight += 1;
                    break;
                }
            },
        }
    }

    fn done(&self, retry_after: Option<u64>) {
        {
            let mut s = self.state.lock().unwrap();
            s.in_flight -= 1;
            if let Some(wait) = retry_after {
                let until = Instant::now() + Duration::from_secs(wait);
                s.paused = Some(s.paused.map_or(until, |u| u.max(until)));
            }
        }
        self.notify.notify_one();
    }

    fn set_limit(&self, limit: usize) {
        self.state.lock().unwrap().limit = limit;
        self.notify.notify_waiters();
    }

    /// What the sampler shows: (delay, concurrency).
    fn shown(&self) -> (f64, f64) {
        let s = self.state.lock().unwrap();
        match self.spacing {
            None => (0.0, s.limit as f64),
            Some(d) => (d.as_secs_f64(), s.in_flight as f64),
        }
    }
}

/// Runs a scenario on a fresh paused-clock runtime.
pub fn run(scenario: &Scenario, client: &Client, seed: u64) -> RunResult {
    run_until(scenario, client, seed, MAX_TIME)
}

/// [`run`], stopped after `limit` s of simulated time (at most
/// [`MAX_TIME`]): unfinished hosts get an infinite makespan.
pub fn run_until(scenario: &Scenario, client: &Client, seed: u64, limit: f64) -> RunResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    rt.block_on(run_async(
        scenario.clone(),
        client.clone(),
        seed,
        limit.min(MAX_TIME),
    ))
}

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Per host, the client's counts.
#[derive(Default)]
struct Tally {
    completed: u64,
    sent: u64,
    in_flight: u64,
    latency_sum: f64,
    latency_n: u64,
    done_at: Option<Instant>,
}

async fn run_async(scenario: Scenario, client: Client, seed: u64, limit: f64) -> RunResult {
    let start = Instant::now();
    let n = scenario.hosts.len();
    let keys: Vec<String> = scenario
        .hosts
        .iter()
        .map(|h| format!("http://{}.sim", h.name))
        .collect();
    let index: Arc<HashMap<String, usize>> = Arc::new(
        scenario
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("{}.sim", h.name), i))
            .collect(),
    );
    let servers: Arc<Vec<HostServer>> = Arc::new(
        scenario
            .hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                HostServer::new(
                    h.model.clone(),
                    host_seed(seed, h.stream.unwrap_or(i)),
                    start,
                )
            })
            .collect(),
    );

    // Changes of capacity and latency.
    for (i, h) in scenario.hosts.iter().enumerate() {
        if let Model::Queue { changes, .. } = &h.model {
            for &(at, change) in changes {
                let server = servers[i].clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + at).await;
                    server.change(change);
                });
            }
        }
    }

    let tallies: Arc<Mutex<Vec<Tally>>> =
        Arc::new(Mutex::new((0..n).map(|_| Tally::default()).collect()));

    // The server as the client sees it; it also records each latency.
    let inner = {
        let servers = Arc::clone(&servers);
        let tallies = Arc::clone(&tallies);
        let index = Arc::clone(&index);
        tower::service_fn(move |req: Request<()>| {
            let i = index[req.uri().authority().unwrap().as_str()];
            let server = servers[i].clone();
            let tallies = Arc::clone(&tallies);
            async move {
                let sent = Instant::now();
                tallies.lock().unwrap()[i].in_flight += 1;
                let response = server.handle().await;
                let latency = (Instant::now() - sent).as_secs_f64();
                let mut t = tallies.lock().unwrap();
                let tally = &mut t[i];
                tally.in_flight -= 1;
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
        Client::Fixed(_) | Client::Schedule(_) | Client::Paced(_) => None,
    };

    let total: u64 = scenario.hosts.iter().map(|h| h.requests as u64).sum();
    // Sends left before the run stops (a client retrying errors as fast as
    // it can); checked by every task before it sends.
    let budget = Arc::new(std::sync::atomic::AtomicU64::new(
        SENT_PER_PAGE * total + SENT_SLACK,
    ));
    let mut tasks = Vec::new();
    let mut gates: Vec<Option<Arc<OracleGate>>> = vec![None; n];
    for (i, h) in scenario.hosts.iter().enumerate() {
        let url = Arc::new(format!("{}/page", keys[i]));
        let gate = match &client {
            Client::Throttle(_) => None,
            Client::Fixed(k) => Some(OracleGate::new(*k, None, start)),
            Client::Schedule(ks) => {
                let first = ks.first().copied().unwrap_or(1);
                Some(OracleGate::new(first, None, start))
            }
            Client::Paced(rate) => Some(OracleGate::new(
                usize::MAX,
                Some(Duration::from_secs_f64(1.0 / rate.max(1e-6))),
                start,
            )),
        }
        .map(Arc::new);
        if let (Client::Schedule(ks), Some(gate)) = (&client, &gate) {
            for (c, at) in h.model.change_times().into_iter().enumerate() {
                let k = ks.get(c + 1).or(ks.last()).copied().unwrap_or(1);
                let gate = Arc::clone(gate);
                tokio::spawn(async move {
                    tokio::time::sleep_until(start + Duration::from_secs_f64(at)).await;
                    gate.set_limit(k);
                });
            }
        }
        gates[i] = gate.clone();
        let workers = match (&client, h.tasks) {
            (_, None) | (Client::Paced(_), _) => h.requests,
            (Client::Fixed(k), Some(pool)) => pool.max(*k).min(h.requests),
            (Client::Schedule(ks), Some(pool)) => pool
                .max(ks.iter().copied().max().unwrap_or(1))
                .min(h.requests),
            (Client::Throttle(_), Some(pool)) => pool.min(h.requests),
        };
        let remaining = Arc::new(AtomicUsize::new(h.requests));
        for _ in 0..workers {
            let tallies = Arc::clone(&tallies);
            let url = Arc::clone(&url);
            let gate = gate.clone();
            let layer = layer.clone();
            let inner = inner.clone();
            let remaining = Arc::clone(&remaining);
            let budget = Arc::clone(&budget);
            let fut: BoxFut<()> = Box::pin(async move {
                // Take the host's next request, until there is none.
                while remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(1))
                    .is_ok()
                {
                    loop {
                        if budget
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                                b.checked_sub(1)
                            })
                            .is_err()
                        {
                            return;
                        }
                        let req = Request::get(url.as_str()).body(()).unwrap();
                        let status = match (&layer, &gate) {
                            (Some(layer), _) => {
                                let svc = tower::Layer::layer(layer, inner.clone());
                                let resp = svc
                                    .oneshot(req)
                                    .await
                                    .expect("the simulated server never fails");
                                resp.status()
                            }
                            (None, Some(gate)) => {
                                // The oracle's client honours Retry-After
                                // for the whole host, as a careful crawler
                                // would, and looks again once it has a
                                // place, just before sending.
                                gate.admit().await;
                                let resp = inner.clone().oneshot(req).await.unwrap();
                                let wait = resp
                                    .headers()
                                    .get("retry-after")
                                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                                gate.done(wait);
                                resp.status()
                            }
                            _ => unreachable!(),
                        };
                        let now = Instant::now();
                        let error = status == StatusCode::TOO_MANY_REQUESTS
                            || status == StatusCode::SERVICE_UNAVAILABLE;
                        {
                            let mut t = tallies.lock().unwrap();
                            let tally = &mut t[i];
                            tally.sent += 1;
                            if !error {
                                tally.completed += 1;
                                tally.done_at = Some(now);
                                break;
                            }
                        }
                        // Retried RETRY_GAP later: an answer at once and a
                        // retry at once would spin at one instant of the
                        // paused clock.
                        tokio::time::sleep(RETRY_GAP).await;
                    }
                }
            });
            tasks.push(tokio::spawn(fut));
        }
    }

    // The sampler: O(hosts) per sample, nothing per request.
    let mut series: Vec<Vec<Point>> = vec![Vec::new(); n];
    let mut interval = tokio::time::interval_at(start + SAMPLE, SAMPLE);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_latency: Vec<(f64, u64)> = vec![(0.0, 0); n];
    let mut last_area: Vec<(f64, Instant)> = vec![(0.0, start); n];
    let by_key: HashMap<&str, usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    loop {
        interval.tick().await;
        let now = Instant::now();
        let t = (now - start).as_secs_f64();
        let mut snaps: Vec<Option<SlotSnapshot>> = vec![None; n];
        if let Some(l) = &layer {
            for s in l.slots() {
                let k: &str = std::borrow::Borrow::borrow(&s.key);
                if let Some(&i) = by_key.get(k) {
                    snaps[i] = Some(s);
                }
            }
        }
        let done = {
            let tallies = tallies.lock().unwrap();
            for i in 0..n {
                let tally = &tallies[i];
                let prev = &mut last_latency[i];
                let latency = (tally.latency_n > prev.1)
                    .then(|| (tally.latency_sum - prev.0) / (tally.latency_n - prev.1) as f64);
                *prev = (tally.latency_sum, tally.latency_n);
                let (delay, concurrency, in_flight) = match (&snaps[i], &gates[i]) {
                    (Some(s), _) => (
                        s.delay.as_secs_f64(),
                        s.concurrency as f64,
                        s.in_flight as f64,
                    ),
                    (None, Some(gate)) => {
                        let (delay, concurrency) = gate.shown();
                        (delay, concurrency, tally.in_flight as f64)
                    }
                    (None, None) => (0.0, 0.0, 0.0),
                };
                let (queue, area) = {
                    let s = servers[i].0.lock().unwrap();
                    (s.queue.len() as f64, s.area_now(now))
                };
                let (area0, t0) = last_area[i];
                let dt = now.saturating_duration_since(t0).as_secs_f64();
                let queue_avg = if dt > 0.0 { (area - area0) / dt } else { queue };
                last_area[i] = (area, now);
                series[i].push(Point {
                    t,
                    delay,
                    concurrency,
                    in_flight,
                    latency,
                    queue,
                    queue_avg,
                    completed: tally.completed,
                    sent: tally.sent,
                });
            }
            tallies.iter().map(|t| t.completed).sum::<u64>() >= total
                || budget.load(Ordering::Relaxed) == 0
        };
        if done || t > limit {
            break;
        }
    }
    for t in tasks {
        t.abort();
    }
    let end = Instant::now();

    let tallies = tallies.lock().unwrap();
    let mut hosts = Vec::new();
    for (i, h) in scenario.hosts.iter().enumerate() {
        let tally = &tallies[i];
        let server = servers[i].0.lock().unwrap();
        let points = std::mem::take(&mut series[i]);
        let finished = tally.completed >= h.requests as u64;
        let makespan = match tally.done_at {
            Some(d) if finished => (d - start).as_secs_f64(),
            _ => f64::INFINITY,
        };
        // The queue is empty once the host's last page is fetched, so the
        // integral at the end is the integral until the makespan.
        let span = if finished {
            makespan
        } else {
            (end - start).as_secs_f64()
        };
        let mean_queue = if span > 0.0 {
            server.area_now(end) / span
        } else {
            0.0
        };
        let mut sorted: Vec<f64> = points
            .iter()
            .filter(|p| p.t <= span + 1e-9)
            .map(|p| p.queue)
            .collect();
        sorted.sort_by(f64::total_cmp);
        let p95_queue = if sorted.is_empty() {
            0.0
        } else {
            sorted[((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len()) - 1]
        };
        let changes = h.model.change_times();
        let settle = settle(&points, &changes, span);
        let mut bounds = vec![(0.0, 0.0)];
        for (c, &at) in changes.iter().enumerate() {
            if at < span {
                bounds.push((at, server.marks.get(c).copied().unwrap_or(0.0)));
            }
        }
        bounds.push((span, server.area_now(end)));
        let regime_queues = bounds
            .windows(2)
            .map(|w| {
                let dt = w[1].0 - w[0].0;
                if dt > 0.0 {
                    (w[1].1 - w[0].1) / dt
                } else {
                    0.0
                }
            })
            .collect();
        hosts.push(HostResult {
            name: h.name,
            requests: h.requests,
            makespan,
            sent: tally.sent,
            overloads: server.load_overloads + server.other_errors,
            load_overloads: server.load_overloads,
            other_errors: server.other_errors,
            early: server.early,
            mean_queue,
            p95_queue,
            regime_queues,
            settle,
            series: points,
        });
    }
    let makespan = hosts.iter().map(|h| h.makespan).fold(0.0, f64::max);
    RunResult { makespan, hosts }
}

/// For each change (time in s), how long after it the host settled: the
/// smallest `s` (in steps of [`SAMPLE`]) such that every one-second window
/// from the change + `s` until the next change (or `end`, the host's
/// makespan) has a time-averaged server queue of at most 1. `None`: the
/// last window before the next change or the end is above 1 (it never
/// settled). Changes at or after `end` are left out.
pub fn settle(series: &[Point], changes: &[f64], end: f64) -> Vec<(f64, Option<f64>)> {
    let per_second = (1.0 / SAMPLE.as_secs_f64()).round() as usize;
    let step = SAMPLE.as_secs_f64();
    let mut out = Vec::new();
    for (c, &at) in changes.iter().enumerate() {
        if at >= end {
            continue;
        }
        let until = changes
            .get(c + 1)
            .copied()
            .unwrap_or(f64::INFINITY)
            .min(end);
        // The intervals (t − step, t] that lie in (at, until].
        let buckets: Vec<f64> = series
            .iter()
            .filter(|p| p.t - step >= at - 1e-9 && p.t <= until + 1e-9)
            .map(|p| p.queue_avg)
            .collect();
        if buckets.is_empty() {
            out.push((at, Some(0.0)));
            continue;
        }
        let width = per_second.min(buckets.len());
        let windows = buckets.len() - width + 1;
        let mut sum: f64 = buckets[..width].iter().sum();
        let mut last_bad = None;
        for j in 0..windows {
            if j > 0 {
                sum += buckets[j + width - 1] - buckets[j - 1];
            }
            if sum / width as f64 > 1.0 + 1e-9 {
                last_bad = Some(j);
            }
        }
        let settled = match last_bad {
            None => Some(0.0),
            Some(j) if j + 1 == windows => None,
            Some(j) => Some((j + 1) as f64 * step),
        };
        out.push((at, settled));
    }
    out
}

/// For rate-limited hosts, the makespan of a client that sends exactly at
/// the allowed rate (after spending the burst, from the storm's end).
pub fn ideal(scenario: &Scenario) -> Option<f64> {
    scenario
        .hosts
        .iter()
        .filter_map(|h| match h.model {
            Model::RateLimited {
                rate,
                burst,
                service,
                storm_until,
                ..
            } => Some(
                storm_until.map_or(0.0, |d| d.as_secs_f64())
                    + (h.requests as f64 - burst).max(0.0) / rate
                    + service.mean(),
            ),
            Model::Queue { .. } => None,
        })
        .reduce(f64::max)
}

/// The oracle's sweep goes up to this concurrency (powers of two, then a
/// search between the best polite one and the next).
pub const SWEEP_MAX: usize = 1024;

/// One client tried by the oracle, on a host alone.
#[derive(Clone, Debug)]
pub struct Probe {
    /// What was tried: `8`, `17/5/17` (one per regime), `paced 19.9/s`.
    pub label: String,
    pub makespan: f64,
    /// The worst regime's mean server queue (the mean queue when the host
    /// does not change).
    pub mean_queue: f64,
    /// Each regime's mean server queue.
    pub regime_queues: Vec<f64>,
    pub early: u64,
    pub load_share: f64,
}

impl Probe {
    /// Polite: finished, mean server queue at most 1 (in every regime),
    /// nothing sent before a `Retry-After` deadline, load-caused overload
    /// answers under 2 %.
    pub fn polite(&self) -> bool {
        self.makespan.is_finite()
            && self.mean_queue <= 1.0
            && self.early == 0
            && self.load_share < 0.02
    }

    fn faster(&self, other: &Probe) -> bool {
        self.makespan < other.makespan
    }
}

/// The oracle of one host.
#[derive(Clone, Debug)]
pub struct HostOracle {
    pub name: &'static str,
    /// The best polite fixed concurrency (the first regime's, if the host
    /// changes; 0 if a paced client won). If none was polite: the fastest
    /// (then `polite` is false).
    pub k: usize,
    /// What won: the concurrency, one per regime (`17/5/17`), or a rate
    /// (`paced 19.9/s`).
    pub label: String,
    pub makespan: f64,
    pub polite: bool,
    /// Every client tried.
    pub tried: Vec<Probe>,
}

/// Runs a host alone (with its streams of randomness in its scenario).
fn probe_host(
    host: &Host,
    stream: usize,
    seed: u64,
    client: Client,
    label: String,
    limit: f64,
) -> Probe {
    let mut alone = host.clone();
    alone.stream = Some(host.stream.unwrap_or(stream));
    let scenario = Scenario {
        name: "oracle",
        about: "",
        hosts: vec![alone],
    };
    let r = run_until(&scenario, &client, seed, limit);
    let h = &r.hosts[0];
    Probe {
        label,
        makespan: h.makespan,
        mean_queue: h.regime_queues.iter().copied().fold(h.mean_queue, f64::max),
        regime_queues: h.regime_queues.clone(),
        early: h.early,
        load_share: h.load_share(),
    }
}

/// The fastest polite concurrency in `1..=max` for `run` (given a time
/// limit), assuming that the makespan falls and the queue rises with it:
/// the powers of two, from the largest down, each stopped once it is slower
/// than the fastest polite one so far (so it could not win: this prunes
/// nothing that matters, and saves most of the time on large hosts), then,
/// between the best polite power `p` and `2p`:
///
/// - if `2p` is not polite, the boundary of politeness: a first guess at
///   `2p − ⌈q⌉ + 1`, with `q` the queue at `2p` (`queue_of`; a FIFO queue
///   grows one for one beyond its workers), then steps of 1, 2, 4… away
///   from the guess until the other side is found, then bisection;
/// - if `2p` is polite but not faster (a rate limit: more requests, more
///   pauses), bisection towards the faster side.
///
/// Returns the fastest polite concurrency tried (if any) and every probe.
fn search(
    max: usize,
    run_until: &dyn Fn(usize, f64) -> Probe,
    queue_of: &dyn Fn(&Probe) -> f64,
) -> (Option<usize>, BTreeMap<usize, Probe>) {
    let run = |k: usize| run_until(k, MAX_TIME);
    let mut powers = Vec::new();
    let mut k = 1;
    while k <= max {
        powers.push(k);
        k *= 2;
    }
    let mut tried: BTreeMap<usize, Probe> = BTreeMap::new();
    let mut limit = MAX_TIME;
    for &k in powers.iter().rev() {
        let probe = run_until(k, limit);
        if probe.polite() && probe.makespan < limit {
            limit = probe.makespan;
        }
        tried.insert(k, probe);
    }
    let best = |tried: &BTreeMap<usize, Probe>| {
        tried
            .iter()
            .filter(|(_, p)| p.polite())
            .min_by(|a, b| a.1.makespan.total_cmp(&b.1.makespan).then(a.0.cmp(b.0)))
            .map(|(k, _)| *k)
    };
    let Some(p) = best(&tried) else {
        return (None, tried);
    };
    let (mut lo, mut hi) = (p, p * 2);
    let Some(up) = tried.get(&hi).cloned() else {
        return (Some(p), tried);
    };
    if up.polite() {
        let mut fastest = tried[&p].clone();
        while hi - lo > 1 {
            let m = (lo + hi) / 2;
            let probe = run(m);
            let better = probe.polite() && probe.faster(&fastest);
            if better {
                fastest = probe.clone();
                lo = m;
            } else {
                hi = m;
            }
            tried.insert(m, probe);
        }
        return (best(&tried), tried);
    }
    #[derive(Clone, Copy)]
    enum Mode {
        Guess,
        Up(usize),
        Down(usize),
        Bisect,
    }
    let guess = hi as f64 - queue_of(&up).ceil() + 1.0;
    let mut next =
        (guess.is_finite() && guess > lo as f64 && guess < hi as f64).then_some(guess as usize);
    let mut mode = Mode::Guess;
    while hi - lo > 1 {
        let m = next
            .take()
            .filter(|m| *m > lo && *m < hi)
            .unwrap_or((lo + hi) / 2);
        let probe = run(m);
        let polite = probe.polite();
        tried.insert(m, probe);
        mode = match (mode, polite) {
            (Mode::Guess, true) => Mode::Up(1),
            (Mode::Guess, false) => Mode::Down(1),
            (Mode::Up(s), true) => Mode::Up(s * 2),
            (Mode::Down(s), false) => Mode::Down(s * 2),
            _ => Mode::Bisect,
        };
        if polite {
            lo = m;
        } else {
            hi = m;
        }
        next = match mode {
            Mode::Up(s) => Some(lo + s),
            Mode::Down(s) => hi.checked_sub(s),
            Mode::Guess | Mode::Bisect => None,
        };
    }
    (best(&tried), tried)
}

/// The fastest polite start rate for a rate-limited host: the powers of
/// two from 4 096 per second down to 1 (pruned as in [`search`]), then 8
/// bisection steps between the best polite one and the next, towards the
/// faster side.
fn search_rate(run_until: &dyn Fn(f64, f64) -> Probe) -> Vec<(f64, Probe)> {
    let run = |r: f64| run_until(r, MAX_TIME);
    let mut tried: Vec<(f64, Probe)> = Vec::new();
    let mut limit = MAX_TIME;
    for i in (0..=12).rev() {
        let r = f64::from(1u32 << i);
        let probe = run_until(r, limit);
        if probe.polite() && probe.makespan < limit {
            limit = probe.makespan;
        }
        tried.push((r, probe));
    }
    let best = tried
        .iter()
        .filter(|(_, p)| p.polite())
        .min_by(|a, b| a.1.makespan.total_cmp(&b.1.makespan))
        .cloned();
    if let Some((r, mut fastest)) = best {
        let (mut lo, mut hi) = (r, 2.0 * r);
        for _ in 0..8 {
            let m = (lo + hi) / 2.0;
            let probe = run(m);
            if probe.polite() && probe.faster(&fastest) {
                fastest = probe.clone();
                lo = m;
            } else {
                hi = m;
            }
            tried.push((m, probe));
        }
    }
    tried
}

/// The oracle of one host (`stream`: its index in its scenario): the
/// fastest polite client of these, each run on the host alone:
///
/// - a fixed concurrency, from 1 to [`SWEEP_MAX`] (no further than the
///   first power of two at or above the host's request count), see
///   [`search`];
/// - for a host whose capacity or latency changes, one fixed concurrency
///   per regime, switched at the change (the oracle knows the schedule):
///   from the best constant one, each regime's searched in turn, the
///   others held;
/// - for a rate-limited host, a fixed start rate, see [`search_rate`].
///
/// If none is polite, the fastest of them, marked so.
pub fn oracle_host(host: &Host, stream: usize, seed: u64) -> HostOracle {
    let mut max = 1;
    while max < SWEEP_MAX && max < host.requests {
        max *= 2;
    }
    let fixed = |k: usize, limit: f64| {
        probe_host(host, stream, seed, Client::Fixed(k), k.to_string(), limit)
    };
    let (constant, tried) = search(max, &fixed, &|p| p.mean_queue);
    let mut all: Vec<Probe> = tried.values().cloned().collect();
    let regimes = host.model.change_times().len() + 1;
    if let (Some(k), true) = (constant, regimes > 1) {
        let mut ks = vec![k; regimes];
        for r in 0..regimes {
            let held = ks.clone();
            let schedule = |k: usize, limit: f64| {
                let mut ks = held.clone();
                ks[r] = k;
                let label = ks
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("/");
                probe_host(host, stream, seed, Client::Schedule(ks), label, limit)
            };
            let queue_of = |p: &Probe| p.regime_queues.get(r).copied().unwrap_or(p.mean_queue);
            let (best, tried) = search(max, &schedule, &queue_of);
            if let Some(best) = best {
                ks[r] = best;
            }
            all.extend(tried.into_values());
        }
    }
    if matches!(host.model, Model::RateLimited { .. }) {
        let paced = |r: f64, limit: f64| {
            probe_host(
                host,
                stream,
                seed,
                Client::Paced(r),
                format!("paced {r:.1}/s"),
                limit,
            )
        };
        all.extend(search_rate(&paced).into_iter().map(|(_, p)| p));
    }
    let fastest = |polite: bool| {
        all.iter()
            .filter(|p| !polite || p.polite())
            .min_by(|a, b| a.makespan.total_cmp(&b.makespan))
            .cloned()
    };
    let (chosen, polite) = match fastest(true) {
        Some(p) => (p, true),
        None => (fastest(false).expect("at least one probe"), false),
    };
    let k = if chosen.label.starts_with("paced") {
        0
    } else {
        chosen
            .label
            .split('/')
            .next()
            .and_then(|k| k.parse().ok())
            .unwrap_or(0)
    };
    HostOracle {
        name: host.name,
        k,
        label: chosen.label.clone(),
        makespan: chosen.makespan,
        polite,
        tried: all,
    }
}

/// The oracle of every host of a scenario (each alone, see
/// [`oracle_host`]).
pub fn oracle_hosts(scenario: &Scenario, seed: u64) -> Vec<HostOracle> {
    if scenario.hosts.len() == 1 {
        vec![oracle_host(&scenario.hosts[0], 0, seed)]
    } else {
        let indexed: Vec<(usize, &Host)> = scenario.hosts.iter().enumerate().collect();
        par_map(&indexed, |(i, h)| oracle_host(h, *i, seed))
    }
}

/// The oracle: for each host alone, the best polite fixed concurrency and
/// its makespan; the scenario's oracle makespan is the slowest host's best.
pub fn oracle(scenario: &Scenario, seed: u64) -> (f64, Vec<(&'static str, usize, f64)>) {
    let per_host: Vec<_> = oracle_hosts(scenario, seed)
        .into_iter()
        .map(|o| (o.name, o.k, o.makespan))
        .collect();
    let makespan = per_host.iter().map(|h| h.2).fold(0.0, f64::max);
    (makespan, per_host)
}

static JOBS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// How many runs go at once (0: one per CPU). Runs are independent and
/// deterministic, so this changes only the wall-clock time.
pub fn set_jobs(n: usize) {
    JOBS.store(n, Ordering::Relaxed);
}

fn jobs() -> usize {
    match JOBS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// `items.iter().map(f)`, on up to [`set_jobs`] threads, in order. Nested
/// calls run on the calling thread.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let jobs = jobs().min(items.len());
    if jobs <= 1 || IN_POOL.with(Cell::get) {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            std::thread::Builder::new()
                .stack_size(16 << 20)
                .spawn_scoped(s, || {
                    IN_POOL.with(|c| c.set(true));
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items.len() {
                            break;
                        }
                        let r = f(&items[i]);
                        results.lock().unwrap()[i] = Some(r);
                    }
                })
                .expect("a thread");
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("every item done"))
        .collect()
}

/// A wider grid of queue servers, for checking that a policy holds up
/// beyond the scoreboard's scenarios: workers {1, 8, 64, 1 000} × mean
/// service time {10 ms, 100 ms, 1 s} × noise {uniform ± 10 %, log-normal
/// σ 0.8, Pareto 1.5, bimodal 90 % fast / 10 % 10× slower}, 48 servers.
///
/// Each runs for `max(30 s, 200 round trips)` at full speed, at most
/// 200 000 requests (the 1 000-worker hosts: 200 round trips; 64 workers
/// at 10 ms: 31 s); above 4 096 requests, a pool of 4 096 tasks takes
/// them.
pub fn wide_scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    for workers in [1usize, 8, 64, 1000] {
        for base_ms in [10u64, 100, 1000] {
            let base = ms(base_ms);
            let noises: [(&'static str, ServiceTime); 4] = [
                ("u10", ServiceTime::Uniform { base, spread: 0.1 }),
                (
                    "ln0.8",
                    ServiceTime::LogNormal {
                        mean: base,
                        sigma: 0.8,
                    },
                ),
                ("p1.5", ServiceTime::Pareto { base, alpha: 1.5 }),
                (
                    "bimodal",
                    // 90 % fast, 10 % ten times slower, mean `base`.
                    ServiceTime::Bimodal {
                        fast: base.div_f64(1.9),
                        slow: base.mul_f64(10.0 / 1.9),
                        p_slow: 0.1,
                    },
                ),
            ];
            for (noise, service) in noises {
                let t = base.as_secs_f64();
                let rate = workers as f64 / t;
                let duration = f64::max(30.0, 200.0 * t);
                let requests = ((rate * duration) as usize).clamp(100, 200_000);
                let name = leak(format!("w{workers}-{base_ms}ms-{noise}"));
                let mut host = Host::new(name, Model::queue(workers, service), requests);
                if requests > 4096 {
                    host = host.pool(4096);
                }
                out.push(Scenario {
                    name,
                    about: "wide grid",
                    hosts: vec![host],
                });
            }
        }
    }
    out
}
