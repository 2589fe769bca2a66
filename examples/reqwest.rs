//! One throttle in front of a reqwest client and a hyper-util client at
//! once, against a small local site.
//!
//! ```text
//! cargo run --example reqwest --features reqwest
//! ```
//!
//! Starts two hosts on 127.0.0.1 (one quick, one slow that admits two
//! requests at a time), sends 40 requests to them, half through reqwest
//! (with reqwest-middleware) and half through hyper-util's client, and
//! prints each slot as the shared throttle left it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use reqwest_middleware::ClientBuilder;
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, BoxError, Config};

/// A host answering after `latency`, slowing down past `capacity` requests at once.
async fn host(latency: Duration, capacity: usize) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let active = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let active = Arc::clone(&active);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    let active = Arc::clone(&active);
                    async move {
                        let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                        let over = now.saturating_sub(capacity) as u32;
                        tokio::time::sleep(latency * (1 + over)).await;
                        active.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let quick = host(Duration::from_millis(5), 16).await;
    let slow = host(Duration::from_millis(60), 2).await;

    let throttle = AutoThrottleLayer::new(Config::default());
    let reqwest = ClientBuilder::new(reqwest::Client::new())
        .with(throttle.middleware())
        .build();
    let hyper = ServiceBuilder::new()
        .layer(throttle.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let url = format!("http://{}/page/{i}", if i % 4 < 2 { quick } else { slow });
        if i % 2 == 0 {
            let client = reqwest.clone();
            tasks.push(tokio::spawn(async move {
                let response = client.get(&url).send().await?;
                response.bytes().await?;
                Ok::<_, BoxError>(())
            }));
        } else {
            let svc = hyper.clone();
            tasks.push(tokio::spawn(async move {
                let request = http::Request::get(&url).body(Empty::new())?;
                svc.oneshot(request).await?.into_body().collect().await?;
                Ok::<_, BoxError>(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    println!(
        "40 requests (20 reqwest, 20 hyper) in {:.2?}",
        started.elapsed()
    );
    for slot in throttle.slots() {
        println!(
            "{}: {} requests, delay {:?}, concurrency {}, smoothed latency {:?}",
            slot.key,
            slot.dispatched,
            slot.delay,
            slot.concurrency,
            slot.latency.unwrap_or_default()
        );
    }
    Ok(())
}
