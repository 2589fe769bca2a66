//! The original AutoThrottle rules (Scrapy, 2012), per slot.

use http::StatusCode;

use super::params::policy_params;
use super::{Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// Scrapy's original AutoThrottle (2012), with its state kept per slot.
    ///
    /// A slot starts with concurrency 1 and a delay of `start_delay`. On each
    /// response with a non-zero latency:
    ///
    /// - **Delay.** `new = (delay + latency) / 2` when the latency is below the
    ///   delay, else `new = latency`. A response whose status is not 200 may only
    ///   raise the delay (error pages and redirects are small and fast, and would
    ///   otherwise pull the delay down).
    /// - **Concurrency.** The latency joins a window. The first window starts
    ///   with `start_delay` as its first sample, as in the original. When the
    ///   window holds `check_period` samples, its mean and sample standard
    ///   deviation (n − 1) are computed; if the mean exceeds the previous
    ///   window's mean plus its deviation (the first comparison is against
    ///   `(start_delay, 0)`), the concurrency drops by one (not below 1),
    ///   otherwise it grows by one (not above `max_concurrency`). The window is
    ///   then emptied.
    ///
    /// A zero latency changes nothing. The arithmetic is the original's, in
    /// `f64` seconds, so a replayed trace gives exactly Scrapy's numbers. Unlike
    /// the original, which kept one latency window for all hosts, every slot has
    /// its own window.
    ///
    /// | parameter | default | Scrapy setting |
    /// |---|---|---|
    /// | `start_delay` | 5 s | `AUTOTHROTTLE_START_DELAY` |
    /// | `check_period` | 10 | `AUTOTHROTTLE_CONCURRENCY_CHECK_PERIOD` |
    /// | `max_concurrency` | 8 | `AUTOTHROTTLE_MAX_CONCURRENCY` |
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_autothrottle::policy::Scrapy2012;
    ///
    /// let policy = Scrapy2012::default()
    ///     .start_delay(Duration::from_millis(500))
    ///     .check_period(5)
    ///     .max_concurrency(4);
    /// ```
    pub struct Scrapy2012("scrapy-2012") {
        delays { start: 5.0, }
        concurrency { max: 8, }
        /// How many samples make a window (1 to 100 000: a window keeps its
        /// samples, as the original's list does).
        ///
        /// As in the original, the first window already holds `start_delay`
        /// as its first sample, so with a period of 1 no window ever
        /// completes and the concurrency stays at 1.
        check_period: usize = 10;
    }
}

/// The longest window: a window keeps its latencies until it completes.
const MAX_CHECK_PERIOD: usize = 100_000;

