//! The slot table and each slot's state.
//!
//! Every slot keeps, under one mutex: its policy and the policy's last
//! answer, the layer's signals (overload backoff, `Retry-After` pause,
//! rate-limit pacing, delay floor, jitter), how many requests are in flight,
//! when the last one was dispatched, and the FIFO queue of waiting
//! requests. All reads and
//! writes of that state happen under the slot's lock, in short critical
//! sections that never wait, never call into the inner service and never
//! wake a task (wakers are taken out and woken after the lock is released),
//! so the state cannot race and no lock is held across an `.await`.
//!
//! A panic while the lock is held (say, in a user-supplied policy) does not
//! poison the slot: the lock is taken back as it was left.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::task::Waker;
use std::time::Duration;

use dashmap::DashMap;
use http::StatusCode;
use tokio::time::Instant;

use crate::control::Overrides;
use crate::headers::RateLimit;
use crate::key::SlotKey;
use crate::policy::{MakePolicy, Outcome, Policy, Sample, Throttle};
use crate::signals::Signals;

/// What one slot looks like at one moment, from
/// [`AutoThrottleLayer::slots`](crate::AutoThrottleLayer::slots).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SlotSnapshot {
    /// The slot's key.
    pub key: SlotKey,
    /// The download delay in force (minimum start-to-start spacing): the
    /// policy's, raised by the floor, rate-limit pacing and overload
    /// backoff.
    pub delay: Duration,
    /// The concurrency limit in force: the policy's, lowered by the
    /// overload backoff.
    pub concurrency: usize,
    /// Requests dispatched whose response body has not ended yet.
    pub in_flight: usize,
    /// Requests waiting in the slot's queue.
    pub queued: usize,
    /// The latency of the last response.
    pub last_latency: Option<Duration>,
    /// The smoothed latency: an exponentially weighted mean of the
    /// responses' latencies, each new one weighing 1/8 (as TCP's SRTT).
    pub latency: Option<Duration>,
    /// The status of the last response.
    pub last_status: Option<StatusCode>,
    /// Requests dispatched so far.
    pub dispatched: u64,
    /// Responses received so far.
    pub responses: u64,
    /// No request of the slot is dispatched before this instant
    /// (`Retry-After`, an exhausted `RateLimit` quota).
    pub paused_until: Option<Instant>,
    /// The delay floor set with
    /// [`AutoThrottleLayer::set_delay_floor`](crate::AutoThrottleLayer::set_delay_floor).
    pub delay_floor: Duration,
    /// Overload events reacted to (repeats from requests already in flight
    /// not counted).
    pub overloads: u64,
}

/// All slots, by key; shared by a layer and every service made from it.
///
/// # Eviction
///
/// A slot is *evictable* when nothing holds it to its host: no request in
/// flight or queued, no delay floor set, its `Retry-After` pause over, and
/// its delay since the last dispatch run out (so a fresh slot for the same
/// host could not send anything too early). Evictable slots idle for
/// `idle_timeout` are dropped, and beyond `max_slots` the least recently
/// used evictable ones go first, down to nine tenths of the bound. This
/// runs when slots are created (after as many new slots as half the table,
/// or when the bound is passed), so it costs O(1) per new slot amortized.
///
/// A request joins its slot's queue while holding the table's shard lock,
/// and eviction removes a slot under the shard's write lock after checking
/// it under its own lock (always in that order: shard, then slot), so a
/// request can never join a slot that is being dropped.
#[derive(Debug)]
pub(crate) struct SlotTable {
    slots: DashMap<SlotKey, Arc<Slot>>,
    policy: Arc<dyn MakePolicy>,
    /// Per-slot settings: what makes the policy of the slots they cover.
    overrides: RwLock<Overrides>,
    jitter: f64,
    seed: u64,
    idle_timeout: Duration,
    max_slots: usize,
    created: AtomicUsize,
}

