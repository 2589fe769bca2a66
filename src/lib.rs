//! Scrapy's AutoThrottle for any tower HTTP client.
//!
//! [`AutoThrottleLayer`] wraps any `tower::Service<http::Request<B>>` (a
//! hyper-util client, a tower stack, a test double) and throttles requests
//! *per remote host*: each host gets a **download delay** (the minimum time
//! between the starts of two requests, or a pacing that the answers clock:
//! see [`policy::Throttle::paced`]) and a **concurrency limit** (the
//! maximum requests in flight), both adapted from the latency it measures,
//! as Scrapy's AutoThrottle does.
//!
//! # How a request flows
//!
//! Each step is a room of its own in `src/`, and each room uses only the
//! rooms before it (`.ci/module_cycles.py` checks that no arrow runs back):
//!
//! 1. **In** (`layer.rs`, `service.rs`): [`AutoThrottleLayer`] wraps a
//!    service into an [`AutoThrottle`]; `call` never waits, it starts the
//!    request on its way (`shared.rs`, the way through the rooms) and
//!    returns a [`ResponseFuture`] (`future.rs`, the state machine that
//!    walks it).
//! 2. **Key** ([`key`]): the request is assigned to a slot: a
//!    [`DownloadSlot`] it carries ([`extensions`](DownloadSlot)), the
//!    configured key function, or the [`KeyStrategy`] (by default its
//!    normalized authority, `scheme://host[:port]`).
//! 3. **Slot table** (`slot/table.rs`): one slot per key, shared by the
//!    layer and every service made from it; idle slots are evicted.
//! 4. **Gate** (`slot/gate.rs`, the only code that waits): the request
//!    waits in its slot's FIFO queue until the slot's delay has passed since
//!    the previous dispatch, fewer than the slot's limit are in flight, and
//!    no `Retry-After` pause runs. A slow slot never holds up another. With
//!    a fleet (`fleet.rs`, feature `redis`), the fleet's schedule is asked
//!    too.
//! 5. **Inner call**: the inner service (itself, for a request admitted at
//!    `call` to a service ready at once; else a clone driven to readiness) is
//!    called; the latency is measured from the call to the response head.
//! 6. **Signals** (`signals/`): what the response means: its outcome (an
//!    overload: 429, 503, a timeout, a refused connection; see
//!    [`classify_error`]) and the server's hints (`Retry-After`, the
//!    `RateLimit` fields: [`headers`]).
//! 7. **Policy** ([`policy`]): the latency and outcome go to the slot's
//!    policy, a pure state machine that answers with a delay and a limit.
//!    [`Config::default`] uses [`policy::Adaptive`], which finds each host's
//!    capacity; [`policy::Scrapy2012`] and [`policy::Scrapy`] are Scrapy's
//!    own rules, [`policy::Aimd`], [`policy::Vegas`] and
//!    [`policy::Gradient2`] Netflix's.
//! 8. **The slot's new delay and limit** (`slot/mod.rs`): the policy's
//!    answer, with the layer's signals on top of any policy: `Retry-After`
//!    pauses the slot, the `RateLimit` fields pace it, a delay floor can be
//!    set at run time ([`AutoThrottleLayer::set_delay_floor`]), and, for a
//!    policy that does not react to overload itself
//!    ([`Policy::owns_overload`](policy::Policy::owns_overload): all but
//!    the default), an overload halves the slot's concurrency and backs its
//!    rate off. A lowered limit binds the very next dispatch.
//! 9. **Body** ([`body`]): the response body holds the request's in-flight
//!    place until it ends or is dropped.
//!
//! Beside the path: the configuration (`config/`: [`Config`], per-slot
//! [`SlotSettings`], config files), the errors (`error.rs`), and two small
//! helpers every room may use (`time.rs`, `rng.rs`). The way in for clients
//! outside tower (`place.rs`) goes through the same rooms as the future.
//! The integrations (`reqwest.rs`, `retry.rs`, `metrics.rs`, `redis/`) are
//! feature-gated rooms that nothing above imports.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_autothrottle::{policy::Scrapy2012, AutoThrottleLayer, Config};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let config = Config::builder()
//!     .policy(Scrapy2012::default().start_delay(Duration::from_millis(500)))
//!     .build()
//!     .unwrap();
//! let throttle = AutoThrottleLayer::new(config);
//! let mut client = ServiceBuilder::new()
//!     .layer(throttle.clone())
//!     .service_fn(|_req: http::Request<String>| async {
//!         tokio::time::sleep(Duration::from_millis(100)).await;
//!         Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//!     });
//!
//! let request = http::Request::get("http://example.com/").body(String::new()).unwrap();
//! let response = client.ready().await.unwrap().call(request).await.unwrap();
//! assert_eq!(response.status(), 200);
//!
//! let slot = throttle.slot("http://example.com").unwrap();
//! assert_eq!(slot.delay, Duration::from_millis(300)); // (500 + 100) / 2
//! assert_eq!(slot.concurrency, 1);
//! # }
//! ```
//!
//! # Integrations and control
//!
//! - [`SlotSettings`]: per-slot settings (Scrapy's `DOWNLOAD_SLOTS`, by key
//!   or pattern, at build or run time), and the per-request opt-out
//!   [`DontAdjust`].
//! - `reqwest` (feature `reqwest`): `AutoThrottleMiddleware` for
//!   reqwest-middleware, sharing a layer's slots.
//! - `retry` (feature `retry`): `RetryPolicy`, a policy for tower's `Retry`
//!   made for this layer (429, 503 and failed connections of idempotent
//!   methods, within a budget, the waiting left to the throttle).
//! - [`Place`], from [`AutoThrottleLayer::acquire`]: a place in a slot for
//!   a client outside tower, given back with a report of what came back.
//! - [`AutoThrottleLayer::export`] and [`AutoThrottleLayer::import`]: what
//!   every slot learned ([`Learned`]), to start a later run's layer from.
//! - `metrics` (feature `metrics`): per-slot gauges and counters through the
//!   `metrics` facade.
//! - `file` (feature `serde`): [`Config`] from TOML, JSON or any serde
//!   format, with typed errors.
//! - `redis` (feature `redis`): one budget per slot across a fleet of
//!   processes, shared through Redis.
//!
//! The README shows where the layer goes among tower's and tower-http's
//! middleware (`Timeout`, `Retry`, `Buffer`, `ConcurrencyLimit`, `Trace`,
//! `FollowRedirect`), as tested in `tests/composition.rs`.
//!
//! # Time
//!
//! All time comes from `tokio::time`, so tests and simulations can drive the
//! throttle with tokio's paused clock.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![warn(clippy::must_use_candidate, clippy::return_self_not_must_use)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The rooms, in the order a request meets them (see the overview above).
pub mod body;
mod config;
mod error;
mod extensions;
mod fleet;
pub mod future;
pub mod key;
mod layer;
pub mod place;
pub mod policy;
mod service;
mod shared;
mod signals;
mod slot;
// Small helpers every room may use.
mod builder;
mod rng;
mod time;
// Integrations: feature-gated, and imported by nothing above.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;
#[cfg(feature = "retry")]
#[cfg_attr(docsrs, doc(cfg(feature = "retry")))]
pub mod retry;

pub use body::ThrottleBody;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::file;
pub use config::{Config, ConfigBuilder, SlotSettings};
pub use error::{BoxError, ConfigError};
pub use extensions::{DontAdjust, DownloadSlot};
pub use future::ResponseFuture;
pub use key::{KeyFn, KeyStrategy, Resolve, SlotKey, SystemResolver};
pub use layer::AutoThrottleLayer;
pub use place::Place;
pub use service::AutoThrottle;
pub use signals::headers;
pub use signals::{classify_error, ErrorClassifier};
pub use slot::{Learned, SlotSnapshot};

// The README's examples use every feature: `cargo test --all-features`.
#[cfg(all(
    doctest,
    feature = "reqwest",
    feature = "metrics",
    feature = "serde",
    feature = "redis"
))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
