//! Run-time control: per-slot settings (by key or pattern, at build and at
//! run time), the per-request opt-out, and what `slots()` shows.

mod common;

use std::time::Duration;

use common::*;
use http::Request;
use tokio::time::Instant;
use tower::Layer;
use tower_autothrottle::policy::Scrapy2012;
use tower_autothrottle::{AutoThrottleLayer, Config, DontAdjust, SlotSettings};

const MS: Duration = Duration::from_millis(1);

fn with(mut req: Request<String>, pairs: &[(&'static str, &str)]) -> Request<String> {
    for (k, v) in pairs {
        req.headers_mut().insert(*k, v.parse().unwrap());
    }
    req
}

fn gaps(dispatches: &[Dispatch]) -> Vec<Duration> {
    dispatches.windows(2).map(|w| w[1].at - w[0].at).collect()
}

#[tokio::test(start_paused = true)]
async fn settings_by_key_and_pattern_apply_to_new_slots() {
    let config = Config::builder()
        .policy(Scripted::new(Duration::ZERO, 4))
        .slot(
            "http://api.test",
            SlotSettings::new().min_delay(200 * MS).max_concurrency(1),
        )
        .slot(
            "http://*.cdn.test",
            SlotSettings::new()
                .policy(Scrapy2012::default())
                .start_delay(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        for host in ["api.test", "x.cdn.test", "other.test"] {
            tasks.push(spawn_request(
                &mut svc,
                request(&format!("http://{host}/"), i, 50),
            ));
        }
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let api = recorder.of("api.test");
    assert!(api.iter().all(|d| d.in_flight <= 1));
    assert!(
        gaps(&api).iter().all(|g| *g >= 200 * MS),
        "{:?}",
        gaps(&api)
    );
    let cdn = recorder.of("x.cdn.test");
    // Scrapy 2012 from 1 s, one at a time: the second request goes after
    // the first response (50 ms), at the new delay (1 s + 50 ms) / 2.
    assert_eq!(gaps(&cdn)[0], 525 * MS);
    let other = recorder.of("other.test");
    assert!(
        other.iter().all(|d| d.at == other[0].at),
        "unbounded default"
    );
    let api = layer.slot("http://api.test").unwrap();
    assert_eq!((api.delay, api.concurrency), (200 * MS, 1));
}

#[tokio::test(start_paused = true)]
async fn settings_set_at_run_time_bind_requests_already_waiting() {
    let (layer, _) = scripted_layer(Duration::ZERO, 4);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    let start = Instant::now();
    let tasks: Vec<_> = (0..12)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 100)))
        .collect();
    settle().await;
    assert_eq!(layer.slot("http://a.test").unwrap().queued, 8);
    layer
        .set_slot_settings(
            "http://a.*",
            SlotSettings::new().min_delay(300 * MS).max_concurrency(1),
        )
        .unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.delay, snap.concurrency), (300 * MS, 1));
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    assert!(d[..4].iter().all(|x| x.at == start));
    for x in &d[4..] {
        assert!(x.in_flight <= 1, "the cap bound the waiting requests");
    }
    assert!(gaps(&d[4..]).iter().all(|g| *g >= 300 * MS));
    // Lifted: the slot is the default's again.
    assert!(layer.remove_slot_settings("http://a.*"));
    assert!(!layer.remove_slot_settings("http://a.*"));
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.delay, snap.concurrency), (Duration::ZERO, 4));
}

#[tokio::test(start_paused = true)]
async fn invalid_settings_are_refused_and_change_nothing() {
    let (layer, _) = scripted_layer(Duration::from_millis(10), 4);
    // The slot exists once a request went.
    let mut svc = layer.layer(server(Recorder::default()));
    spawn_request(&mut svc, request("http://a.test/", 0, 0))
        .await
        .unwrap()
        .unwrap();
    let err = layer
        .set_slot_settings("http://a.test", SlotSettings::new().max_concurrency(0))
        .unwrap_err();
    assert_eq!(err.field(), "max_concurrency");
    let err = layer
        .set_slot_settings(
            "http://a.test",
            SlotSettings::new().start_delay(Duration::from_secs(1)),
        )
        .unwrap_err();
    assert_eq!(err.field(), "start_delay", "the scripted policy has none");
    assert_eq!(
        layer
            .set_slot_settings("", SlotSettings::new())
            .unwrap_err()
            .field(),
        "slot"
    );
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.delay, snap.concurrency), (10 * MS, 4));
    let err = Config::builder()
        .slot("x", SlotSettings::new().min_delay(2 * MS).max_delay(MS))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "min_delay");
}

#[tokio::test(start_paused = true)]
async fn dont_adjust_obeys_the_slot_but_does_not_adjust_it() {
    let (layer, policy) = scripted_layer(200 * MS, 2);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    spawn_request(&mut svc, request("http://a.test/", 0, 10))
        .await
        .unwrap()
        .unwrap();
    // The policy would now answer 1 s / 1; an opted-out response does not
    // adopt it, but the request still waits for the current 200 ms.
    policy.set(Duration::from_secs(1), 1);
    let mut req = request("http://a.test/", 1, 10);
    req.extensions_mut().insert(DontAdjust);
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let d = recorder.of("a.test");
    assert!(d[1].at - d[0].at >= 200 * MS);
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.delay, snap.concurrency), (200 * MS, 2));
    assert_eq!(snap.responses, 2);
    // An opted-out 429 is no overload, but its Retry-After still pauses.
    let mut req = with(
        request("http://a.test/", 2, 10),
        &[("x-status", "429"), ("x-reply-retry-after", "5")],
    );
    req.extensions_mut().insert(DontAdjust);
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(snap.overloads, 0);
    assert!(snap.paused_until.is_some());
    // A plain response adjusts again.
    let started = Instant::now();
    spawn_request(&mut svc, request("http://a.test/", 3, 10))
        .await
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the pause held"
    );
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.delay, snap.concurrency), (Duration::from_secs(1), 1));
}

#[tokio::test(start_paused = true)]
async fn snapshots_show_the_smoothed_latency_and_the_last_status() {
    let (layer, _) = scripted_layer(Duration::ZERO, 4);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    spawn_request(&mut svc, request("http://a.test/", 0, 100))
        .await
        .unwrap()
        .unwrap();
    let req = with(request("http://a.test/", 1, 900), &[("x-status", "404")]);
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!(snap.last_latency, Some(900 * MS));
    // 100 + (900 - 100) / 8
    assert_eq!(snap.latency, Some(200 * MS));
    assert_eq!(snap.last_status, Some(http::StatusCode::NOT_FOUND));
    assert_eq!(
        (snap.dispatched, snap.responses, snap.in_flight, snap.queued),
        (2, 2, 0, 0)
    );
    assert_eq!(snap.paused_until, None);
}
