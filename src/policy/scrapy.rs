//! Today's Scrapy AutoThrottle (Scrapy 2.x), per slot.

use http::StatusCode;

use super::params::policy_params;
use super::{Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// Today's Scrapy AutoThrottle (`scrapy/extensions/throttle.py`, Scrapy 2.x):
    /// it adapts the delay only; the concurrency stays at `max_concurrency`
    /// (Scrapy's `CONCURRENT_REQUESTS_PER_DOMAIN`).
    ///
    /// A slot starts with delay `max(min_delay, start_delay)`. On each response
    /// (errors never adjust it):
    ///
    /// ```text
    /// target = latency / target_concurrency
    /// new    = max(target, (delay + target) / 2)
    /// new    = min(max(min_delay, new), max_delay)
    /// if status != 200 and new <= delay: keep delay, else delay = new
    /// ```
    ///
    /// Unlike the 2012 rules, a zero latency is a sample like any other. As in
    /// Scrapy, a start delay above `max_delay` is where a new slot starts
    /// (Scrapy does not clamp `AUTOTHROTTLE_START_DELAY`); the first response
    /// brings the delay within the bounds.
    ///
    /// | parameter | default | Scrapy setting |
    /// |---|---|---|
    /// | `start_delay` | 5 s | `AUTOTHROTTLE_START_DELAY` |
    /// | `min_delay` | 0 | `DOWNLOAD_DELAY` |
    /// | `max_delay` | 60 s | `AUTOTHROTTLE_MAX_DELAY` |
    /// | `target_concurrency` | 1.0 | `AUTOTHROTTLE_TARGET_CONCURRENCY` |
    /// | `max_concurrency` | 8 | `CONCURRENT_REQUESTS_PER_DOMAIN` |
    pub struct Scrapy("scrapy") {
        delays { start: 5.0, min: 0.0, max: 60.0, }
        concurrency { max: 8, }
        /// How many requests should be in flight on average (greater than 0).
        target_concurrency: f64 = 1.0;
    }
}

impl Scrapy {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if !(self.target_concurrency.is_finite() && self.target_concurrency > 0.0) {
            return Err(ConfigError::new(
                "target_concurrency",
                format!("must be higher than 0, got {}", self.target_concurrency),
            ));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`.
    fn state(&self, _key: &SlotKey) -> Box<dyn Policy> {
        Box::new(ScrapyState {
            delay: self.min_delay.max(self.start_delay),
            config: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
struct ScrapyState {
    delay: f64,
    config: Scrapy,
}

impl Policy for ScrapyState {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.delay, self.config.max_concurrency)
    }

    /// Takes the delay (its limit is the fixed `max_concurrency`).
    fn warm(&mut self, learned: Throttle, _latency: Option<f64>) {
        let c = &self.config;
        let delay = learned.delay_secs();
        if !delay.is_nan() {
            self.delay = delay.max(c.min_delay).min(c.max_delay);
        }
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let c = &self.config;
        if let Some(status) = sample.status() {
            let latency = sample.latency_secs();
            if !latency.is_nan() {
                let target = latency / c.target_concurrency;
                let new = (self.delay + target) / 2.0;
                let new = target.max(new);
                let new = new.max(c.min_delay).min(c.max_delay);
                if !(status != StatusCode::OK && new <= self.delay) {
                    self.delay = new;
                }
            }
        }
        self.throttle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MakePolicy;

    fn once(policy: Scrapy, latency: f64, status: u16) -> f64 {
        let mut p = policy.make_policy(&SlotKey::new("t"));
        let sample = Sample::from_secs_f64(latency, StatusCode::from_u16(status).unwrap());
        p.on_sample(&sample).delay_secs()
    }

    /// Scrapy's own `test_adjustment` cases: (latency, target, slot delay, expected).
    #[test]
    fn scrapys_published_adjustment_cases() {
        for (latency, target, delay, expected) in [
            (2.0, 2.0, 1.0, 1.0),
            (1.0, 2.0, 1.0, 0.75),
            (4.0, 2.0, 1.0, 2.0),
            (2.0, 1.0, 1.0, 2.0),
            (2.0, 4.0, 1.0, 0.75),
            (2.0, 2.0, 0.5, 1.0),
            (2.0, 2.0, 2.0, 1.5),
        ] {
            let p = Scrapy::default()
                .start_delay_secs(delay)
                .target_concurrency(target);
            assert_eq!(
                once(p, latency, 200),
                expected,
                "{latency} {target} {delay}"
            );
        }
    }

    /// Scrapy's `test_adjustment_limits`: latency 2, target 2, delay 1.
    #[test]
    fn scrapys_published_limit_cases() {
        for (min, max, expected) in [(0.5, 2.0, 1.0), (0.25, 0.5, 0.5), (2.0, 4.0, 2.0)] {
            let p = Scrapy::default()
                .start_delay_secs(1.0)
                .min_delay_secs(min)
                .max_delay_secs(max)
                .target_concurrency(2.0);
            assert_eq!(once(p, 2.0, 200), expected, "{min} {max}");
        }
    }

    /// Scrapy's `test_adjustment_bad_response`: status 400.
    #[test]
    fn scrapys_published_bad_response_cases() {
        for (latency, expected) in [(2.0, 1.0), (1.0, 1.0), (4.0, 2.0)] {
            let p = Scrapy::default()
                .start_delay_secs(1.0)
                .target_concurrency(2.0);
            assert_eq!(once(p, latency, 400), expected, "{latency}");
        }
    }

    /// Scrapy's `test_startdelay_definition`: start = max(min, start).
    #[test]
    fn start_delay_is_raised_to_the_minimum() {
        let p = Scrapy::default().min_delay_secs(6.0);
        assert_eq!(
            p.make_policy(&SlotKey::new("t")).throttle().delay_secs(),
            6.0
        );
        let p = Scrapy::default().min_delay_secs(4.0);
        assert_eq!(
            p.make_policy(&SlotKey::new("t")).throttle().delay_secs(),
            5.0
        );
        // Not clamped to the maximum.
        let p = Scrapy::default().max_delay_secs(1.0);
        assert_eq!(
            p.make_policy(&SlotKey::new("t")).throttle().delay_secs(),
            5.0
        );
    }

    #[test]
    fn zero_latency_adjusts_and_errors_do_not() {
        assert_eq!(once(Scrapy::default(), 0.0, 200), 2.5);
        let mut p = Scrapy::default().make_policy(&SlotKey::new("t"));
        let t = p.on_sample(&Sample::error(9.0, crate::policy::Outcome::Overload));
        assert_eq!((t.delay_secs(), t.concurrency()), (5.0, 8));
    }

    #[test]
    fn validation() {
        assert_eq!(
            Scrapy::default()
                .target_concurrency(0.0)
                .validate()
                .unwrap_err()
                .field(),
            "target_concurrency"
        );
        assert_eq!(
            Scrapy::default()
                .min_delay_secs(2.0)
                .max_delay_secs(1.0)
                .validate()
                .unwrap_err()
                .field(),
            "max_delay"
        );
        assert_eq!(
            Scrapy::default()
                .max_concurrency(0)
                .validate()
                .unwrap_err()
                .field(),
            "max_concurrency"
        );
    }
}
