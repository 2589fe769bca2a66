//! `retry::RetryPolicy` (feature `retry`) in tower's `Retry`, outside the
//! throttle, against real hyper servers on 127.0.0.1 through hyper-util's
//! client (tokio's paused clock, so the waits are exact). What the server
//! saw is counted at the server.

mod common;
#[path = "support/site.rs"]
mod site;

use std::time::Duration;

use bytes::Bytes;
use common::scripted_layer;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::retry::RetryPolicy;
use tower_autothrottle::{AutoThrottle, AutoThrottleLayer};

type Body = Empty<Bytes>;

/// A layer whose slots hold 10 ms and 4.
fn throttle() -> AutoThrottleLayer {
    scripted_layer(Duration::from_millis(10), 4).0
}

fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// The stack under test: the retry outside the throttle, hyper-util's
/// client inside.
fn stack(
    policy: RetryPolicy,
    throttle: &AutoThrottleLayer,
) -> tower::retry::Retry<RetryPolicy, AutoThrottle<Client<HttpConnector, Body>>> {
    ServiceBuilder::new()
        .retry(policy)
        .layer(throttle.clone())
        .service(client())
}

fn request(method: Method, url: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(url)
        .body(Empty::new())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_429_is_retried_after_the_throttle_waited_for_retry_after() {
    let host = site::host().await;
    let throttle = throttle();
    let svc = stack(RetryPolicy::new(), &throttle);
    let started = Instant::now();
    let response = svc
        .oneshot(request(
            Method::GET,
            &host.url("/flaky?first=429&retry-after=2"),
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "the retry succeeded");
    // Its body holds the place until it is read or dropped.
    drop(response);
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 2, "one retry");
    let gap = arrivals[1].0 - arrivals[0].0;
    assert!(
        gap >= Duration::from_secs(2),
        "the retry waited for Retry-After at the throttle: {gap:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "and no longer");
    let slot = throttle.slot(host.base()).unwrap();
    assert_eq!(slot.dispatched, 2, "each attempt passed the gate");
    assert_eq!((slot.in_flight, slot.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_503_is_retried_and_the_last_answer_is_returned_after_the_maximum() {
    let host = site::host().await;
    let svc = stack(RetryPolicy::new().max_retries(2), &throttle());
    let response = svc
        .oneshot(request(Method::GET, &host.url("/status/503")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(host.stats.served(), 3, "the first try and two retries");
}

#[tokio::test(start_paused = true)]
async fn a_post_is_not_retried_unless_allowed() {
    let host = site::host().await;
    let svc = stack(RetryPolicy::new(), &throttle());
    let url = host.url("/flaky?first=429&retry-after=1");
    let response = svc.oneshot(request(Method::POST, &url)).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(host.stats.served(), 1, "POST is not idempotent");

    let host = site::host().await;
    let svc = stack(RetryPolicy::new().methods([Method::POST]), &throttle());
    let url = host.url("/flaky?first=429&retry-after=1");
    let response = svc.oneshot(request(Method::POST, &url)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(host.stats.served(), 2, "allowed, it is retried");
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_through_the_gate() {
    // A port with nothing listening on it.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let throttle = throttle();
    let svc = stack(RetryPolicy::new().max_retries(3), &throttle);
    let error = svc
        .oneshot(request(Method::GET, &format!("http://{addr}/")))
        .await
        .unwrap_err();
    assert!(
        tower_autothrottle::retry::connection_failure(error.as_ref()),
        "{error}"
    );
    let slot = throttle.slot(format!("http://{addr}")).unwrap();
    assert_eq!(slot.dispatched, 4, "the first try and three retries");
    assert_eq!((slot.in_flight, slot.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_spent_budget_stops_retries() {
    use std::sync::Arc;
    use tower::retry::budget::TpsBudget;
    let host = site::host().await;
    // No reserve and no share of the requests: no retry at all.
    let budget = Arc::new(TpsBudget::new(Duration::from_secs(1), 0, 0.0));
    let svc = stack(RetryPolicy::new().budget(budget), &throttle());
    let response = svc
        .oneshot(request(Method::GET, &host.url("/status/503")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(host.stats.served(), 1);
}
