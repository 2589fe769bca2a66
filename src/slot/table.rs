//! The table of slots: finding a request's slot (or creating it), the
//! per-slot settings in force, and eviction.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use super::{Learned, Slot, SlotSnapshot};
use crate::config::{Overrides, Target};
use crate::key::SlotKey;
use crate::policy::{MakePolicy, Policy, Sample, Throttle};
use crate::signals::Signals;

/// All slots, by key; shared by a layer and every service made from it.
///
/// # Eviction
///
/// A slot is *evictable* when nothing holds it to its host: no request in
/// flight or queued, its `Retry-After` pause over, and its delay since the
/// last dispatch run out (so a fresh slot for the same host could not send
/// anything too early). A delay floor does not hold it: floors and settings
/// live in the settings table and come back with a new slot. Evictable
/// slots idle for `idle_timeout` are dropped, and beyond `max_slots` the
/// least recently used evictable ones go first, down to nine tenths of the
/// bound. This runs when slots are created: after as many new slots as half
/// the table, or, past the bound, as a tenth of the table. A sweep is
/// linear in the table, so it costs O(1) per new slot amortized, even when
/// nothing can be evicted; the table can pass its bound by a tenth between
/// sweeps, and by as many busy slots as there are.
///
/// A request joins its slot's queue while holding the table's shard lock,
/// and eviction removes a slot under the shard's write lock after checking
/// it under its own lock (always in that order: shard, then slot), so a
/// request can never join a slot that is being dropped.
#[derive(Debug)]
pub(crate) struct SlotTable {
    /// Hashed with foldhash (seeded per table, as hashbrown's default):
    /// SipHash took 155 of the ~330 instructions of a lookup. Each slot is
    /// its own key ([`Entry`]): one word an entry, where a key beside the
    /// slot took three.
    slots: DashMap<Entry, (), foldhash::fast::RandomState>,
    policy: Arc<dyn MakePolicy>,
    /// Per-slot settings: what makes the policy of the slots they cover.
    overrides: RwLock<Overrides>,
    jitter: f64,
    seed: u64,
    idle_timeout: Duration,
    max_slots: usize,
    created: AtomicUsize,
    /// The origin of the slots' clock (see [`clock`](Self::clock)).
    epoch: Instant,
    /// A century before `epoch` (or `epoch` itself, if the clock cannot go
    /// back that far): the instant from which the gate and the future
    /// measure instants as durations (see [`since_origin`](Self::since_origin)).
    origin: Instant,
    /// `epoch - origin`.
    epoch_offset: Duration,
}

/// How long before its epoch a table's origin is: far enough that no
/// clock a layer is used with (a paused one started before the layer was
/// made included) gives an instant before it.
const ORIGIN_BEFORE_EPOCH: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A slot in the table, found by its key: hashed and compared as the key's
/// text, so that a lookup by `&str` finds it.
#[derive(Debug)]
struct Entry(Arc<Slot>);

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.as_str().hash(state);
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key.as_str() == other.0.key.as_str()
    }
}

impl Eq for Entry {}

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        self.0.key.as_str()
    }
}

/// The policy of a slot made before the table is asked whether it is new
/// (see [`SlotTable::with_new_slot`]); never seen by a request.
#[derive(Debug)]
struct Unmade;

impl Policy for Unmade {
    fn throttle(&self) -> Throttle {
        Throttle::new(0.0, 1)
    }

