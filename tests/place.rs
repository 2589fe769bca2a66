//! `AutoThrottleLayer::acquire` and `Place`: a client outside tower
//! throttled by the same slots as a tower client, against a real hyper
//! server on 127.0.0.1 (tokio's paused clock). The server counts what it
//! serves at once and when requests arrive.

mod common;
#[path = "support/site.rs"]
mod site;

use std::time::Duration;

use bytes::Bytes;
use common::scripted_layer;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, SlotKey};

/// A layer whose slots hold `delay` and `limit`.
fn throttle(delay: Duration, limit: usize) -> AutoThrottleLayer {
    scripted_layer(delay, limit).0
}

/// A client the throttle does not wrap: hyper-util's, called directly.
fn bare() -> Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One request through a place: acquire, send, read, report.
async fn outside(throttle: &AutoThrottleLayer, url: &str) -> StatusCode {
    let request = Request::get(url).body(Empty::<Bytes>::new()).unwrap();
    let place = throttle.acquire(&request).await;
    match bare().request(request).await {
        Ok(response) => {
            let status = response.status();
            let headers = response.headers().clone();
            response.into_body().collect().await.unwrap();
            place.report(status, &headers);
            status
        }
        Err(error) => {
            place.report_error(&error);
            StatusCode::BAD_GATEWAY
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_outside_tower_and_a_tower_client_share_one_limit_and_one_spacing() {
    let host = site::host().await;
    let throttle = throttle(Duration::from_millis(20), 2);
    let tower_client = ServiceBuilder::new()
        .layer(throttle.clone())
        .service(bare());
    let url = host.url("/ok?ms=50");
    let mut tasks = Vec::new();
    for i in 0..20 {
        let url = url.clone();
        let throttle = throttle.clone();
        let tower_client = tower_client.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                outside(&throttle, &url).await
            } else {
                let request = Request::get(url).body(Empty::new()).unwrap();
                let response = tower_client.oneshot(request).await.unwrap();
                let status = response.status();
                response.into_body().collect().await.unwrap();
                status
            }
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(host.stats.served(), 20);
    assert_eq!(host.stats.max_active(), 2, "one limit over both clients");
    let gap = host.stats.min_gap().unwrap();
    assert!(
        gap >= Duration::from_millis(20),
        "one spacing over both clients: {gap:?}"
    );
    let slot = throttle.slot(host.base()).unwrap();
    assert_eq!((slot.dispatched, slot.responses), (20, 20));
    assert_eq!((slot.in_flight, slot.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_reported_through_a_place_pauses_the_tower_client() {
    let host = site::host().await;
    let throttle = throttle(Duration::ZERO, 4);
    let status = outside(&throttle, &host.url("/status/429?retry-after=3")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let reported = Instant::now();
    let tower_client = ServiceBuilder::new()
        .layer(throttle.clone())
        .service(bare());
    let request = Request::get(host.url("/ok")).body(Empty::new()).unwrap();
    let response = tower_client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(
        arrivals[1].0 - reported >= Duration::from_secs(3),
        "the tower client waited for the Retry-After the place reported"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_place_gives_its_place_back_and_teaches_nothing() {
    let throttle = throttle(Duration::ZERO, 1);
    let key = SlotKey::new("http://example.test");
    let place = throttle.acquire_key(key.clone()).await;
    assert_eq!(place.key(), &key);
    // The slot's one place is taken: a second waits.
    let second = tokio::spawn({
        let throttle = throttle.clone();
        let key = key.clone();
        async move { throttle.acquire_key(key).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let slot = throttle.slot(key.as_str()).unwrap();
    assert_eq!((slot.in_flight, slot.queued), (1, 1));
    drop(place);
    let second = second.await.unwrap();
    let slot = throttle.slot(key.as_str()).unwrap();
    assert_eq!((slot.in_flight, slot.queued), (1, 0));
    assert_eq!(slot.responses, 0, "a drop is no report");
    second.report_error(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    let slot = throttle.slot(key.as_str()).unwrap();
    assert_eq!(slot.in_flight, 0);
    assert_eq!(slot.overloads, 1, "a refused connection is an overload");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_leaves_the_queue() {
    let throttle = throttle(Duration::ZERO, 1);
    let uri: http::Uri = "http://example.test/a".parse().unwrap();
    let held = throttle.acquire_uri(&uri).await;
    assert_eq!(held.key().as_str(), "http://example.test");
    let waiting = tokio::time::timeout(Duration::from_secs(1), throttle.acquire_uri(&uri)).await;
    assert!(waiting.is_err(), "the slot's one place is held");
    let slot = throttle.slot("http://example.test").unwrap();
    assert_eq!(
        (slot.in_flight, slot.queued),
        (1, 0),
        "the timed-out wait left"
    );
    drop(held);
    let again = throttle.acquire_uri(&uri).await;
    again.report_latency(StatusCode::OK, &HeaderMap::new(), Duration::from_millis(5));
    let slot = throttle.slot("http://example.test").unwrap();
    assert_eq!(slot.last_latency, Some(Duration::from_millis(5)));
}

#[tokio::test(start_paused = true)]
async fn a_dont_adjust_request_teaches_its_slot_nothing() {
    let throttle = throttle(Duration::ZERO, 4);
    let mut request = Request::get("http://example.test/big").body(()).unwrap();
    request
        .extensions_mut()
        .insert(tower_autothrottle::DontAdjust);
    let place = throttle.acquire(&request).await;
    place.report(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new());
    let slot = throttle.slot("http://example.test").unwrap();
    assert_eq!(slot.overloads, 0, "a 503 it was told to ignore");
    // Without the extension, the same report is an overload.
    let request = Request::get("http://example.test/big").body(()).unwrap();
    let place = throttle.acquire(&request).await;
    place.report(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new());
    assert_eq!(throttle.slot("http://example.test").unwrap().overloads, 1);
}
