//! Per-request overhead of the layer against the bare inner service,
//! tower's `ConcurrencyLimit` and tower-acc's adaptive `ConcurrencyLimit`,
//! all around the same always-ready `service_fn`.
//!
//! ```text
//! cargo bench --bench overhead
//! ```
//!
//! The throttle runs with a zero delay and a limit that never binds (a
//! fixed policy, so that the figure is the layer's, not a policy's), and,
//! for reference, with the default policy. Cases:
//!
//! - `one_host`: one task, every request to the same host, through one
//!   service reused (`ready().call()`);
//! - `one_host_oneshot`: the same, but each request through a fresh clone
//!   of the service (`svc.clone().oneshot(request)`), as the README's
//!   examples and most users do: a clone starts with no memory of the
//!   slot its last request went to;
//! - `10k_hosts`: one task, requests spread round-robin over 10 000 hosts
//!   (10 000 slots for the throttle);
//! - `contended`: 8 tasks on a 2-worker runtime, all on one host; the time
//!   is per request, over all tasks (each task parses its own URI, so that
//!   the request's `Uri` clone bumps no count the other worker writes);
//! - `contended_64`: the same with 64 tasks.

mod common;

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{tower_acc_layer, Fixed};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use http::{Request, Response, Uri};
use http_body_util::Empty;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, Config};

type Req = Request<()>;
type Res = Response<Empty<Bytes>>;

fn inner(
) -> impl Service<Req, Response = Res, Error = Infallible, Future = Ready<Result<Res, Infallible>>>
       + Clone
       + Send
       + 'static {
    tower::service_fn(|_req: Req| ready(Ok::<_, Infallible>(Response::new(Empty::new()))))
}

fn uris(hosts: usize) -> Vec<Uri> {
    (0..hosts)
        .map(|i| format!("http://host-{i}.example/page").parse().unwrap())
        .collect()
}

fn request(uri: &Uri) -> Req {
    let mut req = Request::new(());
    *req.uri_mut() = uri.clone();
    req
}

/// Sends `n` requests through `svc`, round-robin over `uris`.
async fn run<S, B>(svc: &mut S, uris: &[Uri], n: u64)
where
    S: Service<Req, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    for i in 0..n {
        let uri = &uris[i as usize % uris.len()];
        let response = svc.ready().await.unwrap().call(request(uri)).await.unwrap();
        drop(response);
    }
}

/// Sends `n` requests, each through a fresh clone of `svc`.
async fn run_oneshot<S, B>(svc: &S, uris: &[Uri], n: u64)
where
    S: Service<Req, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    for i in 0..n {
        let uri = &uris[i as usize % uris.len()];
        let response = svc.clone().oneshot(request(uri)).await.unwrap();
        drop(response);
    }
}

macro_rules! variants {
    ($f:ident) => {{
        let throttle_fixed =
            AutoThrottleLayer::new(Config::builder().policy(Fixed::unbound()).build().unwrap());
        let throttle_default = AutoThrottleLayer::new(Config::default());
        $f!("bare", inner());
        $f!(
            "tower_concurrency_limit",
            tower::limit::ConcurrencyLimitLayer::new(1 << 20).layer(inner())
        );
        $f!("tower_acc_aimd", tower_acc_layer().layer(inner()));
        $f!("autothrottle_fixed", throttle_fixed.layer(inner()));
        $f!("autothrottle_default", throttle_default.layer(inner()));
    }};
}

fn sequential(c: &mut Criterion, name: &str, hosts: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let uris = uris(hosts);
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    macro_rules! one {
        ($label:expr, $svc:expr) => {{
            let mut svc = $svc;
            // Warm up: every slot exists before timing.
            rt.block_on(run(&mut svc, &uris, hosts as u64));
            group.bench_function(BenchmarkId::from_parameter($label), |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        run(&mut svc, &uris, iters).await;
                        start.elapsed()
                    })
                })
            });
        }};
    }
    variants!(one);
    group.finish();
}

fn oneshot(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let uris = uris(1);
    let mut group = c.benchmark_group("one_host_oneshot");
    group.throughput(Throughput::Elements(1));
    macro_rules! one {
        ($label:expr, $svc:expr) => {{
            let svc = $svc;
            rt.block_on(run_oneshot(&svc, &uris, 1));
            group.bench_function(BenchmarkId::from_parameter($label), |b| {
                b.iter_custom(|iters| {
                    rt.block_on(async {
                        let start = Instant::now();
                        run_oneshot(&svc, &uris, iters).await;
                        start.elapsed()
                    })
                })
            });
        }};
    }
    variants!(one);
    group.finish();
}

fn contended(c: &mut Criterion, name: &str, tasks: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    macro_rules! one {
        ($label:expr, $svc:expr) => {{
            let svc = $svc;
            group.bench_function(BenchmarkId::from_parameter($label), |b| {
                b.iter_custom(|iters| {
                    let per_task = iters.div_ceil(tasks);
                    rt.block_on(async {
                        let start = Instant::now();
                        let handles: Vec<_> = (0..tasks)
                            .map(|_| {
                                let mut svc = svc.clone();
                                // Parsed afresh for each task: clones of
                                // one shared `Uri` would bump a reference
                                // count every task writes, and the bench
                                // would time that.
                                let uris = uris(1);
                                tokio::spawn(async move { run(&mut svc, &uris, per_task).await })
                            })
                            .collect();
                        for handle in handles {
                            handle.await.unwrap();
                        }
                        // Per request: scale to the `iters` criterion asked for.
                        start
                            .elapsed()
                            .mul_f64(iters as f64 / (per_task * tasks) as f64)
                    })
                })
            });
        }};
    }
    variants!(one);
    group.finish();
}

fn benches(c: &mut Criterion) {
    sequential(c, "one_host", 1);
    oneshot(c);
    sequential(c, "10k_hosts", 10_000);
    contended(c, "contended", 8);
    contended(c, "contended_64", 64);
}

criterion_group! {
    name = overhead;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(overhead);
