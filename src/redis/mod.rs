//! One budget per slot across a fleet of processes, through Redis (feature
//! `redis`).
//!
//! Every layer configured with the same [`Fleet`] (same Redis, same fleet
//! name) shares, per slot:
//!
//! - **the dispatch schedule**: after a request passes its own slot's gate,
//!   it reserves the fleet's next dispatch time in Redis, in one server-side
//!   script that reads Redis's own clock (`TIME`), so that the start-to-start
//!   spacing holds across the fleet whatever the machines' clocks say;
//! - **the in-flight count**: the same script takes a place, a *lease* that
//!   expires after [`Fleet::lease`] unless given back, so the limit holds
//!   fleet-wide and a crashed worker's places come back on their own;
//! - **the answers**: the sample each worker's policy takes of a response
//!   (latency, status, outcome, the fleet's in-flight count, the pause it
//!   brought) joins the slot's stream in Redis when the place is given
//!   back, stamped with Redis's clock; each reservation brings the worker
//!   the other workers' samples since it last heard, and its policy takes
//!   them in as its own (its answers first, as they come; theirs at its
//!   next dispatch, dated by their age on Redis's clock). So every worker's
//!   policy learns from the whole fleet's answers: one controller,
//!   replicated, whose successes and overloads count once each, wherever
//!   they were answered;
//! - **what was learned**: the delay and limit each worker's policy arrives
//!   at are written back, under the worker's name, when a place is given
//!   back; every reservation applies the most careful of the workers' fresh
//!   words (the longest delay, the lowest limit; a word older than the
//!   lease is dropped), so a worker that joins obeys what the fleet has
//!   learned from its first request, and one worker misled by a loaded
//!   host (its latency-based policy may take a queue for the host's base
//!   latency) cannot open the slot wider for all; a `Retry-After` (or an
//!   exhausted `RateLimit` quota) seen by one worker pauses the slot for all.
//!   A policy's samples count the requests in flight fleet-wide.
//! - **the fleet's spacing**: each reservation tells the worker how long
//!   after the fleet's previous dispatch of the slot it was granted, so
//!   that the layer's overload backoff (for policies that leave overload to
//!   the layer) is sized from the fleet's spacing, not from the worker's
//!   own (N times longer in a fleet of N), and recovers at the pace of the
//!   fleet's successes: one 429 no longer slows the fleet for seconds.
//!
//! ```no_run
//! use std::time::Duration;
//! use tower_autothrottle::{redis::Fleet, AutoThrottleLayer, Config};
//!
//! let config = Config::builder()
//!     .fleet(Fleet::new("redis://127.0.0.1:6379/", "my-crawl").lease(Duration::from_secs(120)))
//!     .build()?;
//! let throttle = AutoThrottleLayer::new(config);
//! # Ok::<_, tower_autothrottle::ConfigError>(())
//! ```
//!
//! # Round trips
//!
//! One per dispatch when the fleet lets the request go at once (the
//! reservation); a request that has to wait for the fleet's schedule sleeps
//! until the reserved time and asks again. Giving the place back (when the
//! response body ends) is one more call, made off the request's path, which
//! also carries what the slot learned, and announces the freed place on the
//! fleet's channel (`autothrottle:F:freed`, Redis pub/sub); a pause is one
//! call when a server asks for it.
//!
//! A request that finds the fleet's limit reached does not poll: each
//! worker keeps one subscription to that channel (one more connection,
//! opened with the first reservation), and at each place given back it
//! wakes one of its own requests waiting on that slot (the longest
//! waiting), which asks again. Failing word, it asks again every 500 ms
//! anyway: a place can also come back by its lease running out (a worker
//! that died), which nobody announces, and a message can be lost while the
//! subscription reconnects. While the subscription is down (Redis gone, or
//! a server without pub/sub), waiters poll as before, after 5 ms doubling
//! to 100 ms. The order across the fleet is not FIFO: at a freed place, one
//! waiter of each worker asks again and the first to reach Redis gets it;
//! within a worker, the waiter woken is the one waiting longest (one
//! still in its call to Redis when word came goes first instead).
//!
//! # Ending a worker
//!
//! Places are given back off the requests' path: call
//! [`AutoThrottleLayer::flush`](crate::AutoThrottleLayer::flush) before a
//! worker process exits, or its last places stay taken until their leases
//! run out (which is also what happens when a worker crashes).
//!
//! # Faults
//!
//! A reservation or a shared pause that fails or takes longer than
//! [`Fleet::timeout`] makes the worker throttle on its own (its local slots keep working as without a
//! fleet), with a `tracing` warning, for [`Fleet::retry_interval`]; then the
//! next request tries Redis again, and sharing resumes as soon as it
//! answers (the connection reconnects in the background). With
//! [`Fleet::fail_closed`], requests wait for Redis instead. Giving a place
//! back is tried three times (50 ms and 200 ms apart) and does not by itself
//! make the worker throttle alone; a place that cannot be given back (Redis
//! down, or the worker gone) expires with its lease. Nothing panics.
//!
//! # Data layout
//!
//! Per slot, with `F` the fleet name and `K` the slot key:
//!
//! | key | type | fields |
//! |---|---|---|
//! | `autothrottle:{F:K}` | hash | `next`: the earliest next dispatch, µs of Redis's clock; `last`: the last dispatch, µs; `pause`: no dispatch before this, µs; `w:WORKER`: `delay_us:limit:at_us`, what that worker learned last |
//! | `autothrottle:{F:K}:leases` | sorted set | one member per place in use, scored by its expiry (µs) |
//! | `autothrottle:{F:K}:samples` | stream, the last 64 entries | one per response a worker's policy took in: `w` the worker, `s` `at_us:latency_us:status:outcome:in_flight:pause_us` |
//!
//! The hash also holds `c:WORKER`, the last sample that worker heard of (a
//! stream id), dropped once older than a lease.
//!
//! The keys share a hash tag, so they would live on one node of a Redis
//! Cluster; but the connection talks to one node, so a cluster is refused
//! at connect, as is a Redis older than 5.0 (the scripts read `TIME` before
//! they write, which needs the script effects replication 5.0 brought): the
//! worker then logs why at `error` level and throttles alone (or waits,
//! with [`Fleet::fail_closed`]), as when Redis is unreachable. Any Redis
//! from 5.0 on, or a Redis-compatible server that reports such a
//! `redis_version` in `INFO`, works. Every reservation sets the hash and the leases to
//! expire after [`Fleet::idle_ttl`] (a pause keeps them at least that long
//! after its end), and every release the stream, so idle slots vanish from
//! Redis on their own. A slot's stream holds at most 64 samples of about
//! 60 bytes each.
//!
//! # Consistency, and its limits
//!
//! - Spacing and limit are exact in Redis's clock and count: the script runs
//!   atomically. What a server sees can differ by the network: two requests
//!   reserved `d` apart can arrive a little closer if the first one took
//!   longer to reach the server.
//! - A place in use is renewed for another lease every third of a lease (at
//!   most every 10 ms), for as long as its request or response body lives,
//!   so a long request or a streaming body keeps counting against the
//!   limit. Only a worker that dies (or loses Redis for longer than a
//!   lease) lets its places expire; the lease (default 60 s) is how long
//!   the fleet waits for them then.
//! - Every worker's policy takes in the same answers, but not at the same
//!   moments nor quite in the same order: its own at once, the others' at
//!   its next dispatch (a worker that dispatches rarely hears at most the
//!   last 64, and none older than a lease; a sample whose release failed
//!   is not shared). A policy dates a sample by its age on Redis's clock
//!   and takes one older than its last as of now. So the replicas agree
//!   up to the samples still in transit; the fleet applies the most
//!   careful of their words (the longest delay, the lowest limit), so a
//!   replica that lags holds the fleet back until it catches up, and
//!   none can open the slot wider than the others learned. The layer's
//!   own reactions to an answer (its overload backoff, a pause) are the
//!   receiving worker's, shared through its word and the slot's pause.
//! - While a worker throttles on its own (Redis unreachable), the fleet's
//!   budget is not shared with it: the fleet can then exceed the delay and
//!   limit, by at most that worker's own share. `fail_closed` prevents it.
//! - A reservation whose caller gave up mid-call, or whose answer came too
//!   late, is given back at once (by its lease id: removing a place never
//!   taken does nothing); only a worker that dies holds its places until
//!   their leases expire.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::builder::setters;
use crate::config::ConfigBuilder;
use crate::error::ConfigError;
use crate::time::Secs;

