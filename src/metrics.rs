//! Per-slot gauges and counters through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`).
//!
//! [`record`] reads every slot ([`AutoThrottleLayer::slots`]) and publishes
//! it to whatever recorder the application installed (Prometheus, StatsD,
//! …); [`spawn`] does so periodically on a tokio task. Nothing is recorded
//! on the request path, so the metrics cost nothing per request.
//!
//! | name | kind | unit |
//! |---|---|---|
//! | `autothrottle_slots` | gauge | slots in the table |
//! | `autothrottle_delay_seconds{slot}` | gauge | the delay in force |
//! | `autothrottle_concurrency_limit{slot}` | gauge | the limit in force |
//! | `autothrottle_in_flight{slot}` | gauge | requests in flight |
//! | `autothrottle_queued{slot}` | gauge | requests waiting |
//! | `autothrottle_latency_seconds{slot}` | gauge | the smoothed latency |
//! | `autothrottle_paused_seconds{slot}` | gauge | time left in a `Retry-After` pause, 0 if none |
//! | `autothrottle_requests_total{slot}` | counter | requests dispatched |
//! | `autothrottle_responses_total{slot}` | counter | responses received |
//! | `autothrottle_overloads_total{slot}` | counter | overloads reacted to |
//!
//! Besides these, `autothrottle_in_flight_total` and `autothrottle_queued_total`
//! (gauges, over all slots) hold without labels.
//!
//! # Cardinality
//!
//! Each labelled slot is a series of its own, so a crawl over millions of
//! hosts would make millions of series. [`record`] labels at most
//! [`DEFAULT_SLOT_SERIES`] slots, the busiest (most requests in flight and
//! queued, then most dispatched); [`record_with`] sets another bound (0 for
//! the totals alone, `usize::MAX` for every slot). A slot that leaves the
//! busiest keeps its series at its last value until the recorder drops idle
//! series (metrics-exporter-prometheus does, after its `idle_timeout`).
//!
//! Counters are set to the slot's own totals. A slot evicted after its idle
//! timeout and created again starts its totals from 0, which Prometheus
//! reads as a counter reset.
//!
//! ```
//! use std::time::Duration;
//! use tower_autothrottle::{AutoThrottleLayer, Config};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let layer = AutoThrottleLayer::new(Config::default());
//! // With a recorder installed (metrics_exporter_prometheus, say):
//! let exporter = tower_autothrottle::metrics::spawn(layer.clone(), Duration::from_secs(5));
//! # exporter.abort();
//! # }
//! ```

use std::cmp::Reverse;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::layer::AutoThrottleLayer;
use crate::slot::SlotSnapshot;

/// How many slots [`record`] labels at most: the busiest.
pub const DEFAULT_SLOT_SERIES: usize = 100;

/// Publishes `layer` once: the totals, and the busiest
/// [`DEFAULT_SLOT_SERIES`] slots with a label each.
pub fn record(layer: &AutoThrottleLayer) {
    record_with(layer, DEFAULT_SLOT_SERIES);
}

/// Publishes `layer` once: the totals, and at most `slot_series` slots with
/// a label each, the busiest (most requests in flight and queued, then most
/// dispatched). 0 publishes the totals alone.
pub fn record_with(layer: &AutoThrottleLayer, slot_series: usize) {
    let mut slots = layer.slots();
    let now = Instant::now();
    metrics::gauge!("autothrottle_slots").set(slots.len() as f64);
    let in_flight: usize = slots.iter().map(|s| s.in_flight).sum();
    let queued: usize = slots.iter().map(|s| s.queued).sum();
    metrics::gauge!("autothrottle_in_flight_total").set(in_flight as f64);
    metrics::gauge!("autothrottle_queued_total").set(queued as f64);
    if slot_series < slots.len() {
        let busiest = |s: &SlotSnapshot| Reverse((s.in_flight + s.queued, s.dispatched));
        if slot_series > 0 {
            slots.select_nth_unstable_by_key(slot_series - 1, busiest);
        }
        slots.truncate(slot_series);
    }
    for slot in slots {
        let key = slot.key.as_str().to_owned();
        let labels = [("slot", key)];
        metrics::gauge!("autothrottle_delay_seconds", &labels).set(slot.delay.as_secs_f64());
        metrics::gauge!("autothrottle_concurrency_limit", &labels).set(slot.concurrency as f64);
        metrics::gauge!("autothrottle_in_flight", &labels).set(slot.in_flight as f64);
        metrics::gauge!("autothrottle_queued", &labels).set(slot.queued as f64);
        if let Some(latency) = slot.latency {
            metrics::gauge!("autothrottle_latency_seconds", &labels).set(latency.as_secs_f64());
        }
        let paused = slot
            .paused_until
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        metrics::gauge!("autothrottle_paused_seconds", &labels).set(paused.as_secs_f64());
        metrics::counter!("autothrottle_requests_total", &labels).absolute(slot.dispatched);
        metrics::counter!("autothrottle_responses_total", &labels).absolute(slot.responses);
        metrics::counter!("autothrottle_overloads_total", &labels).absolute(slot.overloads);
    }
}

/// Publishes `layer` as [`record`] does, now and then every `period` (at
/// least 1 ms), on a tokio task, until the returned handle is aborted.
#[allow(clippy::must_use_candidate)] // dropping the handle leaves the task running, as tokio's
pub fn spawn(layer: AutoThrottleLayer, period: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            record(&layer);
        }
    })
}
