//! The layer, and the state it shares with its services.

use std::fmt;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tower_layer::Layer;

use crate::config::Config;
use crate::service::AutoThrottle;
use crate::slot::{SlotSnapshot, SlotTable};

/// Applies [`AutoThrottle`] to services.
///
/// The layer and every service it makes share one table of slots (and one
/// bound on pending requests, when configured): cloning the layer or a
/// service shares that state, as with tower's `GlobalConcurrencyLimitLayer`.
/// Make a new layer for an independent throttle.
///
/// ```
/// use tower::ServiceBuilder;
/// use tower_autothrottle::{AutoThrottleLayer, Config};
///
/// let layer = AutoThrottleLayer::new(Config::default());
/// let service = ServiceBuilder::new()
///     .layer(layer.clone())
///     .service_fn(|_req: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
///     });
/// assert!(layer.slots().is_empty()); // slots appear with the first request
/// # drop(service);
/// ```
#[derive(Clone)]
pub struct AutoThrottleLayer {
    pub(crate) shared: Arc<Shared>,
}

/// What a layer and its services share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) table: SlotTable,
    pub(crate) pending: Option<Arc<Semaphore>>,
}

impl AutoThrottleLayer {
    /// A layer with its own, empty table of slots.
    pub fn new(config: Config) -> Self {
        let pending = config
            .max_pending
            .map(|max| Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))));
        AutoThrottleLayer {
            shared: Arc::new(Shared {
                table: SlotTable::new(Arc::clone(&config.policy)),
                config,
                pending,
            }),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// A snapshot of every slot, sorted by key.
    pub fn slots(&self) -> Vec<SlotSnapshot> {
        self.shared.table.snapshots()
    }

    /// A snapshot of one slot, if it exists.
    pub fn slot(&self, key: &str) -> Option<SlotSnapshot> {
        self.shared.table.snapshot(key)
    }
}

impl<S> Layer<S> for AutoThrottleLayer {
    type Service = AutoThrottle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AutoThrottle::from_shared(inner, Arc::clone(&self.shared))
    }
}

impl fmt::Debug for AutoThrottleLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AutoThrottleLayer")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}
