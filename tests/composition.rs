//! The layer composed with tower's and tower-http's middleware, in the
//! orders the README recommends, against real hyper servers on 127.0.0.1
//! (hyper-util's client; tokio's paused clock, so the timings are exact).

mod common;
#[path = "support/site.rs"]
mod site;

use std::future::Ready;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use common::Scripted;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, BoxError, Config};

type Body = Empty<Bytes>;
type HyperClient = Client<HttpConnector, Body>;

fn client() -> HyperClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn get(url: &str) -> Request<Body> {
    Request::get(url).body(Empty::new()).unwrap()
}

fn throttle(delay: Duration, limit: usize) -> AutoThrottleLayer {
    let config = Config::builder()
        .policy(Scripted::new(delay, limit))
        .build()
        .unwrap();
    AutoThrottleLayer::new(config)
}

/// Sends `n` requests at once through `svc` and reads every body.
async fn burst<S, B>(svc: &S, urls: Vec<String>) -> Vec<Result<StatusCode, BoxError>>
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let tasks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let response = svc.oneshot(get(&url)).await.map_err(Into::into)?;
                let status = response.status();
                response.into_body().collect().await.map_err(Into::into)?;
                Ok(status)
            })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn timeout_inside_the_throttle_counts_as_overload() {
    let host = site::host().await;
    let throttle = throttle(Duration::ZERO, 4);
    // Throttle outside, timeout inside: the timeout measures the server,
    // not the queue, and an elapsed one reaches the throttle as an error.
    let svc = ServiceBuilder::new()
        .layer(throttle.clone())
        .timeout(Duration::from_millis(100))
        .service(client());
    let error = svc
        .clone()
        .oneshot(get(&host.url("/ok?ms=500")))
        .await
        .unwrap_err();
    assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    let slot = throttle.slot(host.base()).unwrap();
    assert_eq!(slot.overloads, 1);
    assert_eq!(slot.concurrency, 2, "an overload halves the limit");
    assert!(slot.delay > Duration::ZERO, "and backs the rate off");
    assert_eq!((slot.in_flight, slot.queued), (0, 0));
    // A quick answer still goes through.
    let response = svc.oneshot(get(&host.url("/ok"))).await.unwrap();
    assert_eq!(response.status(), 200);
}

/// Retries a 429 (up to `left` times).
#[derive(Clone)]
struct RetryTooMany {
    left: usize,
}

impl<B, E> tower::retry::Policy<Request<Body>, Response<B>, E> for RetryTooMany {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _req: &mut Request<Body>,
        result: &mut Result<Response<B>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(response) if response.status() == StatusCode::TOO_MANY_REQUESTS && self.left > 0 => {
                self.left -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        Some(get(&req.uri().to_string()))
    }
}

#[tokio::test(start_paused = true)]
async fn retry_outside_the_throttle_passes_the_gate_again_and_waits_for_retry_after() {
    let host = site::host().await;
    let throttle = throttle(Duration::from_millis(10), 4);
    let svc = ServiceBuilder::new()
        .retry(RetryTooMany { left: 3 })
        .layer(throttle.clone())
        .service(client());
    let started = Instant::now();
    let response = svc
        .oneshot(get(&host.url("/flaky?first=429&retry-after=2")))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the retry succeeded");
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1].0 - arrivals[0].0;
    assert!(
        gap >= Duration::from_secs(2),
        "the retry waited for Retry-After: {gap:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let slot = throttle.slot(host.base()).unwrap();
    assert_eq!(slot.dispatched, 2, "each attempt passed the gate");
}

/// A client that cannot be cloned.
struct NotClone {
    client: HyperClient,
}

impl Service<Request<Body>> for NotClone {
    type Response = Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        Service::call(&mut self.client, req)
    }
}

