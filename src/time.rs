//! Time arithmetic that never panics, whatever a user or a server gives.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// The latest instant worth waiting for: about 30 years from `now`, as
/// tokio itself uses for "never" (or as far as the clock goes).
pub(crate) fn far_future(now: Instant) -> Instant {
    const THIRTY_YEARS: Duration = Duration::from_secs(86_400 * 365 * 30);
    now.checked_add(THIRTY_YEARS).unwrap_or(now)
}

/// `now + wait`, or [`far_future`] when that is beyond the clock.
pub(crate) fn after(now: Instant, wait: Duration) -> Instant {
    now.checked_add(wait).unwrap_or_else(|| far_future(now))
}

/// `d × factor`, saturating at `Duration::MAX`; a negative or NaN factor
/// gives zero. Equal to `Duration::mul_f64` wherever that does not panic.
pub(crate) fn mul_f64(d: Duration, factor: f64) -> Duration {
    let secs = factor * d.as_secs_f64();
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// Converts seconds to a `Duration` without panicking on any `f64`.
pub(crate) fn secs_to_duration(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// Seconds, as every duration the crate shows in a `Debug` is printed:
/// `0.25s`, whatever its size.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Secs(pub(crate) f64);

impl From<Duration> for Secs {
    fn from(d: Duration) -> Self {
        Secs(d.as_secs_f64())
    }
}

impl Secs {
    /// An optional duration, in seconds.
    pub(crate) fn opt(d: Option<Duration>) -> Option<Secs> {
        d.map(Secs::from)
    }
}

impl fmt::Debug for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0)
    }
}
