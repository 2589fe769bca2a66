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
//! until the reserved time and asks again, and one that finds the fleet's
//! limit reached asks again after 5 ms, doubling to 100 ms. Giving the place
//! back (when the response body ends) is one more call, made off the
//! request's path, which also carries what the slot learned; a pause is one
//! call when a server asks for it.
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
//! A Redis call that fails or takes longer than [`Fleet::timeout`] makes the
//! worker throttle on its own (its local slots keep working as without a
//! fleet), with a `tracing` warning, for [`Fleet::retry_interval`]; then the
//! next request tries Redis again, and sharing resumes as soon as it
//! answers (the connection reconnects in the background). With
//! [`Fleet::fail_closed`], requests wait for Redis instead. Nothing panics,
//! and a place that cannot be given back (Redis down, or the worker gone)
//! expires with its lease.
//!
//! # Data layout
//!
//! Per slot, with `F` the fleet name and `K` the slot key:
//!
//! | key | type | fields |
//! |---|---|---|
//! | `autothrottle:{F:K}` | hash | `next`: the earliest next dispatch, µs of Redis's clock; `pause`: no dispatch before this, µs; `w:WORKER`: `delay_us:limit:at_us`, what that worker learned last |
//! | `autothrottle:{F:K}:leases` | sorted set | one member per place in use, scored by its expiry (µs) |
//!
//! Both keys share a hash tag, so they live on one node of a Redis Cluster.
//! Every reservation sets both to expire after [`Fleet::idle_ttl`] (a pause
//! keeps them at least that long after its end), so idle slots vanish from
//! Redis on their own.
//!
//! # Consistency, and its limits
//!
//! - Spacing and limit are exact in Redis's clock and count: the script runs
//!   atomically. What a server sees can differ by the network: two requests
//!   reserved `d` apart can arrive a little closer if the first one took
//!   longer to reach the server.
//! - A request that runs longer than its lease stops counting against the
//!   limit when the lease expires; choose the lease above your longest
//!   request (default 60 s).
//! - The fleet's delay and limit are the most careful of the workers'
//!   words, not a merged policy: each worker's policy learns from its own
//!   responses (with the fleet's in-flight count), and a slow learner holds
//!   the fleet back until it catches up.
//! - While a worker throttles on its own (Redis unreachable), the fleet's
//!   budget is not shared with it: the fleet can then exceed the delay and
//!   limit, by at most that worker's own share. `fail_closed` prevents it.
//! - A reservation whose caller gave up mid-call, or whose answer came too
//!   late, is given back at once (by its lease id: removing a place never
//!   taken does nothing); only a worker that dies holds its places until
//!   their leases expire.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use tokio::sync::{Notify, OnceCell};
use tokio::time::Instant;

use crate::config::{ConfigBuilder, ConfigError};
use crate::fleet::{Coordinator, Lease, Local};
use crate::key::SlotKey;
use crate::resolve::BoxFuture;

/// Where and how a fleet shares its slots; give it to
/// [`ConfigBuilder::fleet`].
#[derive(Clone, Debug)]
pub struct Fleet {
    url: String,
    name: String,
    lease: Duration,
    timeout: Duration,
    retry_interval: Duration,
    idle_ttl: Duration,
    fail_closed: bool,
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

