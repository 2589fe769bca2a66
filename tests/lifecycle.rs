//! A request's life: latency measurement, the body-held place, cancellation
//! at every stage, inner errors and panics, and slot keys.

mod common;

use std::time::Duration;

use common::*;
use http::{Request, Response};
use http_body_util::BodyExt;
use tokio::time::{advance, Instant};
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::policy::Scrapy2012;
use tower_autothrottle::{AutoThrottleLayer, Config, DownloadSlot, SlotKey};

const MS: Duration = Duration::from_millis(1);

/// A layer with the original rules and their defaults (start delay 5 s).
fn scrapy_2012_layer() -> AutoThrottleLayer {
    let config = Config::builder()
        .policy(Scrapy2012::default())
        .build()
        .unwrap();
    AutoThrottleLayer::new(config)
}

fn slot(layer: &AutoThrottleLayer, key: &str) -> (usize, usize) {
    let s = layer.slot(key).unwrap();
    (s.in_flight, s.queued)
}

#[tokio::test(start_paused = true)]
async fn latency_is_the_inner_services_time_and_feeds_the_policy() {
    let recorder = Recorder::default();
    let layer = scrapy_2012_layer();
    let mut svc = layer.layer(server(recorder.clone()));
    let response = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://a.test/", 0, 237))
        .await
        .unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(snap.last_latency, Some(237 * MS));
    assert_eq!(snap.last_status, Some(http::StatusCode::OK));
    // Scrapy 2012: (5 s + 0.237 s) / 2.
    assert_eq!(snap.delay, Duration::from_secs_f64((5.0 + 0.237) / 2.0));
    assert_eq!(snap.concurrency, 1);
    assert_eq!(snap.responses, 1);
    // The place is held by the body until it is read.
    assert_eq!(snap.in_flight, 1);
    response.into_body().collect().await.unwrap();
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn latency_excludes_time_spent_waiting_in_the_slot() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::from_secs(2), 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let a = spawn_request(&mut svc, request("http://a.test/", 0, 10));
    let b = spawn_request(&mut svc, request("http://a.test/", 1, 40));
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(
        layer.slot("http://a.test").unwrap().last_latency,
        Some(40 * MS)
    );
}

