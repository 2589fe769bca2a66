//! Configuration of the layer, checked once when it is built.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use http::request::Parts;

use crate::key::{KeyFn, SlotKey};
use crate::policy::{MakePolicy, Scrapy2012};

/// How an [`AutoThrottleLayer`](crate::AutoThrottleLayer) throttles.
///
/// Build one with [`Config::builder`]; [`Config::default`] runs the original
/// AutoThrottle rules ([`Scrapy2012`]) with Scrapy's defaults.
///
/// | setting | default | Scrapy setting |
/// |---|---|---|
/// | [`policy`](ConfigBuilder::policy) | [`Scrapy2012`] | `AUTOTHROTTLE_ENABLED` |
/// | [`key_fn`](ConfigBuilder::key_fn) | by authority | `download_slot` meta, `CONCURRENT_REQUESTS_PER_IP` |
/// | [`max_pending`](ConfigBuilder::max_pending) | unbounded | `CONCURRENT_REQUESTS` |
/// | [`debug`](ConfigBuilder::debug) | off | `AUTOTHROTTLE_DEBUG` |
#[derive(Clone)]
pub struct Config {
    pub(crate) policy: Arc<dyn MakePolicy>,
    pub(crate) key_fn: Option<KeyFn>,
    pub(crate) max_pending: Option<usize>,
    pub(crate) debug: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Arc::new(Scrapy2012::default()),
            key_fn: None,
            max_pending: None,
            debug: false,
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
            .finish()
    }
}

impl Config {
    /// Starts from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            config: Config::default(),
        }
    }

    /// The policy that makes each slot's delay and limit.
    pub fn policy(&self) -> &dyn MakePolicy {
        &*self.policy
    }

    /// The bound on requests queued plus in flight over all slots, if any.
    pub fn max_pending(&self) -> Option<usize> {
        self.max_pending
    }

    /// Whether every adjustment is logged at `INFO` level.
    pub fn debug(&self) -> bool {
        self.debug
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
#[derive(Debug)]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    /// The policy each slot runs.
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
    pub fn key_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<SlotKey> + Send + Sync + 'static,
    {
        self.config.key_fn = Some(Arc::new(f));
        self
    }

    /// Bounds the requests queued in slots plus those in flight, over all
    /// slots (Scrapy's `CONCURRENT_REQUESTS`, which also counts queued ones).
    /// When the bound is reached, `poll_ready` returns `Pending` until a
    /// request finishes. Unbounded by default.
    pub fn max_pending(mut self, max: usize) -> Self {
        self.config.max_pending = Some(max);
        self
    }

    /// Logs every adjustment at `INFO` level (Scrapy's `AUTOTHROTTLE_DEBUG`);
    /// otherwise they are logged at `DEBUG` level.
    pub fn debug(mut self, on: bool) -> Self {
        self.config.debug = on;
        self
    }

    /// Checks the configuration.
    pub fn build(self) -> Result<Config, ConfigError> {
        self.config.policy.validate()?;
        if self.config.max_pending == Some(0) {
            return Err(ConfigError::new("max_pending", "must be at least 1"));
        }
        Ok(self.config)
    }
}

/// An invalid configuration value, naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    reason: Cow<'static, str>,
}

impl ConfigError {
    /// An error for `field`, with the reason it is invalid.
    pub fn new(field: &'static str, reason: impl Into<Cow<'static, str>>) -> Self {
        ConfigError {
            field,
            reason: reason.into(),
        }
    }

    /// The name of the invalid field.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why it is invalid.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}
