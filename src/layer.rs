//! The layer, and the state it shares with its services.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::uri::{Authority, Scheme, Uri};
use http::Extensions;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower_layer::Layer;

use crate::config::{Config, ConfigError};
use crate::control::SlotSettings;
use crate::fleet::{Lease, Local};
use crate::future::Start;
use crate::gate::{Permit, Waiting};
use crate::key::{key_for, key_in, DownloadSlot, KeyChoice, KeyStrategy, SlotKey};
use crate::policy::Outcome;
use crate::resolve::BoxFuture;
use crate::resolve::DnsCache;
use crate::service::AutoThrottle;
use crate::slot::{Slot, SlotSnapshot, SlotTable};

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
    /// Resolutions, for [`KeyStrategy::ResolvedIp`] only.
    pub(crate) dns: Option<Arc<DnsCache>>,
}

impl Shared {
    /// Joins the back of `key`'s queue (creating the slot if needed).
    pub(crate) fn enqueue(&self, key: SlotKey) -> Waiting {
        self.table
            .with_slot(key, |slot| Waiting::enqueue(Arc::clone(slot)))
    }

    /// Keys a request by its head and starts it: in its slot's queue now (so
    /// requests queue in call order), or after resolving its host.
    ///
    /// `recent`, a service's memory of the slot its last request went to, is
    /// set to this request's slot (with the default keying only); see
    /// [`start_recent`](Self::start_recent), which the caller tries first.
    pub(crate) fn start(&self, parts: &Parts, recent: Option<&mut Option<Recent>>) -> Start {
        let Some(recent) = recent.filter(|_| self.cacheable(&parts.extensions)) else {
            return self.start_keyed(parts);
        };
        let start = self.start_keyed(parts);
        *recent = match (&start, parts.uri.authority()) {
            (Start::Queued(waiting), Some(authority)) => Some(Recent {
                scheme: parts.uri.scheme().cloned(),
                authority: authority.clone(),
                slot: Arc::clone(waiting.slot()),
            }),
            _ => None,
        };
        start
    }

    /// Classifies an inner error: by the configured classifier, else by
    /// [`classify_error`](crate::classify_error).
    pub(crate) fn classify(&self, error: &(dyn std::error::Error + 'static)) -> Outcome {
        match &self.config.classifier {
            Some(classify) => classify(error),
            None => crate::classify_error(error),
        }
    }

    /// The fleet-wide reservation a request admitted by its slot must wait
    /// for, when a fleet shares the slots.
    pub(crate) fn reserve(&self, permit: &Permit) -> Option<BoxFuture<Option<Lease>>> {
        let coordinator = self.config.coordinator.as_ref()?;
        let slot = permit.slot();
        let (delay, limit) = slot.effective(Instant::now());
        Some(coordinator.reserve(slot.key.clone(), Local { delay, limit }))
    }

    /// Whether a request with these extensions may use a remembered slot:
    /// only with the default keying.
    fn cacheable(&self, extensions: &Extensions) -> bool {
        self.config.key_fn.is_none()
            && self.config.key_strategy == KeyStrategy::Authority
            && extensions.get::<DownloadSlot>().is_none()
    }

    /// Starts the request in the remembered slot, if it goes to the same
    /// scheme and authority and the slot is still in the table; checked
    /// before the request is taken apart, which the way through the table
    /// needs.
    pub(crate) fn start_recent(
        &self,
        uri: &Uri,
        extensions: &Extensions,
        recent: &mut Option<Recent>,
    ) -> Option<Start> {
        let memo = recent.as_ref()?;
        let authority = uri.authority()?;
        // Byte for byte: a request that differs only in case takes the
        // longer way, to the same slot.
        let same = memo.authority.as_str() == authority.as_str()
            && memo.scheme.as_ref().map(Scheme::as_str) == uri.scheme().map(Scheme::as_str);
        if !same || !self.cacheable(extensions) {
            return None;
        }
        Waiting::try_enqueue(Arc::clone(&memo.slot)).map(Start::Queued)
    }

    fn start_keyed(&self, parts: &Parts) -> Start {
        thread_local! {
            static BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
        }
        let config = &self.config;
        let (key_fn, strategy) = (config.key_fn.as_ref(), config.key_strategy);
        let choice = BUFFER.with(|buffer| {
            // A policy or key function that sent a request from in here
            // would find the buffer taken: it then gets a key of its own.
            let Ok(mut buffer) = buffer.try_borrow_mut() else {
                return Err(key_for(parts, key_fn, strategy));
            };
            buffer.clear();
            match key_in(parts, key_fn, strategy, &mut buffer) {
                // The common case: no allocation when the slot exists.
                KeyChoice::InBuffer => Ok(self
                    .table
                    .with_slot_str(&buffer, |slot| Waiting::enqueue(Arc::clone(slot)))),
                other => Err(other),
            }
        });
        let choice = match choice {
            Ok(waiting) => return Start::Queued(waiting),
            Err(choice) => choice,
        };
        match choice {
            KeyChoice::Ready(key) => Start::Queued(self.enqueue(key)),
            // `key_for` never leaves the key in a buffer.
            KeyChoice::InBuffer => Start::Queued(self.enqueue(SlotKey::fallback())),
            KeyChoice::Resolve { host, fallback } => match &self.dns {
                Some(dns) => match dns.cached(&host, &fallback) {
                    Some(key) => Start::Queued(self.enqueue(key)),
                    None => Start::Resolving(dns.key(host, fallback)),
                },
                None => Start::Queued(self.enqueue(fallback)),
            },
        }
    }
}

/// The slot a service's last request went to, by the scheme and authority
/// of its URI (see [`Shared::start`]).
#[derive(Clone, Debug)]
pub(crate) struct Recent {
    scheme: Option<Scheme>,
    authority: Authority,
    slot: Arc<Slot>,
}

impl AutoThrottleLayer {
    /// A layer with its own, empty table of slots.
    pub fn new(config: Config) -> Self {
        let pending = config
            .max_pending
            .map(|max| Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))));
        let dns = (config.key_strategy == KeyStrategy::ResolvedIp).then(|| {
            Arc::new(DnsCache::new(
                Arc::clone(&config.resolver),
                config.dns_ttl,
                config.dns_cache_size,
            ))
        });
        AutoThrottleLayer {
            shared: Arc::new(Shared {
                table: SlotTable::new(
                    Arc::clone(&config.policy),
                    config.overrides.clone(),
                    config.jitter,
                    config.seed,
                    config.idle_timeout,
                    config.max_slots,
                ),
                config,
                pending,
                dns,
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
    /// with `*`; see [`control`](crate::control)) at run time, replacing
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
    pub fn remove_slot_settings(&self, pattern: &str) -> bool {
        self.shared.table.set_settings(pattern, None)
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
