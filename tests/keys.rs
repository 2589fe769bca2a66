//! Slot keys through the layer: by host, by registrable domain, by resolved
//! address (with a fake resolver: no network), and their precedence.

mod common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, BoxError, Config, DownloadSlot, KeyStrategy, SlotKey};

const MS: Duration = Duration::from_millis(1);

fn layer(
    strategy: KeyStrategy,
    delay: Duration,
    build: impl FnOnce(tower_autothrottle::ConfigBuilder) -> tower_autothrottle::ConfigBuilder,
) -> AutoThrottleLayer {
    let config = build(
        Config::builder()
            .policy(Scripted::new(delay, 4))
            .key_strategy(strategy),
    )
    .build()
    .unwrap();
    AutoThrottleLayer::new(config)
}

/// a.test and b.test are one machine; c.test another; slow.test takes a
/// second to resolve; anything else does not resolve.
fn fake_resolver(calls: Arc<AtomicUsize>) -> impl tower_autothrottle::Resolve {
    move |host: String| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let addr = match host.as_str() {
                "a.test" | "b.test" => "10.0.0.1",
                "c.test" => "10.0.0.2",
                "slow.test" => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    "10.0.0.3"
                }
                _ => return Err::<Vec<IpAddr>, BoxError>("NXDOMAIN".into()),
            };
            Ok(vec![addr.parse().unwrap()])
        }
    }
}

fn keys(layer: &AutoThrottleLayer) -> Vec<(String, u64)> {
    layer
        .slots()
        .into_iter()
        .map(|s| (s.key.to_string(), s.dispatched))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn names_of_one_address_share_one_budget() {
    let calls = Arc::new(AtomicUsize::new(0));
    let throttle = layer(KeyStrategy::ResolvedIp, 100 * MS, |c| {
        c.resolver(fake_resolver(calls.clone()))
    });
    let recorder = Recorder::default();
    let mut svc = throttle.layer(server(recorder.clone()));
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..10 {
        let host = if i % 2 == 0 { "a.test" } else { "B.Test" };
        handles.push(spawn_request(
            &mut svc,
            request(&format!("http://{host}/"), i, 0),
        ));
    }
    handles.push(spawn_request(&mut svc, request("http://c.test/", 10, 0)));
    for h in handles {
        h.await.unwrap().unwrap();
    }
    assert_eq!(
        keys(&throttle),
        vec![("10.0.0.1".into(), 10), ("10.0.0.2".into(), 1)]
    );
    // One budget: the ten requests to the two names are 100 ms apart.
    let mut at: Vec<Duration> = recorder
        .dispatches()
        .iter()
        .filter(|d| d.host != "c.test")
        .map(|d| d.at - start)
        .collect();
    at.sort();
    for pair in at.windows(2) {
        assert!(pair[1] - pair[0] >= 100 * MS, "{at:?}");
    }
    // Each name resolved once, however many requests.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    for i in 0..5 {
        spawn_request(&mut svc, request("http://a.test/", 20 + i, 0))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3, "cached");
}