mod client;

use client::RedisFleet;

/// Where and how a fleet shares its slots; give it to
/// [`ConfigBuilder::fleet`].
#[derive(Clone)]
pub struct Fleet {
    url: String,
    name: String,
    lease: Duration,
    timeout: Duration,
    retry_interval: Duration,
    idle_ttl: Duration,
    fail_closed: bool,
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("url", &self.url)
            .field("name", &self.name)
            .field("lease", &Secs::from(self.lease))
            .field("timeout", &Secs::from(self.timeout))
            .field("retry_interval", &Secs::from(self.retry_interval))
            .field("idle_ttl", &Secs::from(self.idle_ttl))
            .field("fail_closed", &self.fail_closed)
            .finish()
    }
}

impl Fleet {
    /// The fleet `name` on the Redis at `url` (`redis://host:port/db`).
    pub fn new(url: impl Into<String>, name: impl Into<String>) -> Self {
        Fleet {
            url: url.into(),
            name: name.into(),
            lease: Duration::from_secs(60),
            timeout: Duration::from_millis(250),
            retry_interval: Duration::from_secs(1),
            idle_ttl: Duration::from_secs(600),
            fail_closed: false,
        }
    }

    setters! {
        /// How long a place is held if its worker never gives it back (it
        /// crashed, or lost Redis): 1 ms to 365 days. Default 60 s.
        pub fn lease(Duration) => lease;
        /// The longest a Redis call may take before the worker throttles on its
        /// own: 1 ms to 60 s. Default 250 ms.
        pub fn timeout(Duration) => timeout;
        /// How long a worker throttles on its own after Redis failed, before it
        /// tries again: 1 ms to a day. Default 1 s.
        pub fn retry_interval(Duration) => retry_interval;
        /// How long an unused slot stays in Redis: 1 ms to 365 days. Default
        /// 10 minutes.
        pub fn idle_ttl(Duration) => idle_ttl;
        /// Wait for Redis rather than throttle alone when it is unreachable
        /// (never risk a host's budget; requests stall while Redis is down).
        /// Off by default.
        pub fn fail_closed(bool) => fail_closed;
    }

