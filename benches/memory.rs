//! Memory per slot and lookup cost as slots grow, and memory under an
//! endless stream of new hosts; bytes counted by a counting global
//! allocator (the bytes asked for, not the allocator's own overhead).
//!
//! ```text
//! cargo bench --bench memory                # 10k, 100k and 1M slots; 10M new hosts
//! cargo bench --bench memory -- quick       # 10k and 100k slots; 1M new hosts
//! ```
//!
//! 1. **Per slot**: one request to each of N distinct authorities
//!    (`http://h{i}.example`), with the default configuration (the
//!    `Adaptive` policy) and eviction out of the way; the live bytes the
//!    table grew by, divided by N, key included. Then the time of a request
//!    to a random existing slot (the table lookup; no slot is remembered
//!    between them), which should not grow with N.
//! 2. **Stream**: 10 million requests, each to a new host, with the default
//!    `idle_timeout` and `max_slots` (100 000); the live bytes and the slot
//!    count at every tenth of the way, which must stay flat.

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::future::ready;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::Empty;
use tower::{Layer, Service, ServiceExt};
use tower_autothrottle::{AutoThrottleLayer, Config};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter only observes the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

type Inner = tower::util::ServiceFn<
    fn(Request<()>) -> std::future::Ready<Result<Response<Empty<Bytes>>, Infallible>>,
>;

fn inner() -> Inner {
    tower::service_fn(|_req: Request<()>| ready(Ok(Response::new(Empty::new()))))
}

fn uri(i: u64) -> Uri {
    format!("http://h{i}.example/").parse().unwrap()
}

async fn send(svc: &mut tower_autothrottle::AutoThrottle<Inner>, uri: Uri) {
    let mut req = Request::new(());
    *req.uri_mut() = uri;
    drop(svc.ready().await.unwrap().call(req).await.unwrap());
}

/// A small seeded generator, for the lookups.
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

async fn per_slot(n: u64, policy: &str) {
    let builder = match policy {
        "scrapy-2012" => {
            Config::builder().policy(tower_autothrottle::policy::Scrapy2012::default())
        }
        _ => Config::builder(),
    };
    let config = builder
        .max_slots(n as usize * 2)
        .idle_timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    let layer = AutoThrottleLayer::new(config);
    let mut svc = layer.layer(inner());
    // The table's first allocations do not belong to any slot.
    send(&mut svc, uri(u64::MAX)).await;
    let uris: Vec<Uri> = (0..n).map(uri).collect();
    let before = live();
    for u in &uris {
        send(&mut svc, u.clone()).await;
    }
    let grown = live() - before;
    assert_eq!(layer.slots().len() as u64, n + 1);
    if policy != "adaptive" {
        // Its delay is above zero after a response: lookups would time waits.
        println!(
            "{n:>9} slots ({policy}): {:>6.1} bytes per slot (key included)",
            grown as f64 / n as f64
        );
        return;
    }
    // Lookups: random existing slots, through fresh service clones so no
    // slot is remembered.
    let lookups = 200_000;
    let picks: Vec<Uri> = {
        let mut s = n;
        (0..lookups)
            .map(|_| uris[(next(&mut s) % n) as usize].clone())
            .collect()
    };
    let start = Instant::now();
    for u in picks {
        let mut fresh = svc.clone();
        send(&mut fresh, u).await;
    }
    let per_lookup = start.elapsed() / lookups;
    println!(
        "{n:>9} slots ({policy}): {:>6.1} bytes per slot (key included), request to an existing slot {per_lookup:?}",
        grown as f64 / n as f64
    );
}

async fn stream(total: u64) {
    let layer = AutoThrottleLayer::new(Config::default());
    let mut svc = layer.layer(inner());
    let start = Instant::now();
    let step = total / 10;
    println!(
        "{total} requests, each to a new host (default idle_timeout 5 min, max_slots 100 000):"
    );
    for i in 0..total {
        send(&mut svc, uri(i)).await;
        if (i + 1) % step == 0 {
            println!(
                "  after {:>10} hosts: {:>7} slots, {:>7.1} MiB live, {:.1?} elapsed",
                i + 1,
                layer.slots().len(),
                live() as f64 / (1 << 20) as f64,
                start.elapsed()
            );
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sizes: &[u64] = if quick {
            &[10_000, 100_000]
        } else {
            &[10_000, 100_000, 1_000_000]
        };
        for &n in sizes {
            per_slot(n, "adaptive").await;
        }
        per_slot(100_000, "scrapy-2012").await;
        stream(if quick { 1_000_000 } else { 10_000_000 }).await;
    });
}
