//! Retry-After and the RateLimit fields on arbitrary bytes: never a panic,
//! windows never above the cap.
#![no_main]

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use tower_autothrottle::headers::{rate_limit, retry_after, RateLimit};

const NAMES: [&str; 4] = ["ratelimit", "ratelimit-policy", "ratelimit-remaining", "ratelimit-reset"];

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    for (i, part) in data.split(|b| *b == b'\n').enumerate() {
        if let Ok(value) = HeaderValue::from_bytes(part) {
            let _ = retry_after(&value, None, SystemTime::UNIX_EPOCH);
            let _ = retry_after(&value, Some(&value), SystemTime::now());
            headers.append(HeaderName::from_static(NAMES[i % NAMES.len()]), value);
        }
    }
    let max = Duration::from_secs(600);
    match rate_limit(&headers, max) {
        Ok(Some(RateLimit::Exhausted { reset })) => assert!(reset <= max),
        Ok(Some(RateLimit::Pace { spacing, valid_for })) => assert!(valid_for <= max && spacing <= valid_for),
        _ => {}
    }
});
