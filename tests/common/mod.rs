//! Test support: a recording inner service, a scripted policy, bodies.
#![allow(dead_code, unreachable_pub)]

#[path = "../support/rng.rs"]
mod rng;
pub use rng::Rng;

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::time::Instant;
use tower::{Service, ServiceExt};
use tower_autothrottle::policy::{MakePolicy, Policy, Sample, Throttle};
use tower_autothrottle::{AutoThrottleLayer, Config, ConfigError, SlotKey};

/// A policy whose answer the test sets from outside; the slot adopts it on
/// its next response (and at creation).
#[derive(Clone, Debug)]
pub struct Scripted(pub Arc<Mutex<(f64, usize)>>);

impl Scripted {
    pub fn new(delay: Duration, limit: usize) -> Self {
        Scripted(Arc::new(Mutex::new((delay.as_secs_f64(), limit))))
    }
    pub fn set(&self, delay: Duration, limit: usize) {
        *self.0.lock().unwrap() = (delay.as_secs_f64(), limit);
    }
}

#[derive(Debug)]
struct ScriptedState(Arc<Mutex<(f64, usize)>>);

impl Policy for ScriptedState {
    fn throttle(&self) -> Throttle {
        let (d, l) = *self.0.lock().unwrap();
        Throttle::new(d, l)
    }
    fn on_sample(&mut self, _: &Sample) -> Throttle {
        self.throttle()
    }
}

impl MakePolicy for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
    fn make_policy(&self, _: &SlotKey) -> Box<dyn Policy> {
        Box::new(ScriptedState(Arc::clone(&self.0)))
    }
}

/// One dispatch as the inner service saw it.
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub host: String,
    pub id: u64,
    pub at: Instant,
    /// Requests of this host in flight at the server, this one included.
    pub in_flight: usize,
}

/// Records what reaches the "server" (the inner service).
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    pub dispatches: Arc<Mutex<Vec<Dispatch>>>,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Recorder {
    pub fn dispatches(&self) -> Vec<Dispatch> {
        self.dispatches.lock().unwrap().clone()
    }
    pub fn of(&self, host: &str) -> Vec<Dispatch> {
        self.dispatches()
            .into_iter()
            .filter(|d| d.host == host)
            .collect()
    }
    pub fn in_flight(&self, host: &str) -> usize {
        *self.in_flight.lock().unwrap().get(host).unwrap_or(&0)
    }
}

/// Holds a server-side in-flight place until the response body ends or
/// is dropped.
#[derive(Debug)]
pub struct ServerPlace {
    host: String,
    recorder: Recorder,
}

impl Drop for ServerPlace {
    fn drop(&mut self) {
        *self
            .recorder
            .in_flight
            .lock()
            .unwrap()
            .get_mut(&self.host)
            .unwrap() -= 1;
    }
}

/// A body that yields its frames from a channel, then ends.
#[derive(Debug)]
pub struct TestBody {
    rx: Option<tokio::sync::mpsc::UnboundedReceiver<Bytes>>,
    place: Option<ServerPlace>,
}

impl TestBody {
    /// A body with all its data ready.
    pub fn ready(chunks: &[&'static str], place: Option<ServerPlace>) -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for c in chunks {
            tx.send(Bytes::from_static(c.as_bytes())).unwrap();
        }
        TestBody {
            rx: Some(rx),
            place,
        }
    }
    /// A body fed by the returned sender; it ends when the sender drops.
    pub fn channel(
        place: Option<ServerPlace>,
    ) -> (tokio::sync::mpsc::UnboundedSender<Bytes>, Self) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            tx,
            TestBody {
                rx: Some(rx),
                place,
            },
        )
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(None) => {
                self.rx = None;
                self.place = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
    fn is_end_stream(&self) -> bool {
        self.rx.is_none()
    }
}

