//! Adversarial servers over real sockets on 127.0.0.1: a body that never
//! ends, connections reset before any response, and 429 forever. The client
//! stays polite (limits and spacing hold), every caller gets an answer or an
//! error, and no place leaks. The clock is tokio's paused clock, so waits
//! cost no real time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};
use tower_autothrottle::policy::Adaptive;
use tower_autothrottle::{AutoThrottleLayer, Config};

#[derive(Clone, Copy)]
enum Behaviour {
    EndlessBody,
    Reset,
    TooManyRequests,
}

#[derive(Default)]
struct Seen {
    active: AtomicUsize,
    max_active: AtomicUsize,
    arrivals: Mutex<Vec<Instant>>,
}

/// A server body: one chunk then pending forever (`endless`), or empty.
/// It counts as active at the server until dropped.
struct ServerBody {
    first: bool,
    endless: bool,
    _guard: Guard,
}

struct Guard(Arc<Seen>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl http_body::Body for ServerBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.endless {
            return Poll::Ready(None);
        }
        if self.first {
            self.first = false;
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk")))));
        }
        Poll::Pending
    }
    fn is_end_stream(&self) -> bool {
        !self.endless
    }
}

async fn server(behaviour: Behaviour, seen: Arc<Seen>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            if let Behaviour::Reset = behaviour {
                seen.arrivals.lock().unwrap().push(Instant::now());
                // Drop the connection with no response.
                drop(stream);
                continue;
            }
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.arrivals.lock().unwrap().push(Instant::now());
                        let now = seen.active.fetch_add(1, Ordering::SeqCst) + 1;
                        seen.max_active.fetch_max(now, Ordering::SeqCst);
                        let endless = matches!(behaviour, Behaviour::EndlessBody);
                        let body = ServerBody {
                            first: true,
                            endless,
                            _guard: Guard(seen),
                        };
                        let status = if endless {
                            StatusCode::OK
                        } else {
                            StatusCode::TOO_MANY_REQUESTS
                        };
                        Ok::<_, Infallible>(Response::builder().status(status).body(body).unwrap())
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

fn client(
    throttle: &AutoThrottleLayer,
) -> impl tower::Service<
    Request<Empty<Bytes>>,
    Response = Response<tower_autothrottle::ThrottleBody<Incoming>>,
    Error = tower_autothrottle::BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    throttle.layer(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>())
}

fn throttle(limit: usize) -> AutoThrottleLayer {
    let config = Config::builder()
        .policy(
            Adaptive::default()
                .initial_concurrency(limit)
                .max_concurrency(limit),
        )
        .build()
        .unwrap();
    AutoThrottleLayer::new(config)
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_ends_holds_its_place_until_the_caller_gives_up() {
    let seen = Arc::new(Seen::default());
    let addr = server(Behaviour::EndlessBody, Arc::clone(&seen)).await;
    let throttle = throttle(2);
    let svc = client(&throttle);
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/{i}"))
                    .body(Empty::new())
                    .unwrap();
                // Callers give up on a body after 2 s.
                tokio::time::timeout(Duration::from_secs(2), async {
                    let response = svc.oneshot(req).await?;
                    let body = response.into_body().collect().await?;
                    Ok::<_, tower_autothrottle::BoxError>(body)
                })
                .await
            })
        })
        .collect();
    let mut timed_out = 0;
    for t in tasks {
        if t.await.unwrap().is_err() {
            timed_out += 1;
        }
    }
    assert_eq!(timed_out, 6, "every caller got its answer: a timeout");
    // The limit held at the server while the bodies hung.
    assert!(seen.max_active.load(Ordering::SeqCst) <= 2);
    let key = format!("http://{addr}");
    let slot = throttle.slot(&key).unwrap();
    assert_eq!((slot.in_flight, slot.queued), (0, 0));
    // The first two hold their places until their callers give up at 2 s;
    // the freed places go to the others in that same instant, just before
    // their own callers give up too (so they may never reach the server).
    // Counted at the server: two arrivals at the start, any others at 2 s
    // (never before a place was free), each a dispatch the slot counted.
    let arrivals = seen.arrivals.lock().unwrap().clone();
    let start = arrivals[0];
    assert_eq!(
        arrivals.iter().filter(|a| **a == start).count(),
        2,
        "{arrivals:?}"
    );
    assert!(
        arrivals[2..]
            .iter()
            .all(|a| *a - start == Duration::from_secs(2)),
        "{arrivals:?}"
    );
    assert!((arrivals.len() as u64..=6).contains(&slot.dispatched));
}

#[tokio::test(start_paused = true)]
async fn connections_reset_give_errors_and_leak_nothing() {
    let seen = Arc::new(Seen::default());
    let addr = server(Behaviour::Reset, Arc::clone(&seen)).await;
    let throttle = throttle(4);
    let svc = client(&throttle);
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/{i}"))
                    .body(Empty::new())
                    .unwrap();
                svc.oneshot(req).await.map(|_| ())
            })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().is_err(), "a reset connection is an error");
    }
    let slot = throttle.slot(format!("http://{addr}")).unwrap();
    assert_eq!((slot.in_flight, slot.queued, slot.dispatched), (0, 0, 20));
}

#[tokio::test(start_paused = true)]
async fn a_server_that_answers_429_forever_is_left_in_peace() {
    let seen = Arc::new(Seen::default());
    let addr = server(Behaviour::TooManyRequests, Arc::clone(&seen)).await;
    let throttle = throttle(8);
    let svc = client(&throttle);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/{i}"))
                    .body(Empty::new())
                    .unwrap();
                svc.oneshot(req).await.map(|r| r.status())
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), StatusCode::TOO_MANY_REQUESTS);
    }
    let slot = throttle.slot(format!("http://{addr}")).unwrap();
    assert_eq!((slot.in_flight, slot.queued), (0, 0));
    assert_eq!(slot.concurrency, 1, "the limit came down to one");
    // After the first few, requests are spaced by at least the minimum
    // backoff, and the spacing grows.
    let arrivals = seen.arrivals.lock().unwrap();
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps[10..].iter().all(|g| *g >= Duration::from_millis(50)),
        "{gaps:?}"
    );
    assert!(gaps[gaps.len() - 1] > gaps[10], "{gaps:?}");
}
