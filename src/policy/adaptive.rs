//! The crate's own policy: finds a host's capacity and keeps its queue near
//! empty, adapting both concurrency and delay.

use std::time::Duration;

use super::{MakePolicy, Outcome, Policy, Sample, Throttle};
use crate::config::ConfigError;
use crate::key::SlotKey;

/// The default policy: it finds how many requests a host serves at once,
/// keeps the host's queue near empty, backs off at once on overload and
/// climbs back when the host recovers.
///
/// # How it works
///
/// The policy looks at the server through its latency. While fewer
/// requests are in flight than the host has workers, latency stays at its
/// *base* (the no-load latency); beyond that, the extra requests queue, and
/// latency grows in proportion. With `n` requests in flight and a median
/// latency `m`, the requests waiting in the server's queue are estimated as
///
/// ```text
/// q = n × (1 − base / m)
/// ```
///
/// (TCP Vegas's estimate, with the measured in-flight count rather than the
/// limit, so an idle client does not read as a loaded server).
///
/// Samples are taken in **rounds** of `max(4, L)` successful responses
/// (about one round trip's worth); the first responses after a change of
/// the limit are skipped, as they were sent under the old one. At the end
/// of each round:
///
/// - **Base latency.** The round's median `m` (robust to heavy-tailed
///   latencies) lowers the base when below it. When at most one request was
///   in flight on average there can be no queue of ours, so `m` *is* the
///   base. Otherwise the base drifts up by 1/32 of the gap, so a host that
///   became slower for good is learned eventually.
/// - **Slow start.** From the initial limit, the limit doubles every round
///   while `q < 1/2`, which finds a host's capacity in `log₂(capacity)`
///   rounds. The first round with a queue ends slow start.
/// - **Steady state.** When `q` exceeds `max(1, n/10)`, the limit drops at
///   once to the estimated capacity plus half a request,
///   `n × base / m + 1/2`; when `q < 1/2` and the limit was used (at least
///   half of it in flight), it grows by one per round; otherwise it holds.
/// - **Overload** (a 429 or 503, a timeout, a refused connection; the layer
///   passes only the first of a burst): the limit halves at once and slow
///   start ends. The layer's own backoff and `Retry-After` handling act on
///   top (see the crate documentation).
/// - **Delay.** The delay paces the requests of a round over half the
///   latency, `m / (2 L)`, within `[min_delay, max_delay]`: it never binds
///   when the limit does, but spreads the bursts a raised limit would send
///   at once. A new slot starts at `start_delay`.
///
/// Latencies of zero (or not finite) are ignored, and so are ignored
/// outcomes (other 5xx, errors that say nothing about load).
///
/// | parameter | default |
/// |---|---|
/// | `start_delay` | 0 |
/// | `min_delay` | 0 |
/// | `max_delay` | 60 s |
/// | `initial_concurrency` | 1 |
/// | `max_concurrency` | 64 |
#[derive(Clone, Debug, PartialEq)]
pub struct Adaptive {
    start_delay: f64,
    min_delay: f64,
    max_delay: f64,
    initial_concurrency: usize,
    max_concurrency: usize,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            start_delay: 0.0,
            min_delay: 0.0,
            max_delay: 60.0,
            initial_concurrency: 1,
            max_concurrency: 64,
        }
    }
}

impl Adaptive {
    /// The name `replay --policy` knows this policy by (`default` works too).
    pub const NAME: &'static str = "adaptive";

