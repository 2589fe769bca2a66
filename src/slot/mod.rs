//! The slot: one host's state, and the rooms around it.
//!
//! Every slot keeps, under one mutex: its policy and the policy's last
//! answer, the layer's signals (overload backoff, `Retry-After` pause,
//! rate-limit pacing, delay floor, jitter), how many requests are in flight,
//! when the last one was dispatched, and the FIFO queue of waiting
//! requests. All reads and writes of that state happen under the slot's
//! lock, in short critical sections that never wait, never call into the
//! inner service and never wake a task (wakers are taken out and woken
//! after the lock is released), so the state cannot race and no lock is
//! held across an `.await`.
//!
//! A panic while the lock is held (say, in a user-supplied policy) does not
//! poison the slot: the lock is taken back as it was left.
//!
//! The table of slots is in `table`, what a slot shows of itself in
//! `snapshot`, and the gate, where requests wait for their slot, in `gate`.

use std::collections::BTreeMap;
use std::task::Waker;
use std::time::Duration;

use http::StatusCode;
use parking_lot::{Mutex, MutexGuard};
use tokio::time::Instant;

use crate::fleet::Remote;
use crate::key::SlotKey;
use crate::policy::{Held, Outcome, Policy, Sample, Throttle};
use crate::signals::{Ended, Signals};
use crate::time::OptNanos;

pub(crate) mod gate;
mod learned;
mod snapshot;
mod table;

pub use learned::Learned;
pub(crate) use learned::Warm;
pub use snapshot::SlotSnapshot;
pub(crate) use table::SlotTable;

/// One slot: a key and its state.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) key: SlotKey,
    state: Mutex<SlotState>,
}

/// The mutable part of a slot; only touched under [`Slot::lock`].
#[derive(Debug)]
pub(crate) struct SlotState {
    policy: Held,
    /// The policy's last answer.
    pub(crate) throttle: Throttle,
    /// What the layer adds on top of the policy.
    pub(crate) signals: Signals,
    /// Requests dispatched and not yet ended (32 bits: beside the small
    /// fields below it takes no word of its own; four billion requests in
    /// flight on one slot would take terabytes of futures first).
    pub(crate) in_flight: u32,
    /// The answers whose places no dispatch has taken again yet, up to
    /// 255 (see [`Throttle::paced`](crate::policy::Throttle::paced)): each
    /// dispatch takes one, and a request may take such a place without the
    /// policy's pacing. (One byte, beside the other small fields; beyond
    /// 255 answers in a row without a dispatch, the next requests are
    /// paced.)
    pub(crate) clocked: u8,
    pub(crate) last_dispatch: Option<Instant>,
    /// `last_dispatch` as the time since the table's origin, in
    /// nanoseconds (see [`SlotTable::since_origin`]); 0 before the first: the gap
    /// between two dispatches is the difference of two integers, where a
    /// difference of two `Instant`s takes about 50 instructions.
    pub(crate) last_dispatch_at: u64,
    /// When a request last joined, left or finished here.
    pub(crate) last_used: Instant,
    /// Waiting requests by ticket; the first entry is the head of the queue.
    pub(crate) waiters: Waiters,
    /// The latest response's latency (one word: see [`OptNanos`]).
    last_latency: OptNanos,
    /// The smoothed latency, in seconds, NaN before there is one (see
    /// [`latency`](Self::latency); no flag of its own, so that the small
    /// fields beside it still share one word).
    srtt: f64,
    last_status: Option<StatusCode>,
    pub(crate) dispatched: u64,
    responses: u64,
    /// Removed from the table: a request holding the slot from before (see
    /// [`Recent`](crate::shared::Recent)) must not join it.
    pub(crate) evicted: bool,
}

/// The queue of waiting requests, by ticket: a map that is only there
/// while someone waits, so that an idle slot carries a null pointer instead
/// of an empty map (and no node left from its last queue).
/// (The box is the point: one pointer inline, where a map is three words.)
#[allow(clippy::box_collection)]
#[derive(Debug, Default)]
pub(crate) struct Waiters(Option<Box<BTreeMap<u64, Option<Waker>>>>);