impl Scrapy2012 {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_CHECK_PERIOD).contains(&self.check_period) {
            return Err(ConfigError::new(
                "check_period",
                format!(
                    "must be between 1 and {MAX_CHECK_PERIOD}, got {}",
                    self.check_period
                ),
            ));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`.
    fn state(&self, _key: &SlotKey) -> Box<dyn Policy> {
        Box::new(Scrapy2012State::new(self))
    }
}

/// The per-slot state of [`Scrapy2012`].
#[derive(Clone, Debug)]
struct Scrapy2012State {
    delay: f64,
    concurrency: usize,
    window: Vec<f64>,
    previous: (f64, f64),
    check_period: usize,
    max_concurrency: usize,
}

impl Scrapy2012State {
    fn new(config: &Scrapy2012) -> Self {
        let mut window = Vec::with_capacity(config.check_period.min(MAX_CHECK_PERIOD));
        window.push(config.start_delay);
        Scrapy2012State {
            delay: config.start_delay,
            concurrency: 1,
            window,
            previous: (config.start_delay, 0.0),
            check_period: config.check_period,
            max_concurrency: config.max_concurrency.max(1),
        }
    }

    fn adjust_delay(&mut self, latency: f64, status: StatusCode) {
        let new_delay = if latency < self.delay {
            (self.delay + latency) / 2.0
        } else {
            latency
        };
        if status == StatusCode::OK || new_delay > self.delay {
            self.delay = new_delay;
        }
    }

    fn check_concurrency(&mut self, latency: f64) {
        if self.check_period < 2 {
            // The window (which starts with `start_delay`) can never hold
            // exactly this many samples: the original never adjusts, and
            // keeping the samples would only grow the window forever.
            return;
        }
        self.window.push(latency);
        if self.window.len() == self.check_period {
            let (mean, stdev) = mean_stdev(&self.window);
            let (prev_mean, prev_stdev) = self.previous;
            self.previous = (mean, stdev);
            self.window.clear();
            if mean > prev_mean + prev_stdev {
                if self.concurrency > 1 {
                    self.concurrency -= 1;
                }
            } else if self.concurrency < self.max_concurrency {
                self.concurrency += 1;
            }
        }
    }
}

impl Policy for Scrapy2012State {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.delay, self.concurrency)
    }

    /// Takes the delay and the concurrency; the first window of latencies
    /// starts from that delay, as a fresh one starts from `start_delay`.
    fn warm(&mut self, learned: Throttle, _latency: Option<f64>) {
        let delay = learned.delay_secs();
        if delay.is_finite() && delay >= 0.0 {
            self.delay = delay;
            self.window.clear();
            self.window.push(delay);
            self.previous = (delay, 0.0);
        }
        self.concurrency = learned.concurrency().clamp(1, self.max_concurrency);
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        let latency = sample.latency_secs();
        // The original sees responses only (download errors never reach
        // it), and skips one without a latency or with a zero one.
        if let Some(status) = sample.status() {
            if latency != 0.0 && !latency.is_nan() {
                self.adjust_delay(latency, status);
                self.check_concurrency(latency);
            }
        }
        self.throttle()
    }
}

/// Mean and sample standard deviation, summed left to right as the original.
fn mean_stdev(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().fold(0.0, |acc, x| acc + x) / n;
    let squares = values
        .iter()
        .fold(0.0, |acc, x| acc + (x - mean) * (x - mean));
    (mean, (squares / (n - 1.0)).powf(0.5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MakePolicy;

    fn run(policy: &Scrapy2012, trace: &[(f64, u16)]) -> Vec<(f64, usize)> {
        let mut state = policy.make_policy(&SlotKey::new("t"));
        trace
            .iter()
            .map(|&(lat, status)| {
                let t = state.on_sample(&Sample::from_secs_f64(
                    lat,
                    StatusCode::from_u16(status).unwrap(),
                ));
                (t.delay_secs(), t.concurrency())
            })
            .collect()
    }

    #[test]
    fn delay_follows_the_original_rules() {
        let out = run(
            &Scrapy2012::default(),
            &[
                (1.0, 200),
                (4.0, 200),
                (0.5, 404),
                (6.0, 500),
                (0.0, 200),
                (2.0, 301),
            ],
        );
        let delays: Vec<f64> = out.iter().map(|o| o.0).collect();
        // 5 -> (5+1)/2 = 3 -> 4 (latency above delay) -> 4 (404 may not lower)
        //   -> 6 (500 raises) -> 6 (zero latency ignored) -> 6 ((6+2)/2 = 4 is lower, 301)
        assert_eq!(delays, vec![3.0, 4.0, 4.0, 6.0, 6.0, 6.0]);
    }

    #[test]
    fn concurrency_windows_hand_computed() {
        let policy = Scrapy2012::default().check_period(3).max_concurrency(2);
        // Window 1: [5.0, 1.0, 1.0]: mean 7/3 < 5 + 0 -> +1 (2).
        // Window 2: [1.0, 1.0, 1.0]: mean 1 <= 7/3 + sd -> +1, capped at 2.
        // Window 3: [9.0, 9.0, 9.0]: mean 9 > 1 + 0 -> -1 (1).
        // Window 4: [9.0, 9.0, 9.0]: mean 9 > 9 + 0? no -> +1 (2).
        let trace = [(1.0, 200); 2]
            .iter()
            .chain([(1.0, 200); 3].iter())
            .chain([(9.0, 200); 6].iter())
            .copied()
            .collect::<Vec<_>>();
        let conc: Vec<usize> = run(&policy, &trace).iter().map(|o| o.1).collect();
        assert_eq!(conc, vec![1, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2]);
    }

    #[test]
    fn validation_names_the_field() {
        let err = Scrapy2012::default()
            .check_period(0)
            .validate()
            .unwrap_err();
        assert_eq!(err.field(), "check_period");
        let err = Scrapy2012::default()
            .max_concurrency(0)
            .validate()
            .unwrap_err();
        assert_eq!(err.field(), "max_concurrency");
        let err = Scrapy2012::default()
            .start_delay_secs(f64::NAN)
            .validate()
            .unwrap_err();
        assert_eq!(err.field(), "start_delay");
        assert!(Scrapy2012::default().validate().is_ok());
    }

    #[test]
    fn a_period_of_one_never_adjusts_concurrency_as_the_original() {
        let policy = Scrapy2012::default().check_period(1);
        let out = run(&policy, &[(1.0, 200); 50]);
        assert!(out.iter().all(|&(_, c)| c == 1));
    }

    #[test]
    fn mean_stdev_matches_hand_values() {
        let (m, s) = mean_stdev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((s - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }
}
