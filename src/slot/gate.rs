//! The gate: where a request waits for its slot's spacing and a place; the
//! only code that waits.
//!
//! A request takes a ticket in its slot's FIFO queue when it is called, and
//! leaves the queue when it is admitted; one that finds the queue empty and
//! the gate open is admitted right away, when it is called, without taking
//! a ticket (the common case, kept free of the queue's costs). Only the head of the queue may be
//! admitted, and only when both hold:
//!
//! - fewer requests than the slot's current limit are in flight, and
//! - at least the slot's current delay has passed since the previous
//!   admission of the slot (start-to-start spacing, as in Scrapy); a delay
//!   of `Duration::MAX` (a floor or a bound set so) blocks the slot until
//!   it is lowered. A policy's paced delay
//!   ([`Throttle::paced`](crate::policy::Throttle::paced)) does not hold a
//!   request while an answer has left a place free that no admission has
//!   taken again yet (what the layer adds on top of the policy still
//!   does).
//!
//! Both are checked against the slot's state *at the moment of admission*,
//! so a lowered limit or a raised delay binds the very next dispatch, even
//! for requests that were already waiting. The head waits on the slot's
//! place (woken by a release or a change of the limit) or on a timer until
//! its deadline (reset when the delay changes); the others wait to become
//! the head. An admitted request holds a [`Permit`]: its in-flight place,
//! given back when the permit is dropped.
//!
//! Dropping a [`Waiting`] at any point leaves the queue at once and, if it
//! was the head, hands the head's turn to the next request.

use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::{Adjustment, Slot, SlotState};
use crate::fleet::{Lease, Local};
use crate::policy::{Outcome, Throttle};
use crate::signals::{Ended, Hints};
use crate::time::OptNanos;

/// A request waiting in its slot's queue.
pub(crate) struct Waiting {
    /// Its slot; moved into the [`Permit`] at admission (one reference
    /// count fewer to bump on a line other threads write too).
    slot: Option<Arc<Slot>>,
    /// The ticket in the slot's queue; `None` once admitted.
    ticket: Option<u64>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// The instant the gate measures instants from (see [`SlotTable::since_origin`](super::SlotTable::since_origin)).
    origin: Instant,
}

/// How a request joined its slot: admitted at once, or in the queue.
pub(crate) enum Joined {
    /// The queue was empty and the gate open: its place, and the instant it
    /// was admitted at (the call's start), as the time since the table's
    /// origin (see [`SlotTable::since_origin`](super::SlotTable::since_origin)).
    Admitted(Permit, Duration),
    Queued(Waiting),
}

/// An in-flight place in a slot (and, when the layer bounds pending
/// requests, the global place), given back on drop.
pub(crate) struct Permit {
    slot: Arc<Slot>,
    /// The request's dispatch number in its slot (1 for the first), and in
    /// the top bit ([`RELEASED`]) whether the local place was given back
    /// already (with the response of a body that was over before it began,
    /// under the same lock). One word for both, where a flag of its own
    /// took one: 40 bytes a permit instead of 48, so that a response that
    /// carries one (in its body) is copied by a few moves instead of a
    /// call to `memcpy`. (A slot would need 2^63 dispatches to reach the
    /// top bit: centuries at a billion a second.)
    seq: u64,
    _pending: Option<OwnedSemaphorePermit>,
    /// The fleet-wide place, when a fleet shares the slot; given back
    /// before the local one.
    ///
    /// Dropped by hand, in [`Permit`]'s `drop` and only when there is one:
    /// the drop glue of an `Option<Box<Lease>>` is a call, made twice a
    /// request (26 instructions) to find `None`.
    lease: ManuallyDrop<Option<Box<Lease>>>,
}

/// The bit of [`Permit::seq`] that says the local place went back.
const RELEASED: u64 = 1 << 63;

#[derive(Debug, PartialEq)]
enum Decision {
    Admit,
    /// Not the head, or no place free: wait to be woken.
    Wait,
    /// The head, with a place, before its deadline.
    WaitUntil(Instant),
}

impl Waiting {
    /// Joins the back of the slot's queue, or, when nobody waits and the
    /// gate is open, goes through at once. `origin` is the instant the
    /// gate measures instants from (see [`SlotTable::since_origin`](super::SlotTable::since_origin)).
    pub(crate) fn enqueue(slot: Arc<Slot>, origin: Instant) -> Joined {
        Self::join(slot, false, origin).expect("only an evicted slot is refused")
    }

