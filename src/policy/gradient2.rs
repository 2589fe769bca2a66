//! Netflix's Gradient2 limit, per slot.

use super::params::{policy_params, renamed_limits, within};
use super::{Outcome, Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// Gradient-based limit, as Netflix concurrency-limits' `Gradient2Limit`
    /// (v0.5.4), with the delay held at `min_delay`.
    ///
    /// Each success: `long` is an exponential average of the latency
    /// (`α = 2 / (long_window + 1)`, after a plain mean over the first 10
    /// samples); when `long / latency > 2`, `long` is cut by 5 %. If fewer than
    /// half the limit were in flight, nothing else changes. Otherwise
    ///
    /// ```text
    /// gradient = clamp(rtt_tolerance × long / latency, 0.5, 1)
    /// L = (1 − smoothing)·L + smoothing·(L·gradient + queue_size)
    /// ```
    ///
    /// kept within `[min_concurrency, max_concurrency]`.
    ///
    /// Netflix's Gradient2 ignores drops; this one does not: an overload
    /// multiplies the limit by 0.9 (AIMD's backoff), within the same bounds.
    ///
    /// | parameter | default |
    /// |---|---|
    /// | `initial_concurrency` | 20 |
    /// | `min_concurrency` | 20 |
    /// | `max_concurrency` | 200 |
    /// | `smoothing` | 0.2 |
    /// | `queue_size` | 4 |
    /// | `long_window` | 600 |
    /// | `rtt_tolerance` | 1.5 |
    /// | `min_delay` | 0 |
    pub struct Gradient2("gradient2") {
        delays { min: 0.0, }
        concurrency { initial: 20, min: 20, max: 200, }
        /// How much of each new estimate is taken, in `(0, 1]`.
        smoothing: f64 = 0.2;
        /// How much the limit may grow per sample while latencies stay low.
        queue_size: usize = 4;
        /// The window of the long-term latency average, in samples.
        long_window: usize = 600;
        /// How much latency above the long-term average is tolerated (≥ 1).
        rtt_tolerance: f64 = 1.5;
    }
}

impl Gradient2 {
    renamed_limits!(initial_limit => initial_concurrency, min_limit => min_concurrency, max_limit => max_concurrency);
}