    /// How long a place is held if its worker never gives it back (it
    /// crashed, or lost Redis). Default 60 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The longest a Redis call may take before the worker throttles on its
    /// own. Default 250 ms.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a worker throttles on its own after Redis failed, before it
    /// tries again. Default 1 s.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = interval;
        self
    }

    /// How long an unused slot stays in Redis. Default 10 minutes.
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = ttl;
        self
    }

    /// Wait for Redis rather than throttle alone when it is unreachable
    /// (never risk a host's budget; requests stall while Redis is down).
    /// Off by default.
    pub fn fail_closed(mut self, on: bool) -> Self {
        self.fail_closed = on;
        self
    }

    fn check(&self) -> Result<redis::Client, ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::new(
                "fleet",
                "the fleet name must not be empty",
            ));
        }
        for (field, value) in [
            ("lease", self.lease),
            ("timeout", self.timeout),
            ("retry_interval", self.retry_interval),
        ] {
            if value.is_zero() {
                return Err(ConfigError::new(field, "must be above zero"));
            }
        }
        if self.idle_ttl < Duration::from_millis(1) {
            return Err(ConfigError::new("idle_ttl", "must be at least 1 ms"));
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
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        match fleet.check() {
            Ok(client) => {
                self.config.coordinator =
                    Some(Arc::new(RedisFleet(Arc::new(Inner::new(fleet, client)))));
            }
            Err(error) => self.error = Some(error),
        }
        self
    }
}

/// Reserves a dispatch: `{1, in_flight}` when granted, `{0, wait_us}` when the
/// schedule or a pause holds it back, `{0, -1}` when the limit is reached.
/// The fleet's delay and limit are the most careful of the workers' fresh
/// words (the longest delay, the lowest limit); words older than a lease
/// (`ARGV[3]`) are dropped.
const RESERVE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now))
local h = redis.call('HGETALL', KEYS[1])
local next, pause, delay, limit = 0, 0, nil, nil
local fresh = now - tonumber(ARGV[3])
for i = 1, #h, 2 do
  local k, v = h[i], h[i + 1]
  if k == 'next' then
    next = tonumber(v)
  elseif k == 'pause' then
    pause = tonumber(v)
  elseif string.sub(k, 1, 2) == 'w:' then
    local d, l, at = string.match(v, '^([^:]+):([^:]+):([^:]+)$')
    if at and tonumber(at) >= fresh then
      d, l = tonumber(d), tonumber(l)
      if delay == nil or d > delay then delay = d end
      if limit == nil or l < limit then limit = l end
    else
      redis.call('HDEL', KEYS[1], k)
    end
  end
end
delay = delay or tonumber(ARGV[1])
limit = limit or tonumber(ARGV[2])
local ready = math.max(next, pause)
if ready > now then
  return {0, string.format('%.0f', math.ceil(ready - now))}
end
if redis.call('ZCARD', KEYS[2]) >= limit then
  return {0, '-1'}
end
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[4])
redis.call('HSET', KEYS[1], 'next', string.format('%.0f', now + delay))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {1, tostring(redis.call('ZCARD', KEYS[2]))}
";

/// Gives a place back, with what the slot learned (if anything), under the
/// worker's own field.
const RELEASE: &str = r"
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[2] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('HSET', KEYS[1], 'w:' .. ARGV[5],
    ARGV[2] .. ':' .. ARGV[3] .. ':' .. string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
";

/// Pauses the slot for `ARGV[1]` µs from Redis's now.
const PAUSE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local till = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'pause')) or 0
if till > cur then
  redis.call('HSET', KEYS[1], 'pause', string.format('%.0f', till))
end
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', tonumber(ARGV[1]) / 1000 + tonumber(ARGV[2])))
return 1
";

/// The coordinator behind [`ConfigBuilder::fleet`].
struct RedisFleet(Arc<Inner>);

struct Inner {
    fleet: Fleet,
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
    /// Until when this worker throttles alone after a failure.
    down_until: Mutex<Option<Instant>>,
    down: AtomicBool,
    worker: String,
    next_lease: AtomicU64,
    reserve: Script,
    release: Script,
    pause: Script,
    /// Calls sent off the requests' path and not yet answered.
    pending: AtomicUsize,
    settled: Notify,
}

enum Reply {
    Granted(usize),
    Wait(Duration),
    Full,
}