impl SlotTable {
    pub(crate) fn new(
        policy: Arc<dyn MakePolicy>,
        overrides: Overrides,
        jitter: f64,
        seed: u64,
        idle_timeout: Duration,
        max_slots: usize,
    ) -> Self {
        SlotTable {
            slots: DashMap::new(),
            policy,
            overrides: RwLock::new(overrides),
            jitter,
            seed,
            idle_timeout,
            max_slots: max_slots.max(1),
            created: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the slot for `key` (created with a fresh policy if it is
    /// new) while holding the table's lock on it, so that the slot cannot
    /// be evicted meanwhile.
    pub(crate) fn with_slot<R>(&self, key: SlotKey, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        if let Some(slot) = self.slots.get(key.as_str()) {
            return f(&slot);
        }
        self.with_new_slot(key, f)
    }

    /// [`with_slot`](Self::with_slot) for a key given as text: allocates
    /// a key only when the slot is new.
    pub(crate) fn with_slot_str<R>(&self, key: &str, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        if let Some(slot) = self.slots.get(key) {
            return f(&slot);
        }
        self.with_new_slot(SlotKey::new(key), f)
    }

    /// The way of [`with_slot`](Self::with_slot) once a plain lookup missed:
    /// creates the slot unless another request did meanwhile, and sweeps
    /// the table when due.
    fn with_new_slot<R>(&self, key: SlotKey, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        let (result, created) = match self.slots.entry(key) {
            dashmap::Entry::Occupied(slot) => (f(slot.get()), false),
            dashmap::Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                let policy = self.make_policy(&key);
                let signals =
                    Signals::new(self.jitter, self.seed ^ crate::policy::hash(key.as_str()));
                let slot = vacant.insert(Arc::new(Slot::new(key, policy, signals)));
                (f(&slot), true)
            }
        };
        if created {
            let created = self.created.fetch_add(1, Ordering::Relaxed) + 1;
            let len = self.slots.len();
            if len > self.max_slots || created >= (len / 2).max(64) {
                self.created.store(0, Ordering::Relaxed);
                self.evict(Instant::now());
            }
        }
        result
    }

    /// A fresh policy for the slot `key`: its settings', or the default.
    fn make_policy(&self, key: &SlotKey) -> Box<dyn Policy> {
        let overrides = self.overrides.read().unwrap_or_else(|p| p.into_inner());
        if !overrides.is_empty() {
            if let Some(policy) = overrides.policy_for(key.as_str()) {
                return policy.make_policy(key);
            }
        }
        self.policy.make_policy(key)
    }

    /// Sets (`Some`) or removes (`None`) the settings of `pattern`, and
    /// gives every existing slot it covers a fresh policy made by what now
    /// applies to it; whether anything was set or removed.
    pub(crate) fn set_settings(&self, pattern: &str, policy: Option<Arc<dyn MakePolicy>>) -> bool {
        {
            let mut overrides = self.overrides.write().unwrap_or_else(|p| p.into_inner());
            match policy {
                Some(policy) => overrides.set(pattern, policy),
                None => {
                    if !overrides.remove(pattern) {
                        return false;
                    }
                }
            }
        }
        let covered: Vec<Arc<Slot>> = self
            .slots
            .iter()
            .filter(|e| Overrides::covers(pattern, e.key().as_str()))
            .map(|e| Arc::clone(e.value()))
            .collect();
        for slot in covered {
            slot.set_policy(self.make_policy(&slot.key));
        }
        true
    }

    /// Drops the evictable slots idle for the idle timeout, then, beyond the
    /// bound, the least recently used evictable ones.
    fn evict(&self, now: Instant) {
        let timeout = self.idle_timeout;
        self.slots.retain(|_, slot| {
            !slot.evict_if(now, |since| now.saturating_duration_since(since) >= timeout)
        });
        if self.slots.len() <= self.max_slots {
            return;
        }
        let mut idle: Vec<(Instant, SlotKey)> = self
            .slots
            .iter()
            .filter_map(|e| {
                e.value()
                    .idle_since(now)
                    .map(|since| (since, e.key().clone()))
            })
            .collect();
        idle.sort();
        let target = self.max_slots - self.max_slots / 10;
        let mut excess = self.slots.len().saturating_sub(target);
        for (_, key) in idle {
            if excess == 0 {
                break;
            }
            if self
                .slots
                .remove_if(&key, |_, slot| slot.evict_if(now, |_| true))
                .is_some()
            {
                excess -= 1;
            }
        }
    }

    pub(crate) fn snapshot(&self, key: &str) -> Option<SlotSnapshot> {
        // Clone the Arc out first so no shard lock is held while locking the slot.
        let slot = self.slots.get(key).map(|s| Arc::clone(&s))?;
        Some(slot.snapshot())
    }

    pub(crate) fn snapshots(&self) -> Vec<SlotSnapshot> {
        let slots: Vec<Arc<Slot>> = self.slots.iter().map(|s| Arc::clone(&s)).collect();
        let mut out: Vec<SlotSnapshot> = slots.iter().map(|s| s.snapshot()).collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

/// One slot: a key and its state.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) key: SlotKey,
    state: Mutex<SlotState>,
}

/// The mutable part of a slot; only touched under [`Slot::lock`].
#[derive(Debug)]
pub(crate) struct SlotState {
    policy: Box<dyn Policy>,
    /// The policy's last answer.
    pub(crate) throttle: Throttle,
    /// What the layer adds on top of the policy.
    pub(crate) signals: Signals,
    pub(crate) in_flight: usize,
    pub(crate) last_dispatch: Option<Instant>,
    /// When a request last joined, left or finished here.
    pub(crate) last_used: Instant,
    /// Waiting requests by ticket; the first entry is the head of the queue.
    pub(crate) waiters: BTreeMap<u64, Option<Waker>>,
    pub(crate) next_ticket: u64,
    last_latency: Option<Duration>,
    /// The smoothed latency, in seconds.
    latency: Option<f64>,
    last_status: Option<StatusCode>,
    pub(crate) dispatched: u64,
    responses: u64,
    /// Removed from the table: a request holding the slot from before (see
    /// [`Recent`](crate::layer::Recent)) must not join it.
    pub(crate) evicted: bool,
}

/// What a response did to its slot, for logging.
#[derive(Debug)]
pub(crate) struct Adjustment {
    pub(crate) delay: Duration,
    pub(crate) limit: usize,
    pub(crate) outcome: Outcome,
    pub(crate) changed: bool,
}

/// The server's hints read from a response.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Hints {
    pub(crate) retry_after: Option<Duration>,
    pub(crate) rate_limit: Option<RateLimit>,
}

/// How a request ended, as reported to its slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    pub(crate) latency: Duration,
    pub(crate) status: Option<StatusCode>,
    pub(crate) outcome: Outcome,
    pub(crate) seq: u64,
    pub(crate) hints: Hints,
    /// Whether the request adjusts its slot (see [`DontAdjust`](crate::DontAdjust)).
    pub(crate) adjust: bool,
    /// Requests in flight fleet-wide when this one went, when a fleet shares
    /// the slot: what the policy is told instead of the local count.
    pub(crate) fleet_in_flight: Option<usize>,
}

impl Slot {
    fn new(key: SlotKey, policy: Box<dyn Policy>, signals: Signals) -> Self {
        let throttle = policy.throttle();
        Slot {
            key,
            state: Mutex::new(SlotState {
                throttle,
                signals,
                policy,
                in_flight: 0,
                last_dispatch: None,
                last_used: Instant::now(),
                waiters: BTreeMap::new(),
                next_ticket: 0,
                last_latency: None,
                latency: None,
                last_status: None,
                dispatched: 0,
                responses: 0,
                evicted: false,
            }),
        }
    }

