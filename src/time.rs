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

/// An optional duration in one word: nanoseconds plus one, zero for none
/// (an `Option<Duration>` takes two). A duration above 584 years is kept
/// as 584 years.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OptNanos(u64);

impl OptNanos {
    /// None.
    pub(crate) const NONE: OptNanos = OptNanos(0);

    /// `d`, in nanoseconds (at most `u64::MAX - 1`).
    pub(crate) fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX)
            .min(u64::MAX - 1)
    }

    /// Some `nanos` nanoseconds (at most `u64::MAX - 1`).
    pub(crate) fn from_nanos(nanos: u64) -> Self {
        OptNanos(nanos.min(u64::MAX - 1) + 1)
    }

    /// Some `d`.
    pub(crate) fn some(d: Duration) -> Self {
        OptNanos::from_nanos(OptNanos::nanos(d))
    }

    /// The nanoseconds, if any.
    pub(crate) fn get_nanos(self) -> Option<u64> {
        self.0.checked_sub(1)
    }

    /// The duration, if any.
    pub(crate) fn get(self) -> Option<Duration> {
        self.get_nanos().map(Duration::from_nanos)
    }
}

impl fmt::Debug for OptNanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
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
