//! A fleet sharing slots through a real Redis (feature `redis`): four layer
//! instances, each with its own connection, against hyper servers on
//! 127.0.0.1. The tests use the Redis at `REDIS_URL` (`.ci/run` installs
//! `redis-server` and starts one on a free port), or else start their own
//! `redis-server` on a free port; the one that stops Redis mid-run always
//! starts its own, as does the one that pauses Redis. Every test uses a
//! fleet name of its own. On a machine where no Redis can be had (no
//! `REDIS_URL` and no `redis-server` to start), each such test says on
//! stderr that it is skipped and how to run it, and passes; with `CI` set
//! (as `.ci/run` sets it) that is a failure instead.
//!
//! These run on the real clock, since the schedule is Redis's. Bounds are
//! one-sided: a check that something waited at least so long cannot fail on
//! a slow machine. The schedule is exact in Redis's clock; the server sees
//! it through the network, so spacing at the server is checked with a
//! slack of 25 ms (the request that opens a gap can be held up on its way
//! by a busy machine).

mod common;
#[path = "support/redis.rs"]
mod redis_server;
#[path = "support/site.rs"]
mod site;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{skip, Scripted};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis_server::RedisServer;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};
use tower_autothrottle::policy::{MakePolicy, Outcome, Policy, Sample, Throttle};
use tower_autothrottle::redis::Fleet;
use tower_autothrottle::{AutoThrottleLayer, Config, ConfigError, SlotKey};

/// How much a gap at the server may fall short of the schedule: the
/// request that opens it can be held up on its way by a busy machine.
const GAP_SLACK: Duration = Duration::from_millis(25);

/// A fleet name no other test uses.
fn fleet_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether `test` can have a Redis: the one at `REDIS_URL`, or (`own`) one
/// it starts itself. If not, says the test is skipped (see [`skip`]).
fn redis_for(test: &str, own: bool) -> bool {
    if !own && std::env::var_os("REDIS_URL").is_some() {
        return true;
    }
    let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let runs = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !runs {
        let why = if own {
            format!("it starts its own Redis, and `{bin}` cannot be run")
        } else {
            format!("REDIS_URL is not set and `{bin}` cannot be run")
        };
        skip(
            &format!("fleet::{test}"),
            &why,
            "install redis-server (apt-get install redis-server), or set REDIS_SERVER to one; .ci/run does",
        );
    }
    runs
}

fn worker(fleet: Fleet, delay: Duration, limit: usize) -> AutoThrottleLayer {
    worker_with(Scripted::new(delay, limit), fleet)
}

/// A worker of `fleet` whose slots run `policy`.
fn worker_with(policy: impl MakePolicy, fleet: Fleet) -> AutoThrottleLayer {
    let config = Config::builder()
        .policy(policy)
        .fleet(fleet)
        .build()
        .unwrap();
    AutoThrottleLayer::new(config)
}

type Svc = tower_autothrottle::AutoThrottle<
    hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Empty<Bytes>,
    >,
>;

fn client(layer: &AutoThrottleLayer) -> Svc {
    ServiceBuilder::new()
        .layer(layer.clone())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>())
}

