//! Load: 100 000 concurrent requests over 1 000 hosts through a trivial
//! inner service finish without deadlock and leave every slot empty; one
//! slot with 10 000 waiters serves them in FIFO order.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Scripted;
use http::{Request, Response};
use tower::{Layer, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, Config};

fn trivial() -> impl tower::Service<
    Request<()>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    })
}

#[tokio::test(start_paused = true)]
async fn a_hundred_thousand_requests_over_a_thousand_hosts() {
    let config = Config::builder()
        .policy(Scripted::new(Duration::from_millis(1), 8))
        .build()
        .unwrap();
    let throttle = AutoThrottleLayer::new(config);
    let svc = throttle.layer(trivial());
    let tasks: Vec<_> = (0..100_000u32)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://h{}.test/", i % 1_000))
                    .body(())
                    .unwrap();
                svc.oneshot(req).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let slots = throttle.slots();
    assert_eq!(slots.len(), 1_000);
    assert!(slots
        .iter()
        .all(|s| (s.in_flight, s.queued, s.dispatched) == (0, 0, 100)));
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_waiters_leave_in_fifo_order() {
    let config = Config::builder()
        .policy(Scripted::new(Duration::ZERO, 1))
        .build()
        .unwrap();
    let throttle = AutoThrottleLayer::new(config);
    let order = Arc::new(Mutex::new(Vec::new()));
    let inner = {
        let order = Arc::clone(&order);
        tower::service_fn(move |req: Request<()>| {
            order.lock().unwrap().push(req.uri().path().to_owned());
            async { Ok::<_, Infallible>(Response::new(String::new())) }
        })
    };
    let svc = throttle.layer(inner);
    // All calls made first, in order; then all driven at once.
    let futures: Vec<_> = (0..10_000)
        .map(|i| {
            let mut svc = svc.clone();
            let req = Request::get(format!("http://one.test/{i}"))
                .body(())
                .unwrap();
            tower::Service::call(&mut svc, req)
        })
        .collect();
    // The first found the gate open and went through when called.
    let slot = throttle.slot("http://one.test").unwrap();
    assert_eq!((slot.in_flight, slot.queued), (1, 9_999));
    let handles: Vec<_> = futures.into_iter().rev().map(tokio::spawn).collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let order = order.lock().unwrap();
    let expected: Vec<String> = (0..10_000).map(|i| format!("/{i}")).collect();
    assert_eq!(*order, expected);
}
