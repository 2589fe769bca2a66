//! Idle slots are dropped after the idle timeout, and beyond the bound the
//! least recently used idle ones first; slots still tied to their host
//! (busy, paused, spacing not run out) are never dropped, and a delay floor,
//! kept in the settings table, comes back with a new slot.

mod common;

use std::time::Duration;

use common::*;
use tower::Layer;
use tower_autothrottle::{AutoThrottleLayer, Config};

const S: Duration = Duration::from_secs(1);

fn throttle(delay: Duration, idle: Duration, max: usize) -> AutoThrottleLayer {
    let config = Config::builder()
        .policy(Scripted::new(delay, 4))
        .idle_timeout(idle)
        .max_slots(max)
        .build()
        .unwrap();
    AutoThrottleLayer::new(config)
}

#[tokio::test(start_paused = true)]
async fn idle_slots_go_after_the_timeout_and_keep_their_state_until_then() {
    let layer = throttle(Duration::ZERO, 60 * S, 100_000);
    let mut svc = layer.layer(server(Recorder::default()));
    spawn_request(&mut svc, request("http://old.test/", 0, 0))
        .await
        .unwrap()
        .unwrap();
    // Before the timeout, new hosts do not drop it.
    tokio::time::advance(30 * S).await;
    for i in 0..200 {
        spawn_request(&mut svc, request(&format!("http://h{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        layer.slot("http://old.test").unwrap().dispatched,
        1,
        "kept, with its counts"
    );
    // After it, the next round of new hosts sweeps it away.
    tokio::time::advance(61 * S).await;
    for i in 200..400 {
        spawn_request(&mut svc, request(&format!("http://h{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    assert!(layer.slot("http://old.test").is_none());
    assert!(layer.slots().len() <= 200, "{}", layer.slots().len());
}

#[tokio::test(start_paused = true)]
async fn the_bound_holds_for_an_endless_stream_of_new_hosts() {
    let layer = throttle(Duration::ZERO, 3600 * S, 500);
    let mut svc = layer.layer(server(Recorder::default()));
    for i in 0..20_000u64 {
        spawn_request(&mut svc, request(&format!("http://h{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
        if i % 100 == 0 {
            assert!(layer.slots().len() <= 500, "{}", layer.slots().len());
        }
    }
    assert!(layer.slots().len() <= 500, "{}", layer.slots().len());
    // The most recent hosts are the ones kept.
    assert!(layer.slot("http://h19999.test").is_some());
    assert!(layer.slot("http://h0.test").is_none());
}

#[tokio::test(start_paused = true)]
async fn slots_tied_to_their_host_are_never_dropped() {
    // Delay 10 s: a slot is tied to its host for 10 s after a dispatch.
    let layer = throttle(10 * S, Duration::ZERO, 10);
    let mut svc = layer.layer(server(Recorder::default()));
    // Busy: a request in flight for an hour.
    let _busy = spawn_request(&mut svc, request("http://busy.test/", 0, 3_600_000));
    // Spacing not run out: dispatched just now, delay 10 s.
    spawn_request(&mut svc, request("http://spaced.test/", 0, 0))
        .await
        .unwrap()
        .unwrap();
    common::settle().await;
    for i in 0..100 {
        spawn_request(&mut svc, request(&format!("http://h{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    for key in ["http://busy.test", "http://spaced.test"] {
        assert!(layer.slot(key).is_some(), "{key} was dropped");
    }
    // Once its spacing ran out, the spaced slot may go; the busy one stays.
    tokio::time::advance(11 * S).await;
    for i in 100..200 {
        spawn_request(&mut svc, request(&format!("http://h{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    assert!(layer.slot("http://spaced.test").is_none());
    assert!(layer.slot("http://busy.test").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_floor_set_before_the_first_request_holds_and_outlives_its_slot() {
    let layer = throttle(Duration::ZERO, Duration::ZERO, 10);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    // No slot is made for it; the floor waits in the settings table.
    layer
        .set_delay_floor("HTTP://Floored.test:80/", Some(5 * S))
        .unwrap();
    assert!(layer.slot("http://floored.test").is_none());
    for i in 0..2 {
        spawn_request(&mut svc, request("http://floored.test/", i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    let d = recorder.of("floored.test");
    assert_eq!(
        d[1].at - d[0].at,
        5 * S,
        "the floor bound the second request"
    );
    // Idle and past its spacing, the slot is dropped among new hosts...
    tokio::time::advance(6 * S).await;
    for i in 0..100 {
        spawn_request(&mut svc, request(&format!("http://h{i}.test/"), i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    assert!(layer.slot("http://floored.test").is_none());
    // ...and its next slot has the floor again.
    for i in 2..4 {
        spawn_request(&mut svc, request("http://floored.test/", i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        layer.slot("http://floored.test").unwrap().delay_floor,
        5 * S
    );
    let d = recorder.of("floored.test");
    assert_eq!(d[3].at - d[2].at, 5 * S);
    // Lifted, a new slot has none.
    layer.set_delay_floor("http://floored.test", None).unwrap();
    assert_eq!(
        layer.slot("http://floored.test").unwrap().delay_floor,
        Duration::ZERO
    );
}

#[tokio::test(start_paused = true)]
async fn a_service_that_remembers_an_evicted_slot_joins_the_tables_new_one() {
    use tower::{Service, ServiceExt};
    // A service remembers the slot of its last request; once that slot is
    // evicted, its next request to the host must go to the table's slot,
    // which every other service shares, not to the forgotten one.
    let layer = throttle(Duration::ZERO, 60 * S, 100_000);
    let recorder = Recorder::default();
    let mut remembering = layer.layer(server(recorder.clone()));
    async fn send<S>(svc: &mut S, uri: &str)
    where
        S: Service<http::Request<String>>,
        S::Error: std::fmt::Debug,
    {
        drop(
            svc.ready()
                .await
                .unwrap()
                .call(request(uri, 0, 0))
                .await
                .unwrap(),
        );
    }
    send(&mut remembering, "http://a.test/").await;
    send(&mut remembering, "http://a.test/").await;
    assert_eq!(layer.slot("http://a.test").unwrap().dispatched, 2);
    // a.test idles past the timeout; new hosts sweep it away.
    tokio::time::advance(61 * S).await;
    let mut other = layer.layer(server(recorder.clone()));
    for i in 0..200 {
        send(&mut other, &format!("http://h{i}.test/")).await;
    }
    assert!(layer.slot("http://a.test").is_none(), "evicted");
    send(&mut remembering, "http://a.test/").await;
    let slot = layer
        .slot("http://a.test")
        .expect("the request made a new slot in the table");
    assert_eq!(slot.dispatched, 1);
    // And the remembered slot is now the table's: a second service's
    // request shares it.
    send(&mut other, "http://a.test/").await;
    send(&mut remembering, "http://a.test/").await;
    assert_eq!(layer.slot("http://a.test").unwrap().dispatched, 3);
}

#[tokio::test(start_paused = true)]
async fn a_clone_per_request_never_joins_an_evicted_slot() {
    use tower::ServiceExt;
    // A fresh clone remembers nothing of its own and takes the thread's
    // memory of the last slot (`svc.clone().oneshot(request)`); once that
    // slot is evicted, the next request must go to the table's new slot.
    let layer = throttle(Duration::ZERO, 60 * S, 100_000);
    let recorder = Recorder::default();
    let base = layer.layer(server(recorder.clone()));
    async fn send<S>(svc: &S, uri: &str)
    where
        S: tower::Service<http::Request<String>> + Clone,
        S::Error: std::fmt::Debug,
    {
        drop(svc.clone().oneshot(request(uri, 0, 0)).await.unwrap());
    }
    send(&base, "http://a.test/").await;
    send(&base, "http://a.test/").await;
    assert_eq!(layer.slot("http://a.test").unwrap().dispatched, 2);
    tokio::time::advance(61 * S).await;
    // New hosts sweep a.test away (sent by a service that keeps its own
    // memory, so the thread's stays on a.test).
    let mut other = layer.layer(server(recorder.clone()));
    for i in 0..200 {
        use tower::Service;
        drop(
            other
                .ready()
                .await
                .unwrap()
                .call(request(&format!("http://h{i}.test/"), 0, 0))
                .await
                .unwrap(),
        );
    }
    assert!(layer.slot("http://a.test").is_none(), "evicted");
    send(&base, "http://a.test/").await;
    let slot = layer
        .slot("http://a.test")
        .expect("the request made a new slot in the table");
    assert_eq!(slot.dispatched, 1);
    send(&base, "http://a.test/").await;
    assert_eq!(layer.slot("http://a.test").unwrap().dispatched, 2);
    // And a layer of its own never takes this layer's slot.
    let second = throttle(Duration::ZERO, 60 * S, 100_000);
    let theirs = second.layer(server(recorder.clone()));
    send(&theirs, "http://a.test/").await;
    assert_eq!(second.slot("http://a.test").unwrap().dispatched, 1);
    assert_eq!(layer.slot("http://a.test").unwrap().dispatched, 2);
}
