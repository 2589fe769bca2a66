//! Server signals on top of any policy: Retry-After, RateLimit fields,
//! overload backoff (429/503, timeouts), the delay floor and jitter.

mod common;

use std::time::Duration;

use common::*;
use http::Request;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use tower_autothrottle::policy::{Outcome, Scrapy2012};
use tower_autothrottle::{AutoThrottleLayer, Config};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn with(mut req: Request<String>, pairs: &[(&'static str, &str)]) -> Request<String> {
    for (k, v) in pairs {
        req.headers_mut().insert(*k, v.parse().unwrap());
    }
    req
}

#[tokio::test(start_paused = true)]
async fn retry_after_pauses_the_slot_and_in_flight_429s_count_once() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 4);
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    // Four requests in flight together, all answered 429 with Retry-After: 3.
    let first: Vec<_> = (0..4)
        .map(|i| {
            let req = with(
                request("http://a.test/", i, 100),
                &[("x-status", "429"), ("x-reply-retry-after", "3")],
            );
            spawn_request(&mut svc, req)
        })
        .collect();
    let later: Vec<_> = (4..8)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 10)))
        .collect();
    for h in first.into_iter().chain(later) {
        h.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    assert!(d[..4].iter().all(|x| x.at == start));
    // Nothing is dispatched before the deadline: 100 ms + 3 s.
    for x in &d[4..] {
        assert!(
            x.at - start >= 3 * S + 100 * MS,
            "dispatched at {:?}",
            x.at - start
        );
    }
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(
        snap.overloads, 1,
        "four 429s to requests in flight together are one event"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_as_an_http_date_against_the_date_field() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    let req = with(
        request("http://a.test/", 0, 0),
        &[
            ("x-status", "503"),
            ("x-reply-date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("x-reply-retry-after", "Sunday, 06-Nov-94 08:49:44 GMT"),
        ],
    );
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(snap.paused_until, Some(start + 7 * S));
    spawn_request(&mut svc, request("http://a.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorder.of("a.test")[1].at - start, 7 * S);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_capped_and_malformed_values_are_ignored() {
    let recorder = Recorder::default();
    let config = Config::builder()
        .policy(Scripted::new(Duration::ZERO, 1))
        .max_retry_after(Duration::from_secs(60))
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    let years = with(
        request("http://a.test/", 0, 0),
        &[("x-status", "429"), ("x-reply-retry-after", "99999999999")],
    );
    spawn_request(&mut svc, years).await.unwrap().unwrap();
    assert_eq!(
        layer.slot("http://a.test").unwrap().paused_until,
        Some(start + 60 * S)
    );

    let garbage = with(
        request("http://b.test/", 0, 0),
        &[("x-status", "429"), ("x-reply-retry-after", "in a while")],
    );
    spawn_request(&mut svc, garbage).await.unwrap().unwrap();
    let b = layer.slot("http://b.test").unwrap();
    assert_eq!(b.paused_until, None);
    assert_eq!(b.overloads, 1, "still an overload");
}

#[tokio::test(start_paused = true)]
async fn retry_after_on_other_statuses_is_not_a_pause() {
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(Recorder::default()));
    let req = with(
        request("http://a.test/", 0, 0),
        &[("x-status", "301"), ("x-reply-retry-after", "30")],
    );
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    assert_eq!(layer.slot("http://a.test").unwrap().paused_until, None);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_fields_pace_and_pause_the_slot() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 8);
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    // 4 requests left in the next 2 s: one every 500 ms.
    let req = with(
        request("http://a.test/", 0, 0),
        &[("x-reply-ratelimit", "\"default\";r=4;t=2")],
    );
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let hs: Vec<_> = (1..4)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 0)))
        .collect();
    for h in hs {
        h.await.unwrap().unwrap();
    }
    let at: Vec<Duration> = recorder.of("a.test").iter().map(|x| x.at - start).collect();
    assert_eq!(at, vec![Duration::ZERO, 500 * MS, 1000 * MS, 1500 * MS]);
    assert_eq!(layer.slot("http://a.test").unwrap().delay, 500 * MS);
    // After the window the pacing no longer holds.
    tokio::time::advance(S).await;
    assert_eq!(layer.slot("http://a.test").unwrap().delay, Duration::ZERO);

    // An exhausted quota holds the slot until it resets.
    let req = with(
        request("http://b.test/", 0, 0),
        &[("x-reply-ratelimit", "\"default\";r=0;t=9")],
    );
    let t0 = Instant::now();
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    spawn_request(&mut svc, request("http://b.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorder.of("b.test")[1].at - t0, 9 * S);
}

#[tokio::test(start_paused = true)]
async fn overload_lowers_what_any_policy_allows_and_recovers() {
    // Today's-Scrapy-like fixed concurrency of 8, zero delay.
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 8);
    let mut svc = layer.layer(server(recorder.clone()));
    let req = with(request("http://a.test/", 0, 20), &[("x-status", "503")]);
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(snap.concurrency, 4);
    assert_eq!(snap.delay, 50 * MS, "the minimum backoff delay");
    // Successes bring it back.
    for i in 1..400 {
        spawn_request(&mut svc, request("http://a.test/", i, 1))
            .await
            .unwrap()
            .unwrap();
    }
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.concurrency, snap.delay), (8, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn an_inner_timeout_counts_as_overload() {
    let recorder = Recorder::default();
    let (throttle, _) = scripted_layer(Duration::ZERO, 6);
    let mut svc = ServiceBuilder::new()
        .layer(throttle.clone())
        .timeout(100 * MS)
        .service(server(recorder));
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://a.test/", 0, 1_000))
        .await
        .unwrap_err();
    assert!(err.is::<tower::timeout::error::Elapsed>());
    assert_eq!(tower_autothrottle::classify_error(&*err), Outcome::Overload);
    let snap = throttle.slot("http://a.test").unwrap();
    assert_eq!(
        (snap.overloads, snap.concurrency, snap.in_flight),
        (1, 3, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn the_delay_floor_binds_waiting_requests_and_can_be_lifted() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(10 * MS, 1);
    layer.set_delay_floor("http://a.test", Some(2 * S)).unwrap();
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    let hs: Vec<_> = (0..3)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 0)))
        .collect();
    common::settle().await;
    tokio::time::advance(S).await;
    layer.set_delay_floor("http://a.test", None).unwrap();
    for h in hs {
        h.await.unwrap().unwrap();
    }
    let at: Vec<Duration> = recorder.of("a.test").iter().map(|x| x.at - start).collect();
    // The second waited for the floor until it was lifted at 1 s.
    assert_eq!(at, vec![Duration::ZERO, S, S + 10 * MS]);
}

