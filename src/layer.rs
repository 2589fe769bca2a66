//! The layer: [`AutoThrottleLayer`], the handle on a throttle's slots.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower_layer::Layer;

use crate::config::{Config, SlotSettings, Target};
use crate::error::ConfigError;
use crate::key::SlotKey;
use crate::place::Place;
use crate::service::AutoThrottle;
use crate::shared::Shared;
use crate::slot::{Learned, SlotSnapshot, Warm};

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

    /// A snapshot of one slot, if it exists. The key is normalized as every
    /// key is (see [`SlotKey`]): `"https://Example.com:443/"` finds the slot
    /// `https://example.com`.
    #[must_use]
    pub fn slot(&self, key: impl AsRef<str>) -> Option<SlotSnapshot> {
        self.shared.snapshot(key.as_ref())
    }

    /// The key of the slot `request` goes to, as the layer would choose it
    /// (its [`DownloadSlot`](crate::DownloadSlot), the key function, the
    /// [`KeyStrategy`](crate::KeyStrategy)); with
    /// [`KeyStrategy::ResolvedIp`](crate::KeyStrategy::ResolvedIp) it
    /// resolves the host (or uses the resolution kept from before). No slot
    /// is created.
    ///
    /// ```
    /// use tower_autothrottle::{AutoThrottleLayer, Config};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let layer = AutoThrottleLayer::new(Config::default());
    /// let request = http::Request::get("https://Example.com:443/robots.txt").body(()).unwrap();
    /// assert_eq!(layer.key_for(&request).await.as_str(), "https://example.com");
    /// # }
    /// ```
    pub async fn key_for<B>(&self, request: &http::Request<B>) -> SlotKey {
        self.shared.key_for(&head(request)).await
    }

    /// What every slot learned (its policy's delay and limit, its smoothed
    /// latency, what is left of a pause the server asked for), sorted by
    /// key: to save (with the `serde` feature, in any serde format) and
    /// [`import`](Self::import) into the layer of a later run, so that it
    /// starts where this one stopped instead of from scratch.
    #[must_use]
    pub fn export(&self) -> Vec<Learned> {
        self.shared.table.learned(Instant::now())
    }

    /// Starts slots from what an earlier layer learned (see
    /// [`export`](Self::export)): each slot named is made if needed, its
    /// policy starts from the learned delay and limit as far as the policy
    /// can (see [`Policy::warm`](crate::policy::Policy::warm); the default
    /// policy restarts its growth from half the learned limit, the replicas
    /// take the delay or limit they keep), and a pause still running then
    /// runs again in full from now (capped by `max_retry_after`), since the
    /// time between the runs is unknown. Meant for a fresh layer; on a slot
    /// in use it binds the next dispatch. Returns how many slots it warmed.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the field, if any entry is invalid (a key
    /// that is no slot key, a negative or non-finite number, a limit of 0);
    /// then no slot is changed.
    ///
    /// ```
    /// use tower_autothrottle::{AutoThrottleLayer, Config, Learned};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let learned = vec![Learned {
    ///     key: "https://example.com".into(),
    ///     delay_secs: 0.25,
    ///     concurrency: 8,
    ///     latency_secs: Some(0.5),
    ///     paused_secs: None,
    /// }];
    /// let layer = AutoThrottleLayer::new(Config::default());
    /// assert_eq!(layer.import(learned).unwrap(), 1);
    /// let slot = layer.slot("https://example.com").unwrap();
    /// assert_eq!(slot.concurrency, 4); // the default restarts from half
    /// # }
    /// ```
    pub fn import(&self, learned: impl IntoIterator<Item = Learned>) -> Result<usize, ConfigError> {
        let max = self.shared.config.max_retry_after;
        let warm = learned
            .into_iter()
            .map(|l| l.check(max))
            .collect::<Result<Vec<Warm>, ConfigError>>()?;
        let now = Instant::now();
        for w in &warm {
            self.shared
                .table
                .with_slot(w.key.clone(), |slot| slot.warm(now, w));
        }
        Ok(warm.len())
    }

    /// Waits for a place in the slot `request` goes to, keyed as the layer
    /// keys it (its [`DownloadSlot`](crate::DownloadSlot), the key function,
    /// the [`KeyStrategy`](crate::KeyStrategy)), for a client outside tower:
    /// see [`Place`]. It waits as a request through the layer would (behind
    /// the requests already queued in the slot, for its delay, limit and
    /// any pause, and for [`max_pending`](crate::ConfigBuilder::max_pending)),
    /// and shares the slots with every service of this layer. Dropping the
    /// future leaves the queue. A request carrying
    /// [`DontAdjust`](crate::DontAdjust) gets a place whose report obeys a
    /// `Retry-After` or `RateLimit` answer but feeds neither the policy nor
    /// the overload backoff, as through the layer.
    ///
    /// ```
    /// use http::{HeaderMap, Request, StatusCode};
    /// use tower_autothrottle::{AutoThrottleLayer, Config};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let throttle = AutoThrottleLayer::new(Config::default());
    /// let request = Request::get("https://example.com/").body(()).unwrap();
    /// let place = throttle.acquire(&request).await;
    /// // ... send it with any client ...
    /// place.report(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new());
    /// assert_eq!(throttle.slot("https://example.com").unwrap().overloads, 1);
    /// # }
    /// ```
    pub async fn acquire<B>(&self, request: &http::Request<B>) -> Place {
        let parts = head(request);
        let adjust = parts.extensions.get::<crate::DontAdjust>().is_none();
        Place::acquire(Arc::clone(&self.shared), adjust, |shared| {
            shared.start(&parts, None)
        })
        .await
    }

    /// [`acquire`](Self::acquire) for a request to `uri` (a GET with no
    /// headers or extensions).
    pub async fn acquire_uri(&self, uri: &http::Uri) -> Place {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.uri = uri.clone();
        Place::acquire(Arc::clone(&self.shared), true, |shared| {
            shared.start(&parts, None)
        })
        .await
    }

    /// [`acquire`](Self::acquire) in the slot `key` names, whatever the
    /// key function or strategy would choose.
    pub async fn acquire_key(&self, key: SlotKey) -> Place {
        Place::acquire(Arc::clone(&self.shared), true, |shared| {
            shared.enqueue(key).into()
        })
        .await
    }

    /// Sets a floor under the delay of the slot `pattern` names (an exact
    /// key, or a pattern with `*`, as for [`SlotSettings`]), for a
    /// robots.txt `Crawl-delay`, say; `None` lifts it. The key is normalized
    /// as every key is (see [`SlotKey`]), so `"https://Example.com:443/"`
    /// and `"https://example.com"` set the same floor. The floor is kept in
    /// the settings table, not in a slot: a host not seen yet gets it from
    /// its first request, and a slot evicted and made again gets it back.
    /// It binds the next dispatch, even for requests already waiting.
    ///
    /// `Duration::MAX` blocks the slot: nothing of it is dispatched, not
    /// even a first request, until the floor is lowered or lifted.
    ///
    /// Where a key has a floor of its own and patterns cover it too, its own
    /// wins; otherwise the first matching pattern's.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_autothrottle::{AutoThrottleLayer, Config};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let layer = AutoThrottleLayer::new(Config::default());
    /// layer.set_delay_floor("https://Example.com/", Some(Duration::from_secs(10))).unwrap();
    /// assert!(layer.set_delay_floor("http://", Some(Duration::from_secs(1))).is_err());
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for `slot` when `pattern` cannot name a slot
    /// (empty, or a URI without a valid host and port); nothing changes.
    pub fn set_delay_floor(
        &self,
        pattern: impl AsRef<str>,
        floor: Option<Duration>,
    ) -> Result<(), ConfigError> {
        let target = Target::parse(pattern.as_ref())?;
        let floor = floor.filter(|f| !f.is_zero());
        self.shared.table.set_floor(&target, floor);
        Ok(())
    }

    /// Sets the settings of the slot `pattern` (an exact key, or a pattern
    /// with `*`, normalized as every key is; see [`SlotSettings`]) at run
    /// time, replacing any it had. Every existing slot it covers starts
    /// afresh with the new policy and bounds, binding its next dispatch;
    /// new slots pick them up when created.
    ///
    /// # Errors
    ///
    /// A pattern that cannot name a slot is refused with a [`ConfigError`]
    /// for `slot`; the settings are checked as
    /// [`ConfigBuilder::build`](crate::ConfigBuilder::build) checks them.
    /// Anything refused changes nothing.
    pub fn set_slot_settings(
        &self,
        pattern: impl AsRef<str>,
        settings: SlotSettings,
    ) -> Result<(), ConfigError> {
        let target = Target::parse(pattern.as_ref())?;
        let policy = settings.resolve(&self.shared.config.policy)?;
        self.shared.table.set_settings(&target, Some(policy));
        Ok(())
    }

    /// Removes the settings of `pattern` (normalized as it was when set);
    /// the slots it covered start afresh with whatever applies to them now.
    /// Returns whether there were any.
    pub fn remove_slot_settings(&self, pattern: impl AsRef<str>) -> bool {
        Target::parse(pattern.as_ref())
            .is_ok_and(|target| self.shared.table.set_settings(&target, None))
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

/// A copy of `request`'s head, for keying.
fn head<B>(request: &http::Request<B>) -> http::request::Parts {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = request.method().clone();
    parts.uri = request.uri().clone();
    parts.version = request.version();
    parts.headers = request.headers().clone();
    parts.extensions = request.extensions().clone();
    parts
}
