//! The per-slot state of what the layer adds on top of any policy: server
//! signals, overload backoff, a delay floor and jitter.
//!
//! This is a plain state machine: every method takes the current time as an
//! argument and none reads a clock, so it can be tested exactly.
//!
//! The slot's effective throttle is
//!
//! ```text
//! delay = max(policy delay, floor, rate-limit spacing, overload backoff delay) × jitter
//! limit = min(policy limit, overload cap), at least 1
//! no dispatch before the pause deadline (Retry-After, an exhausted RateLimit quota)
//! ```
//!
//! **Overload backoff.** An overload (a 429 or 503, a timeout, a refused or
//! reset connection) that is *new*, that is, from a request dispatched after
//! the last reaction, halves the slot's concurrency (a cap on what the
//! policy allows) and sets a backoff delay of twice the larger of the
//! current delay and the recent spacing between dispatches (at least
//! [`MIN_BACKOFF`], at most [`MAX_BACKOFF`]), so the request rate halves.
//! Overloads answered to requests already in flight at that moment count as
//! the same event. Each success then shrinks the backoff delay: by 1/16
//! while it is above 1.25 times the spacing at which the overload happened
//! (so the rate quickly returns to 80 % of the rate that was too much), by
//! 1/256 below (so it probes beyond slowly, about 180 successes per
//! doubling of the rate); and it grows the cap by one every `cap`
//! successes until the policy's own limit binds again.
//!
//! **In a fleet** (a slot shared through a coordinator), the spacing that
//! sizes the backoff is the fleet's (between the fleet's dispatches of the
//! slot, as the coordinator reports it), not this worker's, which is about
//! N times longer in a fleet of N; and each success counts for the fleet's
//! dispatches it stands for (this worker's spacing over the fleet's, 1 to
//! 64), so that the backoff recovers at the pace of the fleet's successes,
//! as one process's would.

use std::time::Duration;

use tokio::time::Instant;

use super::headers::RateLimit;
use crate::policy::{Outcome, Throttle};
use crate::rng::next_unit;
use crate::time::OptNanos;

/// The smallest backoff delay an overload sets.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The largest backoff delay an overload sets.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Below this, a decaying backoff delay is dropped.
const BACKOFF_GONE: Duration = Duration::from_micros(100);

/// What the layer knows about a slot beyond its policy.
#[derive(Debug, Clone)]
pub(crate) struct Signals {
    /// What the server said (pauses, pacing, overload backoff), and the
    /// delay floor: boxed, and only there once a server said something or
    /// a floor was set, so that a quiet slot (most of them, in a broad
    /// crawl) carries a pointer instead.
    trouble: Option<Box<Trouble>>,
    /// A smoothed spacing between dispatches, for sizing the backoff (one
    /// word: see [`OptNanos`]).
    interval: OptNanos,
    /// The jitter, when there is any (boxed: it is off by default, and then
    /// a slot carries a null pointer instead of three words).
    jitter: Option<Box<Jitter>>,
}

/// A slot's jitter: its amount, its random stream, and the factor drawn at
/// the last dispatch.
#[derive(Debug, Clone)]
struct Jitter {
    jitter: f64,
    rng: u64,
    factor: f64,
}

/// The part of [`Signals`] that only a server's answer (or a delay floor)
/// sets.
#[derive(Debug, Clone, Default)]
struct Trouble {
    /// The delay floor (zero: none).
    floor: Duration,
    /// No dispatch before this instant (Retry-After, exhausted quota).
    paused_until: Option<Instant>,
    /// Rate-limit pacing and when it expires.
    rate_spacing: Duration,
    rate_until: Option<Instant>,
    /// Overload backoff: a delay, and a cap on the concurrency limit.
    backoff_delay: Duration,
    cap: Option<usize>,
    cap_credit: usize,
    /// Requests dispatched before or at this sequence number were in flight
    /// at the last overload reaction.
    overload_seq: Option<u64>,
    /// The spacing in force when the last overload happened.
    overload_spacing: Duration,
    /// A smoothed spacing between the fleet's dispatches of the slot, when
    /// a fleet shares it.
    fleet_interval: Option<Duration>,
    /// The overloads counted (an event's repeats not), here rather than
    /// beside the box: every overload makes the box anyway, and a quiet
    /// slot so carries one word fewer.
    overloads: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reaction {
    /// The outcome the policy should see (a repeated overload is `Ignore`).
    pub(crate) outcome: Outcome,
    /// Whether the delay, limit or pause changed.
    pub(crate) changed: bool,
}

impl Signals {
    pub(crate) fn new(jitter: f64, seed: u64) -> Self {
        Signals {
            trouble: None,
            interval: OptNanos::NONE,
            // A jitter of 0 (or below) draws nothing: the factor stays 1.
            jitter: (jitter > 0.0).then(|| {
                Box::new(Jitter {
                    jitter,
                    rng: seed,
                    factor: 1.0,
                })
            }),
        }
    }

