//! The crate's own policy: finds a host's capacity and keeps its queue near
//! empty, adapting both concurrency and delay.

use super::params::{policy_params, within};
use super::{Outcome, Policy, Sample, Throttle};
use crate::error::ConfigError;
use crate::key::SlotKey;

policy_params! {
    /// The default policy: it finds how many requests a host serves at once,
    /// keeps the host's queue near empty, backs off at once on overload and
    /// climbs back when the host recovers.
    ///
    /// # How it works
    ///
    /// The policy watches the server through its latency. While fewer requests
    /// are in flight than the host has workers, latency stays at its *base*
    /// (the no-load latency); beyond that the extra requests queue, and every
    /// request waits longer. With `n` requests in flight and latencies `ratio`
    /// times the base, about `q = n × (1 − 1/ratio)` requests wait in the
    /// server's queue (TCP Vegas's estimate, with the *measured* in-flight
    /// count, so that an idle client never reads as a loaded server), and the
    /// host serves about `n / ratio` at once.
    ///
    /// **Rounds.** Responses are taken in rounds of about one round trip:
    /// `max(2, L/2)` responses in slow start, `L` (8 to 256) after. After a
    /// change of the limit, the responses of the requests already in flight
    /// are skipped: they were sent under the old limit.
    ///
    /// **Level, noise and base.** A round is summed up by its lower quartile
    /// (its *level*): queueing delays every request, while the noise of
    /// service times mostly widens the top of the distribution. The gap
    /// between the round's median and its level gives the noise, so the
    /// *tolerance* is two standard errors of a level (at least 2 %; until a
    /// round of four has measured the noise, a spread of 10 % is assumed):
    /// latencies
    /// within it of the base are no queue. The base is the level of the first
    /// round, or of any round with at most one request in flight (no queue of
    /// ours can exist then), and otherwise follows queue-free rounds (an
    /// average with weight 1/5), as does the noise: a queue would widen the
    /// spread and hide itself.
    ///
    /// **Slow start.** From `initial_concurrency`, the limit doubles every
    /// round whose level is within the tolerance, provided at least half of
    /// it was in use. The first round with a queue ends slow start and cuts the
    /// limit to the estimated capacity `n / ratio`.
    ///
    /// **Steady state.** A round beyond the tolerance with more than half a
    /// request queued cuts the limit to `n / ratio` (never raises it). A round
    /// within half the tolerance, with half the limit in use, raises it: by
    /// half while below half the limit of the last cut (quick recovery after a
    /// capacity drop); beyond, by a step that starts at one and doubles with
    /// every clean round in a row, at most half the limit (a host far from its
    /// capacity is reached fast, one near it carefully). Any other round
    /// resets the step to one.
    ///
    /// **Early exit.** Once each of the last four responses took twice the base
    /// (1.25 times in slow start, as TCP's HyStart), and more than 1.5
    /// standard errors of such a small round above it, and (after slow start)
    /// more than no-load latencies reach one time in ten (the 90th percentile
    /// of queue-free rounds, relative to their level: heavy tails then do not
    /// pass for a capacity drop), the round ends at once and is judged on those
    /// four: a capacity drop is acted on within four responses.
    ///
    /// **Overload** (a 429 or 503, a timeout, a refused connection; the layer
    /// passes on only the first of a burst) halves the limit at once and ends
    /// slow start. The layer's own backoff and `Retry-After` handling act on
    /// top, whatever the policy (see the crate documentation).
    ///
    /// **Delay.** The delay paces a round's requests over half the median
    /// latency, `median / (2 L)`, within `[min_delay, max_delay]`: it never
    /// binds when the limit does, but spreads the burst a raised limit would
    /// otherwise send at once; below a millisecond (the timer's resolution,
    /// where a wait would cap the host at 1000 requests a second) there is no
    /// pacing. A new slot starts at `start_delay` (raised to `min_delay`).
    ///
    /// Zero or non-finite latencies and ignored outcomes (other 5xx, errors
    /// that say nothing about load) change nothing.
    ///
    /// On the simulator (`cargo run --release --example simulate`) it keeps
    /// within 10 % of the best fixed concurrency with a queue under one
    /// request on servers with moderate latency noise; on very noisy (Pareto)
    /// servers and on slow but unbounded ones it is more cautious than the
    /// best fixed concurrency: see the README's scoreboard.
    ///
    /// A start delay is raised to `min_delay`; one above `max_delay` is
    /// refused.
    ///
    /// | parameter | default |
    /// |---|---|
    /// | `start_delay` | 0 |
    /// | `min_delay` | 0 |
    /// | `max_delay` | 60 s |
    /// | `initial_concurrency` | 1 |
    /// | `max_concurrency` | 64 |
    pub struct Adaptive("adaptive") {
        delays { start: 0.0, min: 0.0, max: 60.0, }
        concurrency { initial: 1, max: 64, }
    }
}