/// The request head fields the test server reads.
pub fn request(uri: &str, id: u64, latency_ms: u64) -> Request<String> {
    Request::get(uri)
        .header("x-id", id.to_string())
        .header("x-latency-ms", latency_ms.to_string())
        .body(String::new())
        .unwrap()
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The test "server": records the dispatch, sleeps `x-latency-ms`, answers
/// with `x-status` (default 200) and, for each `x-reply-NAME` header, a
/// `NAME` header with the same value; `x-fail: 1` answers an error instead,
/// `x-panic: 1` panics, `x-stream: 1` answers a body that never ends on its
/// own (its sender is leaked into the recorder-less void until dropped).
pub fn server(
    recorder: Recorder,
) -> impl Service<Request<String>, Response = Response<TestBody>, Error = BoxError, Future = impl Send>
       + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<String>| {
        let recorder = recorder.clone();
        async move {
            let header = |name: &str| {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let host = req
                .uri()
                .authority()
                .map(|a| a.as_str().to_owned())
                .unwrap_or_default();
            let id = header("x-id").and_then(|v| v.parse().ok()).unwrap_or(0);
            let latency = header("x-latency-ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let status = header("x-status")
                .and_then(|v| v.parse().ok())
                .unwrap_or(200u16);
            let in_flight = {
                let mut map = recorder.in_flight.lock().unwrap();
                let n = map.entry(host.clone()).or_insert(0);
                *n += 1;
                *n
            };
            recorder.dispatches.lock().unwrap().push(Dispatch {
                host: host.clone(),
                id,
                at: Instant::now(),
                in_flight,
            });
            let place = ServerPlace {
                host,
                recorder: recorder.clone(),
            };
            tokio::time::sleep(Duration::from_millis(latency)).await;
            if header("x-fail").is_some() {
                return Err::<Response<TestBody>, BoxError>("inner failure".into());
            }
            if header("x-panic").is_some() {
                panic!("inner panic");
            }
            let body = if header("x-stream").is_some() {
                let (tx, body) = TestBody::channel(Some(place));
                tx.send(Bytes::from_static(b"first")).unwrap();
                // Keep the sender alive for an hour: the body stays open.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    drop(tx);
                });
                body
            } else {
                TestBody::ready(&["hello"], Some(place))
            };
            let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
            for (name, value) in req.headers() {
                if let Some(reply) = name.as_str().strip_prefix("x-reply-") {
                    response = response.header(reply, value.clone());
                }
            }
            Ok(response.body(body).unwrap())
        }
    })
}

/// A layer with a scripted policy.
pub fn scripted_layer(delay: Duration, limit: usize) -> (AutoThrottleLayer, Scripted) {
    let policy = Scripted::new(delay, limit);
    let config = Config::builder().policy(policy.clone()).build().unwrap();
    (AutoThrottleLayer::new(config), policy)
}

/// Sends a request through `svc` on a spawned task that reads the whole
/// body; the handle yields the status and the time the body ended.
pub fn spawn_request<S>(
    svc: &mut S,
    req: Request<String>,
) -> tokio::task::JoinHandle<Result<(StatusCode, Instant), BoxError>>
where
    S: Service<Request<String>> + Clone + Send + 'static,
    S::Response: Into<Response<tower_autothrottle::ThrottleBody<TestBody>>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    let mut svc = svc.clone();
    tokio::spawn(async move {
        let svc = svc.ready().await.map_err(Into::into)?;
        let resp: Response<_> = svc.call(req).await.map_err(Into::into)?.into();
        let status = resp.status();
        resp.into_body().collect().await.unwrap();
        Ok((status, Instant::now()))
    })
}

/// Lets every spawned task run as far as it can without time passing.
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// A random trace of `LATENCY STATUS` lines: regimes of steady, rising and
/// falling latencies over several scales, exact zeros, and mixed statuses.
pub fn random_trace(rng: &mut Rng, lines: usize) -> Vec<(f64, u16)> {
    let mut out = Vec::with_capacity(lines);
    let mut level: f64 = *rng.pick(&[0.001, 0.05, 0.3, 2.0, 12.0]);
    while out.len() < lines {
        let regime = rng.below(4);
        for _ in 0..(1 + rng.below(25)) {
            level = match regime {
                0 => level,
                1 => level * (1.0 + rng.unit() * 0.4),
                2 => level * (1.0 - rng.unit() * 0.3),
                _ => *rng.pick(&[0.001, 0.05, 0.3, 2.0, 12.0]),
            }
            .clamp(1e-6, 120.0);
            let latency = if rng.below(20) == 0 {
                0.0
            } else if rng.below(10) == 0 {
                // Round values make ties and exact averages likely.
                (level * 4.0).round() / 4.0
            } else {
                level * (0.5 + rng.unit())
            };
            let status = if rng.below(10) < 7 {
                200
            } else {
                *rng.pick(&[200, 201, 301, 302, 404, 429, 500, 503])
            };
            out.push((latency, status));
        }
    }
    out.truncate(lines);
    out
}

/// Says that a test skipped its check, and why, on the test binary's
/// standard error itself (not the captured output, so that the line shows
/// among the results of `cargo test`), or fails the test when `CI` is set:
/// CI must run every check.
pub fn skip(test: &str, why: &str, how: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why}; CI must run it ({how})"
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test}: {why}; to run it: {how}"
    );
}
