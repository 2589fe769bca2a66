//! The gate: spacing, limits, FIFO order, slot independence, lowered limits.

mod common;

use std::time::Duration;

use common::*;
use tokio::time::{advance, Instant};
use tower::Layer;

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn spacing_is_never_below_the_delay() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(100 * MS, 100);
    let mut svc = layer.layer(server(recorder.clone()));
    let handles: Vec<_> = (0..20)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 30)))
        .collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    assert_eq!(d.len(), 20);
    for pair in d.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= 100 * MS, "gap {gap:?} below the delay");
        // On the paused clock the gate dispatches right at the deadline.
        assert!(gap <= 101 * MS, "gap {gap:?} far above the delay");
    }
}

#[tokio::test(start_paused = true)]
async fn in_flight_never_exceeds_the_limit_and_reaches_it() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 3);
    let mut svc = layer.layer(server(recorder.clone()));
    let handles: Vec<_> = (0..30)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 50)))
        .collect();
    settle().await;
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.in_flight, snap.queued), (3, 27));
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let max = recorder.of("a.test").iter().map(|d| d.in_flight).max();
    assert_eq!(max, Some(3));
    let snap = layer.slot("http://a.test").unwrap();
    assert_eq!((snap.in_flight, snap.queued, snap.dispatched), (0, 0, 30));
}

#[tokio::test(start_paused = true)]
async fn requests_leave_in_fifo_order() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(MS, 2);
    let mut svc = layer.layer(server(recorder.clone()));
    let handles: Vec<_> = (0..200)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, (i * 7) % 13)))
        .collect();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let ids: Vec<u64> = recorder.of("a.test").iter().map(|d| d.id).collect();
    assert_eq!(ids, (0..200).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_stuck_slot_never_holds_up_another() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::ZERO, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    // a.test: one request that takes an hour, and one queued behind it.
    let _slow = spawn_request(&mut svc, request("http://a.test/", 0, 3_600_000));
    let _queued = spawn_request(&mut svc, request("http://a.test/", 1, 0));
    settle().await;
    let start = Instant::now();
    let fast: Vec<_> = (0..5)
        .map(|i| spawn_request(&mut svc, request("http://b.test/", i, 10)))
        .collect();
    for h in fast {
        h.await.unwrap().unwrap();
    }
    assert_eq!(Instant::now() - start, 50 * MS);
    let a = layer.slot("http://a.test").unwrap();
    assert_eq!((a.in_flight, a.queued), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_lowered_limit_binds_the_next_dispatch_even_for_waiters() {
    let recorder = Recorder::default();
    let (layer, policy) = scripted_layer(Duration::ZERO, 4);
    let mut svc = layer.layer(server(recorder.clone()));
    let handles: Vec<_> = (0..12)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 100)))
        .collect();
    settle().await;
    assert_eq!(layer.slot("http://a.test").unwrap().in_flight, 4);
    // The slot adopts limit 1 with the first response, at t = 100 ms.
    policy.set(Duration::ZERO, 1);
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    assert!(d[..4].iter().all(|x| x.at == d[0].at));
    for later in &d[4..] {
        assert_eq!(
            later.in_flight, 1,
            "dispatch {} saw {}",
            later.id, later.in_flight
        );
    }
    // One at a time after the change: 100 ms each.
    for pair in d[4..].windows(2) {
        assert_eq!(pair[1].at - pair[0].at, 100 * MS);
    }
}

#[tokio::test(start_paused = true)]
async fn a_raised_delay_binds_the_waiting_head() {
    let recorder = Recorder::default();
    let (layer, policy) = scripted_layer(10 * MS, 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let handles: Vec<_> = (0..4)
        .map(|i| spawn_request(&mut svc, request("http://a.test/", i, 5)))
        .collect();
    settle().await;
    policy.set(Duration::from_secs(1), 1);
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    // The first response (t = 5 ms) raises the delay while the second waits
    // for its 10 ms deadline: it now leaves 1 s after the first.
    let gaps: Vec<Duration> = d.windows(2).map(|p| p[1].at - p[0].at).collect();
    assert_eq!(gaps, vec![Duration::from_secs(1); 3]);
}

#[tokio::test(start_paused = true)]
async fn a_lowered_delay_lets_the_waiting_head_go_sooner() {
    let recorder = Recorder::default();
    let (layer, policy) = scripted_layer(Duration::from_secs(10), 1);
    let mut svc = layer.layer(server(recorder.clone()));
    let first = spawn_request(&mut svc, request("http://a.test/", 0, 100));
    let second = spawn_request(&mut svc, request("http://a.test/", 1, 0));
    settle().await;
    policy.set(200 * MS, 1);
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let d = recorder.of("a.test");
    assert_eq!(d[1].at - d[0].at, 200 * MS);
}

#[tokio::test(start_paused = true)]
async fn clones_and_layered_services_share_slots() {
    let recorder = Recorder::default();
    let (layer, _) = scripted_layer(Duration::from_secs(1), 8);
    let mut one = layer.layer(server(recorder.clone()));
    let mut two = layer.layer(server(recorder.clone()));
    let mut three = one.clone();
    let hs = vec![
        spawn_request(&mut one, request("http://a.test/", 0, 0)),
        spawn_request(&mut two, request("http://a.test/", 1, 0)),
        spawn_request(&mut three, request("http://a.test/", 2, 0)),
    ];
    for h in hs {
        h.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    assert_eq!(d[1].at - d[0].at, Duration::from_secs(1));
    assert_eq!(d[2].at - d[1].at, Duration::from_secs(1));
    assert_eq!(layer.slots().len(), 1);
    assert_eq!(one.slot("http://a.test").unwrap().dispatched, 3);
}

#[tokio::test(start_paused = true)]
async fn max_pending_gives_backpressure_in_poll_ready() {
    use std::future::poll_fn;
    use tower::Service;

    let recorder = Recorder::default();
    let policy = Scripted::new(Duration::ZERO, 8);
    let config = tower_autothrottle::Config::builder()
        .policy(policy)
        .max_pending(2)
        .build()
        .unwrap();
    let layer = tower_autothrottle::AutoThrottleLayer::new(config);
    let mut svc = layer.layer(server(recorder.clone()));
    let a = spawn_request(&mut svc, request("http://a.test/", 0, 100));
    let b = spawn_request(&mut svc, request("http://b.test/", 1, 100));
    settle().await;
    let mut probe = svc.clone();
    let ready = poll_fn(|cx| std::task::Poll::Ready(probe.poll_ready(cx).is_ready())).await;
    assert!(!ready, "the bound of 2 is reached");
    advance(100 * MS).await;
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    let ready = poll_fn(|cx| std::task::Poll::Ready(probe.poll_ready(cx).is_ready())).await;
    assert!(ready, "places came back");
}
