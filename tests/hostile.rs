//! Nothing a user or a server sends can break the throttle, driven through
//! the public API with arbitrary values: every builder setter and run-time
//! setter with values up to the ends of their types (durations up to
//! `Duration::MAX`), policies built with any parameters (checked or not) fed
//! any sample, any key string, and servers answering any status and any
//! `Retry-After` / `RateLimit` text. Each case asserts no panic, and that
//! every request is answered, or held by a documented reason: in its slot's
//! queue, a `Retry-After` pause, a delay longer than the test's budget (a
//! floor, a bound, a `RateLimit` pacing), or a `Duration::MAX` delay that
//! blocks the slot; outside it, in `poll_ready`, a place under
//! `max_pending` while every place is held by a request queued or in
//! flight. `.ci/hostile-mutations.sh` leaks such a place on purpose and
//! checks that this is caught.
//!
//! CI runs 128 cases of each, drawn from a fixed seed; for a longer soak from
//! a random seed (in a debug build, so that arithmetic overflow panics):
//! `PROPTEST_CASES=20000 cargo test --test hostile`. Failures found that way
//! are kept in `hostile.proptest-regressions` and replayed first by every run.

use std::convert::Infallible;
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode};
use proptest::prelude::*;
use tower::{Layer, ServiceExt};
use tower_autothrottle::policy::{
    Adaptive, Aimd, Bounded, Gradient2, MakePolicy, Outcome, Policy, Sample, Scrapy, Scrapy2012,
    Throttle, Vegas,
};
use tower_autothrottle::{AutoThrottleLayer, Config, KeyStrategy, Learned, SlotKey, SlotSettings};

/// Durations from zero to `Duration::MAX`, the ends and the usual.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::MAX - Duration::from_nanos(1)),
        Just(Duration::from_secs(u64::MAX / 2)),
        (0u64..5_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_secs),
        any::<u64>().prop_map(Duration::from_nanos),
    ]
}

/// Counts from zero to `usize::MAX`.
fn count() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(usize::MAX),
        0usize..100,
        any::<usize>()
    ]
}

/// Seconds as `f64`, including what is no number of seconds.
fn seconds() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-1.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::MAX),
        Just(86_400.0),
        0.0..10.0f64,
        any::<f64>(),
    ]
}

/// A fraction-like value, including the invalid.
fn ratio() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1.0),
        Just(f64::NAN),
        Just(-0.5),
        0.0..2.0f64,
        any::<f64>()
    ]
}

/// Text for keys and patterns: URIs with every case and port, hosts, names,
/// and anything.
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "(http|HTTPS|ws|ftp)://(user@)?[a-zA-Z0-9.-]{0,12}(:[0-9]{0,6})?(/[a-z/]{0,6})?",
        "[a-zA-Z0-9.*-]{0,16}(:[0-9*]{0,5})?",
        "\\[[0-9a-fA-F:]{0,20}\\](:[0-9]{0,5})?",
        "[a-zäöüß中文.]{1,12}",
        ".{0,24}",
    ]
}

/// Any policy, built with any parameters, not checked.
fn any_policy() -> impl Strategy<Value = Box<dyn MakePolicy>> {
    let p = (
        seconds(),
        seconds(),
        seconds(),
        count(),
        count(),
        count(),
        ratio(),
        ratio(),
    );
    (0usize..6, p).prop_map(|(kind, (a, b, c, n, m, k, r, s))| -> Box<dyn MakePolicy> {
        match kind {
            0 => Box::new(
                Adaptive::default()
                    .start_delay_secs(a)
                    .min_delay_secs(b)
                    .max_delay_secs(c)
                    .initial_concurrency(n)
                    .max_concurrency(m),
            ),
            1 => Box::new(
                Scrapy::default()
                    .start_delay_secs(a)
                    .min_delay_secs(b)
                    .max_delay_secs(c)
                    .target_concurrency(r)
                    .max_concurrency(m),
            ),
            2 => Box::new(
                Scrapy2012::default()
                    .start_delay_secs(a)
                    .check_period(k.min(1_000))
                    .max_concurrency(m),
            ),
            3 => Box::new(
                Aimd::default()
                    .initial_concurrency(n)
                    .min_concurrency(k)
                    .max_concurrency(m)
                    .backoff_ratio(r)
                    .timeout_secs(a)
                    .min_delay_secs(b),
            ),
            4 => Box::new(
                Vegas::default()
                    .initial_concurrency(n)
                    .max_concurrency(m)
                    .smoothing(s)
                    .probe_multiplier(k.min(1_000))
                    .min_delay_secs(b),
            ),
            _ => Box::new(
                Gradient2::default()
                    .initial_concurrency(n)
                    .min_concurrency(k)
                    .max_concurrency(m)
                    .smoothing(s)
                    .queue_size(k)
                    .long_window(n)
                    .rtt_tolerance(r)
                    .min_delay_secs(b),
            ),
        }
    })
}

