//! Property tests (proptest): no input a server or a user can produce makes
//! the parsers, the key normalization or the policies panic or step out of
//! their bounds. CI runs proptest's default 256 cases per property; for a
//! longer soak: `PROPTEST_CASES=100000 cargo test --release --test properties`.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;
use tower_autothrottle::headers::{rate_limit, retry_after, RateLimit};
use tower_autothrottle::policy::{
    Adaptive, Aimd, Gradient2, MakePolicy, Outcome, Sample, Scrapy, Scrapy2012, Vegas,
};
use tower_autothrottle::SlotKey;

/// Header-like bytes: visible ASCII with the characters structured fields
/// and dates use, and now and then anything.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        "[ -~]{0,64}".prop_map(String::into_bytes),
        "(\"[a-z]{0,5}\";(r|t|q|w)=-?[0-9]{0,20}(;(r|t|q|w)=[0-9.]{0,8})?, ?){0,3}"
            .prop_map(String::into_bytes),
        "[0-9]{0,30}".prop_map(String::into_bytes),
        "(Sun|Mon), [0-9]{2} (Nov|Feb) [0-9]{2,4} [0-9:]{8} GMT".prop_map(String::into_bytes),
    ]
}

proptest! {
    #[test]
    fn retry_after_never_panics(value in header_bytes(), date in header_bytes(), now in 0u64..u64::MAX / 2) {
        let (Ok(value), Ok(date)) = (HeaderValue::from_bytes(&value), HeaderValue::from_bytes(&date)) else {
            return Ok(());
        };
        let now = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(now)).unwrap_or(SystemTime::UNIX_EPOCH);
        let _ = retry_after(&value, Some(&date), now);
        let _ = retry_after(&value, None, now);
    }

    #[test]
    fn rate_limit_never_panics_and_respects_the_cap(
        fields in proptest::collection::vec((0usize..5, header_bytes()), 0..4),
        max in 0u64..100_000,
    ) {
        let names = ["ratelimit", "ratelimit-policy", "ratelimit-remaining", "ratelimit-reset", "retry-after"];
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.append(HeaderName::from_static(names[name]), value);
            }
        }
        let max = Duration::from_secs(max);
        match rate_limit(&headers, max) {
            Ok(Some(RateLimit::Exhausted { reset })) => prop_assert!(reset <= max),
            Ok(Some(RateLimit::Pace { spacing, valid_for })) => {
                prop_assert!(valid_for <= max);
                prop_assert!(spacing <= valid_for);
            }
            // `RateLimit` is `#[non_exhaustive]`.
            _ => {}
        }
    }

    #[test]
    fn keys_never_panic_and_are_normalized(host in "[ -~]{0,40}") {
        let key = SlotKey::host(&host);
        prop_assert_eq!(key.as_str(), key.as_str().to_ascii_lowercase());
        let domain = SlotKey::registrable_domain(&host);
        prop_assert_eq!(domain.as_str(), domain.as_str().to_ascii_lowercase());
        if let Ok(authority) = host.parse::<http::uri::Authority>() {
            let key = SlotKey::from_authority(Some(&http::uri::Scheme::HTTPS), &authority);
            prop_assert!(key.as_str().starts_with("https://"));
            prop_assert!(!key.as_str().ends_with(":443"));
        }
    }
}

#[derive(Debug, Clone)]
struct Step {
    latency: f64,
    status: Option<u16>,
    outcome: u8,
    in_flight: usize,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![
            Just(0.0),
            Just(f64::MIN_POSITIVE),
            Just(1e-12),
            Just(1e12),
            Just(Duration::MAX.as_secs_f64()),
            0.0..1.0f64,
            0.0..100.0f64,
        ],
        proptest::option::of(100u16..1000),
        0u8..3,
        0usize..100_000,
    )
        .prop_map(|(latency, status, outcome, in_flight)| Step {
            latency,
            status,
            outcome,
            in_flight,
        })
}

fn to_sample(s: &Step) -> Sample {
    match s.status {
        Some(code) => Sample::from_secs_f64(s.latency, StatusCode::from_u16(code).unwrap()),
        None => Sample::error(
            s.latency,
            [Outcome::Success, Outcome::Overload, Outcome::Ignore][s.outcome as usize],
        ),
    }
    .with_in_flight(s.in_flight)
}

/// Policies with ordinary and extreme parameters: (policy, max delay, max limit).
/// A policy's delays go up to a day.
fn policy() -> impl Strategy<Value = (usize, f64, f64, usize)> {
    (0usize..7, 0.0..43_200f64, 0.0..43_200f64, 1usize..1_000_000)
}

fn make(kind: usize, a: f64, b: f64, n: usize) -> (Box<dyn MakePolicy>, f64, usize) {
    let huge = 86_400.0;
    match kind {
        0 => (
            Box::new(Adaptive::default().max_concurrency(n).max_delay_secs(huge)),
            huge,
            n,
        ),
        1 => (
            Box::new(
                Adaptive::default()
                    .min_delay_secs(a)
                    .max_delay_secs(a + b)
                    .initial_concurrency(1)
                    .max_concurrency(n),
            ),
            a + b,
            n,
        ),
        2 => (
            Box::new(
                Scrapy::default()
                    .start_delay_secs(a)
                    .max_delay_secs(b.max(a))
                    .max_concurrency(n),
            ),
            b.max(a),
            n,
        ),
        3 => (
            Box::new(
                Scrapy2012::default()
                    .start_delay_secs(a)
                    .check_period(1 + n % 50)
                    .max_concurrency(n),
            ),
            f64::INFINITY,
            n,
        ),
        4 => (
            Box::new(
                Aimd::default()
                    .min_concurrency(1)
                    .max_concurrency(n)
                    .initial_concurrency(n),
            ),
            0.0,
            n,
        ),
        5 => (
            Box::new(
                Vegas::default()
                    .max_concurrency(n)
                    .initial_concurrency(1 + n / 2),
            ),
            0.0,
            n,
        ),
        _ => (
            Box::new(
                Gradient2::default()
                    .min_concurrency(1)
                    .max_concurrency(n)
                    .initial_concurrency(n),
            ),
            0.0,
            n,
        ),
    }
}

proptest! {
    #[test]
    fn policies_stay_within_bounds(
        (kind, a, b, n) in policy(),
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let (policy, max_delay, max_limit) = make(kind, a, b, n);
        prop_assert!(policy.validate().is_ok(), "{policy:?}");
        let mut state = policy.make_policy(&SlotKey::new("p"));
        for s in &steps {
            let t = state.on_sample(&to_sample(s));
            prop_assert!(t.delay_secs() >= 0.0 && !t.delay_secs().is_nan(), "{t:?} after {s:?}");
            prop_assert!(t.delay_secs() <= max_delay.max(a), "{t:?} after {s:?}");
            prop_assert!((1..=max_limit).contains(&t.concurrency()), "{t:?} after {s:?}");
            let _ = t.delay();
        }
    }
}
