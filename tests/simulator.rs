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