impl Waiters {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|map| map.is_empty())
    }

    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |map| map.len())
    }

    /// Joins the back of the queue; the ticket: one after the last in the
    /// queue, or 0 in an empty one. A ticket may so be given again, but
    /// only once the request that held it left the queue (admitted or
    /// dropped), which gives its ticket up.
    pub(crate) fn push(&mut self) -> u64 {
        let map = self.0.get_or_insert_with(Box::default);
        let ticket = map.last_key_value().map_or(0, |(last, _)| last + 1);
        map.insert(ticket, None);
        ticket
    }

    /// Removes a waiter, and the map with the last one.
    pub(crate) fn remove(&mut self, ticket: &u64) -> Option<Option<Waker>> {
        let map = self.0.as_mut()?;
        let removed = map.remove(ticket);
        if map.is_empty() {
            self.0 = None;
        }
        removed
    }

    pub(crate) fn get_mut(&mut self, ticket: &u64) -> Option<&mut Option<Waker>> {
        self.0.as_mut()?.get_mut(ticket)
    }

    /// The tickets, in queue order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &u64> {
        self.0.iter().flat_map(|map| map.keys())
    }

    /// The wakers, in queue order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Option<Waker>> {
        self.0.iter_mut().flat_map(|map| map.values_mut())
    }
}

/// What a response did to its slot, for logging.
#[derive(Debug)]
pub(crate) struct Adjustment {
    pub(crate) delay: Duration,
    pub(crate) limit: usize,
    pub(crate) outcome: Outcome,
    pub(crate) changed: bool,
    /// The sample the policy took, if it took one (a fleet shares it).
    pub(crate) sample: Option<Sample>,
}

impl Slot {
    pub(crate) fn new(key: SlotKey, policy: Box<dyn Policy>, signals: Signals) -> Self {
        let throttle = policy.throttle();
        Slot {
            key,
            state: Mutex::new(SlotState {
                throttle,
                signals,
                policy: Held::new(policy),
                in_flight: 0,
                clocked: 0,
                last_dispatch: None,
                last_dispatch_at: 0,
                last_used: Instant::now(),
                waiters: Waiters::default(),
                last_latency: OptNanos::NONE,
                srtt: f64::NAN,
                last_status: None,
                dispatched: 0,
                responses: 0,
                evicted: false,
            }),
        }
    }

