//! Per-slot settings: what [`SlotSettings`] set for a key or a pattern, the
//! table of them in force, and the pattern matching.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::builder::setters;
use crate::error::ConfigError;
use crate::key::SlotKey;
use crate::policy::{Bounded, MakePolicy, Policy};
use crate::time::Secs;

/// Settings of one slot, or of the slots matching a pattern.
///
/// [`SlotSettings`] are Scrapy's `DOWNLOAD_SLOTS`: for one slot key, or for
/// every key matching a pattern, a policy of its own, a start delay, bounds
/// on the delay and a cap on the concurrency. Give them when building the
/// configuration ([`ConfigBuilder::slot`](crate::ConfigBuilder::slot)) or
/// at run time ([`AutoThrottleLayer::set_slot_settings`](crate::AutoThrottleLayer::set_slot_settings)).
///
/// # Patterns
///
/// A pattern is a slot key in which `*` stands for any run of characters
/// (none included): `https://*.example.com` matches every subdomain of
/// `example.com` over HTTPS, and `*example.com*` matches whatever key
/// contains it. A pattern without `*` is an exact key. For a slot, settings
/// for its exact key win; otherwise the first matching pattern, in the
/// order the patterns were first set, applies. A slot without a match runs
/// the configuration's policy, unbounded.
///
/// ```
/// use std::time::Duration;
/// use tower_autothrottle::{policy::Scrapy, AutoThrottleLayer, Config, SlotSettings};
///
/// let config = Config::builder()
///     // A partner API: one request at a time, at least 2 s apart.
///     .slot(
///         "https://api.partner.example",
///         SlotSettings::new().min_delay(Duration::from_secs(2)).max_concurrency(1),
///     )
///     // Every host of a CDN: today's Scrapy rules, starting at 100 ms.
///     .slot(
///         "https://*.cdn.example",
///         SlotSettings::new().policy(Scrapy::default()).start_delay(Duration::from_millis(100)),
///     )
///     .build()
///     .unwrap();
/// let layer = AutoThrottleLayer::new(config);
///
/// // At run time: a host that asked for a gentler pace.
/// layer
///     .set_slot_settings("https://slow.example", SlotSettings::new().min_delay(Duration::from_secs(5)))
///     .unwrap();
/// ```
///
/// Unset fields keep the configuration's choice. The bounds clamp what the
/// policy answers (its own state is left as it is) and apply under the
/// layer's signals: a `Retry-After` pause or an overload backoff can still
/// slow the slot below them.
#[derive(Clone, Default)]
pub struct SlotSettings {
    policy: Option<Arc<dyn MakePolicy>>,
    start_delay: Option<Duration>,
    min_delay: Option<Duration>,
    max_delay: Option<Duration>,
    max_concurrency: Option<usize>,
}

impl SlotSettings {
    /// Settings that change nothing yet.
    #[must_use]
    pub fn new() -> Self {
        SlotSettings::default()
    }

    /// The policy of the slot, instead of the configuration's.
    #[must_use]
    pub fn policy(mut self, policy: impl MakePolicy) -> Self {
        self.policy = Some(Arc::new(policy));
        self
    }

    setters! {
        /// The delay the slot starts from (Scrapy's `DOWNLOAD_SLOTS` `delay`,
        /// with AutoThrottle on). Only for policies that have one
        /// ([`Adaptive`](crate::policy::Adaptive), [`Scrapy`](crate::policy::Scrapy),
        /// [`Scrapy2012`](crate::policy::Scrapy2012)); with another policy the
        /// settings are refused with a [`ConfigError`] for `start_delay`.
        pub fn start_delay(Duration) => start_delay = Some;
        /// The slot's delay never goes below this.
        pub fn min_delay(Duration) => min_delay = Some;
        /// The policy's delay is cut to this (signals may still exceed it).
        pub fn max_delay(Duration) => max_delay = Some;
        /// The slot never has more than this many requests in flight (Scrapy's
        /// `DOWNLOAD_SLOTS` `concurrency`).
        pub fn max_concurrency(usize) => max_concurrency = Some;
    }

    /// Checks the settings against the configuration's policy, and returns
    /// what makes the slot's policy.
    pub(crate) fn resolve(
        &self,
        default: &Arc<dyn MakePolicy>,
    ) -> Result<Arc<dyn MakePolicy>, ConfigError> {
        let mut policy = self.policy.clone().unwrap_or_else(|| Arc::clone(default));
        if let Some(start) = self.start_delay {
            policy = policy.with_start_delay(start).ok_or_else(|| {
                ConfigError::new(
                    "start_delay",
                    format!("the {} policy has no start delay", policy.name()),
                )
            })?;
        }
        if self.max_concurrency == Some(0) {
            return Err(ConfigError::new("max_concurrency", "must be at least 1"));
        }
        if let (Some(min), Some(max)) = (self.min_delay, self.max_delay) {
            if min > max {
                return Err(ConfigError::new(
                    "min_delay",
                    format!("{min:?} is above max_delay {max:?}"),
                ));
            }
        }
        policy.validate()?;
        let bounded =
            self.min_delay.is_some() || self.max_delay.is_some() || self.max_concurrency.is_some();
        Ok(if bounded {
            Arc::new(BoundedMaker {
                inner: policy,
                min_delay: self.min_delay.unwrap_or(Duration::ZERO),
                max_delay: self.max_delay.unwrap_or(Duration::MAX),
                max_concurrency: self.max_concurrency.unwrap_or(usize::MAX),
            })
        } else {
            policy
        })
    }
}