    /// The effective delay and limit at `now`, given the policy's answer.
    pub(crate) fn effective(&self, policy: &Throttle, now: Instant) -> (Duration, usize) {
        let (mut delay, mut limit) = Signals::policy_alone(policy);
        if let Some(t) = &self.trouble {
            delay = delay.max(t.floor).max(t.backoff_delay);
            if t.rate_until.is_some_and(|until| now < until) {
                delay = delay.max(t.rate_spacing);
            }
            if let Some(cap) = t.cap {
                limit = limit.min(cap.max(1));
            }
        }
        (delay, limit)
    }

    /// Whether no server signal and no floor is in force or remembered
    /// (nothing boxed yet): then [`effective`](Self::effective) is the
    /// policy's answer alone, at any instant, and there is no pause.
    pub(crate) fn is_quiet(&self) -> bool {
        self.trouble.is_none()
    }

    /// What the policy's answer alone allows: [`effective`](Self::effective)
    /// on a quiet slot (see [`is_quiet`](Self::is_quiet)).
    pub(crate) fn policy_alone(policy: &Throttle) -> (Duration, usize) {
        (policy.delay(), policy.concurrency().max(1))
    }

    /// The smoothed spacing between the slot's dispatches, once there were
    /// two (a gap above 584 years counts as 584 years).
    fn interval(&self) -> Option<Duration> {
        self.interval.get()
    }

    /// The delay floor (zero: none).
    pub(crate) fn floor(&self) -> Duration {
        self.trouble.as_ref().map_or(Duration::ZERO, |t| t.floor)
    }

    /// Sets the delay floor (zero lifts it).
    pub(crate) fn set_floor(&mut self, floor: Duration) {
        if floor.is_zero() && self.trouble.is_none() {
            // Already none: no box for it.
            return;
        }
        self.trouble().floor = floor;
    }

    /// No dispatch before this instant (`Retry-After`, an exhausted quota).
    pub(crate) fn paused_until(&self) -> Option<Instant> {
        self.trouble.as_ref().and_then(|t| t.paused_until)
    }

    /// The overloads counted (not those of an event already counted).
    pub(crate) fn overloads(&self) -> u64 {
        self.trouble.as_ref().map_or(0, |t| t.overloads)
    }

    fn trouble(&mut self) -> &mut Trouble {
        self.trouble.get_or_insert_with(Box::default)
    }

    /// The gap required after the last dispatch, with jitter applied.
    pub(crate) fn gap(&self, delay: Duration) -> Duration {
        let factor = self.jitter.as_ref().map_or(1.0, |j| j.factor);
        if factor == 1.0 {
            delay
        } else {
            crate::time::mul_f64(delay, factor)
        }
    }

