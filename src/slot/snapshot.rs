//! What a slot shows of itself: [`SlotSnapshot`].

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use super::Slot;
use crate::key::SlotKey;
use crate::time::Secs;

/// What one slot looks like at one moment, from
/// [`AutoThrottleLayer::slots`](crate::AutoThrottleLayer::slots).
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct SlotSnapshot {
    /// The slot's key.
    pub key: SlotKey,
    /// The download delay in force (minimum start-to-start spacing): the
    /// policy's, raised by the floor, rate-limit pacing and overload
    /// backoff. (When the policy's delay is a pacing, see
    /// [`Throttle::paced`](crate::policy::Throttle::paced), a request that
    /// takes a place an answer freed does not wait for it.)
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

impl fmt::Debug for SlotSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotSnapshot")
            .field("key", &self.key)
            .field("delay", &Secs::from(self.delay))
            .field("concurrency", &self.concurrency)
            .field("in_flight", &self.in_flight)
            .field("queued", &self.queued)
            .field("last_latency", &Secs::opt(self.last_latency))
            .field("latency", &Secs::opt(self.latency))
            .field("last_status", &self.last_status)
            .field("dispatched", &self.dispatched)
            .field("responses", &self.responses)
            .field("paused_until", &self.paused_until)
            .field("delay_floor", &Secs::from(self.delay_floor))
            .field("overloads", &self.overloads)
            .finish()
    }
}

impl Slot {
    /// The slot as it is now.
    pub(crate) fn snapshot(&self) -> SlotSnapshot {
        let state = self.lock();
        let now = Instant::now();
        let (delay, concurrency) = state.signals.effective(&state.throttle, now);
        SlotSnapshot {
            key: self.key.clone(),
            delay,
            concurrency,
            in_flight: state.in_flight as usize,
            queued: state.waiters.len(),
            last_latency: state.last_latency.get(),
            latency: state.latency().map(crate::time::secs_to_duration),
            last_status: state.last_status,
            dispatched: state.dispatched,
            responses: state.responses,
            paused_until: state.signals.paused_until().filter(|p| *p > now),
            delay_floor: state.signals.floor(),
            overloads: state.signals.overloads(),
        }
    }
}
