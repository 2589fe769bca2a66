//! Timer precision on the real clock: how far apart the layer dispatches a
//! slot's requests, against the slot's delay.
//!
//! ```text
//! cargo bench --bench timer
//! ```
//!
//! A 2-worker tokio runtime, the default timer. Every request of a slot is
//! queued at once; the inner service stamps each call with the real clock
//! (`std::time::Instant`), and the gaps between a slot's consecutive calls
//! are compared with its delay: the smallest gap (never below the delay is
//! the goal) and the overshoot, gap minus delay (mean under 1.5 ms is the
//! goal), mean, 99th percentile and largest.

mod common;

use std::convert::Infallible;
use std::future::ready;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Fixed;
use http::{Request, Response};
use http_body_util::Empty;
use tower::{Layer, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, Config};

async fn run(slots: usize, per_slot: usize, delay: Duration) {
    let policy = Fixed {
        delay,
        limit: 1 << 20,
    };
    let layer = AutoThrottleLayer::new(Config::builder().policy(policy).build().unwrap());
    let stamps: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
    let inner = {
        let stamps = Arc::clone(&stamps);
        tower::service_fn(move |req: Request<()>| {
            let slot: usize = req.uri().host().unwrap()[1..]
                .split('.')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            stamps.lock().unwrap().push((slot, Instant::now()));
            ready(Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())))
        })
    };
    let svc = layer.layer(inner);
    let mut tasks = Vec::new();
    for _ in 0..per_slot {
        for s in 0..slots {
            let svc = svc.clone();
            let req = Request::get(format!("http://s{s}.example/"))
                .body(())
                .unwrap();
            tasks.push(tokio::spawn(async move {
                drop(svc.oneshot(req).await.unwrap())
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stamps = stamps.lock().unwrap();
    let mut by_slot = vec![Vec::new(); slots];
    for &(s, at) in stamps.iter() {
        by_slot[s].push(at);
    }
    let mut gaps: Vec<Duration> = by_slot
        .iter()
        .flat_map(|at| at.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>())
        .collect();
    gaps.sort();
    let over: Vec<f64> = gaps
        .iter()
        .map(|g| (g.as_secs_f64() - delay.as_secs_f64()) * 1e3)
        .collect();
    let mean = over.iter().sum::<f64>() / over.len() as f64;
    let p99 = over[(over.len() * 99 / 100).min(over.len() - 1)];
    println!(
        "{slots:>5} slot(s) x {per_slot:>3} requests, delay {delay:>6.1?}: smallest gap {:>9.3?} ({}), overshoot mean {mean:.3} ms, p99 {p99:.3} ms, max {:.3} ms",
        gaps[0],
        if gaps[0] >= delay { "never below the delay" } else { "BELOW THE DELAY" },
        over[over.len() - 1],
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        run(1, 200, Duration::from_millis(10)).await;
        run(1, 200, Duration::from_millis(2)).await;
        run(1, 100, Duration::from_millis(50)).await;
        run(1_000, 20, Duration::from_millis(10)).await;
        run(1_000, 10, Duration::from_millis(50)).await;
    });
}