    fn check(&self) -> Result<redis::Client, ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::new(
                "fleet",
                "the fleet name must not be empty",
            ));
        }
        const MS: Duration = Duration::from_millis(1);
        const DAY: Duration = Duration::from_secs(86_400);
        for (field, value, min, max, range) in [
            ("lease", self.lease, MS, 365 * DAY, "1 ms to 365 days"),
            (
                "timeout",
                self.timeout,
                MS,
                Duration::from_secs(60),
                "1 ms to 60 s",
            ),
            (
                "retry_interval",
                self.retry_interval,
                MS,
                DAY,
                "1 ms to a day",
            ),
            ("idle_ttl", self.idle_ttl, MS, 365 * DAY, "1 ms to 365 days"),
        ] {
            if !(min..=max).contains(&value) {
                return Err(ConfigError::new(
                    field,
                    format!("must be from {range}, got {value:?}"),
                ));
            }
        }
        redis::Client::open(self.url.as_str())
            .map_err(|e| ConfigError::new("redis_url", format!("{:?}: {e}", self.url)))
    }
}

impl ConfigBuilder {
    /// Shares the slots with every layer configured with the same fleet
    /// (feature `redis`); see [`crate::redis`]. An invalid URL or setting is
    /// reported by [`build`](ConfigBuilder::build). Nothing connects until
    /// the first request.
    #[must_use]
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        match fleet.check() {
            Ok(client) => {
                self.config.coordinator = Some(Arc::new(RedisFleet::new(fleet, client)));
            }
            Err(error) => self.error = Some(error),
        }
        self
    }
}