impl Inner {
    fn new(fleet: Fleet, client: redis::Client) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Inner {
            fleet,
            client,
            conn: OnceCell::new(),
            down_until: Mutex::new(None),
            down: AtomicBool::new(false),
            worker: format!("{:x}-{seed:x}", std::process::id()),
            next_lease: AtomicU64::new(0),
            reserve: Script::new(RESERVE),
            release: Script::new(RELEASE),
            pause: Script::new(PAUSE),
            pending: AtomicUsize::new(0),
            settled: Notify::new(),
        }
    }

    fn keys(&self, key: &SlotKey) -> (String, String) {
        let hash = format!("autothrottle:{{{}:{}}}", self.fleet.name, key.as_str());
        let leases = format!("{hash}:leases");
        (hash, leases)
    }

    fn ttl_ms(&self) -> u64 {
        let ttl = self.fleet.idle_ttl.max(self.fleet.lease);
        u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.fleet.timeout))
            .set_response_timeout(Some(self.fleet.timeout))
            .set_number_of_retries(1);
        self.conn
            .get_or_try_init(|| ConnectionManager::new_with_config(self.client.clone(), config))
            .await
            .cloned()
    }

    /// Whether this worker currently throttles alone, and until when.
    fn down_until(&self) -> Option<Instant> {
        let until = *self.down_until.lock().unwrap_or_else(|p| p.into_inner());
        until.filter(|u| *u > Instant::now())
    }

    fn failed(&self, error: &dyn fmt::Display) {
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + self.fleet.retry_interval);
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                fleet = %self.fleet.name,
                %error,
                fail_closed = self.fleet.fail_closed,
                "Redis unreachable: {}",
                if self.fleet.fail_closed {
                    "requests wait for it"
                } else {
                    "throttling this worker on its own until it is back"
                }
            );
        }
    }

    fn answered(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!(fleet = %self.fleet.name, "Redis is back: sharing the slots again");
        }
    }

    /// Runs a script call on the shared connection, within the timeout.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        call: &redis::ScriptInvocation<'_>,
    ) -> Result<T, String> {
        let call = async {
            let mut conn = self.connection().await?;
            call.invoke_async(&mut conn).await
        };
        match tokio::time::timeout(self.fleet.timeout, call).await {
            Err(_) => Err(format!("no answer within {:?}", self.fleet.timeout)),
            Ok(Err(error)) => Err(error.to_string()),
            Ok(Ok(reply)) => Ok(reply),
        }
    }

    /// One reservation attempt, within the timeout.
    async fn try_reserve(&self, key: &SlotKey, local: Local, lease: &str) -> Result<Reply, String> {
        let (hash, leases) = self.keys(key);
        let mut call = self.reserve.key(&hash);
        call.key(&leases)
            .arg(micros(local.delay))
            .arg(local.limit.max(1) as u64)
            .arg(micros(self.fleet.lease))
            .arg(lease)
            .arg(self.ttl_ms());
        Ok(match self.invoke::<(i64, String)>(&call).await? {
            (1, in_flight) => Reply::Granted(in_flight.parse().unwrap_or(1)),
            (_, wait) => match wait.parse::<i64>() {
                Ok(us) if us >= 0 => Reply::Wait(Duration::from_micros(us as u64)),
                _ => Reply::Full,
            },
        })
    }

    async fn reserve(self: Arc<Self>, key: SlotKey, local: Local) -> Option<Lease> {
        let mut full_backoff = Duration::from_millis(5);
        loop {
            let id = format!(
                "{}-{}",
                self.worker,
                self.next_lease.fetch_add(1, Ordering::Relaxed)
            );
            if let Some(until) = self.down_until() {
                if !self.fleet.fail_closed {
                    return None;
                }
                tokio::time::sleep_until(until).await;
            }
            // Dropped with the call under way (the caller gave up), the
            // attempt gives back whatever place the script may have taken.
            let attempt = Attempt(Some((Arc::clone(&self), key.clone(), id.clone())));
            let reply = self.try_reserve(&key, local, &id).await;
            attempt.disarm();
            match reply {
                Ok(Reply::Granted(in_flight)) => {
                    self.answered();
                    let inner = Arc::clone(&self);
                    return Some(Lease::new(in_flight, move |learned| {
                        inner.give_back(key, id, learned)
                    }));
                }
                Ok(Reply::Wait(wait)) => {
                    self.answered();
                    full_backoff = Duration::from_millis(5);
                    tokio::time::sleep(wait.max(Duration::from_micros(100))).await;
                }
                Ok(Reply::Full) => {
                    self.answered();
                    tokio::time::sleep(full_backoff).await;
                    full_backoff = (full_backoff * 2).min(Duration::from_millis(100));
                }
                Err(error) => {
                    self.failed(&error);
                    // The script may still have run (a late answer): give
                    // the place back, or it would hold the fleet's limit
                    // until its lease ran out. Calls on one connection run
                    // in order, so this comes after the reservation.
                    Arc::clone(&self).give_back(key.clone(), id, None);
                    if !self.fleet.fail_closed {
                        return None;
                    }
                }
            }
        }
    }

    /// Gives a place back, off the request's path.
    fn give_back(self: Arc<Self>, key: SlotKey, id: String, learned: Option<Local>) {
        let inner = Arc::clone(&self);
        self.background(async move {
            let (hash, leases) = inner.keys(&key);
            let (delay, limit) = match learned {
                Some(l) => (micros(l.delay).to_string(), l.limit.max(1).to_string()),
                None => (String::new(), String::new()),
            };
            let mut call = inner.release.key(&hash);
            call.key(&leases)
                .arg(&id)
                .arg(delay)
                .arg(limit)
                .arg(inner.ttl_ms())
                .arg(&inner.worker);
            if let Err(error) = inner.invoke::<i64>(&call).await {
                inner.failed(&format!("giving a place back: {error}"));
            }
        });
    }

    /// Shares a pause of `wait`, off the requests' path.
    fn pause(self: Arc<Self>, key: SlotKey, wait: Duration) {
        let inner = Arc::clone(&self);
        self.background(async move {
            let (hash, _) = inner.keys(&key);
            let mut call = inner.pause.key(&hash);
            call.arg(micros(wait)).arg(inner.ttl_ms());
            match inner.invoke::<i64>(&call).await {
                Ok(_) => inner.answered(),
                Err(error) => inner.failed(&format!("sharing a pause: {error}")),
            }
        });
    }

    /// Runs `call` off the requests' path, counted until it ends (see
    /// [`flush`](Self::flush)). Without a runtime (the process is ending)
    /// it is dropped, and a place it would have given back expires.
    fn background(self: Arc<Self>, call: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        runtime.spawn(async move {
            call.await;
            if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                self.settled.notify_waiters();
            }
        });
    }

    async fn flush(&self) {
        loop {
            let settled = self.settled.notified();
            if self.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            settled.await;
        }
    }
}

/// A reservation call under way; see [`Inner::reserve`].
struct Attempt(Option<(Arc<Inner>, SlotKey, String)>);

impl Attempt {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if let Some((inner, key, id)) = self.0.take() {
            inner.give_back(key, id, None);
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX / 2)
        .min(u64::MAX / 2)
}

impl Coordinator for RedisFleet {
    fn reserve(&self, key: SlotKey, local: Local) -> BoxFuture<Option<Lease>> {
        Box::pin(Arc::clone(&self.0).reserve(key, local))
    }

    fn pause(&self, key: SlotKey, wait: Duration) {
        Arc::clone(&self.0).pause(key, wait);
    }

    fn flush(&self) -> BoxFuture<()> {
        let inner = Arc::clone(&self.0);
        Box::pin(async move { inner.flush().await })
    }
}

impl fmt::Debug for RedisFleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFleet")
            .field("fleet", &self.0.fleet)
            .field("worker", &self.0.worker)
            .field("down", &self.0.down.load(Ordering::Relaxed))
            .finish()
    }
}
