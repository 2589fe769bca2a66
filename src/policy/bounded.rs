//! Bounds on any policy's answer.

use std::fmt;
use std::time::Duration;

use super::{Policy, Sample, Throttle};
use crate::builder::setters;
use crate::time::Secs;

/// Clamps another policy's answers: the delay into `[min_delay, max_delay]`,
/// the concurrency limit to at most `max_concurrency`.
///
/// A `min_delay` above zero spaces every dispatch: with one, a paced
/// answer ([`Throttle::paced`]) becomes a strict one.
///
/// The inner policy's own state is left as it is; only what it answers is
/// clamped. This is what per-slot settings
/// ([`SlotSettings`](crate::SlotSettings)) use for their bounds.
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use tower_autothrottle::policy::{Bounded, MakePolicy, Policy, Sample, Scrapy2012};
/// use tower_autothrottle::SlotKey;
///
/// let inner = Scrapy2012::default().max_concurrency(8).make_policy(&SlotKey::new("k"));
/// let mut policy = Bounded::new(inner)
///     .min_delay(Duration::from_secs(4))
///     .max_concurrency(2);
/// assert_eq!(policy.throttle().delay(), Duration::from_secs(5));
/// let t = policy.on_sample(&Sample::new(Duration::from_secs(1), StatusCode::OK));
/// assert_eq!(t.delay(), Duration::from_secs(4)); // (5 + 1) / 2 = 3, raised to 4
/// assert_eq!(t.concurrency(), 1);
/// ```
pub struct Bounded {
    inner: Box<dyn Policy>,
    min_delay: Duration,
    max_delay: Duration,
    max_concurrency: usize,
}

impl Bounded {
    /// Wraps `inner`, unbounded until bounds are set.
    #[must_use]
    pub fn new(inner: Box<dyn Policy>) -> Self {
        Bounded {
            inner,
            min_delay: Duration::ZERO,
            max_delay: Duration::MAX,
            max_concurrency: usize::MAX,
        }
    }

    setters! {
        /// The delay is never below this.
        pub fn min_delay(Duration) => min_delay;
        /// The delay is never above this (when it is at least `min_delay`).
        pub fn max_delay(Duration) => max_delay;
    }

    /// The limit is never above this (and never below 1).
    #[must_use]
    pub fn max_concurrency(mut self, max: usize) -> Self {
        self.max_concurrency = max.max(1);
        self
    }

    fn clamp(&self, throttle: Throttle) -> Throttle {
        // In f64, so an unclamped answer passes through bit for bit; `min`
        // and `max` also turn a NaN into the bound.
        let delay = throttle
            .delay_secs()
            .min(self.max_delay.as_secs_f64())
            .max(self.min_delay.as_secs_f64());
        let concurrency = throttle.concurrency().clamp(1, self.max_concurrency);
        // A floor spaces every dispatch: a paced answer (see
        // `Throttle::paced`) stays paced only without one.
        if throttle.is_paced() && self.min_delay.is_zero() {
            Throttle::paced(delay, concurrency)
        } else {
            Throttle::new(delay, concurrency)
        }
    }
}

impl fmt::Debug for Bounded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded")
            .field("inner", &self.inner)
            .field("min_delay", &Secs::from(self.min_delay))
            .field("max_delay", &Secs::from(self.max_delay))
            .field("max_concurrency", &self.max_concurrency)
            .finish()
    }
}

impl Policy for Bounded {
    fn throttle(&self) -> Throttle {
        self.clamp(self.inner.throttle())
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let throttle = self.inner.on_sample(sample);
        self.clamp(throttle)
    }

    fn owns_overload(&self) -> bool {
        self.inner.owns_overload()
    }

    fn warm(&mut self, learned: Throttle, latency: Option<f64>) {
        self.inner.warm(learned, latency);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{MakePolicy, Scrapy2012};
    use crate::SlotKey;
    use http::StatusCode;

    #[test]
    fn clamps_both_ways() {
        let inner = Scrapy2012::default()
            .start_delay(Duration::from_secs(5))
            .max_concurrency(8)
            .make_policy(&SlotKey::new("k"));
        let mut p = Bounded::new(inner)
            .max_delay(Duration::from_secs(2))
            .max_concurrency(0);
        assert_eq!(p.throttle().delay(), Duration::from_secs(2));
        assert_eq!(p.throttle().concurrency(), 1);
        // A huge latency: the inner delay grows, the answer stays at 2 s.
        let t = p.on_sample(&Sample::new(Duration::from_secs(1000), StatusCode::OK));
        assert_eq!(t.delay(), Duration::from_secs(2));
    }

    /// A pacing of 100 ms, a limit of 4.
    #[derive(Debug)]
    struct Paced;

    impl Policy for Paced {
        fn throttle(&self) -> Throttle {
            Throttle::paced(0.1, 4)
        }
        fn on_sample(&mut self, _: &Sample) -> Throttle {
            self.throttle()
        }
    }

    #[test]
    fn a_floor_spaces_every_dispatch_of_a_paced_policy() {
        let mut p = Bounded::new(Box::new(Paced))
            .max_delay(Duration::from_secs(2))
            .max_concurrency(3);
        let t = p.on_sample(&Sample::new(Duration::from_secs(1), StatusCode::OK));
        assert!(t.is_paced(), "without a floor the pacing stays a pacing");
        assert_eq!((t.delay_secs(), t.concurrency()), (0.1, 3));
        // Even a floor below the pacing: a dispatch the pacing lets through
        // would otherwise not wait for the floor either.
        let mut p = Bounded::new(Box::new(Paced)).min_delay(Duration::from_millis(1));
        let t = p.on_sample(&Sample::new(Duration::from_secs(1), StatusCode::OK));
        assert!(!t.is_paced(), "a floor is strict");
        assert_eq!((t.delay_secs(), t.concurrency()), (0.1, 4));
        assert!(!p.throttle().is_paced());
    }
}
