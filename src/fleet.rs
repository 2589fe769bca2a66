//! The hook through which a fleet shares slots (see the `redis` feature):
//! after the local gate admits a request, a coordinator may hold it back
//! until the fleet-wide schedule and limit allow it, and hears what the
//! slot learned. The core knows only this trait.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::key::BoxFuture;
use crate::key::SlotKey;
use crate::policy::Sample;

/// What the slot decided locally, handed to the coordinator.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Local {
    pub(crate) delay: Duration,
    pub(crate) limit: usize,
}

/// A sample another worker of the fleet took of the slot, `age` before
/// the reservation that brought it was granted.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Remote {
    pub(crate) age: Duration,
    pub(crate) sample: Sample,
}

/// What the slot learned from the request that held a place: the delay and
/// limit it allows since, and the sample its policy took (and when).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct Learned {
    pub(crate) local: Local,
    pub(crate) sample: Option<(Sample, Instant)>,
}

/// The release of a place: what the slot learned, if anything.
type Release = Box<dyn FnOnce(Option<Learned>) + Send + Sync>;

/// A fleet-wide place, given back when dropped (with what the slot learned
/// meanwhile, if anything).
pub(crate) struct Lease {
    release: Option<Release>,
    learned: Option<Learned>,
    in_flight: usize,
    gap: Option<Duration>,
    remote: Vec<Remote>,
}

impl Lease {
    /// A place taken when `in_flight` requests (this one included) were in
    /// flight fleet-wide.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn new(
        in_flight: usize,
        release: impl FnOnce(Option<Learned>) + Send + Sync + 'static,
    ) -> Self {
        Lease {
            release: Some(Box::new(release)),
            learned: None,
            in_flight,
            gap: None,
            remote: Vec::new(),
        }
    }

    /// The samples the fleet's other workers took of the slot since this
    /// worker last heard, oldest first.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn with_remote(mut self, remote: Vec<Remote>) -> Self {
        self.remote = remote;
        self
    }

    /// Takes the samples of [`with_remote`](Self::with_remote), for the
    /// slot's policy.
    pub(crate) fn take_remote(&mut self) -> Vec<Remote> {
        std::mem::take(&mut self.remote)
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

    /// Records what the slot learned, to be shared when the place goes back:
    /// the delay and limit it allows, and the sample its policy took at
    /// `at`, if any.
    pub(crate) fn learned(&mut self, local: Local, sample: Option<Sample>, at: Instant) {
        self.learned = Some(Learned {
            local,
            sample: sample.map(|s| (s, at)),
        });
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
