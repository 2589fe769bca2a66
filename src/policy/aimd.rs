//! Netflix's AIMD limit, per slot.

use std::time::Duration;

use super::{MakePolicy, Outcome, Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

/// Additive increase, multiplicative decrease, as Netflix concurrency-limits'
/// `AIMDLimit` (v0.5.4), with the delay held at `min_delay`.
///
/// On a drop (an overload outcome) or a latency above `timeout`, the limit
/// becomes `floor(limit × backoff_ratio)`; on another sample, if at least
/// half the limit was in flight, it grows by one. It is kept within
/// `[min_limit, max_limit]`. Ignored outcomes change nothing.
///
/// | parameter | default |
/// |---|---|
/// | `initial_limit` | 20 |
/// | `min_limit` | 20 |
/// | `max_limit` | 200 |
/// | `backoff_ratio` | 0.9 |
/// | `timeout` | 5 s |
/// | `min_delay` | 0 |
#[derive(Clone, Debug, PartialEq)]
pub struct Aimd {
    initial_limit: usize,
    min_limit: usize,
    max_limit: usize,
    backoff_ratio: f64,
    timeout: f64,
    min_delay: f64,
}

impl Default for Aimd {
    fn default() -> Self {
        Aimd {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            backoff_ratio: 0.9,
            timeout: 5.0,
            min_delay: 0.0,
        }
    }
}

impl Aimd {
    /// The name `replay --policy` knows this policy by.
    pub const NAME: &'static str = "aimd";

    /// The limit of a new slot.
    pub fn initial_limit(mut self, limit: usize) -> Self {
        self.initial_limit = limit;
        self
    }
    /// The lowest limit (at least 1).
    pub fn min_limit(mut self, limit: usize) -> Self {
        self.min_limit = limit;
        self
    }
    /// The highest limit.
    pub fn max_limit(mut self, limit: usize) -> Self {
        self.max_limit = limit;
        self
    }
    /// The factor applied on a drop, in `[0.5, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff_ratio = ratio;
        self
    }
    /// A latency above this counts as a drop.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.as_secs_f64();
        self
    }
    /// Like [`timeout`](Self::timeout), in seconds.
    pub fn timeout_secs(mut self, secs: f64) -> Self {
        self.timeout = secs;
        self
    }
    /// The delay, held constant.
    pub fn min_delay(mut self, d: Duration) -> Self {
        self.min_delay = d.as_secs_f64();
        self
    }
    /// Like [`min_delay`](Self::min_delay), in seconds.
    pub fn min_delay_secs(mut self, secs: f64) -> Self {
        self.min_delay = secs;
        self
    }
}

impl MakePolicy for Aimd {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn validate(&self) -> Result<(), ConfigError> {
        super::check_limits(self.initial_limit, self.min_limit, self.max_limit)?;
        if !(0.5..1.0).contains(&self.backoff_ratio) {
            return Err(ConfigError::new(
                "backoff_ratio",
                format!("must be in [0.5, 1), got {}", self.backoff_ratio),
            ));
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0) {
            return Err(ConfigError::new("timeout", "must be positive"));
        }
        super::check_min_delay(self.min_delay)
    }

    fn make_policy(&self, _key: &SlotKey) -> Box<dyn Policy> {
        Box::new(AimdState {
            limit: self.initial_limit.clamp(self.min_limit, self.max_limit),
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
        } else if sample.in_flight() * 2 >= limit {
            limit += 1;
        }
        self.limit = limit.clamp(c.min_limit, c.max_limit);
        self.throttle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn ok(latency: f64, in_flight: usize) -> Sample {
        Sample::from_secs_f64(latency, StatusCode::OK).with_in_flight(in_flight)
    }

    #[test]
    fn hand_computed_sequence() {
        let mut p = Aimd::default().min_limit(1).make_policy(&SlotKey::new("t"));
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
            .max_limit(21)
            .make_policy(&SlotKey::new("t"));
        for _ in 0..5 {
            p.on_sample(&ok(0.1, 100));
        }
        assert_eq!(p.throttle().concurrency(), 21);
        assert_eq!(p.throttle().delay_secs(), 0.0);
    }
}
