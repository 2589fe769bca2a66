//! The configuration: [`Config`] and its builder, checked once when built;
//! per-slot settings (`settings`) and config files (`file`, feature `serde`).

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use crate::builder::setters;
use crate::error::ConfigError;
use crate::key::{KeyFn, KeyStrategy, Resolve, SlotKey, SystemResolver};
use crate::policy::{Adaptive, MakePolicy, Outcome};
use crate::signals::ErrorClassifier;
use crate::time::Secs;

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod file;
mod settings;

pub use settings::SlotSettings;
pub(crate) use settings::{Overrides, Target};

/// How an [`AutoThrottleLayer`](crate::AutoThrottleLayer) throttles.
///
/// Build one with [`Config::builder`]; [`Config::default`] runs the crate's
/// own policy, [`Adaptive`], which adapts both the delay and the
/// concurrency of each host. [`Scrapy2012`](crate::policy::Scrapy2012) runs
/// the original AutoThrottle rules, [`Scrapy`](crate::policy::Scrapy)
/// today's.
///
/// | setting | default | Scrapy setting |
/// |---|---|---|
/// | [`policy`](ConfigBuilder::policy) | [`Adaptive`] | `AUTOTHROTTLE_ENABLED` |
/// | [`key_fn`](ConfigBuilder::key_fn) | by authority | `download_slot` meta, `CONCURRENT_REQUESTS_PER_IP` |
/// | [`max_pending`](ConfigBuilder::max_pending) | unbounded | `CONCURRENT_REQUESTS` |
/// | [`debug`](ConfigBuilder::debug) | off | `AUTOTHROTTLE_DEBUG` |
/// | [`max_retry_after`](ConfigBuilder::max_retry_after) | 10 min | |
/// | [`jitter`](ConfigBuilder::jitter) | 0 (off) | `DOWNLOAD_DELAY_JITTER` (`RANDOMIZE_DOWNLOAD_DELAY`) |
/// | [`seed`](ConfigBuilder::seed) | 0 | |
/// | [`error_classifier`](ConfigBuilder::error_classifier) | [`classify_error`](crate::classify_error) | |
/// | [`key_strategy`](ConfigBuilder::key_strategy) | [`KeyStrategy::Authority`] | `CONCURRENT_REQUESTS_PER_IP` (for [`KeyStrategy::ResolvedIp`]) |
/// | [`resolver`](ConfigBuilder::resolver) | [`SystemResolver`] | |
/// | [`dns_ttl`](ConfigBuilder::dns_ttl) | 60 s | |
/// | [`dns_cache_size`](ConfigBuilder::dns_cache_size) | 10 000 | `DNSCACHE_SIZE` |
/// | [`idle_timeout`](ConfigBuilder::idle_timeout) | 5 min | |
/// | [`max_slots`](ConfigBuilder::max_slots) | 100 000 | |
/// | [`slot`](ConfigBuilder::slot) | none | `DOWNLOAD_SLOTS` |
#[derive(Clone)]
pub struct Config {
    pub(crate) policy: Arc<dyn MakePolicy>,
    pub(crate) key_fn: Option<KeyFn>,
    pub(crate) max_pending: Option<usize>,
    pub(crate) debug: bool,
    pub(crate) max_retry_after: Duration,
    pub(crate) jitter: f64,
    pub(crate) seed: u64,
    pub(crate) classifier: Option<ErrorClassifier>,
    pub(crate) key_strategy: KeyStrategy,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) dns_ttl: Duration,
    pub(crate) dns_cache_size: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_slots: usize,
    /// Per-slot settings, checked and resolved.
    pub(crate) overrides: Overrides,
    /// Shares the slots with a fleet (feature `redis`).
    pub(crate) coordinator: Option<Arc<dyn crate::fleet::Coordinator>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Arc::new(Adaptive::default()),
            key_fn: None,
            max_pending: None,
            debug: false,
            max_retry_after: Duration::from_secs(600),
            jitter: 0.0,
            seed: 0,
            classifier: None,
            key_strategy: KeyStrategy::Authority,
            resolver: Arc::new(SystemResolver),
            dns_ttl: Duration::from_secs(60),
            dns_cache_size: 10_000,
            idle_timeout: Duration::from_secs(300),
            max_slots: 100_000,
            overrides: Overrides::default(),
            coordinator: None,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("policy", &self.policy)
            .field("key_fn", &self.key_fn.as_ref().map(|_| "Fn(&Parts)"))
            .field("max_pending", &self.max_pending)
            .field("debug", &self.debug)
            .field("max_retry_after", &Secs::from(self.max_retry_after))
            .field("jitter", &self.jitter)
            .field("seed", &self.seed)
            .field(
                "error_classifier",
                &self.classifier.as_ref().map(|_| "Fn(&dyn Error)"),
            )
            .field("key_strategy", &self.key_strategy)
            .field("dns_ttl", &Secs::from(self.dns_ttl))
            .field("dns_cache_size", &self.dns_cache_size)
            .field("idle_timeout", &Secs::from(self.idle_timeout))
            .field("max_slots", &self.max_slots)
            .field("slot_settings", &self.overrides)
            .field("fleet", &self.coordinator)
            .finish()
    }
}