#[tokio::test(start_paused = true)]
async fn the_body_holds_the_place_until_it_ends() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let first = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://a.test/", 0, 10))
        .await
        .unwrap();
    let second = spawn_request(&mut svc, request("http://a.test/", 1, 10));
    advance(Duration::from_secs(5)).await;
    settle().await;
    assert_eq!(
        recorder.of("a.test").len(),
        1,
        "the unread body keeps the place"
    );
    assert_eq!(slot(&layer, "http://a.test"), (1, 1));
    assert!(first.body().holds_place());
    let body = first.into_body().collect().await.unwrap();
    assert_eq!(body.to_bytes(), "hello");
    second.await.unwrap().unwrap();
    assert_eq!(recorder.of("a.test").len(), 2);
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_empty_body_gives_the_place_back_at_once() {
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(tower::service_fn(|_req: Request<String>| async {
        Ok::<_, std::convert::Infallible>(Response::new(
            http_body_util::Empty::<bytes::Bytes>::new(),
        ))
    }));
    let response = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://a.test/", 0, 0))
        .await
        .unwrap();
    assert!(!response.body().holds_place());
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_queued_request_frees_its_turn() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let first = spawn_request(&mut svc, request("http://a.test/", 0, 100));
    let head = spawn_request(&mut svc, request("http://a.test/", 1, 0));
    let middle = spawn_request(&mut svc, request("http://a.test/", 2, 0));
    let last = spawn_request(&mut svc, request("http://a.test/", 3, 0));
    settle().await;
    assert_eq!(slot(&layer, "http://a.test"), (1, 3));
    // Cancel the head of the queue and one in the middle.
    head.abort();
    middle.abort();
    settle().await;
    assert_eq!(slot(&layer, "http://a.test"), (1, 1));
    let start = Instant::now();
    first.await.unwrap().unwrap();
    let (_, done) = last.await.unwrap().unwrap();
    assert_eq!(
        done - start,
        100 * MS,
        "the last request takes the head's turn"
    );
    let ids: Vec<u64> = recorder.of("a.test").iter().map(|d| d.id).collect();
    assert_eq!(ids, vec![0, 3]);
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_head_while_it_waits_for_spacing() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::from_secs(1), 4);
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    let first = spawn_request(&mut svc, request("http://a.test/", 0, 0));
    let head = spawn_request(&mut svc, request("http://a.test/", 1, 0));
    let next = spawn_request(&mut svc, request("http://a.test/", 2, 0));
    settle().await;
    first.await.unwrap().unwrap();
    advance(300 * MS).await;
    head.abort();
    settle().await;
    next.await.unwrap().unwrap();
    let d = recorder.of("a.test");
    assert_eq!(d.iter().map(|d| d.id).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(d[1].at - start, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_dispatched_request_frees_its_place() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://a.test/", 0, 1_000));
    // Drive it into the inner call, then drop it.
    let timed_out = tokio::time::timeout(10 * MS, fut).await;
    assert!(timed_out.is_err());
    assert_eq!(recorder.of("a.test").len(), 1);
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
    assert_eq!(recorder.in_flight("a.test"), 0);
    let next = spawn_request(&mut svc, request("http://a.test/", 1, 0));
    next.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_a_half_read_body_frees_its_place() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let mut req = request("http://a.test/", 0, 0);
    req.headers_mut().insert("x-stream", "1".parse().unwrap());
    let response = svc.ready().await.unwrap().call(req).await.unwrap();
    let mut body = response.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    assert_eq!(slot(&layer, "http://a.test"), (1, 0));
    drop(body);
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
    spawn_request(&mut svc, request("http://a.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn inner_errors_free_the_place_and_leave_the_policy_alone() {
    let recorder = Recorder::default();
    let layer = scrapy_2012_layer();
    let mut svc = layer.layer(server(recorder.clone()));
    let mut req = request("http://a.test/", 0, 50);
    req.headers_mut().insert("x-fail", "1".parse().unwrap());
    let err = svc.ready().await.unwrap().call(req).await.unwrap_err();
    assert_eq!(err.to_string(), "inner failure");
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.in_flight, snap.queued, snap.responses), (0, 0, 0));
    assert_eq!(snap.delay, Duration::from_secs(5));
    // The slot still works; the next request waits the delay as usual.
    let start = Instant::now();
    spawn_request(&mut svc, request("http://a.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Instant::now() - start, Duration::from_secs(5) - 50 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_inner_future_frees_the_place() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let mut req = request("http://a.test/", 0, 10);
    req.headers_mut().insert("x-panic", "1".parse().unwrap());
    let joined = spawn_request(&mut svc, req).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
    spawn_request(&mut svc, request("http://a.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
}

#[derive(Clone)]
struct FailingReady;

impl Service<Request<String>> for FailingReady {
    type Response = Response<String>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<Response<String>, &'static str>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Err("not ready"))
    }
    fn call(&mut self, _: Request<String>) -> Self::Future {
        std::future::ready(Ok(Response::new(String::new())))
    }
}

#[tokio::test(start_paused = true)]
async fn an_inner_readiness_error_frees_the_place() {
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(FailingReady);
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://a.test/", 0, 0))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "not ready");
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn keys_normalize_and_can_be_chosen() {
    let recorder = Recorder::default();
    let config = Config::builder()
        .policy(Scrapy2012::default().start_delay(Duration::ZERO))
        .key_fn(|parts| (parts.uri.path() == "/api").then(|| SlotKey::new("api")))
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let mut svc = layer.layer(server(recorder.clone()));
    let mut with_ext = request("http://c.test/api", 0, 0);
    with_ext
        .extensions_mut()
        .insert(DownloadSlot::new("chosen"));
    let uris = [
        "http://Example.com/",
        "http://example.com:80/x",
        "http://user@example.com/",
        "http://example.com./",
        "https://example.com/",
        "https://example.com:443/",
        "http://example.com:8080/",
        "http://b.test/api",
    ];
    for (i, uri) in uris.iter().enumerate() {
        spawn_request(&mut svc, request(uri, i as u64, 0))
            .await
            .unwrap()
            .unwrap();
    }
    spawn_request(&mut svc, with_ext).await.unwrap().unwrap();
    let mut no_authority = request("/", 9, 0);
    no_authority
        .headers_mut()
        .insert("host", "Host.Test".parse().unwrap());
    let _ = spawn_request(&mut svc, no_authority).await.unwrap();
    let _ = spawn_request(&mut svc, request("/", 10, 0)).await.unwrap();
    let keys: Vec<(String, u64)> = layer
        .slots()
        .into_iter()
        .map(|s| (s.key.to_string(), s.dispatched))
        .collect();
    assert_eq!(
        keys,
        vec![
            ("api".to_owned(), 1),
            ("chosen".to_owned(), 1),
            ("default".to_owned(), 1),
            ("http://example.com".to_owned(), 4),
            ("http://example.com:8080".to_owned(), 1),
            ("http://host.test".to_owned(), 1),
            ("https://example.com".to_owned(), 2),
        ]
    );
}

/// An inner service that counts its clones and is ready only once `open`
/// is set (waking the task that last asked).
struct Counted<S> {
    inner: S,
    clones: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    open: std::sync::Arc<std::sync::Mutex<(bool, Option<std::task::Waker>)>>,
}

impl<S: Clone> Clone for Counted<S> {
    fn clone(&self) -> Self {
        self.clones
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Counted {
            inner: self.inner.clone(),
            clones: self.clones.clone(),
            open: self.open.clone(),
        }
    }
}

impl<S> Counted<S> {
    fn new(inner: S, open: bool) -> Self {
        Counted {
            inner,
            clones: Default::default(),
            open: std::sync::Arc::new(std::sync::Mutex::new((open, None))),
        }
    }

    fn open(&self) {
        let mut open = self.open.lock().unwrap();
        open.0 = true;
        if let Some(waker) = open.1.take() {
            waker.wake();
        }
    }

    fn clones(&self) -> usize {
        self.clones.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl<S: Service<Request<String>>> Service<Request<String>> for Counted<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        let mut open = self.open.lock().unwrap();
        if !open.0 {
            open.1 = Some(cx.waker().clone());
            return std::task::Poll::Pending;
        }
        drop(open);
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, req: Request<String>) -> Self::Future {
        self.inner.call(req)
    }
}

/// Sends `n` requests of 10 ms to `a.test`, each after the last one's body
/// ended.
async fn one_after_another<S>(svc: &mut S, n: u64)
where
    S: Service<Request<String>, Response = Response<tower_autothrottle::ThrottleBody<TestBody>>>,
    S::Error: std::fmt::Debug,
{
    for id in 0..n {
        let response = svc.ready().await.unwrap();
        let response = response.call(request("http://a.test/", id, 10)).await;
        response.unwrap().into_body().collect().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_admitted_at_once_goes_to_the_service_itself() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 4);
    let inner = Counted::new(server(recorder.clone()), true);
    let mut svc = layer.layer(inner.clone());
    let before = inner.clones();
    one_after_another(&mut svc, 5).await;
    assert_eq!(recorder.of("a.test").len(), 5);
    // Sent from `call` to the service itself: no clone made.
    assert_eq!(inner.clones(), before);
    // A request that waits in its slot's queue goes with a clone.
    let (layer, _) = scripted_layer(Duration::from_secs(1), 4);
    let mut svc = layer.layer(inner.clone());
    let before = inner.clones();
    one_after_another(&mut svc, 2).await;
    assert_eq!(recorder.of("a.test").len(), 7);
    assert_eq!(inner.clones(), before + 1, "the second request waited");
}

#[tokio::test(start_paused = true)]
async fn an_inner_service_not_ready_at_call_is_driven_by_the_future() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let inner = Counted::new(server(recorder.clone()), false);
    let mut svc = layer.layer(inner.clone());
    let start = Instant::now();
    let handle = spawn_request(&mut svc, request("http://a.test/", 0, 10));
    settle().await;
    // Admitted by its slot, holding its place, waiting for the service.
    assert_eq!(slot(&layer, "http://a.test"), (1, 0));
    assert!(recorder.of("a.test").is_empty());
    advance(Duration::from_millis(30)).await;
    inner.open();
    let (status, ended) = handle.await.unwrap().unwrap();
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(recorder.of("a.test").len(), 1);
    assert_eq!(ended - start, Duration::from_millis(40));
    // The latency runs from the call of the service, not from the admission.
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(snap.last_latency, Some(10 * MS));
    assert_eq!(slot(&layer, "http://a.test"), (0, 0));
}

/// A layer made outside a runtime whose clock is paused, and so behind the
/// real clock the layer read when it was made, measures latencies exactly
/// all the same: the gate and the future measure instants from long before
/// the layer was made, never from an instant such a clock has not reached.
#[test]
fn a_layer_made_ahead_of_a_paused_clock_measures_latency_exactly() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    std::thread::sleep(20 * MS);
    // Outside the runtime: the real clock, 20 ms ahead of the paused one.
    let layer = scrapy_2012_layer();
    rt.block_on(async {
        let mut svc = layer.layer(server(Recorder::default()));
        for (i, latency) in [237u32, 3, 41].into_iter().enumerate() {
            let _response = svc
                .ready()
                .await
                .unwrap()
                .call(request("http://a.test/", i as u64, latency.into()))
                .await
                .unwrap();
            let snap = layer.slot("http://a.test").unwrap();
            assert_eq!(snap.last_latency, Some(latency * MS));
        }
    });
}
