//! Stress on both cores, real clock: many requests over many hosts with
//! random cancellations, inner errors, panics and 429 storms. Nothing may
//! leak or stick: afterwards every slot has nothing in flight and nothing
//! queued. Only end states are asserted, never timings.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use http_body_util::BodyExt;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::policy::Adaptive;
use tower_autothrottle::{AutoThrottleLayer, Config};

/// Both cores, real clock: cancellations, errors, panics, half-read bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_leaks_on_both_cores() {
    run(20261130, false, 20_000).await;
}

/// Paused clock: the same with 429 storms, whose backoff would take long
/// on the real clock.
#[tokio::test(start_paused = true)]
async fn nothing_leaks_under_429_storms() {
    run(7, true, 5_000).await;
}

async fn run(seed: u64, storms: bool, requests: u64) {
    let config = Config::builder()
        .policy(Adaptive::default().initial_concurrency(4))
        .max_pending(2_000)
        .build()
        .unwrap();
    let throttle = AutoThrottleLayer::new(config);
    let svc = throttle.layer(server(Recorder::default()));
    let outcomes = Arc::new([(); 5].map(|_| AtomicU64::new(0)));
    let mut tasks = Vec::new();
    let mut rng = Rng::new(seed);
    for i in 0..requests {
        let host = rng.below(50);
        let kind = match rng.below(20) {
            1..=3 if !storms => 6,
            k => k,
        };
        let cancel_after = rng.below(3);
        let mut req = request(&format!("http://h{host}.test/"), i, 0);
        match kind {
            0 => {
                req.headers_mut().insert("x-fail", "1".parse().unwrap());
            }
            1..=3 => {
                req.headers_mut().insert("x-status", "429".parse().unwrap());
                // Mostly no pause, so the storm keeps going.
                if kind == 1 {
                    req.headers_mut()
                        .insert("x-reply-retry-after", "0".parse().unwrap());
                }
            }
            4 => {
                req.headers_mut().insert("x-stream", "1".parse().unwrap());
            }
            5 => {
                req.headers_mut().insert("x-panic", "1".parse().unwrap());
            }
            _ => {}
        }
        let mut svc = svc.clone();
        let outcomes = Arc::clone(&outcomes);
        tasks.push(tokio::spawn(async move {
            let work = async {
                let svc = svc.ready().await?;
                let response = svc.call(req).await?;
                let mut body = response.into_body();
                // Read one frame; a streaming body is dropped half-read.
                let _ = body.frame().await;
                Ok::<_, tower_autothrottle::BoxError>(())
            };
            let result = if cancel_after == 0 {
                // Cancelled at a random point: queued, dispatched or reading.
                tokio::time::timeout(Duration::from_micros(50), work).await
            } else {
                Ok(work.await)
            };
            let slot = match result {
                Err(_) => 0,
                Ok(Ok(())) => 1,
                Ok(Err(_)) => 2,
            };
            outcomes[slot].fetch_add(1, Ordering::Relaxed);
        }));
    }
    let mut panicked = 0;
    for t in tasks {
        if t.await.is_err() {
            panicked += 1;
        }
    }
    let counts: Vec<u64> = outcomes.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    eprintln!(
        "seed {seed}: cancelled {}, ok {}, errors {}, panicked {panicked}",
        counts[0], counts[1], counts[2]
    );
    assert!(
        counts[1] > requests / 4,
        "many requests succeed: {counts:?}"
    );
    assert!(panicked > 0, "the panic path was exercised");
    let slots = throttle.slots();
    assert_eq!(slots.len(), 50);
    for s in slots {
        assert_eq!((s.in_flight, s.queued), (0, 0), "seed {seed}: {s:?}");
    }
}