impl Config {
    /// Starts from the defaults.
    #[must_use]
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            config: Config::default(),
            error: None,
            slots: Vec::new(),
        }
    }

    /// The policy that makes each slot's delay and limit.
    #[must_use]
    pub fn policy(&self) -> &dyn MakePolicy {
        &*self.policy
    }

    /// The bound on requests queued plus in flight over all slots, if any.
    #[must_use]
    pub fn max_pending(&self) -> Option<usize> {
        self.max_pending
    }

    /// Whether every adjustment is logged at `INFO` level.
    #[must_use]
    pub fn debug(&self) -> bool {
        self.debug
    }

    /// The longest pause a `Retry-After` may impose.
    #[must_use]
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }
}

/// Builds a [`Config`]; [`build`](ConfigBuilder::build) checks it.
///
/// ```
/// use std::time::Duration;
/// use tower_autothrottle::{policy::Scrapy2012, Config};
///
/// let config = Config::builder()
///     .policy(Scrapy2012::default().start_delay(Duration::from_secs(1)))
///     .max_pending(10_000)
///     .debug(true)
///     .build()
///     .expect("valid configuration");
///
/// let bad = Config::builder().policy(Scrapy2012::default().check_period(0)).build();
/// assert_eq!(bad.unwrap_err().field(), "check_period");
/// ```
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    pub(crate) config: Config,
    /// An error found by a setter that checks at once (an integration's),
    /// reported by `build`.
    pub(crate) error: Option<ConfigError>,
    slots: Vec<(String, SlotSettings)>,
}

impl Default for ConfigBuilder {
    /// The same as [`Config::builder`]: the defaults.
    fn default() -> Self {
        Config::builder()
    }
}

impl ConfigBuilder {
    /// The policy each slot runs.
    #[must_use]
    pub fn policy(mut self, policy: impl MakePolicy) -> Self {
        self.config.policy = Arc::new(policy);
        self
    }

    /// A function that chooses the slot of a request from its head; when it
    /// returns `None` the request is keyed by its authority. A
    /// [`DownloadSlot`](crate::DownloadSlot) extension on the request takes
    /// precedence over it.
    ///
    /// ```
    /// use tower_autothrottle::{Config, SlotKey};
    ///
    /// // One slot per host name, whatever the scheme and port (Scrapy's keying).
    /// let config = Config::builder()
    ///     .key_fn(|parts| parts.uri.host().map(|h| SlotKey::new(h.to_ascii_lowercase())))
    ///     .build()
    ///     .unwrap();
    /// ```
    #[must_use]
    pub fn key_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<SlotKey> + Send + Sync + 'static,
    {
        self.config.key_fn = Some(Arc::new(f));
        self
    }

