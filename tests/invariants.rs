//! Randomized invariants of every policy (seeded): whatever the samples,
//! including zero, sub-nanosecond and enormous latencies and every outcome,
//! a policy never panics, its delay stays finite, not negative and within
//! its bounds, and its limit within [1, its maximum].

mod common;

use common::Rng;
use http::StatusCode;
use tower_autothrottle::policy::{
    Adaptive, Aimd, Gradient2, MakePolicy, Outcome, Sample, Scrapy, Scrapy2012, Vegas,
};
use tower_autothrottle::SlotKey;

/// (policy, lowest delay, highest delay, highest limit)
fn policies() -> Vec<(Box<dyn MakePolicy>, f64, f64, usize)> {
    vec![
        (Box::new(Adaptive::default()), 0.0, 60.0, 64),
        (
            Box::new(
                Adaptive::default()
                    .min_delay_secs(0.5)
                    .max_delay_secs(2.0)
                    .max_concurrency(3),
            ),
            0.5,
            2.0,
            3,
        ),
        (Box::new(Scrapy::default()), 0.0, 60.0, 8),
        (
            Box::new(
                Scrapy::default()
                    .min_delay_secs(1.0)
                    .max_delay_secs(1.5)
                    .start_delay_secs(1.2),
            ),
            1.0,
            1.5,
            8,
        ),
        (Box::new(Scrapy2012::default()), 0.0, f64::INFINITY, 8),
        (
            Box::new(Scrapy2012::default().check_period(2).max_concurrency(3)),
            0.0,
            f64::INFINITY,
            3,
        ),
        (Box::new(Aimd::default()), 0.0, 0.0, 200),
        (
            Box::new(Aimd::default().min_concurrency(1).max_concurrency(5)),
            0.0,
            0.0,
            5,
        ),
        (Box::new(Vegas::default()), 0.0, 0.0, 1000),
        (
            Box::new(
                Vegas::default()
                    .initial_concurrency(1)
                    .max_concurrency(7)
                    .smoothing(0.3),
            ),
            0.0,
            0.0,
            7,
        ),
        (Box::new(Gradient2::default()), 0.0, 0.0, 200),
        (
            Box::new(Gradient2::default().min_concurrency(1).max_concurrency(9)),
            0.0,
            0.0,
            9,
        ),
    ]
}

fn sample(rng: &mut Rng) -> Sample {
    let latency = match rng.below(8) {
        0 => 0.0,
        1 => 1e-12,
        2 => 1e12,
        3 => rng.unit() * 1e-3,
        4 => rng.unit() * 100.0,
        _ => rng.unit(),
    };
    let in_flight = rng.below(2_000) as usize;
    match rng.below(10) {
        0 => Sample::error(latency, Outcome::Overload).with_in_flight(in_flight),
        1 => Sample::error(latency, Outcome::Ignore).with_in_flight(in_flight),
        _ => {
            let status = *rng.pick(&[200u16, 200, 200, 201, 301, 404, 429, 500, 503, 504]);
            Sample::from_secs_f64(latency, StatusCode::from_u16(status).unwrap())
                .with_in_flight(in_flight)
        }
    }
}

#[test]
fn every_policy_stays_within_its_bounds() {
    for seed in 0..40u64 {
        for (i, (policy, lo, hi, max)) in policies().into_iter().enumerate() {
            policy.validate().unwrap();
            let mut rng = Rng::new(seed * 100 + i as u64);
            let mut state = policy.make_policy(&SlotKey::new("t"));
            for step in 0..2_000 {
                let s = sample(&mut rng);
                let t = state.on_sample(&s);
                let ctx = || {
                    format!(
                        "seed {seed}, policy {i} ({}), step {step}, sample {s:?}, {t:?}",
                        policy.name()
                    )
                };
                assert!(
                    t.delay_secs().is_finite() && t.delay_secs() >= 0.0,
                    "{}",
                    ctx()
                );
                // The start delay may lie outside [lo, hi] until adjusted
                // (Scrapy does not clamp it either).
                assert!(t.delay_secs() >= lo || step == 0, "{}", ctx());
                assert!(t.delay_secs() <= hi, "{}", ctx());
                if lo == hi {
                    assert_eq!(t.delay_secs(), lo, "{}", ctx());
                }
                assert!((1..=max).contains(&t.concurrency()), "{}", ctx());
                // Converting to a Duration never panics.
                let _ = t.delay();
            }
        }
    }
}
