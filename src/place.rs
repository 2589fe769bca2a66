//! A way in for clients outside tower: [`Place`], a place in a host's slot,
//! taken with [`AutoThrottleLayer::acquire`](crate::AutoThrottleLayer::acquire)
//! (or `acquire_uri`, `acquire_key`) and given back with a report.
//!
//! A custom connection pool, a browser driver, a gRPC or WebSocket client,
//! a test harness: anything that sends requests its own way can be
//! throttled by the same slots as a tower stack. Await a place for the
//! request's host (it waits for the slot's delay and limit, and any pause
//! the server asked for), send the request, then report what came back:
//! [`Place::report`] with the status and headers (the latency is timed from
//! when the place was granted, or given with
//! [`report_latency`](Place::report_latency)), or
//! [`Place::report_error`]. The report feeds the slot's signals and policy
//! exactly as a response through the layer would, and gives the place
//! back. Dropping a place without a report gives it back and teaches the
//! slot nothing, as a cancelled request through the layer does.
//!
//! ```
//! use http::{HeaderMap, StatusCode};
//! use tower_autothrottle::{AutoThrottleLayer, Config};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let throttle = AutoThrottleLayer::new(Config::default());
//! let uri: http::Uri = "https://example.com/page/1".parse().unwrap();
//! let place = throttle.acquire_uri(&uri).await;
//! assert_eq!(place.key().as_str(), "https://example.com");
//! // ... send the request with any client, then:
//! place.report(StatusCode::OK, &HeaderMap::new());
//! assert_eq!(throttle.slot("https://example.com").unwrap().responses, 1);
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::key::SlotKey;
use crate::shared::{Shared, Start};
use crate::slot::gate::Permit;

/// A place in a slot, granted by
/// [`AutoThrottleLayer::acquire`](crate::AutoThrottleLayer::acquire): one
/// request in flight, dispatched at the slot's pace. See the
/// [module docs](self).
#[must_use = "a place is given back when dropped: hold it while the request is under way"]
pub struct Place {
    shared: Arc<Shared>,
    permit: Permit,
    granted: Instant,
    /// Whether the report adjusts the slot (no [`DontAdjust`](crate::DontAdjust)).
    adjust: bool,
}

impl Place {
    /// Waits for a place in the slot a request starting as `start` goes to.
    pub(crate) async fn acquire(
        shared: Arc<Shared>,
        adjust: bool,
        start: impl FnOnce(&Shared) -> Start,
    ) -> Self {
        let pending = shared.pending_place().await;
        let start = start(&shared);
        let permit = shared.admit(start, pending).await;
        tracing::trace!(slot = %permit.slot().key, seq = permit.seq(), "dispatched (place)");
        Place {
            shared,
            permit,
            granted: Instant::now(),
            adjust,
        }
    }

    /// The key of the slot this place is in.
    #[must_use]
    pub fn key(&self) -> &SlotKey {
        &self.permit.slot().key
    }

    /// When the place was granted: the request's dispatch.
    #[must_use]
    pub fn granted(&self) -> Instant {
        self.granted
    }

    /// Reports the response's status and headers (`Retry-After`,
    /// `RateLimit`, … are read as from a response through the layer), timed
    /// from when the place was granted until now, and gives the place back.
    /// Report when the response is complete: the place counts as in flight
    /// until then.
    pub fn report(self, status: StatusCode, headers: &HeaderMap) {
        let latency = Instant::now().saturating_duration_since(self.granted);
        self.report_latency(status, headers, latency);
    }

    /// [`report`](Self::report), with the latency measured by the caller
    /// (say, to the response's head rather than its end).
    pub fn report_latency(mut self, status: StatusCode, headers: &HeaderMap, latency: Duration) {
        let now = Instant::now();
        let size = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        self.shared.end_response(
            &mut self.permit,
            now,
            self.shared.table.clock(now),
            latency,
            status,
            headers,
            size,
            self.adjust,
            true,
        );
    }

    /// Reports that the request failed without a response, classified as an
    /// error through the layer is (by
    /// [`ConfigBuilder::error_classifier`](crate::ConfigBuilder::error_classifier),
    /// else [`classify_error`](crate::classify_error)), and gives the place
    /// back.
    pub fn report_error(mut self, error: &(dyn std::error::Error + 'static)) {
        let now = Instant::now();
        let latency = now.saturating_duration_since(self.granted);
        let outcome = self.shared.classify(error);
        self.shared
            .end_error(&mut self.permit, now, latency, error, outcome, self.adjust);
    }
}

impl fmt::Debug for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Place")
            .field("key", self.key())
            .field("seq", &self.permit.seq())
            .field("granted", &self.granted)
            .finish()
    }
}