    /// The delay of a new slot.
    pub fn start_delay(self, d: Duration) -> Self {
        self.start_delay_secs(d.as_secs_f64())
    }
    /// Like [`start_delay`](Self::start_delay), in seconds.
    pub fn start_delay_secs(mut self, secs: f64) -> Self {
        self.start_delay = secs;
        self
    }
    /// The lowest delay.
    pub fn min_delay(self, d: Duration) -> Self {
        self.min_delay_secs(d.as_secs_f64())
    }
    /// Like [`min_delay`](Self::min_delay), in seconds.
    pub fn min_delay_secs(mut self, secs: f64) -> Self {
        self.min_delay = secs;
        self
    }
    /// The highest delay.
    pub fn max_delay(self, d: Duration) -> Self {
        self.max_delay_secs(d.as_secs_f64())
    }
    /// Like [`max_delay`](Self::max_delay), in seconds.
    pub fn max_delay_secs(mut self, secs: f64) -> Self {
        self.max_delay = secs;
        self
    }
    /// The concurrency of a new slot (at least 1).
    pub fn initial_concurrency(mut self, n: usize) -> Self {
        self.initial_concurrency = n;
        self
    }
    /// The highest concurrency (at least 1).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n;
        self
    }
}

impl MakePolicy for Adaptive {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn validate(&self) -> Result<(), ConfigError> {
        super::scrapy::check_delays(self.start_delay, self.min_delay, self.max_delay)?;
        if self.max_concurrency < 1 {
            return Err(ConfigError::new("max_concurrency", "must be at least 1"));
        }
        if self.initial_concurrency < 1 || self.initial_concurrency > self.max_concurrency {
            return Err(ConfigError::new(
                "initial_concurrency",
                format!(
                    "must be between 1 and max_concurrency ({}), got {}",
                    self.max_concurrency, self.initial_concurrency
                ),
            ));
        }
        Ok(())
    }

    fn make_policy(&self, _key: &SlotKey) -> Box<dyn Policy> {
        let limit = self
            .initial_concurrency
            .clamp(1, self.max_concurrency.max(1)) as f64;
        Box::new(AdaptiveState {
            limit,
            delay: self.start_delay,
            base: None,
            slow_start: true,
            round: Vec::new(),
            in_flight_sum: 0,
            skip: 0,
            spread: 0.0,
            config: self.clone(),
        })
    }
}

/// Half a request: the queue the steady state aims at.
const TARGET_QUEUE: f64 = 0.5;
/// The smallest round in slow start, and after it.
const MIN_ROUND_START: usize = 2;
const MIN_ROUND: usize = 8;
/// The largest round.
const MAX_ROUND: usize = 256;
/// The smallest latency tolerance, relative to the base.
const MIN_TOLERANCE: f64 = 0.02;
/// How much of a queue-free round's median the base takes in.
const BASE_GAIN: f64 = 0.2;
/// A round ends early once this many samples show a median at least
/// [`STRONG`] times the base: a capacity drop is acted on at once.
const EARLY: usize = 4;
const STRONG: f64 = 2.0;

#[derive(Clone, Debug)]
struct AdaptiveState {
    limit: f64,
    delay: f64,
    base: Option<f64>,
    slow_start: bool,
    round: Vec<f64>,
    in_flight_sum: usize,
    /// Responses still to skip after a raise of the limit.
    skip: usize,
    /// Smoothed interquartile range of latencies, relative to the median.
    spread: f64,
    config: Adaptive,
}

impl AdaptiveState {
    /// About one round trip of responses: half the limit in slow start
    /// (which may so overshoot for one round trip, and corrects from the
    /// samples that show it), the limit after.
    fn round_size(&self) -> usize {
        if self.slow_start {
            ((self.limit / 2.0).ceil() as usize).max(MIN_ROUND_START)
        } else {
            (self.limit.ceil() as usize).clamp(MIN_ROUND, MAX_ROUND)
        }
    }

    /// Lowers the limit to `capacity`, never raises it.
    fn cut(&mut self, capacity: f64) {
        if capacity < self.limit {
            self.set_limit(capacity);
        }
    }

    /// Two standard errors of a round's median, relative to it.
    fn noise(&self, n: usize) -> f64 {
        2.0 * 0.93 * self.spread / (n as f64).sqrt()
    }

