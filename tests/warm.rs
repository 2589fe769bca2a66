//! A warm start: `AutoThrottleLayer::export`, through JSON, and `import`
//! into a new layer, against a real hyper server on 127.0.0.1 (tokio's
//! paused clock). What the server saw is counted at the server.

#[path = "support/site.rs"]
mod site;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::policy::Scrapy2012;
use tower_autothrottle::{AutoThrottleLayer, Config, Learned};

/// Crawls `n` pages of `url` through `layer`, `outstanding` at a time.
async fn crawl(layer: &AutoThrottleLayer, url: &str, n: usize, outstanding: usize) {
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let gate = Arc::new(Semaphore::new(outstanding));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let place = Arc::clone(&gate).acquire_owned().await.unwrap();
        let client = client.clone();
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let request = Request::get(url).body(Empty::new()).unwrap();
            let response = client.oneshot(request).await.unwrap();
            let status = response.status();
            response.into_body().collect().await.unwrap();
            drop(place);
            status
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Through JSON and back, as a crawler saving its state would.
fn through_json(learned: &[Learned]) -> Vec<Learned> {
    let text = serde_json::to_string(learned).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_restarted_crawl_starts_where_the_last_one_stopped_not_from_the_start() {
    // A host that answers in 50 ms whatever the load: the default policy
    // keeps growing its limit.
    let host = site::host().await;
    let url = host.url("/ok?ms=50");
    let first = AutoThrottleLayer::new(Config::default());
    crawl(&first, &url, 600, 64).await;
    let learned = first.export();
    assert_eq!(learned.len(), 1);
    let limit = learned[0].concurrency;
    assert!(
        limit >= 16,
        "the first run learned a limit well above the start: {learned:?}"
    );

    // The restart: a new layer, warmed, and a fresh server to count on.
    let host = site::host().await;
    let url = host.url("/ok?ms=50");
    let mut learned = through_json(&learned);
    learned[0].key = host.base();
    let warm = AutoThrottleLayer::new(Config::default());
    assert_eq!(warm.import(learned).unwrap(), 1);
    let slot = warm.slot(host.base()).unwrap();
    assert_eq!(
        slot.concurrency,
        limit / 2,
        "it starts at half what it learned"
    );
    crawl(&warm, &url, 40, 64).await;
    let warm_peak = host.stats.max_active();

    // A cold start, on the same 40 pages.
    let host = site::host().await;
    let cold = AutoThrottleLayer::new(Config::default());
    crawl(&cold, &host.url("/ok?ms=50"), 40, 64).await;
    let cold_peak = host.stats.max_active();
    assert!(
        warm_peak >= limit / 2 && warm_peak > 2 * cold_peak,
        "warm {warm_peak} at once from the start, cold {cold_peak} (learned {limit})"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_still_running_is_kept_across_the_restart() {
    let host = site::host().await;
    let first = AutoThrottleLayer::new(Config::default());
    let client = ServiceBuilder::new()
        .layer(first.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let request = Request::get(host.url("/status/429?retry-after=30"))
        .body(Empty::new())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(response);
    tokio::time::advance(Duration::from_secs(10)).await;
    let learned = through_json(&first.export());
    let left = learned[0].paused_secs.expect("a pause is running");
    assert!((left - 20.0).abs() < 0.5, "20 s of it are left: {left}");

    let warm = AutoThrottleLayer::new(Config::default());
    warm.import(learned).unwrap();
    let restarted = Instant::now();
    let client = ServiceBuilder::new()
        .layer(warm.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let request = Request::get(host.url("/ok")).body(Empty::new()).unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(
        arrivals[1].0 - restarted >= Duration::from_secs(20),
        "the rest of the pause ran again before the first request"
    );
}

#[tokio::test(start_paused = true)]
async fn the_replicas_take_what_they_keep() {
    let layer = AutoThrottleLayer::new(
        Config::builder()
            .policy(Scrapy2012::default())
            .build()
            .unwrap(),
    );
    let learned = Learned {
        key: "https://example.com".into(),
        delay_secs: 0.4,
        concurrency: 3,
        latency_secs: None,
        paused_secs: None,
    };
    layer.import([learned]).unwrap();
    let slot = layer.slot("https://example.com").unwrap();
    assert_eq!(slot.delay, Duration::from_millis(400));
    assert_eq!(slot.concurrency, 3);
}

#[tokio::test(start_paused = true)]
async fn an_invalid_entry_is_a_typed_error_and_changes_nothing() {
    let layer = AutoThrottleLayer::new(Config::default());
    let good = Learned {
        key: "https://example.com".into(),
        delay_secs: 0.1,
        concurrency: 4,
        latency_secs: Some(0.2),
        paused_secs: None,
    };
    for (bad, field) in [
        (
            Learned {
                key: "http://".into(),
                ..good.clone()
            },
            "key",
        ),
        (
            Learned {
                delay_secs: f64::NAN,
                ..good.clone()
            },
            "delay_secs",
        ),
        (
            Learned {
                concurrency: 0,
                ..good.clone()
            },
            "concurrency",
        ),
        (
            Learned {
                latency_secs: Some(-1.0),
                ..good.clone()
            },
            "latency_secs",
        ),
        (
            Learned {
                paused_secs: Some(f64::INFINITY),
                ..good.clone()
            },
            "paused_secs",
        ),
    ] {
        let error = layer.import([good.clone(), bad]).unwrap_err();
        assert_eq!(error.field(), field);
        assert!(layer.slots().is_empty(), "nothing imported");
    }
    // JSON with the optional fields left out.
    let learned: Vec<Learned> = serde_json::from_str(
        r#"[{"key": "https://example.com", "delay_secs": 0.1, "concurrency": 4}]"#,
    )
    .unwrap();
    assert_eq!(layer.import(learned).unwrap(), 1);
}
