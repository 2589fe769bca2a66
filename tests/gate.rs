//! The gate: spacing, limits, FIFO order, slot independence, lowered limits.

mod common;

use std::time::Duration;

use common::*;
use tokio::time::{advance, Instant};
use tower::Layer;
use tower_autothrottle::policy::{MakePolicy, Policy, Sample, Throttle};
use tower_autothrottle::{AutoThrottleLayer, Config, ConfigError, SlotKey};

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

/// A delay of 100 ms, paced or strict, and a limit of 3; a policy that
/// owns overloads has the layer add no backoff of its own on top.
#[derive(Clone, Copy, Debug)]
struct Pacing {
    paced: bool,
    owns_overload: bool,
}

impl Pacing {
    fn paced(paced: bool) -> Self {
        Pacing {
            paced,
            owns_overload: false,
        }
    }
}

impl Policy for Pacing {
    fn throttle(&self) -> Throttle {
        if self.paced {
            Throttle::paced(0.1, 3)
        } else {
            Throttle::new(0.1, 3)
        }
    }
    fn on_sample(&mut self, _: &Sample) -> Throttle {
        self.throttle()
    }
    fn owns_overload(&self) -> bool {
        self.owns_overload
    }
}

impl MakePolicy for Pacing {
    fn name(&self) -> &'static str {
        "pacing"
    }
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
    fn make_policy(&self, _: &SlotKey) -> Box<dyn Policy> {
        Box::new(*self)
    }
}

#[tokio::test(start_paused = true)]
async fn a_paced_delay_spaces_new_places_and_lets_freed_ones_go_at_once() {
    for paced in [true, false] {
        let recorder = Recorder::default();
        let config = Config::builder()
            .policy(Pacing::paced(paced))
            .build()
            .unwrap();
        let mut svc = AutoThrottleLayer::new(config).layer(server(recorder.clone()));
        // The first three open the slot's places: spaced either way. Their
        // answers all come back at 300 ms; the next three take the places
        // those answers freed.
        let handles: Vec<_> = [300, 200, 100, 50, 50, 50]
            .into_iter()
            .enumerate()
            .map(|(i, ms)| spawn_request(&mut svc, request("http://a.test/", i as u64, ms)))
            .collect();
        for h in handles {
            h.await.unwrap().unwrap();
        }
        let d = recorder.of("a.test");
        let at: Vec<Duration> = d.iter().map(|x| x.at - d[0].at).collect();
        let expected: Vec<Duration> = if paced {
            // Each answer clocks the request that replaces it.
            [0, 100, 200, 300, 300, 300]
        } else {
            // Every dispatch waits for the delay (Scrapy's spacing).
            [0, 100, 200, 300, 400, 500]
        }
        .into_iter()
        .map(|ms| ms * MS)
        .collect();
        assert_eq!(at, expected, "paced: {paced}");
        let max = d.iter().map(|x| x.in_flight).max();
        assert_eq!(max, Some(3), "paced: {paced}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_answers_that_end_during_a_pause_clock_nothing_after_it() {
    let recorder = Recorder::default();
    // (A policy that owns overloads: the layer adds no backoff that would
    // space the requests after the pause anyway.)
    let policy = Pacing {
        paced: true,
        owns_overload: true,
    };
    let config = Config::builder().policy(policy).build().unwrap();
    let mut svc = AutoThrottleLayer::new(config).layer(server(recorder.clone()));
    let start = Instant::now();
    // Three places, opened 100 ms apart; all three answers end at 300 ms,
    // the second a 429 with `Retry-After: 1`.
    let mut handles: Vec<_> = [300, 200, 100]
        .into_iter()
        .enumerate()
        .map(|(i, ms)| {
            let mut req = request("http://a.test/", i as u64, ms);
            if i == 1 {
                let headers = req.headers_mut();
                headers.insert("x-status", "429".parse().unwrap());
                headers.insert("x-reply-retry-after", "1".parse().unwrap());
            }
            spawn_request(&mut svc, req)
        })
        .collect();
    // Three more, longer than the pacing: no answer of theirs clocks the
    // next.
    handles.extend((3..6).map(|i| spawn_request(&mut svc, request("http://a.test/", i, 500))));
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let d = recorder.of("a.test");
    assert_eq!(d.len(), 6);
    // After the pause the places are opened again, paced: the answers that
    // ended before it ended clock none of them.
    assert!(d[3].at - start >= 1300 * MS, "{:?}", d[3].at - start);
    for pair in d[3..].windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= 100 * MS, "gap {gap:?} after the pause");
    }
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