impl Gradient2 {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(ConfigError::new("smoothing", "must be in (0, 1]"));
        }
        if self.long_window < 1 {
            return Err(ConfigError::new("long_window", "must be at least 1"));
        }
        if !(self.rtt_tolerance.is_finite() && self.rtt_tolerance >= 1.0) {
            return Err(ConfigError::new("rtt_tolerance", "must be at least 1.0"));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`.
    fn state(&self, _key: &SlotKey) -> Box<dyn Policy> {
        Box::new(Gradient2State {
            limit: self
                .initial_concurrency
                .max(self.min_concurrency)
                .min(self.max_concurrency) as f64,
            long: 0.0,
            long_count: 0,
            long_sum: 0.0,
            config: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
struct Gradient2State {
    limit: f64,
    long: f64,
    long_count: usize,
    long_sum: f64,
    config: Gradient2,
}

const WARMUP: usize = 10;

impl Policy for Gradient2State {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.config.min_delay, self.limit as usize)
    }

    /// Takes the limit (the long-term latency is measured again).
    fn warm(&mut self, learned: Throttle, _latency: Option<f64>) {
        let c = &self.config;
        let (min, max) = (c.min_concurrency as f64, c.max_concurrency as f64);
        self.limit = within(learned.concurrency() as f64, min, max);
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let c = &self.config;
        let (min, max) = (c.min_concurrency as f64, c.max_concurrency as f64);
        match sample.outcome() {
            Outcome::Ignore => return self.throttle(),
            Outcome::Overload => {
                self.limit = within(self.limit * 0.9, min, max);
                return self.throttle();
            }
            Outcome::Success => {}
        }
        let rtt = sample.latency_secs();
        if !(rtt > 0.0 && rtt.is_finite()) {
            return self.throttle();
        }
        if self.long_count < WARMUP {
            self.long_count += 1;
            self.long_sum += rtt;
            self.long = self.long_sum / self.long_count as f64;
        } else {
            let factor = 2.0 / (c.long_window as f64 + 1.0);
            self.long = self.long * (1.0 - factor) + rtt * factor;
        }
        if !self.long.is_finite() {
            // Latencies near f64::MAX overflow the average; start it again.
            self.long = rtt;
        }
        if self.long / rtt > 2.0 {
            self.long *= 0.95;
        }
        if (sample.in_flight() as f64) < self.limit / 2.0 {
            return self.throttle();
        }
        let gradient = (c.rtt_tolerance * self.long / rtt).clamp(0.5, 1.0);
        let new = self.limit * gradient + c.queue_size as f64;
        let new = self.limit * (1.0 - c.smoothing) + new * c.smoothing;
        self.limit = within(new, min, max);
        self.throttle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ok;
    use crate::policy::MakePolicy;

    #[test]
    fn hand_computed_sequence() {
        let mut p = Gradient2::default()
            .min_concurrency(1)
            .make_policy(&SlotKey::new("t"));
        // 1: long = 0.1 (warm-up mean); gradient = clamp(1.5, ..) = 1;
        //    L = 0.8*20 + 0.2*(20 + 4) = 20.8
        assert_eq!(p.on_sample(&ok(0.1, 20)).concurrency(), 20);
        // 2: long = (0.1 + 0.4) / 2 = 0.25; gradient = clamp(1.5*0.25/0.4) = 0.9375;
        //    L = 0.8*20.8 + 0.2*(20.8*0.9375 + 4) = 16.64 + 4.7 = 21.34
        assert_eq!(p.on_sample(&ok(0.4, 20)).concurrency(), 21);
        // 3: app-limited (5 < 21.34 / 2): long = 0.2 (mean of 3), L unchanged.
        assert_eq!(p.on_sample(&ok(0.1, 5)).concurrency(), 21);
        // 4: long = (0.6 + 2.0) / 4 = 0.65; gradient = clamp(1.5*0.65/2) = 0.5;
        //    L = 0.8*21.34 + 0.2*(21.34*0.5 + 4) = 17.072 + 2.934 = 20.006
        assert_eq!(p.on_sample(&ok(2.0, 20)).concurrency(), 20);
        // An overload: 20.006 * 0.9 = 18.005.
        let overload = Sample::error(1.0, Outcome::Overload);
        assert_eq!(p.on_sample(&overload).concurrency(), 18);
    }

    #[test]
    fn long_rtt_is_cut_when_far_above_the_latency() {
        let mut p = Gradient2State {
            limit: 20.0,
            long: 1.0,
            long_count: WARMUP,
            long_sum: 0.0,
            config: Gradient2::default(),
        };
        p.on_sample(&ok(0.1, 0));
        // EMA: 1.0*(1 - 2/601) + 0.1*2/601, then * 0.95 as 9.97 > 2.
        let expected = (1.0 * (1.0 - 2.0 / 601.0) + 0.1 * 2.0 / 601.0) * 0.95;
        assert!((p.long - expected).abs() < 1e-12);
    }

    #[test]
    fn latencies_near_f64_max_keep_a_limit_of_at_least_one() {
        // Found by tests/hostile.rs: the average overflowed to infinity,
        // and with a long window of 1 became inf * 0 = NaN, a limit of 0.
        let mut p = Gradient2::default()
            .min_concurrency(1)
            .long_window(1)
            .make_policy(&SlotKey::new("t"));
        for _ in 0..20 {
            assert!(p.on_sample(&ok(f64::MAX, 100)).concurrency() >= 1);
        }
        assert!(p.on_sample(&ok(0.1, 100)).concurrency() >= 1);
    }
}