    fn set_limit(&mut self, limit: f64) {
        let limit = limit.clamp(1.0, self.config.max_concurrency as f64);
        if limit.floor() != self.limit.floor() {
            // Responses to requests sent under the old limit say little
            // about the new one: skip those in flight now. (Not in slow
            // start, which reads them as a lower bound and corrects an
            // overshoot a round later.)
            if !self.slow_start || limit < self.limit {
                self.skip = self.limit.ceil() as usize;
            }
            self.round.clear();
            self.in_flight_sum = 0;
        }
        self.limit = limit;
    }

    fn end_round(&mut self) {
        let n = self.round.len();
        let in_flight = (self.in_flight_sum as f64 / n as f64).max(1.0);
        self.round.sort_by(f64::total_cmp);
        let median = quantile(&self.round, 0.5);
        let spread = (quantile(&self.round, 0.75) - quantile(&self.round, 0.25)) / median;
        self.round.clear();
        self.in_flight_sum = 0;
        if spread.is_finite() && n >= EARLY {
            // Smoothed over rounds; a round's own estimate is noisy too.
            self.spread = if self.spread == 0.0 {
                spread
            } else {
                0.75 * self.spread + 0.25 * spread
            };
        }
        let noise = self.noise(n);
        // Latency within this of the base is no queue: two standard errors
        // of the round's median.
        let tolerance = noise.max(MIN_TOLERANCE);

        let base = match self.base {
            None => median,
            // With one request in flight there is no queue of ours: this
            // is the no-load latency.
            Some(_) if in_flight <= 1.0 => median,
            // Clearly faster than the base: the host got faster.
            Some(b) if median < b * (1.0 - tolerance) => median,
            b => b.unwrap_or(median),
        };
        let ratio = median / base;
        // A queue-free round refines the base: the typical no-load median,
        // not the luckiest round's.
        self.base = Some(if ratio <= 1.0 + tolerance {
            base + (median - base) * BASE_GAIN
        } else {
            base
        });
        let queue = in_flight * (1.0 - 1.0 / ratio);
        let used = in_flight * 2.0 >= self.limit;
        // What the host serves at once, and half a request more.
        let capacity = in_flight / ratio + TARGET_QUEUE;

        if self.slow_start {
            if ratio <= 1.0 + tolerance {
                if used {
                    self.set_limit(self.limit * 2.0);
                }
            } else {
                self.slow_start = false;
                self.cut(capacity);
            }
        } else if ratio > 1.0 + tolerance && queue > TARGET_QUEUE {
            self.cut(capacity);
        } else if ratio <= 1.0 + tolerance / 2.0 && used {
            self.set_limit(self.limit + 1.0);
        }

        let pacing = median / (2.0 * self.limit);
        self.delay = pacing.clamp(self.config.min_delay, self.config.max_delay);
    }
}

