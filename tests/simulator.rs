//! The simulator (`examples/simulate`) as a test: its runs are
//! deterministic, and the default policy keeps the goals it meets on the
//! scoreboard (a regression guard; the scoreboard has all the figures).

#[path = "../examples/simulate/sim.rs"]
mod sim;

use std::sync::Arc;

use sim::{Client, Scenario};
use tower_autothrottle::policy::{Adaptive, MakePolicy, Scrapy2012};

fn scenario(name: &str) -> Scenario {
    sim::scenarios()
        .into_iter()
        .chain(sim::wide_scenarios())
        .find(|s| s.name == name)
        .unwrap()
}

fn default_policy() -> Client {
    Client::Throttle(Arc::new(Adaptive::default()) as Arc<dyn MakePolicy>)
}

#[test]
fn runs_are_identical_for_a_seed_and_differ_across_seeds() {
    let s = scenario("heavy-tail");
    let a = sim::run(&s, &default_policy(), 7);
    let b = sim::run(&s, &default_policy(), 7);
    let c = sim::run(&s, &default_policy(), 8);
    let key = |r: &sim::RunResult| {
        r.hosts[0]
            .series
            .iter()
            .map(|p| {
                (
                    p.t.to_bits(),
                    p.concurrency.to_bits(),
                    p.queue.to_bits(),
                    p.completed,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(a.makespan, b.makespan);
    assert_eq!(key(&a), key(&b));
    assert_ne!(key(&a), key(&c));
}

#[test]
fn fixed_capacity_near_the_oracle_with_a_short_queue() {
    let s = scenario("fixed");
    let oracle = sim::run(&s, &Client::Fixed(8), 1);
    let ours = sim::run(&s, &default_policy(), 1);
    let share = oracle.makespan / ours.makespan;
    assert!(share >= 0.9, "throughput {share:.2} of the oracle's");
    assert!(
        ours.hosts[0].mean_queue <= 1.0,
        "mean queue {}",
        ours.hosts[0].mean_queue
    );
    assert_eq!(ours.hosts[0].overloads, 0);
}

#[test]
fn capacity_drop_is_followed_within_two_seconds() {
    let s = scenario("drop");
    let ours = sim::run(&s, &default_policy(), 1);
    let host = &ours.hosts[0];
    assert!(host.mean_queue <= 1.0, "mean queue {}", host.mean_queue);
    // From the drop at 10 s: the queue is at most 1 for a whole second
    // within 2 s.
    let after: Vec<_> = host
        .series
        .iter()
        .filter(|p| p.t > 10.0 && p.t <= 25.0)
        .collect();
    let settled = (0..after.len())
        .find(|&i| after[i..].iter().take(20).all(|p| p.queue <= 1.0))
        .map(|i| after[i].t - 10.0)
        .expect("the queue settles");
    assert!(settled <= 2.0, "settled after {settled:.2} s");
}

#[test]
fn rate_limited_server_no_request_before_retry_after_and_few_429s() {
    let s = scenario("rate-limited");
    for client in [
        default_policy(),
        Client::Throttle(Arc::new(Scrapy2012::default()) as Arc<dyn MakePolicy>),
    ] {
        let run = sim::run(&s, &client, 1);
        let host = &run.hosts[0];
        assert_eq!(host.early, 0, "requests sent before a Retry-After deadline");
        let share = host.overloads as f64 / host.sent as f64;
        assert!(share < 0.02, "{:.2} % of requests got a 429", 100.0 * share);
    }
}

#[test]
fn several_hosts_each_near_their_own_capacity() {
    let s = scenario("multi-host");
    let ours = sim::run(&s, &default_policy(), 1);
    let queues: Vec<(&str, f64)> = ours.hosts.iter().map(|h| (h.name, h.mean_queue)).collect();
    // The goal is a mean queue of at most 1 on every host. It is met on the
    // small hosts; with 16 and 32 workers a queue of 1 or 2 moves the
    // latency by 3 to 6 %, about the noise of a round, and the policy keeps
    // 1 to 2.5 there (see the README). Guard those figures from growing.
    for (name, queue) in &queues {
        let bound = match *name {
            "medium" | "large" => 2.5,
            _ => 1.0,
        };
        assert!(*queue <= bound, "{queues:?}");
    }
    let (oracle, _) = sim::oracle(&s, 1);
    assert!(oracle / ours.makespan >= 0.9);
}

// The server models themselves, and the oracle: each checked with the
// oracle's own client (a fixed concurrency), so these tests do not depend
// on any policy.

use std::time::Duration;

use sim::{Change, Host, Model, ServiceTime};

fn alone(host: Host) -> Scenario {
    Scenario {
        name: "test",
        about: "",
        hosts: vec![host],
    }
}

fn uniform(ms: u64) -> ServiceTime {
    ServiceTime::Uniform {
        base: Duration::from_millis(ms),
        spread: 0.1,
    }
}

/// The mean latency of the responses in the samples within `(from, to]`.
fn mean_latency(host: &sim::HostResult, from: f64, to: f64) -> f64 {
    let l: Vec<f64> = host
        .series
        .iter()
        .filter(|p| p.t > from && p.t <= to)
        .filter_map(|p| p.latency)
        .collect();
    l.iter().sum::<f64>() / l.len() as f64
}

#[test]
fn random_errors_are_the_same_share_at_any_load_and_not_load() {
    let host = |n| {
        Host::new(
            "r",
            Model::queue(32, uniform(100)).with_random_errors(0.02),
            n,
        )
    };
    for (k, requests) in [(1, 1500), (32, 5000), (64, 5000)] {
        let run = sim::run(&alone(host(requests)), &Client::Fixed(k), 1);
        let h = &run.hosts[0];
        let share = h.other_errors as f64 / h.sent as f64;
        // Binomial: about 0.02 ± 0.004 (one standard deviation) at 1 500.
        assert!((0.008..=0.032).contains(&share), "k {k}: share {share:.4}");
        assert_eq!(h.load_overloads, 0, "k {k}: random 503s are not load");
        assert_eq!(h.overloads, h.other_errors);
        assert_eq!(h.load_share(), 0.0);
        assert!(h.makespan.is_finite(), "every page fetched, errors retried");
    }
}

#[test]
fn latency_drift_applies_to_service_times_drawn_after_the_change() {
    // ×10 at 5 s: 100 ms before, 1 s after (8 in flight on 8 workers: no
    // queue, the latency is the service time).
    let up = Host::new(
        "up",
        Model::queue(8, uniform(100))
            .with_changes(vec![(Duration::from_secs(5), Change::Latency(10.0))]),
        480,
    );
    let run = sim::run(&alone(up), &Client::Fixed(8), 1);
    let h = &run.hosts[0];
    let before = mean_latency(h, 1.0, 4.9);
    let after = mean_latency(h, 7.0, h.makespan);
    assert!((0.095..=0.105).contains(&before), "before {before}");
    assert!((0.95..=1.05).contains(&after), "after {after}");
    assert_eq!(h.mean_queue, 0.0);
    // ÷10 at 5 s.
    let down = Host::new(
        "down",
        Model::queue(8, uniform(1000))
            .with_changes(vec![(Duration::from_secs(5), Change::Latency(0.1))]),
        400,
    );
    let run = sim::run(&alone(down), &Client::Fixed(8), 1);
    let h = &run.hosts[0];
    let before = mean_latency(h, 1.0, 4.9);
    let after = mean_latency(h, 7.0, h.makespan);
    assert!((0.95..=1.05).contains(&before), "before {before}");
    assert!((0.095..=0.105).contains(&after), "after {after}");
}

#[test]
fn capacity_change_shows_in_the_queue_and_the_regimes() {
    // 16 in flight on 16 workers, then 4 workers from 5 s to 10 s: a
    // queue of 12 while there are 4 workers, none before or after.
    let host = Host::new(
        "drop",
        Model::queue(16, uniform(50)).with_changes(vec![
            (Duration::from_secs(5), Change::Workers(4)),
            (Duration::from_secs(10), Change::Workers(16)),
        ]),
        3000,
    );
    let run = sim::run(&alone(host.clone()), &Client::Fixed(16), 1);
    let h = &run.hosts[0];
    assert_eq!(h.regime_queues.len(), 3);
    assert!(h.regime_queues[0] < 0.01, "{:?}", h.regime_queues);
    assert!(
        (11.0..=12.0).contains(&h.regime_queues[1]),
        "{:?}",
        h.regime_queues
    );
    assert!(h.regime_queues[2] < 0.01, "{:?}", h.regime_queues);
    // It never settles while 4 workers serve 16 requests, and settles at
    // once when the 16 workers are back.
    assert_eq!(h.settle, vec![(5.0, None), (10.0, Some(0.0))]);
    // One concurrency per regime follows the change: no queue at all.
    let run = sim::run(&alone(host), &Client::Schedule(vec![16, 4, 16]), 1);
    let h = &run.hosts[0];
    assert!(h.mean_queue < 0.05, "{:?}", h.regime_queues);
    assert_eq!(h.settle, vec![(5.0, Some(0.0)), (10.0, Some(0.0))]);
}

#[test]
fn settle_needs_every_window_after_the_change_not_one() {
    let step = sim::SAMPLE.as_secs_f64();
    // A change at 1 s; from 1 to 2 s a queue of 3, then 0 for 1 s, a burst
    // of 5 for 0.5 s at 3 s, then 0 until 6 s.
    let series: Vec<sim::Point> = (1..=120)
        .map(|i| {
            let t = i as f64 * step;
            let q = if t > 1.0 && t <= 2.0 {
                3.0
            } else if t > 3.0 && t <= 3.5 {
                5.0
            } else {
                0.0
            };
            sim::Point {
                t,
                queue: q,
                queue_avg: q,
                ..Default::default()
            }
        })
        .collect();
    let settle = sim::settle(&series, &[1.0], 6.0);
    assert_eq!(settle.len(), 1);
    // A window holding more than 0.2 s of the burst (5 × 0.2 = 1
    // request·s) is above 1: the last such one starts at 3.25 s, so every
    // window from 3.3 s on is at most 1: settled 2.3 s after the change
    // (not at 2 s, the first good second).
    let s = settle[0].1.expect("settled");
    assert!((s - 2.3).abs() < 1e-6, "settled after {s}");
    // Not settled if the last second is above 1.
    let settle = sim::settle(&series, &[1.0], 2.0);
    assert_eq!(settle, vec![(1.0, None)]);
}

#[test]
fn storm_answers_429_and_retry_after_1_to_everything_for_1_5_s() {
    let storm = || {
        Host::new(
            "storm",
            Model::rate_limited(400.0, 20.0, uniform(20)).with_storm(Duration::from_millis(1500)),
            400,
        )
    };
    // The request at 0 s and the one at 1 s (the pause's end) are
    // refused (the client learns of the pause from the first answer and
    // sends nothing more until its end); the ones from 2 s are served.
    let run = sim::run(&alone(storm()), &Client::Fixed(4), 1);
    let h = &run.hosts[0];
    assert_eq!(h.other_errors, 2, "the storm's 429s");
    assert_eq!(h.load_overloads, 0, "200 requests/s are under the limit");
    assert_eq!(h.early, 0, "the oracle's client honours Retry-After");
    let first = h.series.iter().find(|p| p.completed > 0).unwrap();
    assert!(first.t > 2.0, "first page at {}", first.t);
    // After the storm, the limit: 800 requests/s get load-caused 429s;
    // 350/s get none.
    let run = sim::run(&alone(storm()), &Client::Paced(800.0), 1);
    assert!(run.hosts[0].load_overloads > 0);
    let run = sim::run(&alone(storm()), &Client::Paced(350.0), 1);
    assert_eq!(run.hosts[0].load_overloads, 0);
    assert_eq!(run.hosts[0].early, 0);
}

#[test]
fn queue_bound_refuses_beyond_four_waiting() {
    let host = || Host::new("q", Model::queue(16, uniform(50)).with_max_queue(4), 2000);
    let run = sim::run(&alone(host()), &Client::Fixed(20), 1);
    let h = &run.hosts[0];
    assert_eq!(h.overloads, 0, "16 served and 4 waiting fit");
    assert!(h.p95_queue <= 4.0);
    let run = sim::run(&alone(host()), &Client::Fixed(24), 1);
    let h = &run.hosts[0];
    assert!(h.load_overloads > 0, "the 21st to 24th are refused");
    assert_eq!(h.other_errors, 0);
    assert!(h.series.iter().all(|p| p.queue <= 4.0));
}

#[test]
fn limit_req_answers_503_without_retry_after_beyond_its_rate() {
    // nginx's limit_req with nodelay: a client that sends as fast as 8
    // places allow is refused most of the time, with 503 and no deadline;
    // one paced under the rate never is.
    let s = scenario("limit-req");
    let host = s.hosts[0].clone();
    let run = sim::run(&alone(host.clone()), &Client::Fixed(8), 1);
    let h = &run.hosts[0];
    assert!(
        h.load_overloads > h.requests as u64,
        "{} refused",
        h.load_overloads
    );
    assert_eq!(h.early, 0, "no Retry-After, so no deadline to break");
    assert_eq!(h.other_errors, 0);
    let run = sim::run(&alone(host), &Client::Paced(19.0), 1);
    assert_eq!(run.hosts[0].load_overloads, 0);
    // The oracle paces it at the rate, as it does with Retry-After.
    let oracle = sim::oracle_host(&s.hosts[0], 0, 1);
    assert!(oracle.polite, "{}", oracle.label);
    assert!(
        oracle.makespan <= sim::ideal(&s).unwrap() * 1.05,
        "{}",
        oracle.makespan
    );
}

#[test]
fn limit_conn_refuses_beyond_its_workers_and_queues_nothing() {
    let host = || scenario("limit-conn").hosts[0].clone();
    let run = sim::run(&alone(host()), &Client::Fixed(8), 1);
    let h = &run.hosts[0];
    assert_eq!(h.overloads, 0, "8 in service fit");
    let run = sim::run(&alone(host()), &Client::Fixed(9), 1);
    let h = &run.hosts[0];
    assert!(h.load_overloads > 0, "the 9th is refused");
    assert!(h.series.iter().all(|p| p.queue == 0.0), "nothing waits");
}

#[test]
fn heavy_tails_have_their_stated_means() {
    // 8 in flight on 8 workers: the makespan is about requests × mean / 8.
    for (service, mean) in [
        (
            ServiceTime::LogNormal {
                mean: Duration::from_millis(100),
                sigma: 0.8,
            },
            0.1,
        ),
        (
            ServiceTime::Bimodal {
                fast: Duration::from_millis(50),
                slow: Duration::from_millis(500),
                p_slow: 0.1,
            },
            0.095,
        ),
        (
            ServiceTime::Pareto {
                base: Duration::from_millis(100),
                alpha: 2.5,
            },
            0.1,
        ),
    ] {
        assert!((service.mean() - mean).abs() < 1e-9);
        let host = Host::new("tail", Model::queue(8, service), 8000);
        let run = sim::run(&alone(host), &Client::Fixed(8), 1);
        let per_request = run.makespan * 8.0 / 8000.0;
        assert!(
            (per_request / mean - 1.0).abs() < 0.06,
            "{service:?}: {per_request:.4} s per request"
        );
    }
}

#[test]
fn oracle_sweeps_past_64_to_a_thousand_workers() {
    let host = Host::new("big", Model::queue(1000, uniform(400)), 20_000).pool(4096);
    let oracle = sim::oracle_host(&host, 0, 1);
    assert!(oracle.polite);
    assert!((1000..=1001).contains(&oracle.k), "k {}", oracle.k);
    // 20 rounds of 400 ms.
    assert!(oracle.makespan < 8.5, "makespan {}", oracle.makespan);
}

#[test]
fn oracle_follows_a_capacity_drop_with_one_concurrency_per_regime() {
    let drop = sim::scenarios()
        .into_iter()
        .find(|s| s.name == "drop")
        .unwrap();
    let oracle = sim::oracle_host(&drop.hosts[0], 0, 1);
    assert!(oracle.polite);
    let ks: Vec<usize> = oracle
        .label
        .split('/')
        .map(|k| k.parse().unwrap())
        .collect();
    assert_eq!(ks.len(), 3, "{}", oracle.label);
    assert!((16..=17).contains(&ks[0]) && (4..=5).contains(&ks[1]) && (16..=17).contains(&ks[2]));
}

#[test]
fn oracle_paces_a_rate_limit() {
    let s = scenario("rate-limited");
    let oracle = sim::oracle_host(&s.hosts[0], 0, 1);
    assert!(oracle.polite, "{}", oracle.label);
    let ideal = sim::ideal(&s).unwrap();
    assert!(
        oracle.makespan <= ideal * 1.05,
        "{} vs ideal {ideal}",
        oracle.makespan
    );
}

#[test]
fn many_hosts_with_one_task_per_request_each_run_alone() {
    let s = Scenario {
        name: "tiny",
        about: "",
        hosts: ["a", "b", "c", "d"]
            .into_iter()
            .map(|n| Host::new(n, Model::queue(1, uniform(200)), 25))
            .collect(),
    };
    let run = sim::run(&s, &Client::Fixed(1), 1);
    for h in &run.hosts {
        assert_eq!(h.mean_queue, 0.0);
        // The same draws as the host alone (the oracle's run).
        let i = s.hosts.iter().position(|x| x.name == h.name).unwrap();
        let solo = sim::oracle_host(&s.hosts[i], i, 1);
        assert_eq!(solo.k, 1);
        assert_eq!(solo.makespan, h.makespan, "{}", h.name);
    }
}

#[test]
fn new_scenarios_are_identical_for_a_seed() {
    for name in [
        "storm",
        "errors-0.5",
        "drift-up",
        "queue-503",
        "limit-req",
        "limit-req-fast",
    ] {
        let s = scenario(name);
        let a = sim::run(&s, &default_policy(), 3);
        let b = sim::run(&s, &default_policy(), 3);
        let key = |r: &sim::RunResult| {
            let h = &r.hosts[0];
            (
                h.sent,
                h.load_overloads,
                h.other_errors,
                h.early,
                h.mean_queue.to_bits(),
                h.series
                    .iter()
                    .map(|p| (p.concurrency.to_bits(), p.queue_avg.to_bits(), p.completed))
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(a.makespan.to_bits(), b.makespan.to_bits(), "{name}");
        assert_eq!(key(&a), key(&b), "{name}");
    }
}

/// The default's goals (issue 12) on a scenario and seed, against the
/// scenario's own oracle (`sim::oracle_hosts`, derived from the server
/// model): at least `thr` of the oracle's speed on every host, a mean server
/// queue of at most `queue` (the goal: 1), nothing sent before a
/// `Retry-After` deadline, load-caused overloads under 2 % of the requests
/// sent, and, where the server changes, settled within `settle` seconds of
/// each change.
fn meets(name: &str, seed: u64, thr: f64, queue: f64, settle: f64) {
    let s = scenario(name);
    let oracles = sim::oracle_hosts(&s, seed);
    let run = sim::run(&s, &default_policy(), seed);
    for (host, oracle) in run.hosts.iter().zip(&oracles) {
        let share = oracle.makespan / host.makespan;
        let load = host.load_overloads as f64 / host.sent.max(1) as f64;
        let settled = host
            .settle
            .iter()
            .all(|(_, after)| after.is_some_and(|a| a <= settle));
        assert!(
            share >= thr && host.mean_queue <= queue && host.early == 0 && load < 0.02 && settled,
            "{name}, seed {seed}, host {}: thr {share:.3} (guard {thr}), queue {:.2} (guard {queue}), early {}, load overloads {load:.4}, settle {:?}",
            host.name,
            host.mean_queue,
            host.early,
            host.settle
        );
    }
}

/// Every seed from 1 to 3.
fn seeds(name: &str, thr: f64, queue: f64, settle: f64) {
    for seed in 1..=3 {
        meets(name, seed, thr, queue, settle);
    }
}

// At the goal: the scenarios where the default meets every goal on seeds
// 1 to 5 (`simulate --seeds 1-5 --policy default`).

#[test]
fn goal_fixed() {
    seeds("fixed", 0.9, 1.0, 5.0);
}

#[test]
fn goal_bimodal() {
    seeds("bimodal", 0.9, 1.0, 5.0);
}

#[test]
fn goal_random_errors() {
    seeds("errors-2", 0.8, 1.0, 5.0);
    seeds("errors-0.5", 0.9, 1.0, 5.0);
}

#[test]
fn goal_queue_bound() {
    seeds("queue-503", 0.9, 1.0, 5.0);
}

#[test]
fn goal_nginx_limiters() {
    seeds("limit-req", 0.9, 1.0, 5.0);
    seeds("limit-conn", 0.9, 1.0, 5.0);
    // Without burst (a bucket of one token): met on seeds 1-15 since free
    // probes find its rate (0.76-0.81 of the oracle before them).
    seeds("limit-req-stock", 0.9, 1.0, 5.0);
}

#[test]
fn goal_many_small_hosts() {
    seeds("tiny-400", 0.9, 1.0, 5.0);
}

#[test]
fn goal_drift_down() {
    seeds("drift-down", 0.9, 1.0, 5.0);
}

#[test]
fn goal_rate_limit_with_retry_after() {
    // Met on seeds 1-5 since the pause measures the token bucket (9e4fb28).
    seeds("rate-limited", 0.9, 1.0, 5.0);
}

#[test]
fn goal_rate_limit_before_a_static_file() {
    // nginx's limit_req at 1.5 ms: met on seeds 1-5 since a refusal at a
    // rate halves to the rate since the last success (b4cc498): 0.94-1.00
    // of the oracle, 1.28-1.57 % refused; 2.06 % on seed 4 before (a floor
    // of 0.75 then; 0.44-0.99, 2.6-3.1 % before a rate kept its unit and a
    // run refused whole was cut by the rule of succession). Seeds 1-5: the
    // descent's refusals showed on seed 4.
    for seed in 1..=5 {
        meets("limit-req-fast", seed, 0.9, 1.0, 5.0);
    }
}

// Below the goal, which the default misses there (BENCHMARKS.md gives the
// figures): floors a little under what it does on seeds 1 to 5 today, so
// that a change that makes it worse shows.

#[test]
fn floor_capacity_drop() {
    seeds("drop", 0.85, 1.0, 5.0);
}

#[test]
fn floor_heavy_tails() {
    seeds("heavy-tail", 0.75, 1.0, 5.0);
    // Log-normal σ 0.8 on 8 workers: a queue of one is an eighth of a
    // latency whose spread is 0.86 of it, and a reference of a few dozen
    // answers is itself 10 to 20 % off, so the queue stays near 1 on some
    // seeds whatever the rules (seeds 1-15 at 6ec42e6: 0.37-1.08, 2 of 15
    // at the goals; a mean queue of 1.25 on seed 2 once a probe needs two
    // clean windows and a re-measure goes to two thirds of the level,
    // 0.30-1.25 with 6 of 15 at the goals). Seed 1 at 1.39 (0.97 of the
    // oracle; 0.84 at 0.92 before) once windows split at dispatch numbers:
    // seeds 1-15 at 0.71-0.97 of the oracle, queue 0.29-1.39 (0.57-0.97,
    // 0.11-1.25 before).
    seeds("lognormal", 0.6, 1.4, 5.0);
}

#[test]
fn floor_drift() {
    // 0.82-0.83 of the oracle on seeds 1-3 since a slower host is told by
    // its latency alone (0.78-0.80 before).
    seeds("drift-up", 0.8, 1.0, 5.0);
}

#[test]
fn floor_heavy_tails_at_a_thousand_workers() {
    // `--wide`: 60 % of the oracle on seed 1, mean queue 0.5 (17 % while a
    // run of quick answers was taken for the host; 22 to 60 % on seeds 1 to
    // 3, mean queue up to 3.0). One seed: 200 000 requests take a minute
    // and a half in a debug build for three.
    meets("w1000-100ms-ln0.8", 1, 0.3, 1.0, 5.0);
}

#[test]
fn floor_large_capacity_drop() {
    // 256 -> 64 -> 256 workers at 100 ms: 0.85, 0.86 and 0.81 of the
    // oracle on seeds 1-3, mean queue 6.6, 7.9 and 2.7, never settled after
    // the recovery on seeds 1 and 2 (df8b34b; the goal is missed). Once
    // windows split at dispatch numbers: 0.86, 0.76 and 0.82, mean queue
    // 6.7, 2.7 and 7.7; seeds 1-15 at 0.76-0.89 (0.79-0.88 before), mean
    // queue 0.9-8.0 (2.9-11.7 before).
    let s = scenario("drop-large");
    for seed in 1..=3 {
        let oracle = &sim::oracle_hosts(&s, seed)[0];
        let host = &sim::run(&s, &default_policy(), seed).hosts[0];
        let share = oracle.makespan / host.makespan;
        assert!(
            share >= 0.75 && host.mean_queue <= 9.0 && host.early == 0,
            "seed {seed}: thr {share:.3} (guard 0.75), queue {:.2} (guard 9)",
            host.mean_queue
        );
    }
}

#[test]
fn floor_pareto_at_64_workers() {
    // `--wide`: 95 % of the oracle on seed 1, mean queue 1.2, since a
    // window more spread than any queue makes it replaces a reference that
    // missed its tail (aa0a6f6; 57 % before: Startup's rounds kept a
    // reference without the tail, and every whole window read as a queue).
    meets("w64-100ms-p1.5", 1, 0.85, 1.5, 5.0);
}

#[test]
fn floor_retry_after() {
    seeds("storm", 0.75, 1.0, 5.0);
}

#[test]
fn floor_several_hosts() {
    seeds("multi-host", 0.85, 1.0, 5.0);
    seeds("three-hosts", 0.9, 1.2, 5.0);
}

#[test]
fn a_large_steady_host_is_found_within_a_few_round_trips_past_32() {
    // 512 workers at 100 ms ± 10 %: past 32 in flight, Startup's windows
    // sized to the raise take about one round trip a level instead of
    // two, so the level passes 400 at 2.85 s (3.4 s before), and the
    // server's mean queue stays under 1 (0.65; 0.91 before).
    let host = Host::new("large", Model::queue(512, uniform(100)), 60_000).pool(4096);
    let run = sim::run(&alone(host), &default_policy(), 1);
    let h = &run.hosts[0];
    let found = h
        .series
        .iter()
        .find(|p| p.concurrency >= 400.0)
        .map(|p| p.t);
    assert!(found.is_some_and(|t| t <= 3.1), "past 400 at {found:?} s");
    assert!(h.mean_queue <= 1.0, "mean queue {}", h.mean_queue);
}