async fn get(svc: &Svc, url: &str) -> StatusCode {
    let request = Request::get(url).body(Empty::new()).unwrap();
    let response = svc.clone().oneshot(request).await.unwrap();
    let status = response.status();
    response.into_body().collect().await.unwrap();
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_hold_one_spacing_and_one_limit() {
    if !redis_for("four_workers_hold_one_spacing_and_one_limit", false) {
        return;
    }
    let redis = RedisServer::any().await;
    let host = site::host().await;
    let name = fleet_name();
    let delay = Duration::from_millis(40);
    let workers: Vec<Svc> = (0..4)
        .map(|_| client(&worker(Fleet::new(redis.url(), &name), delay, 2)))
        .collect();
    let mut tasks = Vec::new();
    for w in &workers {
        for _ in 0..8 {
            let (svc, url) = (w.clone(), host.url("/ok?ms=60"));
            tasks.push(tokio::spawn(async move { get(&svc, &url).await }));
        }
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 32);
    assert!(
        host.stats.max_active() <= 2,
        "in flight fleet-wide: {}",
        host.stats.max_active()
    );
    let gap = host.stats.min_gap().unwrap();
    assert!(gap + GAP_SLACK >= delay, "smallest gap {gap:?}");
    // 32 starts at least 40 ms apart in Redis's clock.
    let span = arrivals[31].0 - arrivals[0].0;
    assert!(span + GAP_SLACK >= delay * 31, "all 32 in {span:?}");
    // Without the fleet, each worker would have sent 2 at once.
    let key = format!("autothrottle:{{{name}:{}}}", host.base());
    let next: Option<String> = redis.query(redis::cmd("HGET").arg(&key).arg("next")).await;
    assert!(next.is_some(), "the schedule is in Redis under {key}");
    let ttl: i64 = redis.query(redis::cmd("PTTL").arg(&key)).await;
    assert!(ttl > 0, "the slot expires when idle: {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_place_comes_back_after_its_lease() {
    if !redis_for("a_dead_workers_place_comes_back_after_its_lease", false) {
        return;
    }
    let redis = RedisServer::any().await;
    let host = site::host().await;
    let name = fleet_name();
    let lease = Duration::from_secs(1);
    let fleet = || Fleet::new(redis.url(), &name).lease(lease);
    // Worker A took the only place and died holding it: its place is in
    // Redis (as the module docs lay it out: a member of the slot's lease
    // set, scored by its expiry on Redis's clock), and no process renews
    // it. (A worker alive in this process would renew it: a place held
    // by a live request is renewed for as long as it lasts.)
    let leases = format!("autothrottle:{{{name}:{}}}:leases", host.base());
    let placed = Instant::now();
    let (secs, micros): (u64, u64) = redis.query(&mut redis::cmd("TIME")).await;
    let expiry = secs * 1_000_000 + micros + lease.as_micros() as u64;
    let _: i64 = redis
        .query(
            redis::cmd("ZADD")
                .arg(&leases)
                .arg(expiry)
                .arg("dead-worker-0"),
        )
        .await;
    let b = client(&worker(fleet(), Duration::ZERO, 1));
    let started = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(10), get(&b, &host.url("/ok")))
        .await
        .expect("the place came back");
    assert_eq!(status, StatusCode::OK);
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 1);
    let waited = arrivals[0].0 - placed;
    assert!(
        waited + GAP_SLACK >= lease,
        "B went after {waited:?}, before the lease ran out"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_held_longer_than_its_lease_is_renewed() {
    if !redis_for("a_place_held_longer_than_its_lease_is_renewed", false) {
        return;
    }
    let redis = RedisServer::any().await;
    let host = site::host().await;
    let name = fleet_name();
    let lease = Duration::from_millis(300);
    let fleet = || Fleet::new(redis.url(), &name).lease(lease);
    // A fleet limit of 1: A's request takes 1.5 s, five leases.
    let a = client(&worker(fleet(), Duration::ZERO, 1));
    let b = client(&worker(fleet(), Duration::ZERO, 1));
    let slow = tokio::spawn({
        let a = a.clone();
        let url = host.url("/ok?ms=1500");
        async move { get(&a, &url).await }
    });
    // B asks once A's request is at the server.
    while host.stats.served() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(get(&b, &host.url("/ok")).await, StatusCode::OK);
    assert_eq!(slow.await.unwrap(), StatusCode::OK);
    let arrivals = host.stats.arrivals();
    assert_eq!(arrivals.len(), 2);
    let waited = arrivals[1].0 - arrivals[0].0;
    assert!(
        waited + GAP_SLACK >= Duration::from_millis(1500),
        "B went after {waited:?}, while A's renewed place was still in use"
    );
    assert_eq!(host.stats.max_active(), 1, "never two at once fleet-wide");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_one_worker_pauses_the_others() {
    if !redis_for("a_429_on_one_worker_pauses_the_others", false) {
        return;
    }
    let redis = RedisServer::any().await;
    let host = site::host().await;
    let name = fleet_name();
    let a = client(&worker(Fleet::new(redis.url(), &name), Duration::ZERO, 4));
    let b = client(&worker(Fleet::new(redis.url(), &name), Duration::ZERO, 4));
    assert_eq!(
        get(&a, &host.url("/status/429?retry-after=2")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The pause is shared off the request's path: wait until Redis has it.
    let key = format!("autothrottle:{{{name}:{}}}", host.base());
    for _ in 0..500 {
        let pause: Option<String> = redis.query(redis::cmd("HGET").arg(&key).arg("pause")).await;
        if pause.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(get(&b, &host.url("/ok")).await, StatusCode::OK);
    let arrivals = host.stats.arrivals();
    let waited = arrivals[1].0 - arrivals[0].0;
    assert!(waited >= Duration::from_secs(2), "B went after {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_go_on_alone_while_redis_is_down_and_share_again_after() {
    if !redis_for(
        "workers_go_on_alone_while_redis_is_down_and_share_again_after",
        true,
    ) {
        return;
    }
    let mut redis = RedisServer::start(None).await;
    let port = redis.port;
    let host = site::host().await;
    let name = fleet_name();
    let fleet = || {
        Fleet::new(redis.url(), &name)
            .timeout(Duration::from_millis(200))
            .retry_interval(Duration::from_millis(200))
    };
    let workers = [
        client(&worker(fleet(), Duration::from_millis(5), 2)),
        client(&worker(fleet(), Duration::from_millis(5), 2)),
    ];
    let closed = client(&worker(fleet().fail_closed(true), Duration::ZERO, 2));
    for w in &workers {
        assert_eq!(get(w, &host.url("/ok")).await, StatusCode::OK);
    }
    let key = format!("autothrottle:{{{name}:{}}}", host.base());
    redis.stop();
    // Down: the workers keep going on their own throttles...
    for _ in 0..5 {
        for w in &workers {
            assert_eq!(get(w, &host.url("/ok")).await, StatusCode::OK);
        }
    }
    // ...and a fail-closed worker waits.
    let waiting =
        tokio::time::timeout(Duration::from_millis(600), get(&closed, &host.url("/ok"))).await;
    assert!(
        waiting.is_err(),
        "a fail-closed worker went ahead without Redis"
    );
    // Back (an empty Redis on the same port): sharing resumes.
    let redis = RedisServer::start(Some(port)).await;
    let mut shared = false;
    for _ in 0..100 {
        for w in &workers {
            assert_eq!(get(w, &host.url("/ok")).await, StatusCode::OK);
        }
        let exists: i64 = redis.query(redis::cmd("EXISTS").arg(&key)).await;
        if exists == 1 {
            shared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(shared, "the workers write the slot to Redis again");
    let status = tokio::time::timeout(Duration::from_secs(10), get(&closed, &host.url("/ok")))
        .await
        .expect("the fail-closed worker goes once Redis is back");
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn bad_fleet_settings_are_typed_errors() {
    let err = Config::builder()
        .fleet(Fleet::new("not a url", "f"))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "redis_url");
    let err = Config::builder()
        .fleet(Fleet::new("redis://127.0.0.1/", ""))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "fleet");
    let err = Config::builder()
        .fleet(Fleet::new("redis://127.0.0.1/", "f").lease(Duration::ZERO))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_joins_obeys_what_the_fleet_learned() {
    if !redis_for("a_worker_that_joins_obeys_what_the_fleet_learned", false) {
        return;
    }
    let redis = RedisServer::any().await;
    let host = site::host().await;
    let name = fleet_name();
    // A has learned that the host wants 300 ms and one request at a time.
    let delay = Duration::from_millis(300);
    let a = worker(Fleet::new(redis.url(), &name), delay, 1);
    assert_eq!(get(&client(&a), &host.url("/ok")).await, StatusCode::OK);
    a.flush().await;
    // B's own policy would send 8 at once without a delay.
    let b = client(&worker(Fleet::new(redis.url(), &name), Duration::ZERO, 8));
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let (b, url) = (b.clone(), host.url("/ok?ms=20"));
            tokio::spawn(async move { get(&b, &url).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(host.stats.max_active(), 1, "one at a time, as A learned");
    let gap = host.stats.min_gap().unwrap();
    assert!(gap + GAP_SLACK >= delay, "smallest gap {gap:?}");
}

/// A policy that lets 8 go at once without a delay and keeps every sample
/// it is given, for the test to read.
#[derive(Clone, Debug, Default)]
struct Recording(std::sync::Arc<std::sync::Mutex<Vec<Sample>>>);

impl Recording {
    fn seen(&self) -> Vec<Sample> {
        self.0.lock().unwrap().clone()
    }
}

impl Policy for Recording {
    fn throttle(&self) -> Throttle {
        Throttle::new(0.0, 8)
    }
    fn on_sample(&mut self, sample: &Sample) -> Throttle {
        self.0.lock().unwrap().push(*sample);
        self.throttle()
    }
}

impl MakePolicy for Recording {
    fn name(&self) -> &'static str {
        "recording"
    }
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
    fn make_policy(&self, _: &SlotKey) -> Box<dyn Policy> {
        Box::new(self.clone())
    }
}

fn recording_worker(fleet: Fleet) -> (AutoThrottleLayer, Recording) {
    let policy = Recording::default();
    (worker_with(policy.clone(), fleet), policy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_learns_from_the_whole_fleets_answers() {
    if !redis_for("every_worker_learns_from_the_whole_fleets_answers", false) {
        return;
    }
    let redis = RedisServer::any().await;
    let host = site::host().await;
    let name = fleet_name();
    // A slow answer on a busy machine must not send a worker off on its
    // own (the default timeout is 250 ms): the counts below assume every
    // reservation reached Redis.
    let fleet = || Fleet::new(redis.url(), &name).timeout(Duration::from_secs(5));
    let (a, seen_a) = recording_worker(fleet());
    let (b, seen_b) = recording_worker(fleet());
    let (svc_a, svc_b) = (client(&a), client(&b));
    // A alone: four answers after 60 ms, one 503.
    for _ in 0..4 {
        assert_eq!(get(&svc_a, &host.url("/ok?ms=60")).await, StatusCode::OK);
    }
    assert_eq!(
        get(&svc_a, &host.url("/status/503")).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    a.flush().await;
    assert_eq!(
        seen_a.seen().len(),
        5,
        "A's policy saw its own answers once"
    );
    // B's first reservation brings A's five answers to B's policy, before
    // B's own.
    assert_eq!(get(&svc_b, &host.url("/ok")).await, StatusCode::OK);
    b.flush().await;
    let got = seen_b.seen();
    assert_eq!(got.len(), 6, "A's five, then B's own: {got:?}");
    // In the order Redis got them: each place goes back off the request's
    // path, from a task of its own, so on a busy machine the 503's may
    // reach Redis before the last 200's (the CI saw it once).
    let (ok, refused): (Vec<&Sample>, Vec<&Sample>) = got[..5]
        .iter()
        .partition(|s| s.status() == Some(StatusCode::OK));
    assert_eq!(
        (ok.len(), refused.len()),
        (4, 1),
        "A's four 200s and a 503: {got:?}"
    );
    for s in ok {
        assert!(s.latency_secs() >= 0.060, "A's latency, {s:?}");
        assert!(s.in_flight() >= 1);
    }
    assert_eq!(refused[0].status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(refused[0].outcome(), Outcome::Overload);
    assert!(
        got[5].latency_secs() < 0.060,
        "B's own answer, {:?}",
        got[5]
    );
    // Stamped in B's clock, no later than B's own answer.
    let own_at = got[5].at_secs().unwrap();
    assert!(got[..5].iter().all(|s| s.at_secs().unwrap() <= own_at));
    // A hears of B's answer (and of nothing of its own again).
    assert_eq!(get(&svc_a, &host.url("/ok")).await, StatusCode::OK);
    a.flush().await;
    let got = seen_a.seen();
    assert_eq!(got.len(), 7, "A's five, B's one, A's own: {got:?}");
    assert!(got[5].latency_secs() < 0.060 && got[5].status() == Some(StatusCode::OK));
    // Each sample goes to each worker once: nothing new comes again.
    assert_eq!(get(&svc_b, &host.url("/ok")).await, StatusCode::OK);
    b.flush().await;
    let got = seen_b.seen();
    assert_eq!(got.len(), 8, "B: A's sixth answer, then its own: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_given_up_during_its_reservation_leaves_no_place_behind() {
    // Its own Redis: pausing a shared one would hold up the other tests.
    if !redis_for(
        "a_request_given_up_during_its_reservation_leaves_no_place_behind",
        true,
    ) {
        return;
    }
    let redis = RedisServer::start(None).await;
    let host = site::host().await;
    let name = fleet_name();
    let layer = worker(
        Fleet::new(redis.url(), &name).timeout(Duration::from_secs(5)),
        Duration::ZERO,
        4,
    );
    let svc = client(&layer);
    // Connect and load the scripts first.
    assert_eq!(get(&svc, &host.url("/ok")).await, StatusCode::OK);
    layer.flush().await;
    // Make Redis hold every client's commands for 500 ms, so that the
    // next reservation waits in its queue...
    let _: String = redis
        .query(redis::cmd("CLIENT").arg("PAUSE").arg(500).arg("ALL"))
        .await;
    // ...and give the request up while its reservation is under way.
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), get(&svc, &host.url("/ok"))).await;
    assert!(gave_up.is_err(), "the reservation should still be waiting");
    layer.flush().await;
    let leases = format!("autothrottle:{{{name}:{}}}:leases", host.base());
    let held: i64 = redis.query(redis::cmd("ZCARD").arg(&leases)).await;
    assert_eq!(held, 0, "the place the script took was given back");
    assert_eq!(
        host.stats.served(),
        1,
        "the given-up request was never sent"
    );
}

/// The calls of these commands a Redis has run so far, those from scripts
/// included (`INFO commandstats`).
async fn command_calls(redis: &RedisServer, commands: &[&str]) -> u64 {
    let info: String = redis.query(redis::cmd("INFO").arg("commandstats")).await;
    info.lines()
        .filter(|line| {
            commands
                .iter()
                .any(|c| line.starts_with(&format!("cmdstat_{c}:")))
        })
        .filter_map(|line| {
            let calls = line.split_once("calls=")?.1;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_a_place_hears_of_its_release_instead_of_polling() {
    // Its own Redis: the test counts the script calls Redis runs.
    if !redis_for(
        "a_request_waiting_for_a_place_hears_of_its_release_instead_of_polling",
        true,
    ) {
        return;
    }
    let redis = RedisServer::start(None).await;
    let host = site::host().await;
    let name = fleet_name();
    let a = worker(Fleet::new(redis.url(), &name), Duration::ZERO, 1);
    let b = worker(Fleet::new(redis.url(), &name), Duration::ZERO, 1);
    let (svc_a, svc_b) = (client(&a), client(&b));
    // Both connect and subscribe first (a readiness wait on Redis's own
    // count of subscribers, not a timing check).
    assert_eq!(get(&svc_a, &host.url("/ok")).await, StatusCode::OK);
    assert_eq!(get(&svc_b, &host.url("/ok")).await, StatusCode::OK);
    a.flush().await;
    b.flush().await;
    let channel = format!("autothrottle:{name}:freed");
    for _ in 0..500 {
        let (_, subscribers): (String, i64) = redis
            .query(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel))
            .await;
        if subscribers == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A holds the fleet's only place for 3 s; B waits for it.
    let hold = tokio::spawn({
        let (svc, url) = (svc_a.clone(), host.url("/ok?ms=3000"));
        async move { get(&svc, &url).await }
    });
    while host.stats.served() < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let scripts = ["evalsha", "eval"];
    let before = command_calls(&redis, &scripts).await;
    assert_eq!(get(&svc_b, &host.url("/ok")).await, StatusCode::OK);
    assert_eq!(hold.await.unwrap(), StatusCode::OK);
    a.flush().await;
    let calls = command_calls(&redis, &scripts).await - before;
    assert_eq!(host.stats.max_active(), 1, "one place fleet-wide");
    // Polling (5 ms doubling to 100 ms) asks about 33 times in 3 s; asking
    // again only at word of a release, or every 500 ms failing that, about
    // 8 times (A's release and its reservation included).
    assert!(calls <= 16, "{calls} script calls while B waited 3 s");
    // And the release was announced to the waiting worker.
    assert!(
        command_calls(&redis, &["publish"]).await >= 1,
        "no release was announced"
    );
}
