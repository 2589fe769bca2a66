//! What a request may carry to steer the throttle: [`DownloadSlot`] names
//! its slot, [`DontAdjust`] keeps it from adjusting the slot.
//!
//! Both go in the request's `http::Extensions` (for reqwest, in
//! reqwest-middleware's extensions).

use crate::key::SlotKey;

/// A request extension that puts the request into the named slot, whatever
/// its URI says (Scrapy's `download_slot` request meta key).
///
/// ```
/// use tower_autothrottle::DownloadSlot;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(DownloadSlot::new("api-budget"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DownloadSlot(pub SlotKey);

impl DownloadSlot {
    /// Names the slot for a request.
    pub fn new(key: impl Into<SlotKey>) -> Self {
        DownloadSlot(key.into())
    }
}

/// A request extension that opts the request out of adjusting its slot
/// (Scrapy's `autothrottle_dont_adjust_delay` request meta key).
///
/// The request still waits for its slot's current delay and limit, and a
/// `Retry-After` or `RateLimit` answer still pauses or paces the slot (they
/// are the server's orders), but its latency and status are not fed to the
/// policy or to the overload backoff. Use it for requests whose latency
/// says nothing about the server's load: a large download, a long poll, a
/// request that is expected to fail.
///
/// ```
/// use tower_autothrottle::DontAdjust;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(DontAdjust);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DontAdjust;
