//! Netflix's Vegas limit, per slot.

use super::params::{policy_params, renamed_limits};
use super::{lg, Outcome, Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// Delay-based limit after TCP Vegas, as Netflix concurrency-limits'
    /// `VegasLimit` (v0.5.4), with the delay held at `min_delay`.
    ///
    /// With `lg(L) = max(1, floor(log10 L))`, `alpha = 3·lg(L)`,
    /// `beta = 6·lg(L)`, `threshold = lg(L)` and the queue estimate
    /// `queue = ceil(L × (1 − rtt_noload / rtt))`, each sample:
    ///
    /// 1. every `U[0.5, 1) × probe_multiplier × L` samples, takes the sample's
    ///    latency as the new no-load latency (a probe) and stops;
    /// 2. a latency below the no-load latency becomes the new one, and stops;
    /// 3. a drop: `L −= lg(L)`; otherwise, if fewer than half the limit were in
    ///    flight, nothing; if `queue ≤ threshold`, `L += beta`; if
    ///    `queue < alpha`, `L += lg(L)`; if `queue > beta`, `L −= lg(L)`;
    /// 4. `L` is kept within `[1, max_concurrency]`, then smoothed:
    ///    `L = (1 − smoothing)·L_old + smoothing·L`.
    ///
    /// Zero latencies are ignored (Netflix rejects them). The probe's random
    /// factor comes from a generator seeded by the slot's key and `seed`, so
    /// runs are reproducible.
    ///
    /// | parameter | default |
    /// |---|---|
    /// | `initial_concurrency` | 20 |
    /// | `max_concurrency` | 1000 |
    /// | `smoothing` | 1.0 |
    /// | `probe_multiplier` | 30 |
    /// | `min_delay` | 0 |
    pub struct Vegas("vegas") {
        delays { min: 0.0, }
        concurrency { initial: 20, max: 1000, }
        /// How much of each new estimate is taken, in `(0, 1]`.
        smoothing: f64 = 1.0;
        /// Probe the no-load latency every `U[0.5, 1) × this × L` samples.
        probe_multiplier: usize = 30;
        /// Seeds the probe jitter.
        seed: u64 = 0;
    }
}

impl Vegas {
    renamed_limits!(initial_limit => initial_concurrency, max_limit => max_concurrency);
}