#[tokio::test(start_paused = true)]
async fn jitter_spreads_the_waits_reproducibly() {
    async fn gaps(seed: u64) -> Vec<Duration> {
        let recorder = Recorder::default();
        let config = Config::builder()
            .policy(Scripted::new(100 * MS, 1))
            .jitter(0.5)
            .seed(seed)
            .build()
            .unwrap();
        let layer = AutoThrottleLayer::new(config);
        let mut svc = layer.layer(server(recorder.clone()));
        let hs: Vec<_> = (0..200)
            .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 0)))
            .collect();
        for h in hs {
            h.await.unwrap().unwrap();
        }
        let d = recorder.of("a.test");
        d.windows(2).map(|p| p[1].at - p[0].at).collect()
    }
    let a = gaps(7).await;
    assert!(a.iter().all(|g| *g >= 50 * MS && *g <= 151 * MS), "{a:?}");
    let distinct: std::collections::BTreeSet<_> = a.iter().collect();
    assert!(distinct.len() > 50);
    assert_eq!(a, gaps(7).await, "seeded");
    assert_ne!(a, gaps(8).await);
}

#[tokio::test(start_paused = true)]
async fn scrapy_2012_sees_429_as_a_plain_response_while_the_layer_backs_off() {
    let config = Config::builder()
        .policy(Scrapy2012::default().start_delay(S))
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let mut svc = layer.layer(server(Recorder::default()));
    let req = with(request("http://a.test/", 0, 100), &[("x-status", "429")]);
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    // The policy keeps its own arithmetic: (1 + 0.1) / 2 would lower the
    // delay, which a non-200 may not do, so it stays 1 s. The layer backs
    // off on top: twice the delay in force.
    assert_eq!(snap.delay, 2 * S);
    assert_eq!(snap.overloads, 1);
    let mut out = Vec::new();
    tower_autothrottle::policy::replay(
        &Scrapy2012::default().start_delay(S),
        "0.1 429\n".as_bytes(),
        &mut out,
    )
    .unwrap();
    assert_eq!(out, b"1.000000 1\n");
}

#[tokio::test(start_paused = true)]
async fn absurd_retry_after_with_an_unbounded_cap_saturates_without_panic() {
    let recorder = Recorder::default();
    let config = Config::builder()
        .policy(Scripted::new(Duration::ZERO, 1))
        .max_retry_after(Duration::MAX)
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let mut svc = layer.layer(server(recorder.clone()));
    let req = with(
        request("http://a.test/", 0, 0),
        &[
            ("x-status", "429"),
            ("x-reply-retry-after", "18446744073709551615"),
        ],
    );
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let paused = layer.slot("http://a.test").unwrap().paused_until.unwrap();
    assert!(paused - Instant::now() > Duration::from_secs(86_400 * 365));
    // A request waits (it would wait decades); dropping it leaves nothing.
    let waiting = spawn_request(&mut svc, request("http://a.test/", 1, 0));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    waiting.abort();
    let _ = waiting.await;
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.in_flight, snap.queued, snap.dispatched), (0, 0, 1));
}
