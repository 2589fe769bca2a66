//! The layer: [`AutoThrottleLayer`], the handle on a throttle's slots.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use crate::config::{Config, SlotSettings};
use crate::error::ConfigError;
use crate::key::SlotKey;
use crate::service::AutoThrottle;
use crate::shared::Shared;
use crate::slot::SlotSnapshot;

/// Applies [`AutoThrottle`] to services.
///
/// The layer and every service it makes share one table of slots (and one
/// bound on pending requests, when configured): cloning the layer or a
/// service shares that state, as with tower's `GlobalConcurrencyLimitLayer`.
/// Make a new layer for an independent throttle.
///
/// The layer is also the handle on its slots ([`slots`](Self::slots),
/// [`set_delay_floor`](Self::set_delay_floor), …), so it is built first and
/// added with `.layer(throttle.clone())`; there is no `ServiceBuilder`
/// extension that would build it inline and hide the handle.
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

impl AutoThrottleLayer {
    /// A layer with its own, empty table of slots.
    #[must_use]
    pub fn new(config: Config) -> Self {
        AutoThrottleLayer {
            shared: Arc::new(Shared::new(config)),
        }
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// A snapshot of every slot, sorted by key.
    #[must_use]
    pub fn slots(&self) -> Vec<SlotSnapshot> {
        self.shared.table.snapshots()
    }

    /// A snapshot of one slot, if it exists.
    #[must_use]
    pub fn slot(&self, key: &str) -> Option<SlotSnapshot> {
        self.shared.table.snapshot(key)
    }

    /// Sets a floor under the slot's delay (for a robots.txt `Crawl-delay`,
    /// say), or lifts it with `None`. The slot is created if it does not
    /// exist yet, so the floor holds from its first request; it binds the
    /// next dispatch, even for requests already waiting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_autothrottle::{AutoThrottleLayer, Config};
    ///
    /// let layer = AutoThrottleLayer::new(Config::default());
    /// layer.set_delay_floor("https://example.com", Some(Duration::from_secs(10)));
    /// assert_eq!(layer.slot("https://example.com").unwrap().delay_floor, Duration::from_secs(10));
    /// ```
    pub fn set_delay_floor(&self, key: impl Into<SlotKey>, floor: Option<Duration>) {
        let floor = floor.unwrap_or(Duration::ZERO);
        self.shared
            .table
            .with_slot(key.into(), |slot| slot.set_floor(floor));
    }
}

impl AutoThrottleLayer {
    /// Sets the settings of the slot `pattern` (an exact key, or a pattern
    /// with `*`; see [`SlotSettings`]) at run time, replacing
    /// any it had. Every existing slot it covers starts afresh with the new
    /// policy and bounds, binding its next dispatch; new slots pick them up
    /// when created.
    ///
    /// # Errors
    ///
    /// The settings are checked as [`ConfigBuilder::build`](crate::ConfigBuilder::build)
    /// checks them; invalid ones are refused and change nothing.
    pub fn set_slot_settings(
        &self,
        pattern: &str,
        settings: SlotSettings,
    ) -> Result<(), ConfigError> {
        if pattern.is_empty() {
            return Err(ConfigError::new("slot", "a slot pattern must not be empty"));
        }
        let policy = settings.resolve(&self.shared.config.policy)?;
        self.shared.table.set_settings(pattern, Some(policy));
        Ok(())
    }

    /// Waits until every place given back and every pause has reached the
    /// fleet's store (feature `redis`); returns at once without a fleet.
    /// Call it before a worker process exits, or its last places stay
    /// taken until their leases run out.
    pub async fn flush(&self) {
        if let Some(coordinator) = &self.shared.config.coordinator {
            coordinator.flush().await;
        }
    }

    /// Removes the settings of `pattern` (as it was given); the slots it
    /// covered start afresh with whatever applies to them now. Returns
    /// whether there were any.
    #[must_use]
    pub fn remove_slot_settings(&self, pattern: &str) -> bool {
        self.shared.table.set_settings(pattern, None)
    }
}

impl<S> AutoThrottle<S> {
    /// A layer that shares this service's slots, for wrapping another
    /// client with the same throttle.
    pub fn layer(&self) -> AutoThrottleLayer {
        AutoThrottleLayer {
            shared: Arc::clone(&self.shared),
        }
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
