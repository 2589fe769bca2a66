//! The fleet's Redis client: the connection, the script calls on and off
//! the request's path, and what happens when Redis fails.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use tokio::sync::{Notify, OnceCell};
use tokio::time::Instant;

use super::Fleet;
use crate::fleet::{Coordinator, Learned, Lease, Local, Remote};
use crate::key::{BoxFuture, SlotKey};
use crate::policy::{Outcome, Sample};
use crate::time::secs_to_duration;

/// Reserves a dispatch, and brings the other workers' samples since this
/// one last heard (the script's header says the reply's shape).
/// The fleet's delay and limit are the most careful of the workers' fresh
/// words (the longest delay, the lowest limit); words older than a lease
/// (`ARGV[3]`) are dropped.
const RESERVE: &str = include_str!("reserve.lua");

/// Gives a place back, with what the slot learned (if anything), under the
/// worker's own field, and the sample the slot's policy took to the slot's
/// stream.
const RELEASE: &str = include_str!("release.lua");

/// Pauses the slot for `ARGV[1]` µs from Redis's now.
const PAUSE: &str = include_str!("pause.lua");

/// Renews a place still in use for another lease.
const RENEW: &str = include_str!("renew.lua");

/// How long a request that found the fleet's limit reached waits for word
/// of a place given back before it asks again anyway: a place can also come
/// back by its lease running out (a worker that died), which nobody
/// announces, and a message can be lost while the subscription reconnects.
const FREED_FALLBACK: Duration = Duration::from_millis(500);

/// The shortest time between two sweeps that renew the places in use.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(10);

/// The coordinator behind [`ConfigBuilder::fleet`](crate::ConfigBuilder::fleet).
pub(super) struct RedisFleet(Arc<Inner>);

impl RedisFleet {
    pub(super) fn new(fleet: Fleet, client: redis::Client) -> Self {
        RedisFleet(Arc::new(Inner::new(fleet, client)))
    }
}

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
    renew: Script,
    /// The places this worker holds, by lease id: their slot, and when their
    /// lease was last set. A sweep renews those older than a third of the
    /// lease, so that a request (or a body streaming) longer than the lease
    /// keeps counting against the fleet's limit.
    live: Mutex<std::collections::HashMap<String, (SlotKey, Instant)>>,
    /// The sweep was started.
    sweeping: AtomicBool,
    /// Calls sent off the requests' path and not yet answered.
    pending: AtomicUsize,
    settled: Notify,
    /// Word of places given back anywhere in the fleet, on this channel.
    freed: Freed,
    freed_channel: String,
}

/// The wake-ups of requests waiting for a place: every release publishes
/// the slot's key on the fleet's channel (`autothrottle:F:freed`), and the
/// worker's subscription wakes one of its own requests waiting on that
/// slot, which asks Redis again.
#[derive(Default)]
struct Freed {
    /// The subscription is up: waiters wait for word instead of polling.
    listening: AtomicBool,
    /// The subscription's task was started.
    started: AtomicBool,
    /// Per slot (its hash key) that requests of this worker are reserving:
    /// one wake-up per place given back.
    slots: Mutex<std::collections::HashMap<String, Arc<Notify>>>,
}

/// A request's interest in the places of one slot, for as long as it
/// reserves: word of a place given back that comes while its call is under
/// way is kept (as `Notify`'s permit), so none is missed.
struct Interest<'a> {
    freed: &'a Freed,
    hash: String,
    notify: Arc<Notify>,
}

impl<'a> Interest<'a> {
    fn new(freed: &'a Freed, hash: String) -> Self {
        let notify = {
            let mut slots = freed.slots.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(slots.entry(hash.clone()).or_default())
        };
        Interest {
            freed,
            hash,
            notify,
        }
    }
}

impl Drop for Interest<'_> {
    fn drop(&mut self) {
        let mut slots = self.freed.slots.lock().unwrap_or_else(|p| p.into_inner());
        // Only the table and this request hold it: no one else waits.
        if Arc::strong_count(&self.notify) == 2 {
            slots.remove(&self.hash);
        }
    }
}