    /// Locks the slot's state, recovering it if a panic poisoned the lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes in how a request ended: the layer's signals first, then the
    /// policy, and applies the result.
    pub(crate) fn on_end(&self, now: Instant, ended: Ended) -> Adjustment {
        let (adjustment, wake) = {
            let mut state = self.lock();
            let state = &mut *state;
            if ended.status.is_some() {
                state.responses += 1;
                state.last_latency = Some(ended.latency);
                state.last_status = ended.status;
                if ended.adjust {
                    let latest = ended.latency.as_secs_f64();
                    state.latency = Some(
                        state
                            .latency
                            .map_or(latest, |srtt| srtt + (latest - srtt) / 8.0),
                    );
                }
            }
            let before = (
                state.signals.effective(&state.throttle, now),
                state.signals.paused_until(),
            );
            let reaction = if ended.adjust {
                state.signals.on_outcome(
                    now,
                    ended.outcome,
                    ended.seq,
                    state.dispatched,
                    &state.throttle,
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
            let sample = match ended.status {
                Some(status) => Sample::new(ended.latency, status),
                None => Sample::error(ended.latency.as_secs_f64(), ended.outcome),
            }
            .with_outcome(reaction.outcome)
            .with_in_flight(ended.fleet_in_flight.unwrap_or(state.in_flight));
            if ended.adjust {
                state.throttle = state.policy.on_sample(&sample);
            }
            let (delay, limit) = state.signals.effective(&state.throttle, now);
            let changed = before != ((delay, limit), state.signals.paused_until());
            // A new delay, limit or pause may let the head of the queue go
            // sooner, or later: let it look again.
            let wake = if changed {
                state.take_head_waker()
            } else {
                None
            };
            let adjustment = Adjustment {
                delay,
                limit,
                outcome: reaction.outcome,
                changed,
            };
            (adjustment, wake)
        };
        if let Some(waker) = wake {
            waker.wake();
        }
        adjustment
    }

    /// The delay and limit in force at `now`.
    pub(crate) fn effective(&self, now: Instant) -> (Duration, usize) {
        let state = self.lock();
        state.signals.effective(&state.throttle, now)
    }

    /// Replaces the slot's policy; its answer binds the next dispatch.
    pub(crate) fn set_policy(&self, policy: Box<dyn Policy>) {
        let wake = {
            let mut state = self.lock();
            state.throttle = policy.throttle();
            state.policy = policy;
            state.take_head_waker()
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }

    /// Sets or lifts the slot's delay floor.
    pub(crate) fn set_floor(&self, floor: Duration) {
        let wake = {
            let mut state = self.lock();
            state.signals.floor = floor;
            state.take_head_waker()
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }

    /// Since when the slot is evictable (see [`SlotTable`]), if it is.
    fn idle_since(&self, now: Instant) -> Option<Instant> {
        self.lock().idle_since(now)
    }

    /// Marks the slot evicted, if it is evictable and `old_enough` says so
    /// of the instant since which it is idle; whether it did. Called by the
    /// table just before it removes the slot, under the shard's write lock.
    fn evict_if(&self, now: Instant, old_enough: impl FnOnce(Instant) -> bool) -> bool {
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
            state.in_flight = state.in_flight.saturating_sub(1);
            state.last_used = Instant::now();
            state.take_head_waker()
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }

    fn snapshot(&self) -> SlotSnapshot {
        let state = self.lock();
        let now = Instant::now();
        let (delay, concurrency) = state.signals.effective(&state.throttle, now);
        SlotSnapshot {
            key: self.key.clone(),
            delay,
            concurrency,
            in_flight: state.in_flight,
            queued: state.waiters.len(),
            last_latency: state.last_latency,
            latency: state.latency.map(crate::policy::secs_to_duration),
            last_status: state.last_status,
            dispatched: state.dispatched,
            responses: state.responses,
            paused_until: state.signals.paused_until().filter(|p| *p > now),
            delay_floor: state.signals.floor,
            overloads: state.signals.overloads,
        }
    }
}
impl SlotState {
    /// Since when the slot is evictable (see [`SlotTable`]), if it is.
    fn idle_since(&self, now: Instant) -> Option<Instant> {
        let state = self;
        let busy = state.in_flight > 0 || !state.waiters.is_empty();
        let pinned = !state.signals.floor.is_zero();
        let paused = state.signals.paused_until().is_some_and(|p| p > now);
        let (delay, _) = state.signals.effective(&state.throttle, now);
        let spacing = state
            .last_dispatch
            .is_some_and(|last| last.checked_add(delay).is_none_or(|next| next > now));
        (!busy && !pinned && !paused && !spacing).then_some(state.last_used)
    }

    /// Takes the waker of the request at the head of the queue, if any.
    pub(crate) fn take_head_waker(&mut self) -> Option<Waker> {
        self.waiters.values_mut().next().and_then(Option::take)
    }
}
