//! End to end: hyper-util's legacy client wrapped in the layer, against real
//! hyper servers on 127.0.0.1 (two hosts on two ports). The sockets are real;
//! the clock is tokio's paused clock, which moves only when every task is
//! idle, so the timestamps below are exact whatever the machine's load.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::Scripted;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, Config};

#[derive(Default)]
struct ServerStats {
    active: AtomicUsize,
    max_active: AtomicUsize,
    served: AtomicUsize,
}

async fn start_server(stats: Arc<ServerStats>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let stats = Arc::clone(&stats);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let stats = Arc::clone(&stats);
                    async move {
                        let now = stats.active.fetch_add(1, Ordering::SeqCst) + 1;
                        stats.max_active.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        stats.active.fetch_sub(1, Ordering::SeqCst);
                        stats.served.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!(
                            "page {}",
                            req.uri().path()
                        )))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Records when each request leaves the throttle for the client.
#[derive(Clone)]
struct Stamp<S> {
    inner: S,
    log: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl<S: Service<Request<B>>, B> Service<Request<B>> for Stamp<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, req: Request<B>) -> S::Future {
        let host = req.uri().authority().unwrap().to_string();
        self.log.lock().unwrap().push((host, Instant::now()));
        self.inner.call(req)
    }
}

#[tokio::test(start_paused = true)]
async fn hyper_client_through_the_layer_against_real_servers() {
    let stats = [
        Arc::new(ServerStats::default()),
        Arc::new(ServerStats::default()),
    ];
    let addrs = [
        start_server(Arc::clone(&stats[0])).await,
        start_server(Arc::clone(&stats[1])).await,
    ];
    let delay = Duration::from_millis(15);
    let policy = Scripted::new(delay, 2);
    let throttle = AutoThrottleLayer::new(Config::builder().policy(policy).build().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let svc = ServiceBuilder::new()
        .layer(throttle.clone())
        .service(Stamp {
            inner: client,
            log: Arc::clone(&log),
        });

    let per_host = 15;
    let mut tasks = Vec::new();
    for i in 0..per_host {
        for addr in addrs {
            let svc = svc.clone();
            tasks.push(tokio::spawn(async move {
                let request = Request::get(format!("http://{addr}/p/{i}"))
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let response = svc.oneshot(request).await.unwrap();
                assert_eq!(response.status(), 200);
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(body, format!("page /p/{i}"));
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }

    for (addr, stats) in addrs.iter().zip(&stats) {
        assert_eq!(stats.served.load(Ordering::SeqCst), per_host);
        assert!(
            stats.max_active.load(Ordering::SeqCst) <= 2,
            "the limit holds at the server"
        );
        let key = format!("http://{addr}");
        let snap = throttle.slot(&key).expect("one slot per host");
        assert_eq!((snap.in_flight, snap.queued), (0, 0));
        assert_eq!(snap.responses, per_host as u64);
        assert!(snap.last_latency.unwrap() >= Duration::from_millis(5));
        let host = addr.to_string();
        let stamps: Vec<Instant> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| *h == host)
            .map(|(_, t)| *t)
            .collect();
        assert_eq!(stamps.len(), per_host);
        for pair in stamps.windows(2) {
            assert!(
                pair[1] - pair[0] >= delay,
                "spacing {:?}",
                pair[1] - pair[0]
            );
        }
    }
    assert_eq!(throttle.slots().len(), 2);
}