enum Reply {
    Granted(usize, Option<Duration>, Vec<Remote>),
    Wait(Duration),
    Full,
}

/// Whether the server that answered `INFO` with `info` can hold a fleet:
/// Redis 5.0 or later, not a cluster (see the module docs). A server that
/// does not say is given the benefit of the doubt.
fn supported(info: &str) -> Result<(), String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    if let Some(version) = field("redis_version") {
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        if major.is_some_and(|major| major < 5) {
            return Err(format!(
                "Redis {version} is too old for a fleet: it needs 5.0 or later \
                 (its scripts read TIME before writing)"
            ));
        }
    }
    if field("cluster_enabled") == Some("1") {
        return Err(
            "Redis Cluster is not supported for a fleet: the worker's connection \
                    talks to one node; use a single Redis (replicas are fine)"
                .to_owned(),
        );
    }
    Ok(())
}

/// A worker id no other worker has: 128 random bits (the standard
/// library's hasher keys, drawn from the OS's randomness once per process
/// and stepped for each hasher), mixed with the time and a counter of this
/// process. The pid alone is not enough: in containers it is usually 1.
fn worker_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let made = MADE.fetch_add(1, Ordering::Relaxed);
    let mut halves = [0u64; 2];
    for half in &mut halves {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u64(made);
        hasher.write_u32(std::process::id());
        *half = hasher.finish();
    }
    format!("{:016x}{:016x}", halves[0], halves[1])
}

impl Inner {
    fn new(fleet: Fleet, client: redis::Client) -> Self {
        Inner {
            client,
            conn: OnceCell::new(),
            down_until: Mutex::new(None),
            down: AtomicBool::new(false),
            worker: worker_id(),
            next_lease: AtomicU64::new(0),
            reserve: Script::new(RESERVE),
            release: Script::new(RELEASE),
            pause: Script::new(PAUSE),
            renew: Script::new(RENEW),
            live: Mutex::new(std::collections::HashMap::new()),
            sweeping: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            settled: Notify::new(),
            freed: Freed::default(),
            freed_channel: format!("autothrottle:{}:freed", fleet.name),
            fleet,
        }
    }