impl Vegas {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(ConfigError::new("smoothing", "must be in (0, 1]"));
        }
        if self.probe_multiplier < 1 {
            return Err(ConfigError::new("probe_multiplier", "must be at least 1"));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`.
    fn state(&self, key: &SlotKey) -> Box<dyn Policy> {
        let mut rng = self.seed ^ crate::rng::hash(key.as_str());
        let jitter = 0.5 + 0.5 * crate::rng::next_unit(&mut rng);
        Box::new(VegasState {
            limit: self
                .initial_concurrency
                .max(1)
                .min(self.max_concurrency.max(1)) as f64,
            rtt_noload: 0.0,
            probe_count: 0,
            probe_jitter: jitter,
            rng,
            config: self.clone(),
        })
    }
}

#[derive(Clone, Debug)]
struct VegasState {
    limit: f64,
    rtt_noload: f64,
    probe_count: usize,
    probe_jitter: f64,
    rng: u64,
    config: Vegas,
}

impl Policy for VegasState {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.config.min_delay, self.limit as usize)
    }

    /// Takes the limit (the no-load latency is measured again).
    fn warm(&mut self, learned: Throttle, _latency: Option<f64>) {
        let max = self.config.max_concurrency.max(1);
        self.limit = learned.concurrency().clamp(1, max) as f64;
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let rtt = sample.latency_secs();
        let drop = match sample.outcome() {
            Outcome::Ignore => return self.throttle(),
            Outcome::Overload => true,
            Outcome::Success => false,
        };
        if !(rtt > 0.0 && rtt.is_finite()) {
            return self.throttle();
        }
        let c = &self.config;
        self.probe_count += 1;
        if self.probe_jitter * c.probe_multiplier as f64 * self.limit <= self.probe_count as f64 {
            self.probe_jitter = 0.5 + 0.5 * crate::rng::next_unit(&mut self.rng);
            self.probe_count = 0;
            self.rtt_noload = rtt;
            return self.throttle();
        }
        if self.rtt_noload == 0.0 || rtt < self.rtt_noload {
            self.rtt_noload = rtt;
            return self.throttle();
        }
        let l = self.limit;
        let li = l as usize;
        let queue = (l * (1.0 - self.rtt_noload / rtt)).ceil();
        let new = if drop {
            l - lg(li) as f64
        } else if (sample.in_flight().saturating_mul(2) as f64) < l {
            return self.throttle();
        } else {
            let (alpha, beta, threshold) = (3 * lg(li), 6 * lg(li), lg(li));
            if queue <= threshold as f64 {
                l + beta as f64
            } else if queue < alpha as f64 {
                l + lg(li) as f64
            } else if queue > beta as f64 {
                l - lg(li) as f64
            } else {
                return self.throttle();
            }
        };
        let new = new.min(c.max_concurrency as f64).max(1.0);
        self.limit = (1.0 - c.smoothing) * l + c.smoothing * new;
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
        // A probe multiplier so large that no probe happens here.
        let mut p = Vegas::default()
            .probe_multiplier(1_000_000)
            .make_policy(&SlotKey::new("t"));
        let limits: Vec<usize> = [
            ok(0.100, 20), // first rtt: the no-load latency; 20
            ok(0.100, 20), // queue = ceil(20 * 0) = 0 <= threshold 1: +beta (6) = 26
            ok(0.130, 26), // queue = ceil(26 * (1 - 1/1.3)) = 6 >= alpha 3, <= beta 6: 26
            ok(0.200, 26), // queue = ceil(26 * 0.5) = 13 > 6: 26 - 1 = 25
            ok(0.110, 5),  // 5*2 < 25: app-limited, 25
            Sample::error(0.3, Outcome::Overload).with_in_flight(25), // drop: 24
            ok(0.050, 24), // a new minimum: no change, rtt_noload = 0.05
        ]
        .iter()
        .map(|s| p.on_sample(s).concurrency())
        .collect();
        assert_eq!(limits, vec![20, 26, 26, 25, 25, 24, 24]);
    }

    #[test]
    fn probes_reset_the_noload_latency() {
        // Limit 10, probe multiplier 1: the first probe comes after
        // U[0.5, 1) × 10 samples, that is at a count from 5 to 10.
        let mut p = Vegas::default()
            .initial_concurrency(10)
            .probe_multiplier(1)
            .make_policy(&SlotKey::new("t"));
        // The first sample sets the no-load latency: 0.1 s.
        assert_eq!(p.on_sample(&ok(0.1, 10)).concurrency(), 10);
        // At 0.2 s, queue = ceil(10 × (1 − 0.1 / 0.2)) = 5: between alpha
        // (3) and beta (6), no change, until the probe takes 0.2 s as the
        // new no-load latency; the next sample then shows no queue (0 ≤
        // threshold 1): + beta (6) = 16.
        let limits: Vec<usize> = (2..=12)
            .map(|_| p.on_sample(&ok(0.2, 10)).concurrency())
            .collect();
        let first_raise = limits.iter().position(|&l| l != 10).expect("a probe came");
        assert_eq!(limits[first_raise], 16, "{limits:?}");
        // Samples 2.. are at positions 0..: the probe at count 5 to 10 is at
        // position 3 to 8, the raise one later.
        assert!((4..=9).contains(&first_raise), "{limits:?}");
    }

    #[test]
    fn lg_matches_netflix() {
        assert_eq!(
            (
                lg(0),
                lg(1),
                lg(9),
                lg(10),
                lg(99),
                lg(100),
                lg(999),
                lg(1000),
                lg(12_345)
            ),
            (1, 1, 1, 1, 1, 2, 2, 3, 4)
        );
    }
}
