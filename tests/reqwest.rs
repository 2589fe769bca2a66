//! reqwest through reqwest-middleware, with the throttle's middleware,
//! against real hyper servers on 127.0.0.1 (paused clock).

mod common;
#[path = "support/site.rs"]
mod site;

use std::time::Duration;

use bytes::Bytes;
use common::Scripted;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::reqwest::AutoThrottleMiddleware;
use tower_autothrottle::{AutoThrottleLayer, Config, DontAdjust, DownloadSlot};

fn throttle(delay: Duration, limit: usize) -> (AutoThrottleLayer, Scripted) {
    let policy = Scripted::new(delay, limit);
    let config = Config::builder().policy(policy.clone()).build().unwrap();
    (AutoThrottleLayer::new(config), policy)
}

fn reqwest_client(layer: &AutoThrottleLayer) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(layer.middleware())
        .build()
}

#[tokio::test(start_paused = true)]
async fn spacing_and_limit_hold_over_reqwest() {
    let hosts = site::hosts(2).await;
    let delay = Duration::from_millis(25);
    let (layer, _) = throttle(delay, 2);
    let client = reqwest_client(&layer);
    let mut tasks = Vec::new();
    for i in 0..20 {
        let url = hosts[i % 2].url("/ok?ms=40");
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let response = client.get(&url).send().await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.url().as_str(), url, "the response keeps its URL");
            response.text().await.unwrap()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), "page /ok");
    }
    for host in &hosts {
        assert_eq!(host.stats.served(), 10);
        assert!(host.stats.max_active() <= 2);
        assert!(host.stats.min_gap().unwrap() >= delay);
        let slot = layer.slot(host.base()).unwrap();
        assert_eq!((slot.dispatched, slot.responses), (10, 10));
        assert_eq!((slot.in_flight, slot.queued), (0, 0));
    }
}

#[tokio::test(start_paused = true)]
async fn one_throttle_serves_a_hyper_stack_and_a_reqwest_client() {
    let host = site::host().await;
    let delay = Duration::from_millis(20);
    let (layer, _) = throttle(delay, 1);
    let reqwest = reqwest_client(&layer);
    let hyper = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let mut tasks = Vec::new();
    for i in 0..10 {
        let url = host.url("/ok?ms=10");
        if i % 2 == 0 {
            let client = reqwest.clone();
            tasks.push(tokio::spawn(async move {
                client.get(&url).send().await.unwrap().status().as_u16()
            }));
        } else {
            let svc = hyper.clone();
            tasks.push(tokio::spawn(async move {
                let request = http::Request::get(url).body(Empty::new()).unwrap();
                svc.oneshot(request).await.unwrap().status().as_u16()
            }));
        }
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), 200);
    }
    assert_eq!(host.stats.served(), 10);
    assert_eq!(host.stats.max_active(), 1, "one limit over both clients");
    assert!(
        host.stats.min_gap().unwrap() >= delay,
        "one spacing over both"
    );
    assert_eq!(layer.slots().len(), 1);
    assert_eq!(layer.slot(host.base()).unwrap().dispatched, 10);
}

#[tokio::test(start_paused = true)]
async fn the_body_holds_the_place_until_read() {
    let host = site::host().await;
    let (layer, _) = throttle(Duration::ZERO, 1);
    let client = reqwest_client(&layer);
    let first = client.get(host.url("/ok")).send().await.unwrap();
    assert_eq!(layer.slot(host.base()).unwrap().in_flight, 1);
    // A second request waits while the first body is unread.
    let second = {
        let client = client.clone();
        let url = host.url("/ok");
        tokio::spawn(async move { client.get(&url).send().await.unwrap().text().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(host.stats.served(), 1);
    assert_eq!(layer.slot(host.base()).unwrap().queued, 1);
    assert_eq!(first.text().await.unwrap(), "page /ok");
    assert_eq!(second.await.unwrap().unwrap(), "page /ok");
    assert_eq!(host.stats.served(), 2);
    assert_eq!(layer.slot(host.base()).unwrap().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn retry_after_from_reqwest_pauses_the_slot_for_every_client() {
    let host = site::host().await;
    let (layer, _) = throttle(Duration::ZERO, 4);
    let client = reqwest_client(&layer);
    let started = Instant::now();
    let response = client
        .get(host.url("/status/429?retry-after=3"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let slot = layer.slot(host.base()).unwrap();
    assert!(slot.paused_until.is_some());
    // The hyper stack on the same throttle waits too.
    let hyper = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let request = http::Request::get(host.url("/ok"))
        .body(Empty::new())
        .unwrap();
    let response = hyper.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let arrivals = host.stats.arrivals();
    assert!(arrivals[1].0 - arrivals[0].0 >= Duration::from_secs(3));
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn extensions_choose_the_slot_and_opt_out() {
    let host = site::host().await;
    let (layer, policy) = throttle(Duration::from_millis(10), 2);
    let client = reqwest_client(&layer);
    let response = client
        .get(host.url("/ok"))
        .with_extension(DownloadSlot::new("budget"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    assert_eq!(layer.slot("budget").unwrap().dispatched, 1);
    assert!(layer.slot(host.base()).is_none());

    // DontAdjust: the policy's new answer is not adopted on this response.
    policy.set(Duration::from_millis(500), 1);
    let response = client
        .get(host.url("/ok"))
        .with_extension(DownloadSlot::new("budget"))
        .with_extension(DontAdjust)
        .send()
        .await
        .unwrap();
    drop(response);
    let slot = layer.slot("budget").unwrap();
    assert_eq!(
        (slot.delay, slot.concurrency),
        (Duration::from_millis(10), 2)
    );
    assert_eq!(slot.responses, 2);
    // Without it, the next response adjusts the slot.
    drop(
        client
            .get(host.url("/ok"))
            .with_extension(DownloadSlot::new("budget"))
            .send()
            .await
            .unwrap(),
    );
    let slot = layer.slot("budget").unwrap();
    assert_eq!(
        (slot.delay, slot.concurrency),
        (Duration::from_millis(500), 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_an_overload_and_the_error_passes_through() {
    // A port with nothing listening.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let middleware = AutoThrottleMiddleware::new(
        Config::builder()
            .policy(Scripted::new(Duration::ZERO, 4))
            .build()
            .unwrap(),
    );
    let layer = middleware.layer();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .build();
    let error = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    let slot = layer.slot(format!("http://{addr}")).unwrap();
    assert_eq!(slot.overloads, 1);
    assert_eq!(slot.concurrency, 2);
    assert_eq!(slot.in_flight, 0);
}
