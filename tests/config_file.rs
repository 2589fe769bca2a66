//! The `serde` feature: configuration from TOML and JSON, into a working
//! layer, and typed errors that name the field.

mod common;

use std::time::Duration;

use common::*;
use tower::Layer;
use tower_autothrottle::file::{ConfigFile, SlotFile};
use tower_autothrottle::{AutoThrottleLayer, Config};

const TOML: &str = r#"
policy = "scrapy"
start_delay = 0.5
min_delay = 0.1
max_delay = 20
target_concurrency = 2.0
max_concurrency = 4
max_pending = 100
jitter = 0.0
seed = 7
max_retry_after = 120
key_strategy = "host"
idle_timeout = 60
max_slots = 5000

[slots."api.test"]
start_delay = 2.0
max_concurrency = 1

[slots."*.cdn.test"]
policy = "scrapy-2012"
check_period = 3
"#;

#[tokio::test(start_paused = true)]
async fn toml_configures_a_working_layer() {
    let config: Config = toml::from_str(TOML).unwrap();
    assert_eq!(config.policy().name(), "scrapy");
    assert_eq!(config.max_pending(), Some(100));
    assert_eq!(config.max_retry_after(), Duration::from_secs(120));
    let layer = AutoThrottleLayer::new(config);
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    for host in ["api.test", "x.cdn.test", "other.test"] {
        spawn_request(&mut svc, request(&format!("http://{host}/"), 0, 10))
            .await
            .unwrap()
            .unwrap();
    }
    // key_strategy = "host": slots by host name.
    let api = layer.slot("api.test").unwrap();
    // Scrapy's rule from 2 s: max(latency / 2, (2 + latency / 2) / 2) = 1.0025 s
    assert_eq!(api.concurrency, 1);
    assert_eq!(api.delay, Duration::from_micros(1_002_500));
    let cdn = layer.slot("x.cdn.test").unwrap();
    // The 2012 rules: (5 s + 10 ms) / 2.
    assert_eq!(cdn.delay, Duration::from_micros(2_505_000));
    let other = layer.slot("other.test").unwrap();
    // (0.5 + 0.01 / 2) / 2 = 0.2525 s, above the 0.1 s minimum.
    assert_eq!(other.delay, Duration::from_micros(252_500));
}

#[test]
fn json_reads_the_same_fields() {
    let json = r#"{"policy": "aimd", "initial_concurrency": 4, "min_concurrency": 2,
                   "max_concurrency": 16, "backoff_ratio": 0.5, "timeout": 2.5,
                   "slots": {"https://a.test": {"min_delay": 1.0}}}"#;
    let file: ConfigFile = serde_json::from_str(json).unwrap();
    assert_eq!(file.slots["https://a.test"].min_delay, Some(1.0));
    let config = file.build().unwrap();
    assert_eq!(config.policy().name(), "aimd");
    // And back out: the file form round-trips.
    let again: ConfigFile = serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
    assert_eq!(again, file);
}

#[test]
fn errors_name_the_field() {
    let cases: &[(&str, &str)] = &[
        ("start_delay = -1.0", "start_delay"),
        ("max_delay = nan", "max_delay"),
        ("jitter = 1.5", "jitter"),
        ("max_slots = 0", "max_slots"),
        ("policy = \"fast\"", "policy"),
        ("key_strategy = \"ip\"", "key_strategy"),
        ("policy = \"scrapy-2012\"\nmin_delay = 1.0", "min_delay"),
        ("policy = \"vegas\"\nmin_concurrency = 1", "min_concurrency"),
        ("policy = \"scrapy\"\ncheck_period = 3", "check_period"),
        ("policy = \"scrapy-2012\"\ncheck_period = 0", "check_period"),
        ("[slots.\"a\"]\nmax_concurrency = 0", "max_concurrency"),
        (
            "policy = \"aimd\"\n[slots.\"a\"]\nstart_delay = 1.0",
            "start_delay",
        ),
        (
            "[slots.\"a\"]\nmin_delay = 2.0\nmax_delay = 1.0",
            "min_delay",
        ),
        ("[slots.\"\"]\nmin_delay = 2.0", "slot"),
        ("dns_ttl = -3", "dns_ttl"),
    ];
    for (text, field) in cases {
        let file: ConfigFile = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let err = file.build().unwrap_err();
        assert_eq!(err.field(), *field, "{text}: {err}");
        // Straight into a Config, the format's error carries the message.
        let direct = toml::from_str::<Config>(text).unwrap_err().to_string();
        assert!(direct.contains(field), "{text}: {direct}");
    }
}

#[test]
fn unknown_fields_and_wrong_types_are_refused() {
    let err = toml::from_str::<ConfigFile>("start_dealy = 1.0").unwrap_err();
    assert!(err.to_string().contains("start_dealy"), "{err}");
    let err = toml::from_str::<ConfigFile>("[slots.a]\nconcurrency = 1").unwrap_err();
    assert!(err.to_string().contains("concurrency"), "{err}");
    let err = toml::from_str::<ConfigFile>("max_pending = \"ten\"").unwrap_err();
    assert!(err.to_string().contains("max_pending"), "{err}");
    let err = toml::from_str::<ConfigFile>("max_pending = -1").unwrap_err();
    assert!(err.to_string().contains("max_pending"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_slot_of_the_same_policy_inherits_the_configurations_fields() {
    // max_delay 1 s comes from the top level; the slot only changes the target.
    // (A start delay above it would be refused.)
    // Both structs are `#[non_exhaustive]`: built from their defaults.
    let mut slot = SlotFile::default();
    slot.target_concurrency = Some(4.0);
    let mut file = ConfigFile::default();
    file.policy = Some("scrapy".into());
    file.start_delay = Some(1.0);
    file.max_delay = Some(1.0);
    file.slots = [("a".to_owned(), slot)].into();
    let layer = AutoThrottleLayer::new(file.build().unwrap());
    let recorder = Recorder::default();
    let mut svc = layer.layer(server(recorder.clone()));
    // Scrapy's rule with target 4, after 8 s: max(2, (1 + 2) / 2) = 2 s;
    // the inherited max_delay cuts it to 1 s.
    let mut req = request("http://a.test/", 1, 8_000);
    req.extensions_mut()
        .insert(tower_autothrottle::DownloadSlot::new("a"));
    spawn_request(&mut svc, req).await.unwrap().unwrap();
    assert_eq!(layer.slot("a").unwrap().delay, Duration::from_secs(1));
}
