//! Time arithmetic that never panics, whatever a user or a server gives.

use std::time::Duration;

use tokio::time::Instant;

/// The latest instant worth waiting for.
pub(crate) fn far_future(now: Instant) -> Instant {
    // About 30 years, as tokio itself uses for "never".
    now + Duration::from_secs(86_400 * 365 * 30)
}

/// Converts seconds to a `Duration` without panicking on any `f64`.
pub(crate) fn secs_to_duration(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}
