//! Netflix's AIMD limit, per slot.

use super::params::{policy_params, renamed_limits, within};
use super::{Outcome, Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// Additive increase, multiplicative decrease, as Netflix concurrency-limits'
    /// `AIMDLimit` (v0.5.4), with the delay held at `min_delay`.
    ///
    /// On a drop (an overload outcome) or a latency above `timeout`, the limit
    /// becomes `floor(limit × backoff_ratio)`; on another sample, if at least
    /// half the limit was in flight, it grows by one. It is kept within
    /// `[min_concurrency, max_concurrency]`. Ignored outcomes change nothing.
    ///
    /// | parameter | default |
    /// |---|---|
    /// | `initial_concurrency` | 20 |
    /// | `min_concurrency` | 20 |
    /// | `max_concurrency` | 200 |
    /// | `backoff_ratio` | 0.9 |
    /// | `timeout` | 5 s |
    /// | `min_delay` | 0 |
    pub struct Aimd("aimd") {
        delays { min: 0.0, }
        concurrency { initial: 20, min: 20, max: 200, }
        /// The factor applied on a drop, in `[0.5, 1)`.
        backoff_ratio: f64 = 0.9;
        /// A latency above this counts as a drop.
        timeout: f64 = 5.0, seconds timeout_secs;
    }
}

impl Aimd {
    renamed_limits!(initial_limit => initial_concurrency, min_limit => min_concurrency, max_limit => max_concurrency);
}

impl Aimd {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if !(0.5..1.0).contains(&self.backoff_ratio) {
            return Err(ConfigError::new(
                "backoff_ratio",
                format!("must be in [0.5, 1), got {}", self.backoff_ratio),
            ));
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0) {
            return Err(ConfigError::new("timeout", "must be positive"));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`.
    fn state(&self, _key: &SlotKey) -> Box<dyn Policy> {
        Box::new(AimdState {
            limit: self
                .initial_concurrency
                .max(self.min_concurrency)
                .min(self.max_concurrency),
            config: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
struct AimdState {
    limit: usize,
    config: Aimd,
}

impl Policy for AimdState {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.config.min_delay, self.limit)
    }

    /// Takes the limit.
    fn warm(&mut self, learned: Throttle, _latency: Option<f64>) {
        let c = &self.config;
        self.limit = within(learned.concurrency(), c.min_concurrency, c.max_concurrency);
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let c = &self.config;
        let drop = match sample.outcome() {
            Outcome::Ignore => return self.throttle(),
            Outcome::Overload => true,
            Outcome::Success => sample.latency_secs() > c.timeout,
        };
        let mut limit = self.limit;
        if drop {
            limit = (limit as f64 * c.backoff_ratio) as usize;
        } else if sample.in_flight().saturating_mul(2) >= limit {
            limit = limit.saturating_add(1);
        }
        self.limit = within(limit, c.min_concurrency, c.max_concurrency);
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
        let mut p = Aimd::default()
            .min_concurrency(1)
            .make_policy(&SlotKey::new("t"));
        let limits: Vec<usize> = [
            ok(0.1, 10),                           // 10*2 >= 20: 21
            ok(0.1, 5),                            // 5*2 < 21: 21
            Sample::error(1.0, Outcome::Overload), // floor(21*0.9) = 18
            ok(6.0, 18),                           // latency > 5 s: floor(18*0.9) = 16
            Sample::error(1.0, Outcome::Ignore),   // 16
            ok(0.1, 8),                            // 8*2 >= 16: 17
        ]
        .iter()
        .map(|s| p.on_sample(s).concurrency())
        .collect();
        assert_eq!(limits, vec![21, 21, 18, 16, 16, 17]);
    }

    #[test]
    fn clamped_to_min_and_max() {
        let mut p = Aimd::default().make_policy(&SlotKey::new("t"));
        let t = p.on_sample(&Sample::error(0.0, Outcome::Overload));
        assert_eq!(t.concurrency(), 20);
        let mut p = Aimd::default()
            .max_concurrency(21)
            .make_policy(&SlotKey::new("t"));
        for _ in 0..5 {
            p.on_sample(&ok(0.1, 100));
        }
        assert_eq!(p.throttle().concurrency(), 21);
        assert_eq!(p.throttle().delay_secs(), 0.0);
    }
}