fn any_sample() -> impl Strategy<Value = Sample> {
    (seconds(), 100u16..1000, 0usize..3, count()).prop_map(|(latency, status, kind, in_flight)| {
        let sample = match (kind, StatusCode::from_u16(status)) {
            (0, Ok(status)) => Sample::from_secs_f64(latency, status),
            (1, _) => Sample::error(latency, Outcome::Overload),
            _ => Sample::error(latency, Outcome::Ignore),
        };
        sample.with_in_flight(in_flight)
    })
}

/// The run's configuration: a soak when `PROPTEST_CASES` is set, else 128
/// cases drawn from a fixed seed.
fn soak_or_fixed() -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() {
        return ProptestConfig::default();
    }
    ProptestConfig {
        cases: 128,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_a070),
        ..ProptestConfig::default()
    }
}

proptest! {
    // 128 cases each from a fixed seed, so that CI is deterministic; or
    // PROPTEST_CASES from a random seed (or PROPTEST_RNG_SEED), for a soak.
    #![proptest_config(soak_or_fixed())]

    /// Any policy with any parameters, checked or not, on any samples: no
    /// panic, and a limit of at least 1 from the checked ones.
    #[test]
    fn policies_never_panic_whatever_their_parameters(
        policy in any_policy(),
        samples in proptest::collection::vec(any_sample(), 0..64),
        bounds in (duration(), duration(), count()),
    ) {
        let valid = policy.validate().is_ok();
        let mut state = policy.make_policy(&SlotKey::new("t"));
        let mut bounded = Bounded::new(policy.make_policy(&SlotKey::new("t")))
            .min_delay(bounds.0)
            .max_delay(bounds.1)
            .max_concurrency(bounds.2);
        for sample in &samples {
            let t = state.on_sample(sample);
            let _ = t.delay();
            if valid {
                prop_assert!(t.concurrency() >= 1, "{policy:?}: {t:?}");
            }
            let b = bounded.on_sample(sample);
            prop_assert!(b.concurrency() >= 1);
        }
    }

    /// Any policy warmed with anything, then imported through a layer:
    /// no panic; an import either fails with a typed error and changes
    /// nothing, or warms a slot that allows at least one request.
    #[test]
    fn warm_starts_take_anything(
        policy in any_policy(),
        key in key_text(),
        delay in seconds(),
        concurrency in count(),
        latency in proptest::option::of(seconds()),
        paused in proptest::option::of(seconds()),
    ) {
        let valid = policy.validate().is_ok();
        let mut state = policy.make_policy(&SlotKey::new("t"));
        state.warm(Throttle::new(delay, concurrency), latency);
        if valid {
            prop_assert!(state.throttle().concurrency() >= 1, "{policy:?}");
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let layer = AutoThrottleLayer::new(Config::default());
            let learned = Learned { key, delay_secs: delay, concurrency, latency_secs: latency, paused_secs: paused };
            match layer.import([learned.clone()]) {
                Ok(n) => {
                    prop_assert_eq!(n, 1);
                    let slots = layer.slots();
                    prop_assert_eq!(slots.len(), 1);
                    prop_assert!(slots[0].concurrency >= 1);
                    let again = layer.export();
                    prop_assert_eq!(again.len(), 1);
                }
                Err(_) => prop_assert!(layer.slots().is_empty()),
            }
            Ok(())
        })?;
    }

    /// Any text as a key: no panic; normalizing twice changes nothing; a
    /// parsed key is the key `new` gives.
    #[test]
    fn keys_normalize_once(text in key_text()) {
        let key = SlotKey::new(&text);
        prop_assert_eq!(SlotKey::new(key.as_str()), key.clone());
        if let Ok(parsed) = SlotKey::parse(&text) {
            prop_assert_eq!(parsed, key);
        }
    }

    /// A URI a request can carry is keyed as its text is.
    #[test]
    fn a_request_and_its_uri_text_name_one_slot(
        scheme in "(http|https|HTTP|Https|ws)",
        host in "([a-zA-Z0-9-]{1,8}\\.){0,3}[a-zA-Z0-9-]{1,8}\\.?",
        port in proptest::option::of(0u32..70_000),
        path in "(/[a-z]{0,4}){0,3}",
    ) {
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let text = format!("{scheme}://{host}{port}{path}");
        let Ok(uri) = text.parse::<http::Uri>() else { return Ok(()) };
        let Some(from_request) = SlotKey::from_uri(&uri) else { return Ok(()) };
        match SlotKey::parse(&text) {
            Ok(parsed) => prop_assert_eq!(parsed, from_request),
            // A port beyond 65535, which a URI may carry and no server has.
            Err(_) => prop_assert!(
                uri.authority().unwrap().as_str().contains(':') && uri.port_u16().is_none()
            ),
        }
    }

    /// Any configuration and any run-time settings, then requests to servers
    /// answering anything: no panic, and every request answered or held by
    /// a documented reason.
    #[test]
    fn the_layer_answers_or_holds_for_a_documented_reason(
        (preset, hostile) in (0usize..4, any_policy()),
        settings in (
            duration(),
            prop_oneof![4 => 1usize..1_000, 1 => count()],
            prop_oneof![4 => 0.0..=1.0f64, 1 => ratio()],
            duration(),
            duration(),
            prop_oneof![4 => 1usize..1_000, 1 => count()],
            any::<u64>(),
        ),
        slot in proptest::option::weighted(0.3, (key_text(), duration(), duration(), duration(), count())),
        floor in (key_text(), proptest::option::of(duration())),
        answers in proptest::collection::vec((0usize..4, 0usize..6, ".{0,40}"), 1..8),
        strategy in 0usize..3,
    ) {
        let (max_retry_after, max_pending, jitter, dns_ttl, idle_timeout, max_slots, seed) = settings;
        // Three ordinary policies, and one with any parameters.
        let policy: Box<dyn MakePolicy> = match preset {
            0 => Box::new(Adaptive::default()),
            1 => Box::new(Scrapy2012::default().start_delay(Duration::from_millis(100))),
            2 => Box::new(Aimd::default().min_concurrency(1)),
            _ => hostile,
        };
        let mut builder = Config::builder()
            .policy(policy)
            .max_retry_after(max_retry_after)
            .max_pending(max_pending)
            .jitter(jitter)
            .seed(seed)
            .dns_ttl(dns_ttl)
            .idle_timeout(idle_timeout)
            .max_slots(max_slots)
            .key_strategy([KeyStrategy::Authority, KeyStrategy::Host, KeyStrategy::RegistrableDomain][strategy]);
        if let Some(slot) = &slot {
            builder = builder.slot(
                slot.0.clone(),
                SlotSettings::new()
                    .min_delay(slot.1)
                    .max_delay(slot.2)
                    .start_delay(slot.3)
                    .max_concurrency(slot.4),
            );
        }
        let Ok(config) = builder.build() else { return Ok(()) };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            let layer = AutoThrottleLayer::new(config);
            let _ = layer.set_delay_floor(&floor.0, floor.1);
            if let Some(slot) = &slot {
                let _ = layer.set_slot_settings(&slot.0, SlotSettings::new().min_delay(slot.1));
            }
            let hosts = ["http://a.test", "http://b.test:8080", "https://A.TEST"];
            let statuses = [200, 429, 503, 500];
            let headers = ["retry-after", "ratelimit", "ratelimit-policy", "date", "ratelimit-reset", "x-other"];
            let mut tasks = Vec::new();
            for (i, (status, header, value)) in answers.into_iter().enumerate() {
                let answer = move |_req: Request<()>| {
                    let value = value.clone();
                    async move {
                        let mut response = Response::builder().status(statuses[status]);
                        if let Ok(value) = HeaderValue::from_str(&value) {
                            response = response.header(headers[header], value);
                        }
                        Ok::<_, Infallible>(response.body(String::new()).unwrap())
                    }
                };
                let svc = layer.layer(tower::service_fn(answer));
                let request = Request::get(format!("{}/{i}", hosts[i % hosts.len()])).body(()).unwrap();
                let key = layer.key_for(&request).await;
                tasks.push((key, tokio::spawn(svc.oneshot(request))));
            }
            // A budget of virtual time far beyond any delay a policy may
            // set; the paused clock runs through it at once.
            let budget = Duration::from_secs(86_400 * 1_000);
            tokio::time::sleep(budget).await;
            // What holds the requests still out, read before any of them
            // is given up: a slot's queue, held by a pause or a long delay,
            // or `poll_ready`, waiting for a place under `max_pending` that
            // the requests queued or in flight all hold.
            let now = tokio::time::Instant::now();
            let slots = layer.slots();
            let taken: usize = slots.iter().map(|s| s.queued + s.in_flight).sum();
            for slot in slots.iter().filter(|s| s.queued > 0) {
                let paused = slot.paused_until.is_some_and(|until| until > now);
                let long_delay = slot.delay > budget / 100;
                prop_assert!(
                    paused || long_delay,
                    "held without a documented reason: {slot:?}"
                );
            }
            let full = taken >= max_pending;
            let mut held = 0;
            for (key, task) in tasks {
                if task.is_finished() {
                    let answered = task.await.expect("no panic");
                    prop_assert!(answered.is_ok(), "the inner service never fails");
                    continue;
                }
                held += 1;
                let queued = slots.iter().any(|s| s.key == key && s.queued > 0);
                prop_assert!(
                    queued || full,
                    "{key} held outside its slot's queue while {taken} of {max_pending} places are taken"
                );
                task.abort();
            }
            prop_assert!(
                held <= taken || full,
                "{held} held, {taken} queued or in flight, with places free under max_pending {max_pending}"
            );
            Ok(())
        })?;
    }
}