impl fmt::Debug for SlotSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotSettings")
            .field("policy", &self.policy)
            .field("start_delay", &Secs::opt(self.start_delay))
            .field("min_delay", &Secs::opt(self.min_delay))
            .field("max_delay", &Secs::opt(self.max_delay))
            .field("max_concurrency", &self.max_concurrency)
            .finish()
    }
}

/// Makes [`Bounded`] policies.
#[derive(Debug)]
struct BoundedMaker {
    inner: Arc<dyn MakePolicy>,
    min_delay: Duration,
    max_delay: Duration,
    max_concurrency: usize,
}

impl MakePolicy for BoundedMaker {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.inner.validate()
    }

    fn make_policy(&self, key: &SlotKey) -> Box<dyn Policy> {
        Box::new(
            Bounded::new(self.inner.make_policy(key))
                .min_delay(self.min_delay)
                .max_delay(self.max_delay)
                .max_concurrency(self.max_concurrency),
        )
    }
}

/// A pattern of slot keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pattern(Arc<str>);

impl Pattern {
    fn matches(&self, key: &str) -> bool {
        glob(&self.0, key)
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of characters.
/// Linear in `pattern.len() × text.len()` at worst, never exponential.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and where in the text it was tried up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The per-slot settings in force, with what makes each one's policy.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    exact: HashMap<SlotKey, Arc<dyn MakePolicy>>,
    patterns: Vec<(Pattern, Arc<dyn MakePolicy>)>,
}

impl Overrides {
    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.patterns.is_empty()
    }

    /// Sets (or replaces) the policy maker for `pattern`.
    pub(crate) fn set(&mut self, pattern: &str, policy: Arc<dyn MakePolicy>) {
        if pattern.contains('*') {
            let pattern = Pattern(Arc::from(pattern));
            match self.patterns.iter_mut().find(|(p, _)| *p == pattern) {
                Some(entry) => entry.1 = policy,
                None => self.patterns.push((pattern, policy)),
            }
        } else {
            self.exact.insert(SlotKey::new(pattern), policy);
        }
    }

    /// Removes the settings of `pattern`; whether there were any.
    pub(crate) fn remove(&mut self, pattern: &str) -> bool {
        if pattern.contains('*') {
            let before = self.patterns.len();
            self.patterns.retain(|(p, _)| &*p.0 != pattern);
            before != self.patterns.len()
        } else {
            self.exact.remove(pattern).is_some()
        }
    }

    /// What makes the policy of the slot `key`, if settings apply to it.
    pub(crate) fn policy_for(&self, key: &str) -> Option<&Arc<dyn MakePolicy>> {
        self.exact.get(key).or_else(|| {
            self.patterns
                .iter()
                .find(|(p, _)| p.matches(key))
                .map(|(_, policy)| policy)
        })
    }

    /// Whether `pattern` (as given to [`set`](Self::set)) covers `key`.
    pub(crate) fn covers(pattern: &str, key: &str) -> bool {
        if pattern.contains('*') {
            glob(pattern, key)
        } else {
            pattern == key
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Aimd, Scrapy2012};

    #[test]
    fn glob_matches() {
        assert!(glob("https://*.example.com", "https://www.example.com"));
        assert!(glob("https://*.example.com", "https://a.b.example.com"));
        assert!(!glob("https://*.example.com", "https://example.com"));
        assert!(!glob("https://*.example.com", "http://www.example.com"));
        assert!(glob("*", ""));
        assert!(glob("*example*", "https://example.com:8443"));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
        // No exponential blow-up on many stars.
        let text = "a".repeat(10_000);
        assert!(!glob(&format!("{}b", "*a".repeat(50)), &text));
    }

    #[test]
    fn exact_wins_then_first_pattern() {
        let mut o = Overrides::default();
        let a: Arc<dyn MakePolicy> = Arc::new(Scrapy2012::default());
        let b: Arc<dyn MakePolicy> = Arc::new(Aimd::default());
        o.set("https://*.example.com", Arc::clone(&a));
        o.set("https://*", Arc::clone(&b));
        o.set("https://www.example.com", Arc::clone(&b));
        assert_eq!(
            o.policy_for("https://www.example.com").unwrap().name(),
            "aimd"
        );
        assert_eq!(
            o.policy_for("https://x.example.com").unwrap().name(),
            "scrapy-2012"
        );
        assert_eq!(o.policy_for("https://other.org").unwrap().name(), "aimd");
        assert!(o.policy_for("http://other.org").is_none());
        assert!(o.remove("https://*.example.com"));
        assert_eq!(
            o.policy_for("https://x.example.com").unwrap().name(),
            "aimd"
        );
        assert!(!o.remove("https://*.example.com"));
    }

    #[test]
    fn start_delay_needs_a_policy_that_has_one() {
        let default: Arc<dyn MakePolicy> = Arc::new(Aimd::default());
        let err = SlotSettings::new()
            .start_delay(Duration::from_secs(1))
            .resolve(&default)
            .unwrap_err();
        assert_eq!(err.field(), "start_delay");
        let ok = SlotSettings::new()
            .policy(Scrapy2012::default())
            .start_delay(Duration::from_secs(1))
            .resolve(&default)
            .unwrap();
        let policy = ok.make_policy(&SlotKey::new("k"));
        assert_eq!(policy.throttle().delay(), Duration::from_secs(1));
    }

    #[test]
    fn bad_bounds_are_refused() {
        let default: Arc<dyn MakePolicy> = Arc::new(Scrapy2012::default());
        let err = SlotSettings::new().max_concurrency(0).resolve(&default);
        assert_eq!(err.unwrap_err().field(), "max_concurrency");
        let err = SlotSettings::new()
            .min_delay(Duration::from_secs(2))
            .max_delay(Duration::from_secs(1))
            .resolve(&default);
        assert_eq!(err.unwrap_err().field(), "min_delay");
    }
}
