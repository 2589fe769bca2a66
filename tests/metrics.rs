//! The `metrics` feature: what `record` publishes, read back through
//! metrics-util's debugging recorder.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tower::Layer;

/// `(name, slot label)` → value, from one `record` call.
fn recorded(layer: &tower_autothrottle::AutoThrottleLayer) -> HashMap<(String, String), f64> {
    recorded_with(layer, tower_autothrottle::metrics::DEFAULT_SLOT_SERIES)
}

/// The same from one `record_with(layer, slot_series)` call.
fn recorded_with(
    layer: &tower_autothrottle::AutoThrottleLayer,
    slot_series: usize,
) -> HashMap<(String, String), f64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tower_autothrottle::metrics::record_with(layer, slot_series)
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let slot = key
                .labels()
                .find(|l| l.key() == "slot")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            let value = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => f64::NAN,
            };
            ((key.name().to_owned(), slot), value)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn record_publishes_every_slot() {
    let (layer, _) = scripted_layer(Duration::from_millis(250), 3);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    for i in 0..2 {
        spawn_request(&mut svc, request("http://a.test/", i, 40))
            .await
            .unwrap()
            .unwrap();
    }
    let mut req = request("http://b.test/", 9, 10);
    req.headers_mut().insert("x-status", "429".parse().unwrap());
    req.headers_mut()
        .insert("x-reply-retry-after", "7".parse().unwrap());
    spawn_request(&mut svc, req).await.unwrap().unwrap();

    let m = recorded(&layer);
    let get = |name: &str, slot: &str| {
        *m.get(&(name.to_owned(), slot.to_owned()))
            .unwrap_or_else(|| panic!("{name}{{slot={slot}}} missing from {m:?}"))
    };
    assert_eq!(get("autothrottle_slots", ""), 2.0);
    let a = "http://a.test";
    assert_eq!(get("autothrottle_delay_seconds", a), 0.25);
    assert_eq!(get("autothrottle_concurrency_limit", a), 3.0);
    assert_eq!(get("autothrottle_in_flight", a), 0.0);
    assert_eq!(get("autothrottle_queued", a), 0.0);
    assert_eq!(get("autothrottle_latency_seconds", a), 0.04);
    assert_eq!(get("autothrottle_paused_seconds", a), 0.0);
    assert_eq!(get("autothrottle_requests_total", a), 2.0);
    assert_eq!(get("autothrottle_responses_total", a), 2.0);
    assert_eq!(get("autothrottle_overloads_total", a), 0.0);
    let b = "http://b.test";
    assert_eq!(get("autothrottle_overloads_total", b), 1.0);
    assert_eq!(get("autothrottle_paused_seconds", b), 7.0);
    assert_eq!(get("autothrottle_concurrency_limit", b), 1.0);
}

#[tokio::test(start_paused = true)]
async fn spawn_records_periodically_until_aborted() {
    // A global recorder is process-wide; this binary installs none
    // elsewhere, so the exporter task's writes land in it.
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let (layer, _) = scripted_layer(Duration::ZERO, 2);
    let task = tower_autothrottle::metrics::spawn(layer.clone(), Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let slots = |snap: metrics_util::debugging::Snapshot| {
        snap.into_vec()
            .into_iter()
            .find(|(k, ..)| k.key().name() == "autothrottle_slots")
            .map(|(.., v)| v)
    };
    assert_eq!(
        slots(snapshotter.snapshot()),
        Some(DebugValue::Gauge(0.0.into()))
    );
    let mut svc = layer.layer(server(Recorder::default()));
    spawn_request(&mut svc, request("http://one.test/", 0, 0))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        slots(snapshotter.snapshot()),
        Some(DebugValue::Gauge(1.0.into()))
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn per_slot_series_are_bounded_to_the_busiest() {
    let (layer, _) = scripted_layer(Duration::ZERO, 8);
    let mut svc = layer.layer(server(Recorder::default()));
    // Five idle hosts, and one with three requests still in flight.
    for i in 0..5 {
        spawn_request(&mut svc, request(&format!("http://idle{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    let busy: Vec<_> = (0..3)
        .map(|i| spawn_request(&mut svc, request("http://busy.test/", 10 + i, 60_000)))
        .collect();
    settle().await;
    let labelled = |m: &HashMap<(String, String), f64>| {
        let mut slots: Vec<String> = m
            .keys()
            .filter(|(name, slot)| name == "autothrottle_in_flight" && !slot.is_empty())
            .map(|(_, slot)| slot.clone())
            .collect();
        slots.sort();
        slots
    };
    // The default bound (100) labels all six; the totals are there too.
    let m = recorded(&layer);
    assert_eq!(labelled(&m).len(), 6);
    assert_eq!(
        m[&("autothrottle_in_flight_total".to_owned(), String::new())],
        3.0
    );
    assert_eq!(m[&("autothrottle_slots".to_owned(), String::new())], 6.0);
    // A bound of one labels the busiest alone; zero, none.
    let m = recorded_with(&layer, 1);
    assert_eq!(labelled(&m), ["http://busy.test"]);
    assert_eq!(
        m[&("autothrottle_in_flight_total".to_owned(), String::new())],
        3.0
    );
    let m = recorded_with(&layer, 0);
    assert!(labelled(&m).is_empty());
    assert!(m.keys().all(|(_, slot)| slot.is_empty()));
    for t in busy {
        t.abort();
    }
}