/// The `q` quantile of sorted values, interpolated.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Policy for AdaptiveState {
    fn throttle(&self) -> Throttle {
        Throttle::new(self.delay, self.limit as usize)
    }

    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        match sample.outcome() {
            Outcome::Ignore => {}
            Outcome::Overload => {
                self.slow_start = false;
                self.set_limit((self.limit / 2.0).floor());
            }
            Outcome::Success => {
                let latency = sample.latency_secs();
                if latency > 0.0 && latency.is_finite() {
                    if self.skip > 0 {
                        self.skip -= 1;
                    } else {
                        self.round.push(latency);
                        self.in_flight_sum += sample.in_flight();
                        // Strong: beyond both twice the base and three
                        // standard errors of a median of this few.
                        let threshold = STRONG.max(1.0 + 1.5 * self.noise(EARLY));
                        let strong = self.round.len() >= EARLY
                            && self.base.is_some_and(|b| {
                                let mut r = self.round.clone();
                                r.sort_by(f64::total_cmp);
                                quantile(&r, 0.5) >= threshold * b
                            });
                        if strong || self.round.len() >= self.round_size() {
                            self.end_round();
                        }
                    }
                }
            }
        }
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

    fn feed(p: &mut Box<dyn Policy>, n: usize, latency: f64, in_flight: usize) -> Throttle {
        let mut t = p.throttle();
        for _ in 0..n {
            t = p.on_sample(&ok(latency, in_flight));
        }
        t
    }

    #[test]
    fn slow_start_doubles_then_settles_at_the_estimated_capacity() {
        let mut p = Adaptive::default().make_policy(&SlotKey::new("t"));
        assert_eq!(p.throttle().concurrency(), 1);
        // Slow-start rounds of max(2, L/2) samples; 100 ms at every load
        // so far: no queue, the limit doubles.
        assert_eq!(feed(&mut p, 2, 0.1, 1).concurrency(), 2);
        assert_eq!(feed(&mut p, 2, 0.1, 2).concurrency(), 4);
        assert_eq!(feed(&mut p, 2, 0.1, 4).concurrency(), 8);
        // At 8 in flight the latency doubles (a 4-worker host): the round
        // ends early on this strong signal, and slow start ends at the
        // estimated capacity 8 / 2 + 1/2 = 4.5.
        let t = feed(&mut p, 4, 0.2, 8);
        assert_eq!(t.concurrency(), 4);
        // The delay paces a round over half the latency: 0.2 / (2 × 4.5).
        assert!((t.delay_secs() - 0.2 / 9.0).abs() < 1e-12);
        // Steady: the 8 responses in flight at the cut are skipped, then a
        // round of 8 at 4 in flight shows no queue: +1.
        assert_eq!(feed(&mut p, 8 + 8, 0.1, 4).concurrency(), 5);
        // Then a queue (5 in flight, latency × 1.375, so q = 1.36): after
        // the 5 responses in flight at the raise, cut to 5 / 1.375 + 1/2.
        assert_eq!(feed(&mut p, 5 + 8, 0.1375, 5).concurrency(), 4);
    }

    #[test]
    fn an_overload_halves_the_limit() {
        let mut p = Adaptive::default()
            .initial_concurrency(10)
            .make_policy(&SlotKey::new("t"));
        let t = p.on_sample(&Sample::error(1.0, Outcome::Overload));
        assert_eq!(t.concurrency(), 5);
        let t = p.on_sample(&Sample::from_secs_f64(0.1, StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(t.concurrency(), 2);
        for _ in 0..5 {
            p.on_sample(&Sample::error(1.0, Outcome::Overload));
        }
        assert_eq!(p.throttle().concurrency(), 1);
    }

    #[test]
    fn a_slower_host_is_learned_at_one_in_flight() {
        let mut p = Adaptive::default().make_policy(&SlotKey::new("t"));
        feed(&mut p, 4, 0.1, 1);
        // The host now takes 1 s even alone: with one in flight that is its
        // base, not a queue, so the limit is not cut.
        let t = feed(&mut p, 40, 1.0, 1);
        assert!(t.concurrency() >= 2, "{t:?}");
    }

    #[test]
    fn ignored_and_zero_samples_change_nothing() {
        let mut p = Adaptive::default().make_policy(&SlotKey::new("t"));
        let before = p.throttle();
        p.on_sample(&Sample::error(1.0, Outcome::Ignore));
        p.on_sample(&ok(0.0, 1));
        p.on_sample(&ok(f64::NAN, 1));
        assert_eq!(p.throttle(), before);
    }

    #[test]
    fn validation() {
        assert_eq!(
            Adaptive::default()
                .initial_concurrency(100)
                .validate()
                .unwrap_err()
                .field(),
            "initial_concurrency"
        );
        assert_eq!(
            Adaptive::default()
                .max_concurrency(0)
                .validate()
                .unwrap_err()
                .field(),
            "max_concurrency"
        );
        assert!(Adaptive::default().validate().is_ok());
    }
}
