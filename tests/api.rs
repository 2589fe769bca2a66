//! The public API says one thing one way: one name for one idea across the
//! policies, builders that can be cloned and defaulted, durations shown in
//! seconds.

use std::time::Duration;

use tower_autothrottle::policy::{
    Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas,
};
use tower_autothrottle::{AutoThrottleLayer, Config, ConfigBuilder, SlotSettings};

#[test]
fn the_concurrency_bounds_have_one_name_in_every_policy() {
    // The same three setters wherever the policy has the bound.
    let _ = Adaptive::default()
        .initial_concurrency(2)
        .max_concurrency(4);
    let _ = Scrapy::default().max_concurrency(4);
    let _ = Scrapy2012::default().max_concurrency(4);
    let _ = Aimd::default()
        .initial_concurrency(2)
        .min_concurrency(1)
        .max_concurrency(4);
    let _ = Vegas::default().initial_concurrency(2).max_concurrency(4);
    let _ = Gradient2::default()
        .initial_concurrency(2)
        .min_concurrency(1)
        .max_concurrency(4);
    // And errors name them so.
    let field = |p: &dyn MakePolicy| p.validate().unwrap_err().field();
    assert_eq!(
        field(&Aimd::default().min_concurrency(0)),
        "min_concurrency"
    );
    assert_eq!(
        field(&Gradient2::default().min_concurrency(5).max_concurrency(4)),
        "max_concurrency"
    );
    assert_eq!(
        field(&Vegas::default().initial_concurrency(0)),
        "initial_concurrency"
    );
    assert_eq!(
        field(&Adaptive::default().max_concurrency(0)),
        "max_concurrency"
    );
    assert_eq!(
        field(&Scrapy2012::default().max_concurrency(0)),
        "max_concurrency"
    );
}

#[test]
#[allow(deprecated)]
fn the_former_netflix_names_still_build_the_same_policy() {
    assert_eq!(
        Aimd::default().initial_limit(3).min_limit(2).max_limit(9),
        Aimd::default()
            .initial_concurrency(3)
            .min_concurrency(2)
            .max_concurrency(9)
    );
    assert_eq!(
        Vegas::default().max_limit(9),
        Vegas::default().max_concurrency(9)
    );
}

#[test]
fn a_duration_and_its_seconds_set_the_same_delay() {
    assert_eq!(
        Scrapy::default().start_delay(Duration::from_millis(250)),
        Scrapy::default().start_delay_secs(0.25)
    );
    assert_eq!(
        Aimd::default().timeout(Duration::from_secs(2)),
        Aimd::default().timeout_secs(2.0)
    );
}

#[test]
fn builders_clone_and_default() {
    fn clone_and_default<T: Clone + Default>() {}
    clone_and_default::<ConfigBuilder>();
    clone_and_default::<SlotSettings>();
    let builder = ConfigBuilder::default().max_pending(3);
    let copy = builder.clone();
    assert_eq!(builder.build().unwrap().max_pending(), Some(3));
    assert_eq!(copy.build().unwrap().max_pending(), Some(3));
}

#[tokio::test(start_paused = true)]
async fn debug_shows_every_duration_in_seconds() {
    let policy = format!(
        "{:?}",
        Scrapy::default().min_delay(Duration::from_millis(250))
    );
    assert!(policy.contains("start_delay: 5s"), "{policy}");
    assert!(policy.contains("min_delay: 0.25s"), "{policy}");
    let config = format!("{:?}", Config::default());
    assert!(config.contains("max_retry_after: 600s"), "{config}");
    assert!(config.contains("idle_timeout: 300s"), "{config}");
    let settings = format!(
        "{:?}",
        SlotSettings::new().min_delay(Duration::from_millis(1500))
    );
    assert!(settings.contains("min_delay: Some(1.5s)"), "{settings}");
    let layer = AutoThrottleLayer::new(Config::default());
    layer
        .set_delay_floor("http://a.test", Some(Duration::from_millis(20)))
        .unwrap();
    let service = tower::Layer::layer(
        &layer,
        tower::service_fn(|_req: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
        }),
    );
    let request = http::Request::get("http://a.test/").body(()).unwrap();
    tower::ServiceExt::oneshot(service, request).await.unwrap();
    let slot = format!("{:?}", layer.slot("http://a.test").unwrap());
    assert!(slot.contains("delay_floor: 0.02s"), "{slot}");
    assert!(slot.contains("delay: 0.02s"), "{slot}");
}