    /// Called at each dispatch: tracks the spacing and draws the next
    /// jitter factor. A gap that a pause forced (the pause ended between the
    /// two dispatches) says nothing of the rate the slot had: it is left out,
    /// so that a backoff is never sized from it.
    ///
    /// `previous` is the previous dispatch, if any, and the gap since it in
    /// nanoseconds (`OptNanos::nanos(now - previous)`, which the caller
    /// has without a difference of `Instant`s).
    pub(crate) fn on_dispatch(&mut self, now: Instant, previous: Option<(Instant, u64)>) {
        let forced = self
            .paused_until()
            .is_some_and(|until| previous.is_some_and(|(p, _)| p < until) && until <= now);
        if let Some((_, gap)) = previous.filter(|_| !forced) {
            // In nanoseconds, `(7 i + gap) / 8` is what the same on
            // `Duration`s gives (a second is a multiple of 8 ns), without
            // its normalizations; the sum in `u128` cannot overflow, and
            // the mean is never above the larger of the two.
            self.interval = OptNanos::from_nanos(match self.interval.get_nanos() {
                Some(i) => ((u128::from(i) * 7 + u128::from(gap)) / 8) as u64,
                None => gap,
            });
        }
        if let Some(j) = self.jitter.as_deref_mut() {
            let u = next_unit(&mut j.rng);
            j.factor = (1.0 + j.jitter * (2.0 * u - 1.0)).max(0.0);
        }
    }

    /// Called when a fleet granted a dispatch `gap` after the fleet's
    /// previous one of the slot (a gap a pause forced is not reported).
    pub(crate) fn on_fleet_dispatch(&mut self, gap: Duration) {
        let t = self.trouble();
        t.fleet_interval = Some(match t.fleet_interval {
            Some(i) => i.saturating_mul(7).saturating_add(gap) / 8,
            None => gap,
        });
    }

    /// Takes in how a request ended. `seq` is the request's dispatch number
    /// and `dispatched` the slot's count of dispatches so far. With `owned`
    /// (a policy that reacts to overload itself), overloads are counted but
    /// set no backoff, and the policy sees each of them.
    #[inline]
    pub(crate) fn on_outcome(
        &mut self,
        now: Instant,
        outcome: Outcome,
        seq: u64,
        dispatched: u64,
        policy: &Throttle,
        owned: bool,
    ) -> Reaction {
        if outcome != Outcome::Overload && self.trouble.is_none() {
            // The common case: nothing to react to, nothing to recover
            // from.
            return Reaction {
                outcome,
                changed: false,
            };
        }
        self.react(now, outcome, seq, dispatched, policy, owned)
    }

