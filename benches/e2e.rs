//! End to end: hyper-util's client against a real hyper server on
//! 127.0.0.1 (HTTP/1.1 keep-alive), with and without the layer (zero delay,
//! a limit that never binds), in requests per second.
//!
//! ```text
//! cargo bench --bench e2e
//! ```
//!
//! One 2-worker runtime runs both the server and the client (the machine
//! has 2 cores); 32 tasks send requests back to back, 40 000 per run. The
//! runs alternate, bare and throttled, 5 of each; the median of each is
//! reported, and the throttled median as a share of the bare one (the goal
//! is at least 95 %).

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Fixed;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, BoxError, Config};

const TASKS: usize = 32;
const REQUESTS: usize = 40_000;
const RUNS: usize = 5;

async fn server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Requests per second through `svc`.
async fn run<S, B>(svc: S, addr: SocketAddr) -> f64
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let svc = svc.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                for _ in 0..REQUESTS / TASKS {
                    let req = Request::get(uri.clone()).body(Empty::new()).unwrap();
                    let response = svc.clone().oneshot(req).await.map_err(Into::into).unwrap();
                    response
                        .into_body()
                        .collect()
                        .await
                        .map_err(Into::into)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    REQUESTS as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = server().await;
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let throttle =
            AutoThrottleLayer::new(Config::builder().policy(Fixed::unbound()).build().unwrap());
        let throttled = ServiceBuilder::new()
            .layer(throttle)
            .service(client.clone());
        // Warm up: open the connections.
        run(client.clone(), addr).await;
        run(throttled.clone(), addr).await;
        let (mut bare, mut with) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            bare.push(run(client.clone(), addr).await);
            with.push(run(throttled.clone(), addr).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (b, w) = (median(bare.clone()), median(with.clone()));
        println!(
            "bare client:      {b:>8.0} requests/s (runs: {})",
            fmt(&bare)
        );
        println!(
            "with the layer:   {w:>8.0} requests/s (runs: {})",
            fmt(&with)
        );
        println!("throttled / bare: {:.1} %", 100.0 * w / b);
    });
}

fn fmt(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}
