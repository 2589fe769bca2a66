//! The fleet's cost on loopback: a request through a layer that shares its
//! slots through Redis, next to the same layer alone, and the Redis calls
//! each dispatch makes (read from Redis's own `INFO commandstats`).
//!
//! ```text
//! cargo bench --bench fleet --features redis      # needs redis-server installed
//! ```
//!
//! Starts its own `redis-server` on a free port. One task sends 20 000
//! requests, one after another, to one host, through an always-ready
//! `service_fn`; zero delay and a limit that never binds, so that every
//! dispatch takes the fast path (the fleet lets it go at once).

mod common;
#[path = "../tests/support/redis.rs"]
mod redis_server;

use std::convert::Infallible;
use std::future::ready;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Fixed;
use http::{Request, Response};
use http_body_util::Empty;
use redis_server::RedisServer;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::redis::Fleet;
use tower_autothrottle::{AutoThrottleLayer, Config};

const REQUESTS: u32 = 20_000;

async fn run(layer: &AutoThrottleLayer) -> Duration {
    let mut svc = layer.layer(tower::service_fn(|_req: Request<()>| {
        ready(Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())))
    }));
    let start = Instant::now();
    for _ in 0..REQUESTS {
        let req = Request::get("http://one.example/").body(()).unwrap();
        drop(svc.ready().await.unwrap().call(req).await.unwrap());
    }
    start.elapsed() / REQUESTS
}

/// Calls of the scripts so far (`EVALSHA`, and `EVAL` when a script was
/// not cached yet).
async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let redis = RedisServer::start(None).await;
        let url = redis.url();
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let alone = AutoThrottleLayer::new(Config::builder().policy(Fixed::unbound()).build().unwrap());
        let fleet = AutoThrottleLayer::new(
            Config::builder()
                .policy(Fixed::unbound())
                .fleet(Fleet::new(url.as_str(), "bench"))
                .build()
                .unwrap(),
        );
        run(&alone).await;
        run(&fleet).await; // connect, load the scripts
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = script_calls(&mut conn).await;
        let local = run(&alone).await;
        let shared = run(&fleet).await;
        // Let the places given back off the request's path reach Redis.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let calls = script_calls(&mut conn).await - before;
        println!("alone:          {local:>9.2?} per request");
        println!("with the fleet: {shared:>9.2?} per request");
        println!(
            "Redis script calls per request: {:.2} (one reservation on the request's path, one release off it)",
            calls as f64 / f64::from(REQUESTS)
        );
    });
}