    setters! {
        /// Bounds the requests queued in slots plus those in flight, over all
        /// slots (Scrapy's `CONCURRENT_REQUESTS`, which also counts queued ones),
        /// from 1 up (`usize::MAX` is no bound). When the bound is reached,
        /// `poll_ready` returns `Pending` until a request finishes.
        ///
        /// Unbounded by default, and deliberately: `poll_ready` cannot see
        /// which host a request is for, so this bound counts every host, and
        /// one slow host's backlog would hold up requests to all the others,
        /// which per-host throttling exists to prevent. Without it,
        /// `poll_ready` is always ready and each slot queues what it is
        /// given; the memory of a queued request is its future. Bound the
        /// work at its source (a crawler's frontier, a worker pool), or set
        /// this bound for tower-style backpressure across all hosts.
        pub fn max_pending(usize) => config.max_pending = Some;
        /// Logs every adjustment at `INFO` level (Scrapy's `AUTOTHROTTLE_DEBUG`);
        /// otherwise they are logged at `DEBUG` level.
        pub fn debug(bool) => config.debug;
        /// The longest pause a `Retry-After` (or an exhausted `RateLimit`
        /// quota) may impose; longer ones are cut to it (with a warning).
        /// Default 10 minutes. `Duration::ZERO` ignores these pauses (the
        /// overload backoff still reacts to a 429 or 503); `Duration::MAX`
        /// caps nothing.
        pub fn max_retry_after(Duration) => config.max_retry_after;
        /// Randomizes each wait between two requests of a slot to
        /// `delay × (1 + U(-jitter, jitter))`, like Scrapy's
        /// `DOWNLOAD_DELAY_JITTER`; `jitter` is in `[0, 1]`, and 0 (the default)
        /// turns it off. Scrapy's `RANDOMIZE_DOWNLOAD_DELAY = True` is 0.5.
        pub fn jitter(f64) => config.jitter;
        /// Seeds the jitter, so that runs can be reproduced.
        pub fn seed(u64) => config.seed;
        /// How requests are grouped into slots when neither a
        /// [`DownloadSlot`](crate::DownloadSlot) extension nor the key function
        /// decides; see [`KeyStrategy`].
        ///
        /// ```
        /// use tower_autothrottle::{Config, KeyStrategy};
        ///
        /// // One budget per registrable domain, as Crawlee does.
        /// let config = Config::builder().key_strategy(KeyStrategy::RegistrableDomain).build().unwrap();
        /// ```
        pub fn key_strategy(KeyStrategy) => config.key_strategy;
        /// How long a resolution is kept for [`KeyStrategy::ResolvedIp`]
        /// (failures too: such a host is keyed by name meanwhile). Default 60 s.
        /// `Duration::ZERO` keeps none: every request resolves its host.
        pub fn dns_ttl(Duration) => config.dns_ttl;
        /// How many resolutions are kept at most (Scrapy's `DNSCACHE_SIZE`), at
        /// least 1; beyond it the oldest go first. Default 10 000.
        pub fn dns_cache_size(usize) => config.dns_cache_size;
        /// How long a slot is kept, with what it learned, once nothing holds it
        /// to its host (no request in flight or queued, no running pause or
        /// delay). Default 5 minutes. `Duration::ZERO` drops idle slots at
        /// the next sweep (each host then starts afresh, though never sooner
        /// than its delay allows); `Duration::MAX` keeps them until
        /// [`max_slots`](Self::max_slots) is passed. Floors and settings are
        /// kept in the settings table, so a dropped slot gets them back.
        pub fn idle_timeout(Duration) => config.idle_timeout;
        /// Bounds the slots kept (at least 1): beyond it, the least recently
        /// used idle ones are dropped early, down to nine tenths of it. Busy
        /// slots are never dropped, so the bound can be passed while more
        /// hosts than it are busy at once. Default 100 000.
        pub fn max_slots(usize) => config.max_slots;
    }

    /// Classifies the inner service's errors as overload (which lowers what
    /// the slot allows) or not; the default is
    /// [`classify_error`](crate::classify_error).
    #[must_use]
    pub fn error_classifier<F>(mut self, f: F) -> Self
    where
        F: Fn(&(dyn Error + 'static)) -> Outcome + Send + Sync + 'static,
    {
        self.config.classifier = Some(Arc::new(f));
        self
    }

    /// The resolver for [`KeyStrategy::ResolvedIp`]; the system's by
    /// default.
    #[must_use]
    pub fn resolver(mut self, resolver: impl Resolve) -> Self {
        self.config.resolver = Arc::new(resolver);
        self
    }

    /// Settings for the slot `pattern`, an exact key or a pattern with `*`
    /// (Scrapy's `DOWNLOAD_SLOTS`), normalized as every key is (see
    /// [`SlotKey`]); see [`SlotSettings`] for what they set and how
    /// patterns match. Setting the same pattern twice keeps the last
    /// settings; a pattern that cannot name a slot is refused by
    /// [`build`](Self::build) with a [`ConfigError`] for `slot`.
    #[must_use]
    pub fn slot(mut self, pattern: impl Into<String>, settings: SlotSettings) -> Self {
        self.slots.push((pattern.into(), settings));
        self
    }

    /// Checks the configuration.
    pub fn build(mut self) -> Result<Config, ConfigError> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        for (pattern, settings) in std::mem::take(&mut self.slots) {
            let target = Target::parse(&pattern)?;
            let policy = settings.resolve(&self.config.policy)?;
            self.config.overrides.set_policy(&target, Some(policy));
        }
        if self.config.max_slots == 0 {
            return Err(ConfigError::new("max_slots", "must be at least 1"));
        }
        if self.config.dns_cache_size == 0 {
            return Err(ConfigError::new("dns_cache_size", "must be at least 1"));
        }
        self.config.policy.validate()?;
        if self.config.max_pending == Some(0) {
            return Err(ConfigError::new("max_pending", "must be at least 1"));
        }
        if !(0.0..=1.0).contains(&self.config.jitter) {
            return Err(ConfigError::new(
                "jitter",
                format!("must be between 0 and 1, got {}", self.config.jitter),
            ));
        }
        Ok(self.config)
    }
}