/// The reports of the issue, one by one: each panicked before.
#[tokio::test(start_paused = true)]
async fn a_duration_max_floor_blocks_the_slot_until_it_is_lifted() {
    let config = Config::builder().jitter(0.5).build().unwrap();
    let layer = AutoThrottleLayer::new(config);
    let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::builder().status(429).body(String::new()).unwrap())
    }));
    layer
        .set_delay_floor("http://a.test", Some(Duration::MAX))
        .unwrap();
    let request = || Request::get("http://a.test/").body(()).unwrap();
    let first = tokio::spawn(svc.clone().oneshot(request()));
    tokio::time::sleep(Duration::from_secs(86_400 * 365)).await;
    assert!(
        !first.is_finished(),
        "blocked: not even a first request goes"
    );
    let slot = layer.slot("http://a.test").unwrap();
    assert_eq!((slot.queued, slot.dispatched), (1, 0));
    layer.set_delay_floor("http://a.test", None).unwrap();
    let response = first.await.unwrap().unwrap();
    assert_eq!(response.status(), 429);
    // A 429 with a huge floor back on: the backoff saturates, no panic.
    layer
        .set_delay_floor(
            "http://a.test",
            Some(Duration::MAX - Duration::from_secs(1)),
        )
        .unwrap();
    let second = tokio::spawn(svc.oneshot(request()));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!second.is_finished());
    second.abort();
}