    /// Starts the subscription to word of places given back, once. It
    /// holds the worker weakly and ends when the worker goes; when Redis
    /// drops it, waiters poll until it is back (tried again every
    /// [`Fleet::retry_interval`]).
    fn listen(self: &Arc<Self>) {
        if self.freed.started.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.freed.started.store(false, Ordering::Relaxed);
            return;
        };
        let weak = Arc::downgrade(self);
        let (client, channel) = (self.client.clone(), self.freed_channel.clone());
        let (timeout, retry) = (self.fleet.timeout, self.fleet.retry_interval);
        runtime.spawn(async move {
            loop {
                let subscribe = async {
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&channel).await?;
                    Ok::<_, redis::RedisError>(pubsub.into_on_message())
                };
                if let Ok(Ok(mut messages)) = tokio::time::timeout(timeout, subscribe).await {
                    match weak.upgrade() {
                        Some(inner) => inner.freed.listening.store(true, Ordering::Relaxed),
                        None => return,
                    }
                    loop {
                        let next = std::future::poll_fn(|cx| {
                            futures_core::Stream::poll_next(std::pin::Pin::new(&mut messages), cx)
                        });
                        // Looks up now and then whether the worker is gone.
                        let message = match tokio::time::timeout(Duration::from_secs(1), next).await
                        {
                            Err(_) if weak.strong_count() == 0 => return,
                            Err(_) => continue,
                            Ok(None) => break,
                            Ok(Some(message)) => message,
                        };
                        let Some(inner) = weak.upgrade() else { return };
                        if let Ok(hash) = message.get_payload::<String>() {
                            let slots = inner.freed.slots.lock().unwrap_or_else(|p| p.into_inner());
                            if let Some(notify) = slots.get(&hash) {
                                notify.notify_one();
                            }
                        }
                    }
                    // The connection ended: poll until it is back.
                    match weak.upgrade() {
                        Some(inner) => inner.freed.listening.store(false, Ordering::Relaxed),
                        None => return,
                    }
                }
                tokio::time::sleep(retry).await;
                if weak.strong_count() == 0 {
                    return;
                }
            }
        });
    }

    fn keys(&self, key: &SlotKey) -> (String, String) {
        let hash = format!("autothrottle:{{{}:{}}}", self.fleet.name, key.as_str());
        let leases = format!("{hash}:leases");
        (hash, leases)
    }

    /// The slot's stream of samples, beside its hash (same hash tag).
    fn samples_key(hash: &str) -> String {
        format!("{hash}:samples")
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
            .get_or_try_init(|| async {
                let mut manager =
                    ConnectionManager::new_with_config(self.client.clone(), config).await?;
                let info: String = redis::cmd("INFO").query_async(&mut manager).await?;
                if let Err(why) = supported(&info) {
                    tracing::error!(fleet = %self.fleet.name, "{why}");
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "unsupported Redis",
                        why,
                    )));
                }
                Ok(manager)
            })
            .await
            .cloned()
    }

    /// Whether this worker currently throttles alone, and until when.
    fn down_until(&self) -> Option<Instant> {
        let until = *self.down_until.lock().unwrap_or_else(|p| p.into_inner());
        until.filter(|u| *u > Instant::now())
    }

    fn failed(&self, error: &dyn fmt::Display) {
        *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(crate::time::after(
            Instant::now(),
            self.fleet.retry_interval,
        ));
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
            .key(Inner::samples_key(&hash))
            .arg(micros(local.delay))
            .arg(local.limit.max(1) as u64)
            .arg(micros(self.fleet.lease))
            .arg(lease)
            .arg(self.ttl_ms())
            .arg(&self.worker);
        type Answer = (i64, String, String, String, Vec<String>);
        Ok(match self.invoke::<Answer>(&call).await? {
            (1, in_flight, gap, now, samples) => Reply::Granted(
                in_flight.parse().unwrap_or(1),
                gap.parse::<u64>().ok().map(Duration::from_micros),
                remote_samples(&now, &samples),
            ),
            (_, wait, _, _, _) => match wait.parse::<i64>() {
                Ok(us) if us >= 0 => Reply::Wait(Duration::from_micros(us as u64)),
                _ => Reply::Full,
            },
        })
    }

    async fn reserve(self: Arc<Self>, key: SlotKey, local: Local) -> Option<Lease> {
        let mut full_backoff = Duration::from_millis(5);
        // Set before the first call, so that a place given back while it is
        // under way is not missed.
        let interest = Interest::new(&self.freed, self.keys(&key).0);
        self.listen();
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
                Ok(Reply::Granted(in_flight, gap, remote)) => {
                    self.answered();
                    self.hold(&key, &id);
                    let inner = Arc::clone(&self);
                    let lease = Lease::new(in_flight, move |learned| {
                        inner.live().remove(&id);
                        inner.give_back(key, id, learned)
                    });
                    return Some(lease.with_gap(gap).with_remote(remote));
                }
                Ok(Reply::Wait(wait)) => {
                    self.answered();
                    full_backoff = Duration::from_millis(5);
                    tokio::time::sleep(wait.max(Duration::from_micros(100))).await;
                }
                Ok(Reply::Full) => {
                    self.answered();
                    if self.freed.listening.load(Ordering::Relaxed) {
                        // Until a place is given back (or, failing word of
                        // it, a while).
                        let _ =
                            tokio::time::timeout(FREED_FALLBACK, interest.notify.notified()).await;
                    } else {
                        tokio::time::sleep(full_backoff).await;
                        full_backoff = (full_backoff * 2).min(Duration::from_millis(100));
                    }
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

    fn live(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (SlotKey, Instant)>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a place granted, and starts the sweep that renews the places
    /// in use, once.
    fn hold(self: &Arc<Self>, key: &SlotKey, id: &str) {
        self.live()
            .insert(id.to_owned(), (key.clone(), Instant::now()));
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.sweeping.store(false, Ordering::Relaxed);
            return;
        };
        // The sweep holds the worker weakly: it ends when the worker goes.
        let weak = Arc::downgrade(self);
        let every = (self.fleet.lease / 3).max(MIN_RENEW_EVERY);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                inner.renew_old(every).await;
            }
        });
    }

    /// Renews the places whose lease was set more than `age` ago.
    async fn renew_old(&self, age: Duration) {
        let now = Instant::now();
        let old: Vec<(String, SlotKey)> = self
            .live()
            .iter()
            .filter(|(_, (_, set))| now.saturating_duration_since(*set) >= age)
            .map(|(id, (key, _))| (id.clone(), key.clone()))
            .collect();
        for (id, key) in old {
            let (hash, leases) = self.keys(&key);
            let mut call = self.renew.key(&hash);
            call.key(&leases)
                .arg(&id)
                .arg(micros(self.fleet.lease))
                .arg(self.ttl_ms());
            match self.invoke::<i64>(&call).await {
                Ok(1) => {
                    if let Some(entry) = self.live().get_mut(&id) {
                        entry.1 = Instant::now();
                    }
                }
                // Gone from Redis (expired while Redis was away): nothing
                // to renew.
                Ok(_) => {
                    self.live().remove(&id);
                }
                // Redis is away: the reservations say so; try again at the
                // next sweep.
                Err(_) => {}
            }
        }
    }

    /// Gives a place back, off the request's path.
    fn give_back(self: Arc<Self>, key: SlotKey, id: String, learned: Option<Learned>) {
        let inner = Arc::clone(&self);
        self.background(async move {
            let (hash, leases) = inner.keys(&key);
            let (delay, limit) = match learned {
                Some(l) => (
                    micros(l.local.delay).to_string(),
                    l.local.limit.max(1).to_string(),
                ),
                None => (String::new(), String::new()),
            };
            let (sample, age) = match learned.and_then(|l| l.sample) {
                Some((sample, at)) => (
                    encode_sample(&sample),
                    micros(Instant::now().saturating_duration_since(at)),
                ),
                None => (String::new(), 0),
            };
            let mut call = inner.release.key(&hash);
            call.key(&leases)
                .key(Inner::samples_key(&hash))
                .arg(&id)
                .arg(delay)
                .arg(limit)
                .arg(inner.ttl_ms())
                .arg(&inner.worker)
                .arg(&inner.freed_channel)
                .arg(sample)
                .arg(age);
            // A failed release does not make the worker throttle alone
            // (its reservations say whether Redis is there): it is tried
            // twice more, and if those fail too the place expires with its
            // lease, holding the fleet's limit until then.
            let mut wait = Duration::from_millis(50);
            for attempt in 0..3 {
                match inner.invoke::<i64>(&call).await {
                    Ok(_) => return,
                    Err(error) if attempt == 2 => {
                        tracing::warn!(
                            fleet = %inner.fleet.name,
                            slot = %key,
                            %error,
                            "a place could not be given back; it expires with its lease ({:?})",
                            inner.fleet.lease,
                        );
                    }
                    Err(_) => {
                        tokio::time::sleep(wait).await;
                        wait *= 4;
                    }
                }
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

/// A sample as the slot's stream keeps it (after the `at_us:` the release
/// puts first): `latency_us:status:outcome:in_flight:pause_us`, with status
/// 0 for an answer that had none and the outcome `s`, `o` or `i`
/// (success, overload, ignore).
fn encode_sample(sample: &Sample) -> String {
    let outcome = match sample.outcome() {
        Outcome::Success => 's',
        Outcome::Overload => 'o',
        _ => 'i',
    };
    format!(
        "{}:{}:{outcome}:{}:{}",
        micros(secs_to_duration(sample.latency_secs())),
        sample.status().map_or(0, |s| s.as_u16()),
        sample.in_flight(),
        micros(secs_to_duration(sample.pause_secs())),
    )
}

/// The samples of a reservation's answer (see [`encode_sample`]), each
/// with its age at Redis's `now`; one that does not parse (another
/// version's worker) is left out.
fn remote_samples(now: &str, samples: &[String]) -> Vec<Remote> {
    let Ok(now) = now.parse::<u64>() else {
        return Vec::new();
    };
    samples
        .iter()
        .filter_map(|s| {
            let parsed = decode_sample(s);
            if parsed.is_none() {
                tracing::debug!(sample = %s, "a fleet sample that does not parse is left out");
            }
            let (at, sample) = parsed?;
            Some(Remote {
                age: Duration::from_micros(now.saturating_sub(at)),
                sample,
            })
        })
        .collect()
}

fn decode_sample(s: &str) -> Option<(u64, Sample)> {
    let mut fields = s.split(':');
    let mut next = || fields.next();
    let at = next()?.parse::<u64>().ok()?;
    let latency = next()?.parse::<u64>().ok()? as f64 / 1e6;
    let status = next()?.parse::<u16>().ok()?;
    let outcome = match next()? {
        "s" => Outcome::Success,
        "o" => Outcome::Overload,
        "i" => Outcome::Ignore,
        _ => return None,
    };
    let in_flight = next()?.parse::<usize>().ok()?;
    let pause = next()?.parse::<u64>().ok()? as f64 / 1e6;
    if next().is_some() {
        return None;
    }
    let sample = match status {
        0 => Sample::error(latency, outcome),
        code => Sample::from_secs_f64(latency, http::StatusCode::from_u16(code).ok()?),
    };
    Some((
        at,
        sample
            .with_outcome(outcome)
            .with_in_flight(in_flight)
            .with_pause(pause),
    ))
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;

    use super::{decode_sample, encode_sample, remote_samples, supported, worker_id};
    use crate::policy::{Outcome, Sample};

    #[test]
    fn a_sample_crosses_the_fleet_as_it_was_taken() {
        let samples = [
            Sample::from_secs_f64(0.123_456, StatusCode::OK).with_in_flight(7),
            Sample::from_secs_f64(0.002, StatusCode::TOO_MANY_REQUESTS)
                .with_in_flight(1)
                .with_pause(1.5),
            Sample::from_secs_f64(0.3, StatusCode::SERVICE_UNAVAILABLE)
                .with_outcome(Outcome::Ignore)
                .with_in_flight(3),
            Sample::error(2.0, Outcome::Overload).with_in_flight(4),
        ];
        for sample in samples {
            let (at, back) = decode_sample(&format!("1000:{}", encode_sample(&sample))).unwrap();
            assert_eq!(at, 1000);
            assert_eq!(back, sample);
        }
        let remote = remote_samples(
            "1500000",
            &[
                format!("1000000:{}", encode_sample(&samples[0])),
                "900000:12:200:s:1".to_owned(),
                "900000:12:200:x:1:0".to_owned(),
                "900000:12:200:s:1:0:9".to_owned(),
                "garbage".to_owned(),
                format!("2000000:{}", encode_sample(&samples[1])),
            ],
        );
        assert_eq!(remote.len(), 2, "the four malformed ones are left out");
        assert_eq!(remote[0].age, Duration::from_millis(500));
        assert_eq!(remote[0].sample, samples[0]);
        assert_eq!(remote[1].age, Duration::ZERO, "from ahead of now: age 0");
        assert!(remote_samples("not a time", &["1:1:200:s:1:0".to_owned()]).is_empty());
    }

    #[test]
    fn redis_5_and_later_on_one_node_are_supported() {
        let info = |version: &str, cluster: &str| {
            format!(
                "# Server\r\nredis_version:{version}\r\nredis_mode:standalone\r\n\
                 # Cluster\r\ncluster_enabled:{cluster}\r\n"
            )
        };
        assert!(supported(&info("7.2.4", "0")).is_ok());
        assert!(supported(&info("5.0.0", "0")).is_ok());
        assert!(supported(&info("4.0.9", "0"))
            .unwrap_err()
            .contains("5.0 or later"));
        assert!(supported(&info("7.2.4", "1"))
            .unwrap_err()
            .contains("Cluster"));
        // A server that does not say is not refused.
        assert!(supported("# Server\r\nsome_other:1\r\n").is_ok());
    }

    #[test]
    fn worker_ids_are_128_random_bits_and_differ() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| worker_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
