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

/// What settings apply to: one slot key, or the keys a pattern matches
/// (`*` is any run of characters). Both are normalized as keys are (see
/// [`SlotKey`]), so `https://Example.com:443/` and `https://example.com`
/// name the same slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Key(SlotKey),
    Pattern(Arc<str>),
}

impl Target {
    /// Parses a key or a pattern.
    pub(crate) fn parse(text: &str) -> Result<Target, ConfigError> {
        let pattern = text.contains('*');
        crate::key::normalize_pattern(text, pattern)
            .map(|normal| {
                if pattern {
                    Target::Pattern(normal.into())
                } else {
                    Target::Key(SlotKey::verbatim(normal))
                }
            })
            .map_err(|reason| ConfigError::new("slot", format!("{text:?}: {reason}")))
    }

    /// Whether it covers the slot `key`.
    pub(crate) fn covers(&self, key: &str) -> bool {
        match self {
            Target::Key(k) => k.as_str() == key,
            Target::Pattern(p) => glob(p, key),
        }
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

/// Values by key or pattern: for a slot, the value of its exact key wins,
/// then the first matching pattern's, in the order the patterns were first
/// set.
#[derive(Clone, Debug)]
struct ByTarget<T> {
    exact: HashMap<SlotKey, T>,
    patterns: Vec<(Arc<str>, T)>,
}

impl<T> Default for ByTarget<T> {
    fn default() -> Self {
        ByTarget {
            exact: HashMap::new(),
            patterns: Vec::new(),
        }
    }
}

impl<T> ByTarget<T> {
    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.patterns.is_empty()
    }

    /// Sets (`Some`) or removes (`None`) the value of `target`; whether
    /// anything was set or removed.
    fn set(&mut self, target: &Target, value: Option<T>) -> bool {
        match (target, value) {
            (Target::Key(key), Some(value)) => {
                self.exact.insert(key.clone(), value);
                true
            }
            (Target::Key(key), None) => self.exact.remove(key.as_str()).is_some(),
            (Target::Pattern(pattern), Some(value)) => {
                match self.patterns.iter_mut().find(|(p, _)| p == pattern) {
                    Some(entry) => entry.1 = value,
                    None => self.patterns.push((Arc::clone(pattern), value)),
                }
                true
            }
            (Target::Pattern(pattern), None) => {
                let before = self.patterns.len();
                self.patterns.retain(|(p, _)| p != pattern);
                before != self.patterns.len()
            }
        }
    }

    /// The value that applies to the slot `key`, if any.
    fn get(&self, key: &str) -> Option<&T> {
        if self.is_empty() {
            return None;
        }
        self.exact.get(key).or_else(|| {
            self.patterns
                .iter()
                .find(|(p, _)| glob(p, key))
                .map(|(_, value)| value)
        })
    }
}

/// The per-slot settings in force: what makes each slot's policy, and the
/// delay floors. They are kept here, by key or pattern, not in the slots, so
/// a setting for a host not yet seen (or whose slot was evicted) creates no
/// slot and holds from the host's first request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Overrides {
    policies: ByTarget<Arc<dyn MakePolicy>>,
    floors: ByTarget<Duration>,
}

impl Overrides {
    /// Sets (`Some`) or removes (`None`) what makes the policy of the slots
    /// `target` covers; whether anything was set or removed.
    pub(crate) fn set_policy(
        &mut self,
        target: &Target,
        policy: Option<Arc<dyn MakePolicy>>,
    ) -> bool {
        self.policies.set(target, policy)
    }

    /// Sets (`Some`) or removes (`None`) the delay floor of the slots
    /// `target` covers; whether anything was set or removed.
    pub(crate) fn set_floor(&mut self, target: &Target, floor: Option<Duration>) -> bool {
        self.floors.set(target, floor)
    }

    /// What makes the policy of the slot `key`, if settings apply to it.
    pub(crate) fn policy_for(&self, key: &str) -> Option<&Arc<dyn MakePolicy>> {
        self.policies.get(key)
    }

    /// The delay floor of the slot `key` (zero if none).
    pub(crate) fn floor_for(&self, key: &str) -> Duration {
        self.floors.get(key).copied().unwrap_or(Duration::ZERO)
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
        let t = |text| Target::parse(text).unwrap();
        o.set_policy(&t("https://*.example.com"), Some(Arc::clone(&a)));
        o.set_policy(&t("https://*"), Some(Arc::clone(&b)));
        o.set_policy(&t("HTTPS://WWW.Example.com:443/"), Some(Arc::clone(&b)));
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
        assert!(o.set_policy(&t("https://*.example.com"), None));
        assert_eq!(
            o.policy_for("https://x.example.com").unwrap().name(),
            "aimd"
        );
        assert!(!o.set_policy(&t("https://*.example.com"), None));
        // Floors, by the same rules.
        o.set_floor(&t("https://*.example.com"), Some(Duration::from_secs(2)));
        o.set_floor(&t("https://a.example.com/"), Some(Duration::from_secs(5)));
        assert_eq!(o.floor_for("https://a.example.com"), Duration::from_secs(5));
        assert_eq!(o.floor_for("https://b.example.com"), Duration::from_secs(2));
        assert_eq!(o.floor_for("https://example.com"), Duration::ZERO);
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