    /// [`enqueue`](Self::enqueue) into a slot held from before, unless it
    /// has been evicted from the table since (then `None`).
    pub(crate) fn try_enqueue(slot: Arc<Slot>, origin: Instant) -> Option<Joined> {
        Self::join(slot, true, origin)
    }

    fn join(slot: Arc<Slot>, check_evicted: bool, origin: Instant) -> Option<Joined> {
        let now = Instant::now();
        // The request's one clock difference until its answer, outside the
        // lock (see `take_place`).
        let since = now.saturating_duration_since(origin);
        let ticket = {
            let mut state = slot.lock();
            if check_evicted && state.evicted {
                return None;
            }
            let (now, since) = state.dispatch_instant(now, since, origin);
            if state.waiters.is_empty() && matches!(open(&state, now), Decision::Admit) {
                state.last_used = now;
                let seq = take_place(&mut state, now, since);
                drop(state);
                return Some(Joined::Admitted(Permit::new(slot, seq), since));
            }
            let ticket = state.waiters.push();
            state.last_used = now;
            ticket
        };
        Some(Joined::Queued(Waiting {
            slot: Some(slot),
            ticket: Some(ticket),
            sleep: None,
            origin,
        }))
    }

    /// The slot it waits in, until admitted.
    pub(crate) fn slot(&self) -> Option<&Arc<Slot>> {
        self.slot.as_ref()
    }

    /// Waits until the request is admitted, then returns its place.
    ///
    /// `pending` is the global place held since `call`; it moves into the
    /// returned permit. Must not be polled again after it returned `Ready`.
    pub(crate) fn poll_admit(
        &mut self,
        cx: &mut Context<'_>,
        pending: &mut Option<OwnedSemaphorePermit>,
    ) -> Poll<Permit> {
        let (Some(ticket), Some(slot)) = (self.ticket, self.slot.as_ref()) else {
            // Polled after admission: a bug in the caller, but not worth a
            // panic; it will never be admitted twice.
            return Poll::Pending;
        };
        loop {
            let now = Instant::now();
            let since = now.saturating_duration_since(self.origin);
            let decision = {
                let mut state = slot.lock();
                let (now, since) = state.dispatch_instant(now, since, self.origin);
                let decision = decide(&state, ticket, now);
                match decision {
                    Decision::Admit => {
                        state.waiters.remove(&ticket);
                        let seq = take_place(&mut state, now, since);
                        // The next request is now the head: it has to start
                        // its own wait for spacing.
                        let next = state.take_head_waker();
                        drop(state);
                        if let Some(waker) = next {
                            waker.wake();
                        }
                        self.ticket = None;
                        self.sleep = None;
                        let slot = self.slot.take().expect("checked above");
                        return Poll::Ready(Permit::new(slot, seq).with_pending(pending.take()));
                    }
                    Decision::Wait | Decision::WaitUntil(_) => {
                        if let Some(slot_waker) = state.waiters.get_mut(&ticket) {
                            match slot_waker {
                                Some(w) if w.will_wake(cx.waker()) => {}
                                _ => *slot_waker = Some(cx.waker().clone()),
                            }
                        }
                    }
                }
                decision
            };
            let Decision::WaitUntil(deadline) = decision else {
                return Poll::Pending;
            };
            match &mut self.sleep {
                Some(sleep) if sleep.deadline() == deadline => {}
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            let sleep = self.sleep.as_mut().expect("set above");
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The deadline passed: look again (the delay may have changed).
        }
    }
}

/// Takes an in-flight place and records the dispatch at `now` (`since` the
/// table's origin, see [`SlotState::dispatch_instant`]); the request's
/// dispatch number.
///
/// The gap since the previous dispatch is the difference of the two as
/// durations since the origin, in nanoseconds: what `now - previous`
/// gives, both being after the origin, without a difference of `Instant`s.
fn take_place(state: &mut SlotState, now: Instant, since: Duration) -> u64 {
    state.in_flight += 1;
    state.dispatched += 1;
    state.clocked = state.clocked.saturating_sub(1);
    let previous = state.last_dispatch.replace(now);
    let at = OptNanos::nanos(since);
    let previous_at = std::mem::replace(&mut state.last_dispatch_at, at);
    state
        .signals
        .on_dispatch(now, previous.map(|p| (p, at.saturating_sub(previous_at))));
    state.dispatched
}

fn decide(state: &SlotState, ticket: u64, now: Instant) -> Decision {
    if state.waiters.keys().next() != Some(&ticket) {
        return Decision::Wait;
    }
    open(state, now)
}

/// Whether the gate lets the head of the queue through now.
///
/// `now` is never before the slot's last dispatch (see
/// [`SlotState::dispatch_instant`]).
#[inline]
fn open(state: &SlotState, now: Instant) -> Decision {
    open_quiet(state).unwrap_or_else(|| open_spaced(state, now))
}

/// [`open`] in the common case, without the clock: a quiet slot (no pause,
/// no cap, no floor: see [`Signals::is_quiet`](crate::signals::Signals))
/// whose policy asks no delay holds a request only at its limit.
fn open_quiet(state: &SlotState) -> Option<Decision> {
    if !state.signals.is_quiet() || state.throttle.delay_secs() != 0.0 {
        return None;
    }
    Some(
        if (state.in_flight as usize) < state.throttle.concurrency().max(1) {
            Decision::Admit
        } else {
            Decision::Wait
        },
    )
}

/// [`open`] in general.
fn open_spaced(state: &SlotState, now: Instant) -> Decision {
    // A place an answer freed is taken without the policy's pacing (see
    // `Throttle::paced`); what the layer adds still spaces it.
    let (delay, limit) = if state.throttle.is_paced() && state.clocked > 0 {
        let unpaced = Throttle::new(0.0, state.throttle.concurrency());
        state.signals.effective(&unpaced, now)
    } else {
        state.signals.effective(&state.throttle, now)
    };
    // A delay of `Duration::MAX` blocks the slot: nothing goes, not even a
    // first request, until it is lowered (which wakes the head).
    if state.in_flight as usize >= limit || delay == Duration::MAX {
        return Decision::Wait;
    }
    // A zero delay (with any jitter) spaces nothing: the deadline is the
    // last dispatch itself, without the arithmetic.
    let spaced = if delay.is_zero() {
        state.last_dispatch
    } else {
        state
            .last_dispatch
            .map(|last| crate::time::after(last, state.signals.gap(delay)))
    };
    let paused = state.signals.paused_until();
    match spaced.into_iter().chain(paused).max() {
        Some(deadline) if deadline > now => Decision::WaitUntil(deadline),
        _ => Decision::Admit,
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // Admitted: nothing left here.
        let Some(slot) = &self.slot else { return };
        let Some(ticket) = self.ticket else { return };
        let wake = {
            let mut state = slot.lock();
            let was_head = state.waiters.keys().next() == Some(&ticket);
            state.waiters.remove(&ticket);
            if was_head {
                state.take_head_waker()
            } else {
                None
            }
        };
        if let Some(waker) = wake {
            waker.wake();
        }
    }
}

impl Permit {
    fn new(slot: Arc<Slot>, seq: u64) -> Self {
        Permit {
            slot,
            seq: seq & !RELEASED,
            _pending: None,
            lease: ManuallyDrop::new(None),
        }
    }