#[tokio::test(start_paused = true)]
async fn a_huge_ratelimit_window_with_no_cap_then_a_429_does_not_panic() {
    let config = Config::builder()
        .max_retry_after(Duration::MAX)
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let svc = layer.layer(tower::service_fn(|req: Request<()>| async move {
        let status = if req.uri().path() == "/0" { 200 } else { 429 };
        Ok::<_, Infallible>(
            Response::builder()
                .status(status)
                // The largest integer a structured field holds: 31 million years.
                .header("ratelimit", "\"x\";r=1;t=999999999999999")
                .body(String::new())
                .unwrap(),
        )
    }));
    let first = svc
        .clone()
        .oneshot(Request::get("http://a.test/0").body(()).unwrap())
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    // Paced at one request in 10^15 s: the next one waits, without a panic.
    let second = tokio::spawn(svc.oneshot(Request::get("http://a.test/1").body(()).unwrap()));
    tokio::time::sleep(Duration::from_secs(86_400)).await;
    assert!(!second.is_finished());
    assert!(layer.slot("http://a.test").unwrap().delay > Duration::from_secs(86_400 * 365));
    second.abort();
}

#[tokio::test(start_paused = true)]
async fn a_duration_max_min_delay_blocks_its_slot() {
    let config = Config::builder()
        .slot(
            "http://blocked.test",
            SlotSettings::new().min_delay(Duration::MAX),
        )
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let blocked = tokio::spawn(
        svc.clone()
            .oneshot(Request::get("http://BLOCKED.test:80/").body(()).unwrap()),
    );
    svc.oneshot(Request::get("http://open.test/").body(()).unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(!blocked.is_finished());
    blocked.abort();
}

#[test]
fn in_flight_at_the_end_of_usize_does_not_overflow_a_policy() {
    let huge = Sample::from_secs_f64(0.1, StatusCode::OK).with_in_flight(usize::MAX);
    for policy in [
        Box::new(Aimd::default().max_concurrency(usize::MAX)) as Box<dyn MakePolicy>,
        Box::new(Vegas::default()),
        Box::new(Gradient2::default()),
        Box::new(Adaptive::default()),
    ] {
        let mut state: Box<dyn Policy> = policy.make_policy(&SlotKey::new("t"));
        for _ in 0..100 {
            assert!(state.on_sample(&huge).concurrency() >= 1);
        }
    }
}

#[test]
fn settings_at_the_ends_of_their_types_are_refused_by_name_or_accepted() {
    let day = Duration::from_secs(86_400);
    // A policy's delays go up to a day; its start delay not above its max.
    let err = Config::builder()
        .policy(Scrapy2012::default().start_delay(Duration::MAX))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "start_delay");
    let err = Config::builder()
        .policy(
            Adaptive::default()
                .start_delay(5 * day / 10)
                .max_delay(day / 100),
        )
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "start_delay");
    assert!(Config::builder()
        .policy(Adaptive::default().max_delay(day))
        .build()
        .is_ok());
    // Durations of the layer: every value has a meaning.
    for d in [Duration::ZERO, Duration::MAX] {
        assert!(Config::builder()
            .max_retry_after(d)
            .dns_ttl(d)
            .idle_timeout(d)
            .build()
            .is_ok());
    }
    // Counts: zero is refused by name, the maximum accepted.
    for (field, builder) in [
        ("max_slots", Config::builder().max_slots(0)),
        ("max_pending", Config::builder().max_pending(0)),
        ("dns_cache_size", Config::builder().dns_cache_size(0)),
    ] {
        assert_eq!(builder.build().unwrap_err().field(), field);
    }
    assert!(Config::builder()
        .max_slots(usize::MAX)
        .max_pending(usize::MAX)
        .dns_cache_size(usize::MAX)
        .build()
        .is_ok());
    // A key string that names no slot is refused, not a new slot.
    let err = Config::builder()
        .slot("http://", SlotSettings::new())
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "slot");
}