    /// [`on_outcome`](Self::on_outcome) past its common case.
    fn react(
        &mut self,
        now: Instant,
        outcome: Outcome,
        seq: u64,
        dispatched: u64,
        policy: &Throttle,
        owned: bool,
    ) -> Reaction {
        match outcome {
            Outcome::Overload => {
                let last = self.trouble.as_ref().and_then(|t| t.overload_seq);
                if last.is_some_and(|last| seq <= last) {
                    // In flight when we last reacted: the same event.
                    let outcome = if owned { outcome } else { Outcome::Ignore };
                    return Reaction {
                        outcome,
                        changed: false,
                    };
                }
                self.trouble().overloads += 1;
                if owned {
                    self.trouble().overload_seq = Some(dispatched);
                    return Reaction {
                        outcome,
                        changed: false,
                    };
                }
                let (delay, limit) = self.effective(policy, now);
                let fleet = self.trouble.as_ref().and_then(|t| t.fleet_interval);
                let base = delay.max(fleet.or(self.interval()).unwrap_or(Duration::ZERO));
                let t = self.trouble();
                t.overload_seq = Some(dispatched);
                t.overload_spacing = base;
                t.backoff_delay = base.saturating_mul(2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                t.cap = Some((limit / 2).max(1));
                t.cap_credit = 0;
                Reaction {
                    outcome,
                    changed: true,
                }
            }
            Outcome::Success => {
                let mut changed = false;
                let own = self.interval();
                let Some(t) = self.trouble.as_deref_mut() else {
                    return Reaction { outcome, changed };
                };
                let weight = weight(own, t.fleet_interval);
                if !t.backoff_delay.is_zero() {
                    for _ in 0..weight {
                        let fast = t.backoff_delay > crate::time::mul_f64(t.overload_spacing, 1.25);
                        t.backoff_delay -= t.backoff_delay / if fast { 16 } else { 256 };
                        if t.backoff_delay < BACKOFF_GONE {
                            t.backoff_delay = Duration::ZERO;
                            break;
                        }
                    }
                    changed = true;
                }
                if let Some(cap) = t.cap {
                    t.cap_credit += weight as usize;
                    if t.cap_credit >= cap {
                        t.cap_credit = 0;
                        changed = true;
                        t.cap = if cap.saturating_add(1) >= policy.concurrency() {
                            None
                        } else {
                            Some(cap.saturating_add(1))
                        };
                    }
                }
                Reaction { outcome, changed }
            }
            Outcome::Ignore => Reaction {
                outcome,
                changed: false,
            },
        }
    }

    /// A `Retry-After` wait: no dispatch before `now + wait`.
    pub(crate) fn retry_after(&mut self, now: Instant, wait: Duration) -> bool {
        if wait.is_zero() {
            return false;
        }
        let until = crate::time::after(now, wait);
        if self.paused_until().is_some_and(|p| p >= until) {
            return false;
        }
        self.trouble().paused_until = Some(until);
        true
    }

    /// The pacing asked by the rate-limit fields of a response.
    pub(crate) fn rate_limit(&mut self, now: Instant, limit: RateLimit) -> bool {
        match limit {
            RateLimit::Exhausted { reset } => self.retry_after(now, reset),
            RateLimit::Pace { spacing, valid_for } => {
                let t = self.trouble();
                t.rate_spacing = spacing;
                // A window too long for the clock holds for as long as it can.
                t.rate_until = Some(crate::time::after(now, valid_for));
                true
            }
        }
    }

    /// The current backoff delay and cap.
    #[cfg(test)]
    pub(crate) fn backoff(&self) -> (Duration, Option<usize>) {
        self.trouble
            .as_ref()
            .map_or((Duration::ZERO, None), |t| (t.backoff_delay, t.cap))
    }
}

/// How many of the fleet's dispatches one of this worker's stands for,
/// from the two spacings (1 without a fleet).
fn weight(own: Option<Duration>, fleet: Option<Duration>) -> u32 {
    match (own, fleet) {
        (Some(own), Some(fleet)) if !fleet.is_zero() => (own.as_secs_f64() / fleet.as_secs_f64())
            .round()
            .clamp(1.0, 64.0) as u32,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dispatch at `now`, after one at `previous`: the gap as the gate
    /// computes it on the table's clock, here from the two instants.
    fn dispatch(s: &mut Signals, now: Instant, previous: Option<Instant>) {
        s.on_dispatch(
            now,
            previous.map(|p| (p, OptNanos::nanos(now.saturating_duration_since(p)))),
        );
    }

    const MS: Duration = Duration::from_millis(1);

    fn policy(delay_ms: u64, limit: usize) -> Throttle {
        Throttle::new(delay_ms as f64 / 1000.0, limit)
    }

    #[test]
    fn an_overload_halves_the_limit_and_doubles_the_spacing_once() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        let p = policy(100, 8);
        // Dispatches 100 ms apart.
        dispatch(&mut s, t0, None);
        dispatch(&mut s, t0 + 100 * MS, Some(t0));
        let r = s.on_outcome(t0 + 150 * MS, Outcome::Overload, 2, 10, &p, false);
        assert_eq!(
            r,
            Reaction {
                outcome: Outcome::Overload,
                changed: true
            }
        );
        assert_eq!(s.effective(&p, t0), (200 * MS, 4));
        // Requests 3..=10 were in flight: their overloads are the same event.
        for seq in 3..=10 {
            let r = s.on_outcome(t0 + 160 * MS, Outcome::Overload, seq, 10, &p, false);
            assert_eq!(r.outcome, Outcome::Ignore);
        }
        assert_eq!(s.effective(&p, t0), (200 * MS, 4));
        assert_eq!(s.overloads(), 1);
        // A later request's overload is a new event.
        s.on_outcome(t0 + 500 * MS, Outcome::Overload, 11, 12, &p, false);
        assert_eq!(s.effective(&p, t0), (400 * MS, 2));
    }

    #[test]
    fn successes_decay_the_backoff_and_lift_the_cap() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        let p = policy(0, 4);
        s.on_outcome(t0, Outcome::Overload, 1, 1, &p, false);
        assert_eq!(s.effective(&p, t0), (MIN_BACKOFF, 2));
        // Two successes at cap 2 -> cap 3; three more -> cap 4 = the
        // policy's limit, so the cap goes.
        for _ in 0..2 {
            s.on_outcome(t0, Outcome::Success, 2, 2, &p, false);
        }
        assert_eq!(s.effective(&p, t0).1, 3);
        for _ in 0..3 {
            s.on_outcome(t0, Outcome::Success, 2, 2, &p, false);
        }
        assert_eq!(s.backoff().1, None);
        let mut n = 5;
        while !s.backoff().0.is_zero() {
            s.on_outcome(t0, Outcome::Success, 2, 2, &p, false);
            n += 1;
        }
        // No dispatch spacing was known: 50 ms decays by 1/16 a success
        // while above 1.25 × 0 ... that is, always fast, until below 0.1 ms.
        assert!((95..105).contains(&n), "{n}");
    }