impl Adaptive {
    /// Checks the parameters beyond the bounds.
    fn check(&self) -> Result<(), ConfigError> {
        if self.start_delay > self.max_delay {
            return Err(ConfigError::new(
                "start_delay",
                format!(
                    "must not be above max_delay ({}), got {}",
                    self.max_delay, self.start_delay
                ),
            ));
        }
        if self.initial_concurrency > self.max_concurrency {
            return Err(ConfigError::new(
                "initial_concurrency",
                format!(
                    "must not be above max_concurrency ({}), got {}",
                    self.max_concurrency, self.initial_concurrency
                ),
            ));
        }
        Ok(())
    }

    /// A fresh state for the slot `key`.
    fn state(&self, _key: &SlotKey) -> Box<dyn Policy> {
        let limit = self
            .initial_concurrency
            .clamp(1, self.max_concurrency.max(1)) as f64;
        Box::new(AdaptiveState {
            limit,
            delay: self.start_delay.max(self.min_delay),
            base: None,
            slow_start: true,
            round: Vec::new(),
            skip: 0,
            spread: PRIOR_SPREAD,
            spread_known: false,
            tail: 1.0,
            step: 1.0,
            ceiling: 0.0,
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
/// The quantile of a round's latencies compared with the base: queueing
/// delays every request, while the noise of service times mostly widens the
/// top of the distribution.
const LEVEL: f64 = 0.25;
/// tokio's timer resolution, in seconds: pacing finer than this is dropped.
const TIMER_RESOLUTION: f64 = 0.001;
/// The noise assumed until a round has measured it: moderate.
const PRIOR_SPREAD: f64 = 0.1;
/// The smallest latency tolerance, relative to the base.
const MIN_TOLERANCE: f64 = 0.02;
/// How much of a queue-free round's median the base takes in.
const BASE_GAIN: f64 = 0.2;
/// A round ends early once each of its last this many samples took at least
/// [`STRONG`] times the base: a capacity drop is acted on at once.
const EARLY: usize = 4;
const STRONG: f64 = 2.0;
/// The same in slow start.
const SLOW_START_EXIT: f64 = 1.25;

#[derive(Clone, Debug)]
struct AdaptiveState {
    limit: f64,
    delay: f64,
    base: Option<f64>,
    slow_start: bool,
    /// This round's latencies, with the in-flight count of each.
    round: Vec<(f64, usize)>,
    /// Responses still to skip after a raise of the limit.
    skip: usize,
    /// Smoothed gap between the median and the lower quartile of a
    /// round's latencies, relative to the quartile.
    spread: f64,
    /// The limit before the last cut.
    ceiling: f64,
    /// The next additive step.
    step: f64,
    /// Whether `spread` was measured yet (until then it is a prior).
    spread_known: bool,
    /// Smoothed 90th percentile of queue-free rounds, relative to their
    /// level: how far no-load latencies stray (1 until measured).
    tail: f64,
    config: Adaptive,
}

impl AdaptiveState {
    /// Half a round trip of responses in slow start (after the skip, that
    /// is enough to see a queue), a round trip's after.
    fn round_size(&self) -> usize {
        if self.slow_start {
            ((self.limit / 2.0).ceil() as usize).max(MIN_ROUND_START)
        } else {
            (self.limit.ceil() as usize).clamp(MIN_ROUND, MAX_ROUND)
        }
    }

    /// Whether each of the last [`EARLY`] responses took more than both
    /// [`STRONG`] times the base (in slow start, where an overshoot doubles
    /// the load, [`SLOW_START_EXIT`] times, as TCP's HyStart) and 1.5
    /// standard errors of a level of so few.
    fn strong_signal(&self) -> bool {
        let (Some(base), true) = (self.base, self.round.len() >= EARLY) else {
            return false;
        };
        let strong = if self.slow_start {
            SLOW_START_EXIT
        } else {
            STRONG
        };
        // Beyond what no-load latencies reach one time in ten, too: four
        // such in a row by chance is then about one window in 10 000.
        let threshold = strong
            .max(1.0 + 1.5 * self.noise(EARLY))
            .max(if self.slow_start { 1.0 } else { self.tail });
        self.round[self.round.len() - EARLY..]
            .iter()
            .all(|&(latency, _)| latency >= threshold * base)
    }

    /// Lowers the limit to `capacity`, never raises it.
    fn cut(&mut self, capacity: f64) {
        if capacity < self.limit {
            self.ceiling = self.limit;
            self.set_limit(capacity);
        }
    }

    /// Two standard errors of a round's level (its lower quartile),
    /// relative to it: for a normal spread σ the quartile's standard error
    /// is 1.36 σ / √n, and σ ≈ (median − quartile) / 0.674.
    fn noise(&self, n: usize) -> f64 {
        2.0 * 2.02 * self.spread / (n as f64).sqrt()
    }

    fn set_limit(&mut self, limit: f64) {
        let limit = within(limit, 1.0, self.config.max_concurrency as f64);
        if limit.floor() != self.limit.floor() {
            // Responses to requests sent under the old limit say little
            // about the new one: skip those in flight now.
            self.skip = self.limit.ceil() as usize;
            self.round.clear();
        }
        self.limit = limit;
    }

    fn end_round(&mut self) {
        let n = self.round.len();
        let in_flight = self.round.iter().map(|&(_, f)| f as f64).sum::<f64>() / n as f64;
        let in_flight = in_flight.max(1.0);
        let mut latencies: Vec<f64> = self.round.drain(..).map(|(l, _)| l).collect();
        latencies.sort_by(f64::total_cmp);
        let level = quantile(&latencies, LEVEL);
        let median = quantile(&latencies, 0.5);
        let high = quantile(&latencies, 0.9);
        let spread = (median - level) / level;
        if !self.spread_known && spread.is_finite() && n >= EARLY {
            self.spread = spread;
            self.spread_known = true;
        }
        // Latency within this of the base is no queue: two standard errors
        // of the round's level.
        let tolerance = self.noise(n).max(MIN_TOLERANCE);

        let base = match self.base {
            // With one request in flight there is no queue of ours: this
            // is the no-load latency.
            Some(b) if in_flight > 1.0 => b,
            _ => level,
        };
        let ratio = level / base;
        // A queue-free round refines the base: the typical no-load level,
        // not the luckiest round's.
        if ratio <= 1.0 + tolerance {
            self.base = Some(base + (level - base) * BASE_GAIN);
            // The noise is learned from queue-free rounds only: a queue
            // widens the spread and would hide itself.
            if self.spread_known && spread.is_finite() && n >= EARLY {
                self.spread += (spread - self.spread) * BASE_GAIN;
            }
            let tail = high / level;
            if tail.is_finite() && n >= MIN_ROUND {
                self.tail = if self.tail == 1.0 {
                    tail
                } else {
                    self.tail + (tail - self.tail) * BASE_GAIN
                };
            }
        } else {
            self.base = Some(base);
        }
        let queue = in_flight * (1.0 - 1.0 / ratio);
        let used = in_flight * 2.0 >= self.limit;
        // What the host serves at once.
        let capacity = in_flight / ratio;

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
            // Back quickly towards the level of the last cut; beyond it, a
            // step that doubles with every clean round in a row (at most
            // half the limit), so a host far from its capacity is reached
            // fast and one near it carefully.
            let step = if self.limit < self.ceiling / 2.0 {
                self.limit / 2.0
            } else {
                self.step.min(self.limit / 2.0).max(1.0)
            };
            self.step *= 2.0;
            self.set_limit(self.limit + step);
            return self.pace(median);
        }
        self.step = 1.0;
        self.pace(median);
    }

    /// Spreads a round's requests over half the latency.
    fn pace(&mut self, median: f64) {
        let pacing = median / (2.0 * self.limit);
        // Below the timer's resolution a wait rounds up to a whole
        // millisecond and would cap a fast host at 1000 requests a second:
        // no pacing there.
        let pacing = if pacing < TIMER_RESOLUTION {
            0.0
        } else {
            pacing
        };
        self.delay = within(pacing, self.config.min_delay, self.config.max_delay);
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
                        self.round.push((latency, sample.in_flight()));
                        if self.strong_signal() {
                            // Judge the round on the recent evidence alone.
                            self.round.drain(..self.round.len() - EARLY);
                            self.end_round();
                        } else if self.round.len() >= self.round_size() {
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
    use crate::policy::ok;
    use crate::policy::MakePolicy;
    use http::StatusCode;

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
        // Slow-start rounds of max(2, L/2) responses, after skipping the
        // responses in flight at each raise; 100 ms at every load so far:
        // no queue, the limit doubles.
        assert_eq!(feed(&mut p, 2, 0.1, 1).concurrency(), 2);
        assert_eq!(feed(&mut p, 1 + 2, 0.1, 2).concurrency(), 4);
        assert_eq!(feed(&mut p, 2 + 2, 0.1, 4).concurrency(), 8);
        // At 8 in flight the latency doubles (a 4-worker host): slow start
        // ends with a cut to the estimated capacity 8 / 2 = 4.
        let t = feed(&mut p, 4 + 4, 0.2, 8);
        assert_eq!(t.concurrency(), 4);
        // The delay paces a round over half the latency: 0.2 / (2 × 4).
        assert!((t.delay_secs() - 0.025).abs() < 1e-12);
        // Steady: skip the 8 responses in flight at the cut, then a round
        // of 8 at 4 in flight shows no queue. 4 is not below half the
        // limit of the cut (8), so +1.
        assert_eq!(feed(&mut p, 8 + 8, 0.1, 4).concurrency(), 5);
        // Then a queue: 5 in flight, latency × 1.375, q = 1.36: cut to
        // 5 / 1.375 = 3.6.
        assert_eq!(feed(&mut p, 4 + 8, 0.1375, 5).concurrency(), 3);
        // No queue again: 3.6 is not below half the limit of that cut (5),
        // so +1.
        assert_eq!(feed(&mut p, 5 + 8, 0.1, 3).concurrency(), 4);
    }

    #[test]
    fn a_capacity_drop_is_seen_within_four_responses() {
        let mut p = Adaptive::default()
            .initial_concurrency(16)
            .make_policy(&SlotKey::new("t"));
        // Slow start: 16 → 32; at 32 in flight the level is × 1.3: cut to
        // 16 / 1.3 = 12.3 (skipping the 16, then 32, responses in flight).
        assert_eq!(feed(&mut p, 8, 0.05, 16).concurrency(), 32);
        assert_eq!(feed(&mut p, 16 + 16, 0.065, 16).concurrency(), 12);
        // Steady at 12 without a queue, below half the limit of the cut
        // (32): recovery by half, to 18.5.
        assert_eq!(feed(&mut p, 32 + 12, 0.05, 12).concurrency(), 18);
        // Skip the 13 responses in flight at that raise.
        feed(&mut p, 13, 0.05, 18);
        // The host drops to a quarter: three slow responses are not enough;
        // the fourth ends the round, judged on those four: a cut to 18 / 4.
        assert_eq!(feed(&mut p, 3, 0.2, 18).concurrency(), 18);
        assert_eq!(feed(&mut p, 1, 0.2, 18).concurrency(), 4);
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
    fn the_start_delay_is_raised_to_the_minimum() {
        let p = Adaptive::default()
            .min_delay_secs(0.5)
            .make_policy(&SlotKey::new("t"));
        assert_eq!(p.throttle().delay_secs(), 0.5);
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