    /// The permit, holding the global place held since `call` (see
    /// [`max_pending`](crate::ConfigBuilder::max_pending)) until it drops.
    #[inline]
    pub(crate) fn with_pending(mut self, pending: Option<OwnedSemaphorePermit>) -> Self {
        if pending.is_some() {
            self._pending = pending;
        }
        self
    }

    /// Ends the request in its slot: the outcome goes to the slot's signals
    /// and policy (told the fleet-wide in-flight count when a fleet shares
    /// the slot), and what the slot then allows is kept with the fleet's
    /// place, to be shared when it goes back. With `release`, the local
    /// place goes back under the same lock (the caller drops the permit
    /// next, or the response's body was over before it began).
    #[allow(clippy::too_many_arguments)] // internal; what one request's end tells its slot
    pub(crate) fn end(
        &mut self,
        now: Instant,
        at: f64,
        latency: Duration,
        response: Option<(StatusCode, Hints)>,
        outcome: Outcome,
        adjust: bool,
        release: bool,
    ) -> Adjustment {
        // (A fleet's place goes back before the local one, and carries what
        // the slot learned: with a lease, the permit's drop gives both.)
        let release = release && self.lease.is_none() && !self.released();
        let (status, hints) = match response {
            Some((status, hints)) => (Some(status), hints),
            None => (None, Hints::default()),
        };
        let ended = Ended {
            at,
            latency,
            status,
            outcome,
            seq: self.seq(),
            hints,
            adjust,
            fleet_in_flight: self.lease.as_deref().map(Lease::in_flight),
            release,
        };
        let adjustment = self.slot.on_end(now, ended);
        if release {
            self.seq |= RELEASED;
        }
        if let Some(lease) = self.lease.as_mut() {
            lease.learned(
                Local {
                    delay: adjustment.delay,
                    limit: adjustment.limit,
                },
                adjustment.sample,
                now,
            );
        }
        adjustment
    }