#[tokio::test(start_paused = true)]
async fn resolutions_expire_after_the_ttl() {
    let calls = Arc::new(AtomicUsize::new(0));
    let throttle = layer(KeyStrategy::ResolvedIp, Duration::ZERO, |c| {
        c.resolver(fake_resolver(calls.clone()))
            .dns_ttl(Duration::from_secs(10))
    });
    let mut svc = throttle.layer(server(Recorder::default()));
    spawn_request(&mut svc, request("http://a.test/", 0, 0))
        .await
        .unwrap()
        .unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;
    spawn_request(&mut svc, request("http://a.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(6)).await;
    spawn_request(&mut svc, request("http://a.test/", 2, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_resolution_keys_by_host_and_never_stalls() {
    let throttle = layer(KeyStrategy::ResolvedIp, Duration::ZERO, |c| {
        c.resolver(fake_resolver(Arc::new(AtomicUsize::new(0))))
    });
    let mut svc = throttle.layer(server(Recorder::default()));
    let (status, _) = spawn_request(&mut svc, request("http://nowhere.test/", 0, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    // IP literals are never resolved.
    spawn_request(&mut svc, request("http://[::1]:8080/", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        keys(&throttle),
        vec![("[::1]".into(), 1), ("nowhere.test".into(), 1)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_resolution_holds_up_no_other_slot() {
    let throttle = layer(KeyStrategy::ResolvedIp, Duration::ZERO, |c| {
        c.resolver(fake_resolver(Arc::new(AtomicUsize::new(0))))
    });
    let mut svc = throttle.layer(server(Recorder::default()));
    let start = Instant::now();
    let slow = spawn_request(&mut svc, request("http://slow.test/", 0, 0));
    let fast = spawn_request(&mut svc, request("http://c.test/", 1, 10));
    let (_, done) = fast.await.unwrap().unwrap();
    assert_eq!(done - start, 10 * MS);
    let (_, done) = slow.await.unwrap().unwrap();
    assert_eq!(done - start, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_resolution_frees_the_global_place() {
    let throttle = layer(KeyStrategy::ResolvedIp, Duration::ZERO, |c| {
        c.resolver(fake_resolver(Arc::new(AtomicUsize::new(0))))
            .max_pending(1)
    });
    let mut svc = throttle.layer(server(Recorder::default()));
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(request("http://slow.test/", 0, 0));
    assert!(tokio::time::timeout(100 * MS, fut).await.is_err());
    // The one global place is back: the next request goes through.
    spawn_request(&mut svc, request("http://c.test/", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert!(throttle.slot("10.0.0.3").is_none());
}

#[tokio::test(start_paused = true)]
async fn host_and_registrable_domain_strategies() {
    let throttle = layer(KeyStrategy::Host, Duration::ZERO, |c| c);
    let mut svc = throttle.layer(server(Recorder::default()));
    for uri in ["http://a.test:8080/", "https://A.TEST./", "http://a.test/"] {
        let _ = spawn_request(&mut svc, request(uri, 0, 0)).await.unwrap();
    }
    assert_eq!(keys(&throttle), vec![("a.test".into(), 3)]);

    let throttle = layer(KeyStrategy::RegistrableDomain, Duration::ZERO, |c| c);
    let mut svc = throttle.layer(server(Recorder::default()));
    for uri in [
        "http://a.example.co.uk/",
        "https://b.example.co.uk:8443/",
        "http://example.co.uk/",
        "http://other.co.uk/",
        "http://localhost:3000/",
        "http://127.0.0.1:3000/",
    ] {
        let _ = spawn_request(&mut svc, request(uri, 0, 0)).await.unwrap();
    }
    assert_eq!(
        keys(&throttle),
        vec![
            ("127.0.0.1".into(), 1),
            ("example.co.uk".into(), 3),
            ("localhost".into(), 1),
            ("other.co.uk".into(), 1),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_extension_and_the_key_function_come_before_the_strategy() {
    let calls = Arc::new(AtomicUsize::new(0));
    let throttle = layer(KeyStrategy::ResolvedIp, Duration::ZERO, |c| {
        c.resolver(fake_resolver(calls.clone()))
            .key_fn(|parts| (parts.uri.path() == "/api").then(|| SlotKey::new("api")))
    });
    let mut svc = throttle.layer(server(Recorder::default()));
    let mut with_ext = request("http://a.test/api", 0, 0);
    with_ext.extensions_mut().insert(DownloadSlot::new("mine"));
    spawn_request(&mut svc, with_ext).await.unwrap().unwrap();
    spawn_request(&mut svc, request("http://a.test/api", 1, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(keys(&throttle), vec![("api".into(), 1), ("mine".into(), 1)]);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing to resolve");
}
