//! The layer's hot path alone, for a profiler: one task sends requests to
//! one host through the layer (zero delay, a limit that never binds) around
//! an always-ready `service_fn`, and prints the mean time per request.
//!
//! ```text
//! cargo bench --bench hot_path                      # 1 000 000 requests
//! cargo bench --bench hot_path -- oneshot           # each through svc.clone().oneshot()
//! cargo bench --bench hot_path -- contended         # 64 tasks on 2 workers (TASKS=N: N)
//! HOSTS=10000 cargo bench --bench hot_path          # round-robin over 10 000 hosts
//! LAYER=tower-acc cargo bench --bench hot_path      # tower-acc's AIMD instead (or LAYER=bare;
//!                                                   # with `contended` too)
//! cargo bench --bench hot_path --no-run             # then, with the path it prints:
//! valgrind --tool=callgrind target/release/deps/hot_path-HASH 100000
//! callgrind_annotate --inclusive=yes callgrind.out.PID | head -60
//! ```
//!
//! callgrind counts instructions, so its totals repeat exactly from run to
//! run whatever else the machine does (divide by the request count).

mod common;

use std::convert::Infallible;
use std::future::ready;
use std::time::Instant;

use bytes::Bytes;
use common::{tower_acc_layer, Fixed};
use http::{Request, Response, Uri};
use http_body_util::Empty;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, Config};

fn main() {
    // `cargo bench` passes `--bench`; a number is the request count.
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    // `oneshot`: each request through a fresh clone of the service.
    let oneshot = std::env::args().any(|a| a == "oneshot");
    // `contended`: 64 tasks on a 2-worker runtime share the host (or hosts).
    let contended = std::env::args().any(|a| a == "contended");
    let rt = if contended {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let layer = AutoThrottleLayer::new(Config::builder().policy(Fixed::unbound()).build().unwrap());
    let svc = layer.layer(inner());
    // `HOSTS=N` in the environment: requests round-robin over N hosts, each
    // request to another slot than the last.
    let hosts: Vec<Uri> = (0..std::env::var("HOSTS")
        .ok()
        .and_then(|h| h.parse().ok())
        .unwrap_or(1usize)
        .max(1))
        .map(|i| format!("http://host-{i}.example/page").parse().unwrap())
        .collect();
    if hosts.len() > 1 {
        // Every slot exists before the count starts.
        rt.block_on(sequential(svc.clone(), &hosts, hosts.len() as u64, false));
    }
    let start = Instant::now();
    if contended {
        // `TASKS=N` in the environment: N tasks instead of 64.
        let tasks_n: u64 = std::env::var("TASKS")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(64)
            .max(1);
        // (`LAYER` chooses the service here too.)
        match std::env::var("LAYER").as_deref() {
            Ok("bare") => rt.block_on(spread(inner(), &hosts, n, tasks_n)),
            Ok("tower-acc") => {
                rt.block_on(spread(tower_acc_layer().layer(inner()), &hosts, n, tasks_n))
            }
            _ => rt.block_on(spread(svc, &hosts, n, tasks_n)),
        }
        let per = start.elapsed() / (n / tasks_n * tasks_n) as u32;
        println!("hot_path: {n} requests from {tasks_n} tasks on 2 workers, {per:?} per request");
        return;
    }
    // `LAYER=bare` or `LAYER=tower-acc` in the environment: the same loop
    // without the layer, or through tower-acc's AIMD limiter, to count
    // their instructions beside the layer's.
    match std::env::var("LAYER").as_deref() {
        Ok("bare") => rt.block_on(sequential(inner(), &hosts, n, oneshot)),
        Ok("tower-acc") => rt.block_on(sequential(
            tower_acc_layer().layer(inner()),
            &hosts,
            n,
            oneshot,
        )),
        _ => rt.block_on(sequential(svc, &hosts, n, oneshot)),
    }
    let per = start.elapsed() / n as u32;
    let how = if oneshot {
        ", each through a fresh clone"
    } else {
        ""
    };
    println!("hot_path: {n} requests{how}, {per:?} per request");
}

type Res = Response<Empty<Bytes>>;
type Answer = std::future::Ready<Result<Res, Infallible>>;
type Inner = tower::util::ServiceFn<fn(Request<()>) -> Answer>;

/// The always-ready inner service.
fn inner() -> Inner {
    fn answer(_req: Request<()>) -> Answer {
        ready(Ok(Response::new(Empty::new())))
    }
    tower::service_fn(answer as fn(_) -> _)
}

/// `n` requests from `tasks` tasks spawned on the runtime, each sending its
/// share one after another through its own clone of `svc`.
async fn spread<S, B>(svc: S, hosts: &[Uri], n: u64, tasks: u64)
where
    S: Service<Request<()>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: Send + 'static,
{
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            // Each task parses its own URIs: a clone of a shared `Uri` bumps
            // a reference count that every task would write, and the bench
            // would time that.
            let (svc, hosts) = (svc.clone(), own_copies(hosts));
            tokio::spawn(async move { sequential(svc, &hosts, n / tasks, false).await })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
}

/// The same URIs, parsed afresh: no buffer shared with `hosts`.
fn own_copies(hosts: &[Uri]) -> Vec<Uri> {
    hosts
        .iter()
        .map(|uri| uri.to_string().parse().unwrap())
        .collect()
}

/// `n` requests from one task, round-robin over `hosts`, through `svc`
/// reused or (`oneshot`) through a fresh clone each.
async fn sequential<S, B>(mut svc: S, hosts: &[Uri], n: u64, oneshot: bool)
where
    S: Service<Request<()>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    for i in 0..n {
        let mut req = Request::new(());
        *req.uri_mut() = hosts[i as usize % hosts.len()].clone();
        let response = if oneshot {
            svc.clone().oneshot(req).await.unwrap()
        } else {
            svc.ready().await.unwrap().call(req).await.unwrap()
        };
        drop(response);
    }
}