    #[test]
    fn the_backoff_recovers_fast_to_80_percent_of_the_bad_rate_then_slowly() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        let p = policy(0, 4);
        // Dispatches every 100 ms, then an overload: backoff 200 ms.
        dispatch(&mut s, t0, None);
        dispatch(&mut s, t0 + 100 * MS, Some(t0));
        s.on_outcome(t0, Outcome::Overload, 2, 2, &p, false);
        assert_eq!(s.backoff().0, 200 * MS);
        let mut n = 0;
        while s.backoff().0 > 125 * MS {
            s.on_outcome(t0, Outcome::Success, 3, 3, &p, false);
            n += 1;
        }
        // 200 → 125 ms at 1/16 a success: 8 successes.
        assert_eq!(n, 8);
        let at = s.backoff().0;
        s.on_outcome(t0, Outcome::Success, 3, 3, &p, false);
        assert_eq!(s.backoff().0, at - at / 256);
    }

    #[test]
    fn an_owned_overload_is_counted_and_passed_on_without_a_backoff() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        let p = policy(0, 8);
        dispatch(&mut s, t0, None);
        dispatch(&mut s, t0 + 100 * MS, Some(t0));
        let r = s.on_outcome(t0 + 150 * MS, Outcome::Overload, 2, 10, &p, true);
        assert_eq!(
            r,
            Reaction {
                outcome: Outcome::Overload,
                changed: false
            }
        );
        // Requests in flight then: still the same event, but the policy sees
        // each overload as it came.
        let r = s.on_outcome(t0 + 160 * MS, Outcome::Overload, 5, 10, &p, true);
        assert_eq!(r.outcome, Outcome::Overload);
        assert_eq!(s.overloads(), 1);
        assert_eq!(s.backoff(), (Duration::ZERO, None));
        assert_eq!(s.effective(&p, t0 + 200 * MS), (Duration::ZERO, 8));
    }

    #[test]
    fn in_a_fleet_the_backoff_is_sized_and_recovers_at_the_fleets_pace() {
        let t0 = Instant::now();
        let p = policy(0, 4);
        // One worker of four: its own dispatches 200 ms apart, the fleet's
        // 50 ms apart.
        let mut s = Signals::new(0.0, 0);
        dispatch(&mut s, t0, None);
        dispatch(&mut s, t0 + 200 * MS, Some(t0));
        s.on_fleet_dispatch(50 * MS);
        s.on_outcome(t0, Outcome::Overload, 2, 2, &p, false);
        // Twice the fleet's spacing, not twice this worker's (400 ms).
        assert_eq!(s.backoff(), (100 * MS, Some(2)));
        // One process dispatching every 50 ms.
        let mut alone = Signals::new(0.0, 0);
        dispatch(&mut alone, t0, None);
        dispatch(&mut alone, t0 + 50 * MS, Some(t0));
        alone.on_outcome(t0, Outcome::Overload, 2, 2, &p, false);
        assert_eq!(alone.backoff(), s.backoff());
        // One success of this worker stands for four of the fleet's.
        for _ in 0..3 {
            s.on_outcome(t0, Outcome::Success, 3, 3, &p, false);
            for _ in 0..4 {
                alone.on_outcome(t0, Outcome::Success, 3, 3, &p, false);
            }
            assert_eq!(s.backoff().0, alone.backoff().0);
        }
        assert!(s.backoff().0 < 100 * MS * 3 / 4, "{:?}", s.backoff());
    }

    #[test]
    fn the_spacing_in_nanoseconds_is_the_mean_on_durations() {
        // The smoothing as it was written on `Duration`s: the reference.
        let mut rng = 9;
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        let (mut at, mut reference): (Instant, Option<Duration>) = (t0, None);
        dispatch(&mut s, at, None);
        for _ in 0..5_000 {
            let scale = [1e-9, 1e-6, 1e-3, 1.0, 3600.0][(next_unit(&mut rng) * 5.0) as usize];
            let gap = Duration::from_secs_f64(scale * 1000.0 * next_unit(&mut rng));
            dispatch(&mut s, at + gap, Some(at));
            at += gap;
            reference = Some(match reference {
                Some(i) => i.saturating_mul(7).saturating_add(gap) / 8,
                None => gap,
            });
            assert_eq!(s.interval(), reference);
        }
    }

    #[test]
    fn a_gap_a_pause_forced_is_not_the_slots_spacing() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        dispatch(&mut s, t0, None);
        dispatch(&mut s, t0 + 10 * MS, Some(t0));
        assert_eq!(s.interval(), Some(10 * MS));
        // A pause from 20 ms to 1 s: the next dispatch, at 1 s, is 990 ms
        // after the one before, which says nothing of the slot's rate.
        assert!(s.retry_after(t0 + 20 * MS, Duration::from_millis(980)));
        dispatch(&mut s, t0 + 1000 * MS, Some(t0 + 10 * MS));
        assert_eq!(s.interval(), Some(10 * MS));
        // The next gap counts again.
        dispatch(&mut s, t0 + 1018 * MS, Some(t0 + 1000 * MS));
        assert_eq!(s.interval(), Some(11 * MS));
    }

    #[test]
    fn retry_after_pauses_and_only_extends() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        assert!(s.retry_after(t0, Duration::from_secs(5)));
        assert!(!s.retry_after(t0, Duration::from_secs(2)));
        assert!(!s.retry_after(t0, Duration::ZERO));
        assert_eq!(s.paused_until(), Some(t0 + Duration::from_secs(5)));
        assert!(s.retry_after(t0 + Duration::from_secs(1), Duration::from_secs(5)));
        assert_eq!(s.paused_until(), Some(t0 + Duration::from_secs(6)));
    }

    #[test]
    fn rate_limit_pacing_expires() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.0, 0);
        let p = policy(10, 4);
        s.rate_limit(
            t0,
            RateLimit::Pace {
                spacing: 500 * MS,
                valid_for: Duration::from_secs(2),
            },
        );
        assert_eq!(s.effective(&p, t0 + Duration::from_secs(1)).0, 500 * MS);
        assert_eq!(s.effective(&p, t0 + Duration::from_secs(2)).0, 10 * MS);
    }

    #[test]
    fn floor_and_jitter() {
        let t0 = Instant::now();
        let mut s = Signals::new(0.5, 42);
        s.set_floor(Duration::from_secs(1));
        let p = policy(10, 4);
        assert_eq!(s.effective(&p, t0).0, Duration::from_secs(1));
        let mut factors = Vec::new();
        for _ in 0..1000 {
            dispatch(&mut s, t0, None);
            factors.push(s.gap(Duration::from_secs(1)).as_secs_f64());
        }
        assert!(factors.iter().all(|f| (0.5..=1.5).contains(f)));
        let mean = factors.iter().sum::<f64>() / 1000.0;
        assert!((mean - 1.0).abs() < 0.05, "{mean}");
        // Seeded: the same seed draws the same factors.
        let mut again = Signals::new(0.5, 42);
        dispatch(&mut again, t0, None);
        assert_eq!(again.gap(Duration::from_secs(1)).as_secs_f64(), factors[0]);
    }
}