    fn on_sample(&mut self, _: &Sample) -> Throttle {
        self.throttle()
    }
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
        let epoch = Instant::now();
        let origin = epoch.checked_sub(ORIGIN_BEFORE_EPOCH).unwrap_or(epoch);
        SlotTable {
            slots: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            policy,
            overrides: RwLock::new(overrides),
            jitter,
            seed,
            idle_timeout,
            max_slots: max_slots.max(1),
            created: AtomicUsize::new(0),
            epoch,
            origin,
            epoch_offset: epoch.saturating_duration_since(origin),
        }
    }

    /// `now` on the slots' clock: seconds since the table was made, as
    /// policies get it in their samples.
    pub(crate) fn clock(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.epoch).as_secs_f64()
    }

    /// `now` as the time since the table's origin (see [`origin`](Self::origin)):
    /// the difference of two such durations is that of the two instants,
    /// exactly, so that one difference of `Instant`s (about 50
    /// instructions) serves several.
    #[inline]
    pub(crate) fn since_origin(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.origin)
    }

    /// [`clock`](Self::clock) of the instant `since` the origin: the same
    /// value, exactly (0 for an instant before the epoch, as there).
    #[inline]
    pub(crate) fn clock_since(&self, since: Duration) -> f64 {
        since.saturating_sub(self.epoch_offset).as_secs_f64()
    }

    /// The instant from which the gate and the future measure instants as
    /// durations: a century before the table was made, so that every
    /// instant the layer meets comes after it.
    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    /// Runs `f` on the slot for `key` (created with a fresh policy if it is
    /// new) while holding the table's lock on it, so that the slot cannot
    /// be evicted meanwhile.
    pub(crate) fn with_slot<R>(&self, key: SlotKey, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        if let Some(entry) = self.slots.get(key.as_str()) {
            return f(&entry.key().0);
        }
        self.with_new_slot(key, f)
    }

    /// [`with_slot`](Self::with_slot) for a key given as text: allocates
    /// a key only when the slot is new.
    pub(crate) fn with_slot_str<R>(&self, key: &str, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        if let Some(entry) = self.slots.get(key) {
            return f(&entry.key().0);
        }
        self.with_new_slot(SlotKey::verbatim(key), f)
    }

    /// The way of [`with_slot`](Self::with_slot) once a plain lookup missed:
    /// creates the slot unless another request did meanwhile, and sweeps
    /// the table when due.
    ///
    /// The slot is made before the table is asked (it is the table's key),
    /// with a placeholder policy: a request that loses a race to create it
    /// drops its own. Its policy and floor are made under the table's lock
    /// on its shard, as they were when the key was separate, so that
    /// settings changed meanwhile either reach it there or find it in the
    /// table.
    fn with_new_slot<R>(&self, key: SlotKey, f: impl FnOnce(&Arc<Slot>) -> R) -> R {
        let signals = Signals::new(self.jitter, self.seed ^ crate::rng::hash(key.as_str()));
        let slot = Arc::new(Slot::new(key, Box::new(Unmade), signals));
        let (result, created) = match self.slots.entry(Entry(slot)) {
            dashmap::Entry::Occupied(entry) => (f(&entry.key().0), false),
            dashmap::Entry::Vacant(vacant) => {
                let slot = &vacant.key().0;
                let (policy, floor) = {
                    let overrides = self.overrides();
                    (
                        self.make_policy(&overrides, &slot.key),
                        overrides.floor_for(slot.key.as_str()),
                    )
                };
                slot.set_policy(policy);
                slot.set_floor(floor);
                let entry = vacant.insert(());
                (f(&entry.key().0), true)
            }
        };
        if created {
            let created = self.created.fetch_add(1, Ordering::Relaxed) + 1;
            let len = self.slots.len();
            // A sweep every half a table of new slots, or, past the bound,
            // every tenth of a table: amortized O(1) per new slot even when
            // nothing can be evicted.
            let due = (len / 2).max(64);
            let over = len > self.max_slots && created >= (len / 10).max(1);
            if over || created >= due {
                self.created.store(0, Ordering::Relaxed);
                self.evict(Instant::now());
            }
        }
        result
    }

    /// The settings table, read.
    fn overrides(&self) -> std::sync::RwLockReadGuard<'_, Overrides> {
        self.overrides.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh policy for the slot `key`: its settings', or the default.
    fn make_policy(&self, overrides: &Overrides, key: &SlotKey) -> Box<dyn Policy> {
        match overrides.policy_for(key.as_str()) {
            Some(policy) => policy.make_policy(key),
            None => self.policy.make_policy(key),
        }
    }

    /// The slots `target` covers.
    fn covered(&self, target: &Target) -> Vec<Arc<Slot>> {
        if let Target::Key(key) = target {
            return self
                .slots
                .get(key.as_str())
                .map(|e| Arc::clone(&e.key().0))
                .into_iter()
                .collect();
        }
        self.slots
            .iter()
            .filter(|e| target.covers(e.key().0.key.as_str()))
            .map(|e| Arc::clone(&e.key().0))
            .collect()
    }

    /// Sets (`Some`) or removes (`None`) the policy settings of `target`,
    /// and gives every existing slot it covers a fresh policy made by what
    /// now applies to it; whether anything was set or removed.
    pub(crate) fn set_settings(
        &self,
        target: &Target,
        policy: Option<Arc<dyn MakePolicy>>,
    ) -> bool {
        {
            let mut overrides = self.overrides.write().unwrap_or_else(|p| p.into_inner());
            if !overrides.set_policy(target, policy) {
                return false;
            }
        }
        for slot in self.covered(target) {
            let policy = self.make_policy(&self.overrides(), &slot.key);
            slot.set_policy(policy);
        }
        true
    }

    /// Sets (`Some`) or removes (`None`) the delay floor of `target`, and
    /// gives every existing slot it covers the floor that now applies to
    /// it; whether anything was set or removed.
    pub(crate) fn set_floor(&self, target: &Target, floor: Option<Duration>) -> bool {
        {
            let mut overrides = self.overrides.write().unwrap_or_else(|p| p.into_inner());
            if !overrides.set_floor(target, floor) {
                return false;
            }
        }
        for slot in self.covered(target) {
            let floor = self.overrides().floor_for(slot.key.as_str());
            slot.set_floor(floor);
        }
        true
    }

    /// Drops the evictable slots idle for the idle timeout, then, beyond the
    /// bound, the least recently used evictable ones.
    fn evict(&self, now: Instant) {
        let timeout = self.idle_timeout;
        self.slots.retain(|entry, ()| {
            !entry
                .0
                .evict_if(now, |since| now.saturating_duration_since(since) >= timeout)
        });
        if self.slots.len() <= self.max_slots {
            return;
        }
        let mut idle: Vec<(Instant, SlotKey)> = self
            .slots
            .iter()
            .filter_map(|e| {
                let slot = &e.key().0;
                slot.idle_since(now).map(|since| (since, slot.key.clone()))
            })
            .collect();
        let target = self.max_slots - self.max_slots / 10;
        let mut excess = self.slots.len().saturating_sub(target);
        // The `excess` least recently used first, in order, found in linear
        // time; the others after them, should some of those turn busy.
        let first = excess.min(idle.len());
        if first < idle.len() {
            idle.select_nth_unstable(first);
        }
        idle[..first].sort_unstable();
        for (_, key) in idle {
            if excess == 0 {
                break;
            }
            if self
                .slots
                .remove_if(key.as_str(), |entry, ()| entry.0.evict_if(now, |_| true))
                .is_some()
            {
                excess -= 1;
            }
        }
    }

    pub(crate) fn snapshot(&self, key: &str) -> Option<SlotSnapshot> {
        // Clone the Arc out first so no shard lock is held while locking the slot.
        let slot = self.slots.get(key).map(|e| Arc::clone(&e.key().0))?;
        Some(slot.snapshot())
    }

    /// What every slot learned, sorted by key.
    pub(crate) fn learned(&self, now: Instant) -> Vec<Learned> {
        let slots: Vec<Arc<Slot>> = self.slots.iter().map(|e| Arc::clone(&e.key().0)).collect();
        let mut out: Vec<Learned> = slots.iter().map(|s| s.learned(now)).collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    pub(crate) fn snapshots(&self) -> Vec<SlotSnapshot> {
        let slots: Vec<Arc<Slot>> = self.slots.iter().map(|e| Arc::clone(&e.key().0)).collect();
        let mut out: Vec<SlotSnapshot> = slots.iter().map(|s| s.snapshot()).collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}