    /// Keeps the fleet's place, tells the slot the fleet's spacing it
    /// reports, and hands the slot's policy the samples the fleet's other
    /// workers took (`at`: the slot's clock now).
    pub(crate) fn set_lease(&mut self, mut lease: Option<Box<Lease>>, now: Instant, at: f64) {
        if let Some(lease) = lease.as_deref_mut() {
            if let Some(gap) = lease.gap() {
                self.slot.lock().signals.on_fleet_dispatch(gap);
            }
            self.slot.learn_remote(&lease.take_remote(), now, at);
        }
        // (The permit's own lease, if any, is dropped as it is replaced.)
        *self.lease = lease;
    }

    /// The slot this place belongs to.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// The request's dispatch number in its slot.
    pub(crate) fn seq(&self) -> u64 {
        self.seq & !RELEASED
    }

    /// Whether the local place was given back already.
    fn released(&self) -> bool {
        self.seq & RELEASED != 0
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            drop(lease);
        }
        if !self.released() {
            self.slot.release();
        }
    }
}

impl fmt::Debug for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiting")
            .field("slot", &self.slot.as_ref().map(|slot| &slot.key))
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("slot", &self.slot.key)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, Sample, Throttle};
    use crate::signals::Signals;
    use crate::SlotKey;

    /// No delay, a limit that never binds.
    #[derive(Debug)]
    struct Open;

    impl Policy for Open {
        fn throttle(&self) -> Throttle {
            Throttle::new(0.0, usize::MAX)
        }
        fn on_sample(&mut self, _: &Sample) -> Throttle {
            self.throttle()
        }
    }

    /// No delay, a limit of its own.
    #[derive(Debug)]
    struct Limit(f64, usize);

    impl Policy for Limit {
        fn throttle(&self) -> Throttle {
            Throttle::new(self.0, self.1)
        }
        fn on_sample(&mut self, _: &Sample) -> Throttle {
            self.throttle()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_quiet_gate_decides_as_the_spaced_one() {
        let now = Instant::now() + Duration::from_secs(1);
        let mut quiet = 0;
        for jitter in [0.0, 0.5] {
            for limit in [0, 1, 2, 7, usize::MAX] {
                for in_flight in [0u32, 1, 2, 6, 7, 8, u32::MAX] {
                    for last in [None, Some(now), Some(now - Duration::from_millis(3))] {
                        for delay in [0.0, -0.0, 1e-9, 0.25, f64::NAN] {
                            let slot = Slot::new(
                                SlotKey::new("a.example"),
                                Box::new(Limit(delay, limit)),
                                Signals::new(jitter, 7),
                            );
                            let mut state = slot.lock();
                            state.in_flight = in_flight;
                            state.last_dispatch = last;
                            match open_quiet(&state) {
                                Some(decision) => {
                                    quiet += 1;
                                    assert_eq!(
                                        decision,
                                        open_spaced(&state, now),
                                        "limit {limit}, {in_flight} in flight, delay {delay}"
                                    );
                                }
                                // Only a delay other than zero takes the
                                // longer way on a quiet slot.
                                None => assert!(delay != 0.0, "delay {delay}"),
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(quiet, 2 * 5 * 7 * 3 * 2);
        // A slot the server spoke to takes the longer way.
        let slot = Slot::new(
            SlotKey::new("a.example"),
            Box::new(Limit(0.0, 8)),
            Signals::new(0.0, 7),
        );
        let mut state = slot.lock();
        state.signals.retry_after(now, Duration::from_secs(1));
        assert_eq!(open_quiet(&state), None);
        assert_eq!(
            open_spaced(&state, now),
            Decision::WaitUntil(now + Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dispatch_stamped_later_by_another_thread_does_not_hold_a_zero_delay_slot() {
        let slot = Arc::new(Slot::new(
            SlotKey::new("a.example"),
            Box::new(Open),
            Signals::new(0.0, 0),
        ));
        // Another thread read the clock after this one and dispatched
        // first: the slot's last dispatch is later than this thread's `now`.
        let later = Instant::now() + Duration::from_micros(3);
        slot.lock().last_dispatch = Some(later);
        let joined = Waiting::enqueue(Arc::clone(&slot), Instant::now());
        assert!(matches!(joined, Joined::Admitted(..)), "it waits");
        let state = slot.lock();
        assert!(state.waiters.is_empty());
        assert_eq!(state.last_dispatch, Some(later));
    }
}