    /// Locks the slot's state. (`parking_lot`'s lock is not poisoned by a
    /// panic while it is held: the state is taken as it was left, as the
    /// standard lock's poisoned state was.)
    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock()
    }

    /// Takes in how a request ended: the layer's signals first, then the
    /// policy, and applies the result.
    #[inline]
    pub(crate) fn on_end(&self, now: Instant, ended: Ended) -> Adjustment {
        // In seconds once, for the smoothed latency and the sample (a
        // `Duration`'s conversion to `f64` takes a dozen instructions).
        let latest = ended.latency.as_secs_f64();
        let (adjustment, wake) = {
            let mut state = self.lock();
            let state = &mut *state;
            if ended.status.is_some() {
                state.responses += 1;
                state.last_latency = OptNanos::some(ended.latency);
                state.last_status = ended.status;
                if ended.adjust {
                    let srtt = state
                        .latency()
                        .map_or(latest, |srtt| srtt + (latest - srtt) / 8.0);
                    state.set_latency(Some(srtt));
                }
            }
            // A quiet slot (the server never said anything, no floor) and a
            // quiet answer (no hints) leave the signals as they are unless
            // `on_outcome` makes them speak: then what the gate allows is a
            // function of the policy's answer alone, and the comparison
            // below needs nothing computed before.
            let quiet = state.signals.is_quiet() && ended.hints.is_empty();
            let throttle_before = state.throttle;
            let before = (!quiet).then(|| {
                (
                    state.signals.effective(&state.throttle, now),
                    state.signals.paused_until(),
                )
            });
            let owned = state.policy.owns_overload();
            let reaction = if ended.adjust {
                state.signals.on_outcome(
                    now,
                    ended.outcome,
                    ended.seq,
                    state.dispatched,
                    &state.throttle,
                    owned,
                )
            } else {
                crate::signals::Reaction {
                    outcome: Outcome::Ignore,
                    changed: false,
                }
            };
            if let Some(wait) = ended.hints.retry_after {
                state.signals.retry_after(now, wait);
            }
            if let Some(limit) = ended.hints.rate_limit {
                state.signals.rate_limit(now, limit);
            }
            // No pause: 0 seconds, as `Duration::ZERO` converts to,
            // without the conversion.
            let pause = ended.hints.pause().map_or(0.0, |pause| pause.as_secs_f64());
            let sample = match ended.status {
                // As `Sample::new(ended.latency, status)`.
                Some(status) => Sample::from_secs_f64(latest, status),
                None => Sample::error(latest, ended.outcome),
            }
            .with_outcome(reaction.outcome)
            .with_in_flight(ended.fleet_in_flight.unwrap_or(state.in_flight as usize))
            .with_at(ended.at)
            .with_order(ended.seq, state.dispatched)
            .with_pause(pause);
            if ended.adjust {
                state.throttle = state.policy.on_sample(&sample);
            }
            let sample = ended.adjust.then_some(sample);
            let (delay, limit) = state.signals.effective(&state.throttle, now);
            let after = ((delay, limit), state.signals.paused_until());
            let changed = match before {
                Some(before) => before != after,
                // Still quiet, and the same answer: it allows the same.
                None if state.signals.is_quiet() && state.throttle == throttle_before => false,
                // Before, the quiet signals allowed what the policy's
                // answer alone did, and no pause.
                None => (Signals::policy_alone(&throttle_before), None) != after,
            };
            if ended.release {
                // As `release` does, after the policy saw the count with
                // this request in it.
                state.give_back(now);
            }
            // A new delay, limit or pause, or a place given back, may let
            // the head of the queue go sooner, or later: let it look again.
            let wake = if changed || ended.release {
                state.take_head_waker()
            } else {
                None
            };
            let adjustment = Adjustment {
                delay,
                limit,
                outcome: reaction.outcome,
                changed,
                sample,
            };
            (adjustment, wake)
        };
        if let Some(waker) = wake {
            waker.wake();
        }
        adjustment
    }

    /// Takes in the samples the fleet's other workers took of this slot
    /// (see [`Remote`]), as if they were its own: the policy learns from
    /// the whole fleet's answers. `at` is the slot's clock now; each sample
    /// is stamped its age before it. The layer's own signals (backoff,
    /// pauses) do not see them: the worker that got the answer reacted,
    /// and shares its reaction through the fleet.
    pub(crate) fn learn_remote(&self, remote: &[Remote], now: Instant, at: f64) {
        if remote.is_empty() {
            return;
        }
        let wake = {
            let mut state = self.lock();
            let state = &mut *state;
            let before = state.signals.effective(&state.throttle, now);
            let policy = &mut state.policy;
            let last = remote.iter().fold(None, |_, r| {
                let sample = r.sample.with_at((at - r.age.as_secs_f64()).max(0.0));
                Some(policy.on_sample(&sample))
            });
            if let Some(throttle) = last {
                state.throttle = throttle;
            }
            if state.signals.effective(&state.throttle, now) != before {
                state.take_head_waker()
            } else {
                None
            }
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }

    /// The delay and limit in force at `now`.
    pub(crate) fn effective(&self, now: Instant) -> (Duration, usize) {
        let state = self.lock();
        state.signals.effective(&state.throttle, now)
    }

    /// Changes the slot's state with `change`, then wakes the head of the
    /// queue (after the lock is released) so that the change binds the next
    /// dispatch.
    fn change(&self, change: impl FnOnce(&mut SlotState)) {
        let wake = {
            let mut state = self.lock();
            change(&mut state);
            state.take_head_waker()
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }

    /// Replaces the slot's policy; its answer binds the next dispatch.
    pub(crate) fn set_policy(&self, policy: Box<dyn Policy>) {
        self.change(|state| {
            state.throttle = policy.throttle();
            state.policy = Held::new(policy);
        });
    }

    /// Sets or lifts the slot's delay floor.
    pub(crate) fn set_floor(&self, floor: Duration) {
        self.change(|state| state.signals.set_floor(floor));
    }

    /// Since when the slot is evictable (see [`SlotTable`]), if it is.
    pub(crate) fn idle_since(&self, now: Instant) -> Option<Instant> {
        self.lock().idle_since(now)
    }

    /// Marks the slot evicted, if it is evictable and `old_enough` says so
    /// of the instant since which it is idle; whether it did. Called by the
    /// table just before it removes the slot, under the shard's write lock.
    pub(crate) fn evict_if(&self, now: Instant, old_enough: impl FnOnce(Instant) -> bool) -> bool {
        let mut state = self.lock();
        match state.idle_since(now) {
            Some(since) if old_enough(since) => {
                state.evicted = true;
                true
            }
            _ => false,
        }
    }

    /// Gives back one in-flight place.
    pub(crate) fn release(&self) {
        let wake = {
            let mut state = self.lock();
            state.give_back(Instant::now());
            state.take_head_waker()
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }
}

impl SlotState {
    /// A request gave its place back at `now`: one fewer in flight, and one
    /// more place a paced request may take at once (see `clocked`), unless
    /// a pause the server asked for holds the slot: that clears the count,
    /// so that the requests after the pause are paced from the first
    /// instead of going in a burst on the answers that ended during it.
    fn give_back(&mut self, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.signals.paused_until().is_some_and(|until| until > now) {
            self.clocked = 0;
        } else {
            self.clocked = self.clocked.saturating_add(1);
        }
        self.last_used = now;
    }

    /// The smoothed latency, in seconds, once there is one.
    pub(crate) fn latency(&self) -> Option<f64> {
        (!self.srtt.is_nan()).then_some(self.srtt)
    }

    /// Sets (or forgets) the smoothed latency (a NaN is none).
    pub(crate) fn set_latency(&mut self, latency: Option<f64>) {
        self.srtt = latency.unwrap_or(f64::NAN);
    }

    /// Since when the slot is evictable (see [`SlotTable`]), if it is.
    fn idle_since(&self, now: Instant) -> Option<Instant> {
        let state = self;
        let busy = state.in_flight > 0 || !state.waiters.is_empty();
        let paused = state.signals.paused_until().is_some_and(|p| p > now);
        let (delay, _) = state.signals.effective(&state.throttle, now);
        let spacing = state
            .last_dispatch
            .is_some_and(|last| last.checked_add(delay).is_none_or(|next| next > now));
        (!busy && !paused && !spacing).then_some(state.last_used)
    }

    /// `now`, read before the lock was taken, or the slot's last dispatch
    /// if another thread dispatched at a later instant in between: the
    /// slot's time never runs backwards, so a zero delay never makes a
    /// request wait for an instant that has already passed. With it, the
    /// same instant as the time since the table's origin: `since` (`now`
    /// since `origin`), or the last dispatch since `origin` when that is
    /// the later.
    pub(crate) fn dispatch_instant(
        &self,
        now: Instant,
        since: Duration,
        origin: Instant,
    ) -> (Instant, Duration) {
        match self.last_dispatch {
            Some(last) if last > now => (last, last.saturating_duration_since(origin)),
            _ => (now, since),
        }
    }

    /// Takes the waker of the request at the head of the queue, if any.
    #[inline]
    pub(crate) fn take_head_waker(&mut self) -> Option<Waker> {
        self.waiters.values_mut().next().and_then(Option::take)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex as StdMutex};
    use std::time::Duration;

    use http::StatusCode;
    use tokio::time::Instant;

    use super::{Slot, Waiters};
    use crate::policy::{Outcome, Policy, Sample, Throttle};
    use crate::signals::{Ended, Hints, Signals};
    use crate::SlotKey;

    /// Answers from a script, one a sample.
    #[derive(Debug)]
    struct Script(Arc<StdMutex<Vec<Throttle>>>, Throttle);

    impl Policy for Script {
        fn throttle(&self) -> Throttle {
            self.1
        }
        fn on_sample(&mut self, _: &Sample) -> Throttle {
            if let Some(next) = self.0.lock().unwrap().pop() {
                self.1 = next;
            }
            self.1
        }
    }

    /// Whether a response changed what the gate allows is what `effective`
    /// and the pause give before and after it, whichever way `on_end` takes
    /// (a quiet slot's shorter one included).
    #[tokio::test(start_paused = true)]
    async fn a_response_changed_the_slot_when_what_it_allows_changed() {
        let throttles = [
            (0.0, 8),
            (0.0, 8),
            (0.0, 0),
            (0.0, 1),
            (-0.0, 1),
            (1e-10, 1),
            (0.1, 1),
            (0.1, 1),
            (0.1, usize::MAX),
            (f64::NAN, usize::MAX),
            (0.0, usize::MAX),
            (0.0, 4),
        ];
        let ends: [(Option<StatusCode>, Outcome, bool); 6] = [
            (Some(StatusCode::OK), Outcome::Success, false),
            (Some(StatusCode::OK), Outcome::Success, true),
            (None, Outcome::Ignore, false),
            (
                Some(StatusCode::SERVICE_UNAVAILABLE),
                Outcome::Overload,
                false,
            ),
            (Some(StatusCode::TOO_MANY_REQUESTS), Outcome::Overload, true),
            (Some(StatusCode::OK), Outcome::Success, false),
        ];
        // Quiet slots first (no overload, no hint: the slot stays quiet),
        // then loud ones.
        let quiet = [
            (Some(StatusCode::OK), Outcome::Success, false),
            (None, Outcome::Ignore, false),
        ];
        let mut changes = 0;
        for (first, ends) in (0..throttles.len())
            .map(|first| (first, &quiet[..]))
            .chain((0..ends.len()).map(|first| (first, &ends[..])))
        {
            let script = Arc::new(StdMutex::new(
                throttles
                    .iter()
                    .cycle()
                    .skip(first)
                    .take(2 * throttles.len())
                    .map(|&(d, c)| Throttle::new(d, c))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>(),
            ));
            let slot = Slot::new(
                SlotKey::new("a.example"),
                Box::new(Script(Arc::clone(&script), Throttle::new(0.0, 8))),
                Signals::new(0.0, 3),
            );
            let start = Instant::now();
            for step in 0..2 * throttles.len() {
                let (status, outcome, retry) = ends[(first + step) % ends.len()];
                let now = start + Duration::from_millis(10 * step as u64);
                let before = {
                    let state = slot.lock();
                    (
                        state.signals.effective(&state.throttle, now),
                        state.signals.paused_until(),
                    )
                };
                slot.lock().dispatched += 1;
                let adjustment = slot.on_end(
                    now,
                    Ended {
                        at: 0.01 * step as f64,
                        latency: Duration::from_millis(5),
                        status,
                        outcome,
                        seq: step as u64 + 1,
                        hints: Hints {
                            retry_after: retry.then_some(Duration::from_millis(15)),
                            rate_limit: None,
                        },
                        adjust: step % 5 != 4,
                        fleet_in_flight: None,
                        release: false,
                    },
                );
                let after = {
                    let state = slot.lock();
                    (
                        state.signals.effective(&state.throttle, now),
                        state.signals.paused_until(),
                    )
                };
                assert_eq!(
                    adjustment.changed,
                    before != after,
                    "step {step} from {first}"
                );
                assert_eq!((adjustment.delay, adjustment.limit), after.0);
                changes += usize::from(adjustment.changed);
            }
        }
        // Both answers came, on quiet slots and loud ones.
        assert!(changes > 10, "{changes}");
    }

    /// A policy that panics on its first sample.
    #[derive(Debug)]
    struct PanicsOnce(bool);

    impl Policy for PanicsOnce {
        fn throttle(&self) -> Throttle {
            Throttle::new(0.0, 4)
        }
        fn on_sample(&mut self, _: &Sample) -> Throttle {
            if !std::mem::replace(&mut self.0, true) {
                panic!("a policy's bug");
            }
            Throttle::new(0.0, 3)
        }
    }

    /// A panic while the slot's lock is held (in the policy) leaves the
    /// slot usable: the lock is taken again, with the state as it was
    /// left, and the next answer is taken in (see the module's docs).
    #[tokio::test(start_paused = true)]
    async fn a_policy_that_panicked_under_the_lock_leaves_the_slot_usable() {
        let slot = Slot::new(
            SlotKey::new("a.example"),
            Box::new(PanicsOnce(false)),
            Signals::new(0.0, 3),
        );
        let end = |seq: u64| Ended {
            at: 0.01 * seq as f64,
            latency: Duration::from_millis(5),
            status: Some(StatusCode::OK),
            outcome: Outcome::Success,
            seq,
            hints: Hints::default(),
            adjust: true,
            fleet_in_flight: None,
            release: false,
        };
        slot.lock().dispatched = 2;
        let now = Instant::now();
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| slot.on_end(now, end(1))));
        assert!(panicked.is_err());
        // Counted before the policy ran, and nothing after it.
        assert_eq!(slot.lock().responses, 1);
        assert_eq!(slot.lock().throttle.concurrency(), 4);
        let adjustment = slot.on_end(now, end(2));
        assert_eq!(adjustment.limit, 3);
        assert_eq!(slot.lock().responses, 2);
    }

    #[test]
    fn the_queue_holds_no_map_once_empty() {
        let mut waiters = Waiters::default();
        assert!(waiters.is_empty());
        assert_eq!(waiters.push(), 0);
        assert_eq!(waiters.push(), 1);
        assert_eq!(waiters.push(), 2);
        assert_eq!(waiters.len(), 3);
        assert_eq!(waiters.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
        assert!(waiters.get_mut(&2).is_some());
        // A ticket left from the middle is never given again while the
        // queue lasts: new ones go after the last.
        assert!(matches!(waiters.remove(&1), Some(None)));
        assert!(waiters.remove(&1).is_none());
        assert_eq!(waiters.push(), 3);
        assert_eq!(waiters.keys().copied().collect::<Vec<_>>(), [0, 2, 3]);
        for ticket in [0, 2, 3] {
            assert!(!waiters.is_empty());
            assert!(matches!(waiters.remove(&ticket), Some(None)));
        }
        assert!(waiters.is_empty() && waiters.0.is_none());
        assert_eq!(waiters.keys().next(), None);
        assert!(waiters.values_mut().next().is_none());
        // Empty, it starts again from 0.
        assert_eq!(waiters.push(), 0);
    }
}
