//! The hook through which a fleet shares slots (see the `redis` feature):
//! after the local gate admits a request, a coordinator may hold it back
//! until the fleet-wide schedule and limit allow it, and hears what the
//! slot learned. The core knows only this trait.

use std::fmt;
use std::time::Duration;

use crate::key::BoxFuture;
use crate::key::SlotKey;

/// What the slot decided locally, handed to the coordinator.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Local {
    pub(crate) delay: Duration,
    pub(crate) limit: usize,
}

/// A fleet-wide place, given back when dropped (with what the slot learned
/// meanwhile, if anything).
pub(crate) struct Lease {
    release: Option<Box<dyn FnOnce(Option<Local>) + Send + Sync>>,
    learned: Option<Local>,
    in_flight: usize,
    gap: Option<Duration>,
}

impl Lease {
    /// A place taken when `in_flight` requests (this one included) were in
    /// flight fleet-wide.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn new(
        in_flight: usize,
        release: impl FnOnce(Option<Local>) + Send + Sync + 'static,
    ) -> Self {
        Lease {
            release: Some(Box::new(release)),
            learned: None,
            in_flight,
            gap: None,
        }
    }

    /// The place was granted `gap` after the fleet's previous dispatch of
    /// the slot (`None`: unknown, or a pause lay between).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn with_gap(mut self, gap: Option<Duration>) -> Self {
        self.gap = gap;
        self
    }

    /// See [`with_gap`](Self::with_gap).
    pub(crate) fn gap(&self) -> Option<Duration> {
        self.gap
    }

    /// Requests in flight fleet-wide when the place was taken.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Records what the slot learned, to be shared when the place goes back.
    pub(crate) fn learned(&mut self, local: Local) {
        self.learned = Some(local);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release(self.learned);
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("learned", &self.learned)
            .finish_non_exhaustive()
    }
}

/// Shares slots across a fleet.
pub(crate) trait Coordinator: fmt::Debug + Send + Sync + 'static {
    /// Waits until the fleet lets a request of `key` go, given the slot's
    /// local delay and limit; the returned lease is the request's place.
    /// `None`: the request goes ahead on local throttling alone.
    fn reserve(&self, key: SlotKey, local: Local) -> BoxFuture<Option<Lease>>;

    /// A server asked the slot to pause for `wait` (`Retry-After`).
    fn pause(&self, key: SlotKey, wait: Duration);

    /// Waits until what was sent off the requests' path (places given
    /// back, pauses) has been handled.
    fn flush(&self) -> BoxFuture<()>;
}