#[tokio::test(start_paused = true)]
async fn buffer_gives_a_non_clone_service_to_the_throttle() {
    let host = site::host().await;
    let delay = Duration::from_millis(20);
    let throttle = throttle(delay, 2);
    let svc = ServiceBuilder::new()
        .layer(throttle.clone())
        .buffer(64)
        .service(NotClone { client: client() });
    let results = burst(&svc, (0..12).map(|_| host.url("/ok?ms=30")).collect()).await;
    assert!(results.iter().all(|r| matches!(r, Ok(StatusCode::OK))));
    assert_eq!(host.stats.served(), 12);
    assert!(host.stats.max_active() <= 2);
    assert!(host.stats.min_gap().unwrap() >= delay);
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_outside_bounds_all_hosts_together() {
    let site = Arc::new(site::Stats::default());
    let mut hosts = Vec::new();
    for _ in 0..3 {
        hosts.push(site::host_counted(Some(Arc::clone(&site))).await);
    }
    let delay = Duration::from_millis(5);
    let throttle = throttle(delay, 3);
    // A global cap of 4 over three hosts that each allow 3: outside the
    // throttle, it counts queued requests too (like `max_pending`).
    let svc = ServiceBuilder::new()
        .concurrency_limit(4)
        .layer(throttle.clone())
        .service(client());
    let urls: Vec<String> = (0..30).map(|i| hosts[i % 3].url("/ok?ms=40")).collect();
    let results = burst(&svc, urls).await;
    assert!(results.iter().all(|r| matches!(r, Ok(StatusCode::OK))));
    assert!(site.max_active() <= 4, "site-wide: {}", site.max_active());
    assert!(
        site.max_active() >= 3,
        "and the cap was used: {}",
        site.max_active()
    );
    for host in &hosts {
        assert_eq!(host.stats.served(), 10);
        assert!(host.stats.max_active() <= 3);
        assert!(host.stats.min_gap().unwrap() >= delay);
    }
}

#[tokio::test(start_paused = true)]
async fn trace_layer_outside_sees_throttled_responses() {
    let host = site::host().await;
    let throttle = throttle(Duration::from_millis(10), 1);
    let svc = ServiceBuilder::new()
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(throttle.clone())
        .service(client());
    let results = burst(&svc, (0..5).map(|_| host.url("/ok?ms=5")).collect()).await;
    assert!(results.iter().all(|r| matches!(r, Ok(StatusCode::OK))));
    assert!(host.stats.max_active() <= 1);
    assert!(host.stats.min_gap().unwrap() >= Duration::from_millis(10));
    assert_eq!(throttle.slot(host.base()).unwrap().responses, 5);
}

#[tokio::test(start_paused = true)]
async fn follow_redirect_outside_sends_each_hop_through_its_own_slot() {
    let hosts = site::hosts(2).await;
    let (from, to) = (&hosts[0], &hosts[1]);
    let throttle = throttle(Duration::from_millis(10), 2);
    let svc = ServiceBuilder::new()
        .layer(tower_http::follow_redirect::FollowRedirectLayer::new())
        .layer(throttle.clone())
        .service(client());
    let target = to.url("/ok");
    let response = svc
        .clone()
        .oneshot(get(&from.url(&format!("/redirect?to={target}"))))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "page /ok");
    let slots = throttle.slots();
    assert_eq!(slots.len(), 2);
    assert_eq!(throttle.slot(from.base()).unwrap().dispatched, 1);
    assert_eq!(
        throttle.slot(to.base()).unwrap().dispatched,
        1,
        "the redirected request used the target's slot"
    );
    assert_eq!(from.stats.served(), 1);
    assert_eq!(to.stats.served(), 1);
}

#[tokio::test(start_paused = true)]
async fn follow_redirect_inside_keeps_every_hop_in_the_first_slot() {
    // The other order, documented as such: the throttle sees one request.
    let hosts = site::hosts(2).await;
    let (from, to) = (&hosts[0], &hosts[1]);
    let throttle = throttle(Duration::from_millis(10), 2);
    let svc = ServiceBuilder::new()
        .layer(throttle.clone())
        .layer(tower_http::follow_redirect::FollowRedirectLayer::new())
        .service(client());
    let target = to.url("/ok");
    let response = svc
        .oneshot(get(&from.url(&format!("/redirect?to={target}"))))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(throttle.slots().len(), 1);
    assert_eq!(throttle.slot(from.base()).unwrap().dispatched, 1);
    assert!(throttle.slot(to.base()).is_none());
}
