//! A slot's policy, held inline when it is the default one.
//!
//! Most slots of a broad crawl run the default policy and see a handful of
//! answers; its early state ([`Lazy`] over shared [`Adaptive`] parameters)
//! is three words. Boxed as a `dyn Policy` it would take a two-word pointer
//! in the slot and a 24-byte allocation beside it; held inline it takes the
//! three words and nothing else. Any other policy stays boxed.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::lazy::Lazy;
use super::{Adaptive, Policy, Sample, Throttle};

/// The default policy's state, as [`Adaptive`] makes it.
type Default = Lazy<Arc<Adaptive>>;

/// A slot's policy: the default one's state inline, any other boxed.
pub(crate) enum Held {
    Default(Default),
    Other(Box<dyn Policy>),
}

impl Held {
    /// Holds `policy`, inline if it is the default policy's state.
    pub(crate) fn new(policy: Box<dyn Policy>) -> Self {
        if !(policy.as_ref() as &dyn Any).is::<Default>() {
            return Held::Other(policy);
        }
        let policy: Box<dyn Any> = policy;
        match policy.downcast::<Default>() {
            Ok(state) => Held::Default(*state),
            // Not reached: the type was checked above, and an `Any` that
            // is not a policy cannot come back as one.
            Err(_) => unreachable!("checked to be the default policy's state"),
        }
    }
}

impl Policy for Held {
    #[inline]
    fn throttle(&self) -> Throttle {
        match self {
            Held::Default(state) => state.throttle(),
            Held::Other(policy) => policy.throttle(),
        }
    }

    #[inline]
    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        match self {
            Held::Default(state) => state.on_sample(sample),
            Held::Other(policy) => policy.on_sample(sample),
        }
    }

    #[inline]
    fn owns_overload(&self) -> bool {
        match self {
            Held::Default(state) => state.owns_overload(),
            Held::Other(policy) => policy.owns_overload(),
        }
    }

    fn warm(&mut self, learned: Throttle, latency: Option<f64>) {
        match self {
            Held::Default(state) => state.warm(learned, latency),
            Held::Other(policy) => policy.warm(learned, latency),
        }
    }
}

/// As the policy held (the holding is not shown).
impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Held::Default(state) => fmt::Debug::fmt(state, f),
            Held::Other(policy) => fmt::Debug::fmt(policy, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;

    use super::*;
    use crate::key::SlotKey;
    use crate::policy::{MakePolicy, Scrapy2012};

    #[test]
    fn the_default_policy_is_held_inline_and_others_boxed() {
        let key = SlotKey::new("example.com");
        assert!(matches!(
            Held::new(Adaptive::default().make_policy(&key)),
            Held::Default(_)
        ));
        assert!(matches!(
            Held::new(Scrapy2012::default().make_policy(&key)),
            Held::Other(_)
        ));
    }

    /// Held inline or boxed, the policy answers as itself.
    #[test]
    fn a_held_policy_answers_as_the_policy() {
        let key = SlotKey::new("example.com");
        for make in [
            &Adaptive::default() as &dyn MakePolicy,
            &Scrapy2012::default(),
        ] {
            let mut held = Held::new(make.make_policy(&key));
            let mut bare = make.make_policy(&key);
            assert_eq!(held.throttle(), bare.throttle());
            assert_eq!(held.owns_overload(), bare.owns_overload());
            for i in 0..12u64 {
                let status = if i % 5 == 4 {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                };
                let sample = Sample::new(Duration::from_millis(20 + 7 * i), status)
                    .with_in_flight(1 + i as usize % 3)
                    .with_at(0.05 * i as f64);
                assert_eq!(held.on_sample(&sample), bare.on_sample(&sample));
            }
            assert_eq!(format!("{held:?}"), format!("{bare:?}"));
        }
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn the_default_state_takes_three_words() {
        assert_eq!(std::mem::size_of::<Held>(), 24);
    }
}
