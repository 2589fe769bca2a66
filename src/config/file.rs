//! [`Config`] from TOML, JSON or any serde format (feature `serde`).
//!
//! [`ConfigFile`] is the configuration as a file spells it: every field
//! optional (a missing one keeps its default), durations in seconds as
//! numbers, the policy by name, per-slot settings in a `slots` table.
//! [`ConfigFile::build`] checks it into a [`Config`], with a [`ConfigError`]
//! that names the field; [`Config`] also implements `Deserialize` directly,
//! through it. Unknown fields are refused, so a typo is an error, not a
//! setting silently left at its default.
//!
//! ```
//! use tower_autothrottle::{file::ConfigFile, Config};
//!
//! let text = r#"
//! policy = "scrapy"          # AUTOTHROTTLE_ENABLED, and which rules
//! start_delay = 1.0          # AUTOTHROTTLE_START_DELAY
//! max_delay = 30.0           # AUTOTHROTTLE_MAX_DELAY
//! target_concurrency = 2.0   # AUTOTHROTTLE_TARGET_CONCURRENCY
//! min_delay = 0.25           # DOWNLOAD_DELAY
//! max_concurrency = 8        # CONCURRENT_REQUESTS_PER_DOMAIN
//! max_pending = 16           # CONCURRENT_REQUESTS
//! jitter = 0.5               # RANDOMIZE_DOWNLOAD_DELAY = True
//!
//! [slots."https://api.example.com"]   # DOWNLOAD_SLOTS
//! start_delay = 2.0
//! max_concurrency = 1
//! "#;
//! let file: ConfigFile = toml::from_str(text).unwrap();
//! let config: Config = file.build().unwrap();
//! assert_eq!(config.policy().name(), "scrapy");
//!
//! // Invalid values name their field.
//! let file: ConfigFile = toml::from_str("jitter = 2.0").unwrap();
//! assert_eq!(file.build().unwrap_err().field(), "jitter");
//! // The same from JSON, straight into a Config.
//! let config: Result<Config, _> = serde_json::from_str(r#"{"policy": "aimd", "target_concurrency": 2}"#);
//! assert!(config.unwrap_err().to_string().contains("target_concurrency"));
//! ```
//!
//! # Fields
//!
//! | field | Scrapy setting | applies to |
//! |---|---|---|
//! | `policy` | `AUTOTHROTTLE_ENABLED` | `adaptive` (default), `scrapy`, `scrapy-2012`, `aimd`, `vegas`, `gradient2` |
//! | `start_delay` | `AUTOTHROTTLE_START_DELAY` | adaptive, scrapy, scrapy-2012 |
//! | `min_delay` | `DOWNLOAD_DELAY` | all but scrapy-2012 |
//! | `max_delay` | `AUTOTHROTTLE_MAX_DELAY` | adaptive, scrapy |
//! | `target_concurrency` | `AUTOTHROTTLE_TARGET_CONCURRENCY` | scrapy |
//! | `max_concurrency` | `CONCURRENT_REQUESTS_PER_DOMAIN` | all |
//! | `initial_concurrency` | | adaptive, aimd, vegas, gradient2 |
//! | `min_concurrency` | | aimd, gradient2 |
//! | `check_period` | | scrapy-2012 |
//! | `backoff_ratio`, `timeout` | | aimd |
//! | `smoothing` | | vegas, gradient2 |
//! | `probe_multiplier` | | vegas |
//! | `queue_size`, `long_window`, `rtt_tolerance` | | gradient2 |
//! | `debug` | `AUTOTHROTTLE_DEBUG` | |
//! | `max_pending` | `CONCURRENT_REQUESTS` | |
//! | `jitter` | `DOWNLOAD_DELAY_JITTER` | |
//! | `seed` | | |
//! | `max_retry_after` | | |
//! | `key_strategy` | `CONCURRENT_REQUESTS_PER_IP` (`resolved-ip`) | `authority` (default), `host`, `registrable-domain`, `resolved-ip` |
//! | `dns_ttl` | | |
//! | `dns_cache_size` | `DNSCACHE_SIZE` | |
//! | `idle_timeout`, `max_slots` | | |
//! | `slots` | `DOWNLOAD_SLOTS` | a table of [`SlotFile`] by exact key or pattern |
//!
//! A policy field given for a policy that has no use for it is an error
//! naming the field. Durations are seconds (`0.5` is 500 ms).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::{Config, SlotSettings};
use crate::error::ConfigError;
use crate::key::KeyStrategy;
use crate::policy::{Adaptive, Aimd, Gradient2, MakePolicy, Scrapy, Scrapy2012, Vegas};

/// Writes the file's structs from one list of the policy fields:
/// [`ConfigFile`] (the policy's name, its fields, then the layer's),
/// [`SlotFile`] (the slot's own policy's name and its fields), and `Params`
/// (the policy fields alone, as one policy sees them), with what moves
/// fields between them.
macro_rules! file_structs {
    (
        policy fields {
            $( $(#[doc = $pdoc:expr])* $pf:ident: $pt:ty, )*
        }
        $(#[$cmeta:meta])*
        pub struct ConfigFile {
            $( $(#[$cfmeta:meta])* $cf:ident: $ct:ty, )*
        }
        $(#[$smeta:meta])*
        pub struct SlotFile;
    ) => {
        $(#[$cmeta])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        #[non_exhaustive]
        pub struct ConfigFile {
            /// The policy's name: `adaptive` (the default), `scrapy`,
            /// `scrapy-2012`, `aimd`, `vegas` or `gradient2`.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub policy: Option<String>,
            $(
                $(#[doc = $pdoc])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $pf: Option<$pt>,
            )*
            $( $(#[$cfmeta])* pub $cf: $ct, )*
        }

        $(#[$smeta])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        #[non_exhaustive]
        pub struct SlotFile {
            /// The slot's own policy, by name.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub policy: Option<String>,
            $(
                $(#[doc = $pdoc])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $pf: Option<$pt>,
            )*
        }

        /// A policy's fields, as given.
        #[derive(Clone, Copy, Debug, Default)]
        struct Params {
            $( $pf: Option<$pt>, )*
        }

        impl Params {
            /// `self`, with `other`'s fields where it has them.
            fn overlay(self, other: Params) -> Params {
                Params { $( $pf: other.$pf.or(self.$pf), )* }
            }

            /// Each field's name, and whether it is set.
            fn set(&self) -> Vec<(&'static str, bool)> {
                vec![ $( (stringify!($pf), self.$pf.is_some()), )* ]
            }
        }

        impl ConfigFile {
            fn params(&self) -> Params {
                Params { $( $pf: self.$pf, )* }
            }
        }

        impl SlotFile {
            /// The entry's policy fields, with the four it takes as bounds
            /// (`start_delay`, `min_delay`, `max_delay`, `max_concurrency`)
            /// left out.
            fn params(&self) -> Params {
                Params {
                    start_delay: None,
                    min_delay: None,
                    max_delay: None,
                    max_concurrency: None,
                    ..Params { $( $pf: self.$pf, )* }
                }
            }
        }
    };
}

file_structs! {
    policy fields {
        /// Seconds a slot starts from (in a [`SlotFile`], its own start).
        start_delay: f64,
        /// Seconds the delay never goes below.
        min_delay: f64,
        /// Seconds the policy's delay is cut to.
        max_delay: f64,
        /// Requests the `scrapy` policy aims to have in flight.
        target_concurrency: f64,
        /// The limit a slot starts with.
        initial_concurrency: usize,
        /// The lowest limit (`aimd`, `gradient2`).
        min_concurrency: usize,
        /// The highest limit (in a [`SlotFile`], the slot's cap).
        max_concurrency: usize,
        /// Responses per adjustment window (`scrapy-2012`).
        check_period: usize,
        /// The limit's factor on a drop (`aimd`).
        backoff_ratio: f64,
        /// Seconds after which a response counts as a drop (`aimd`).
        timeout: f64,
        /// The limit's smoothing factor (`vegas`, `gradient2`).
        smoothing: f64,
        /// How often `vegas` probes for a new base latency.
        probe_multiplier: usize,
        /// The queue `gradient2` allows for.
        queue_size: usize,
        /// The long latency window of `gradient2`, in samples.
        long_window: usize,
        /// The latency growth `gradient2` tolerates.
        rtt_tolerance: f64,
    }

    /// The configuration as a file spells it; see the [module documentation](self).
    ///
    /// Build one from a format (`toml::from_str`, `serde_json::from_str`) or
    /// from [`ConfigFile::default`], setting its fields.
    pub struct ConfigFile {
        /// Log every adjustment at `INFO` level.
        #[serde(skip_serializing_if = "Option::is_none")]
        debug: Option<bool>,
        /// Bound on requests queued plus in flight, over all slots.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_pending: Option<usize>,
        /// Randomization of each wait, in `[0, 1]`.
        #[serde(skip_serializing_if = "Option::is_none")]
        jitter: Option<f64>,
        /// Seed of the jitter.
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        /// Seconds.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_retry_after: Option<f64>,
        /// `authority` (the default), `host`, `registrable-domain` or `resolved-ip`.
        #[serde(skip_serializing_if = "Option::is_none")]
        key_strategy: Option<String>,
        /// Seconds.
        #[serde(skip_serializing_if = "Option::is_none")]
        dns_ttl: Option<f64>,
        /// Resolutions kept at most.
        #[serde(skip_serializing_if = "Option::is_none")]
        dns_cache_size: Option<usize>,
        /// Seconds.
        #[serde(skip_serializing_if = "Option::is_none")]
        idle_timeout: Option<f64>,
        /// Slots kept at most.
        #[serde(skip_serializing_if = "Option::is_none")]
        max_slots: Option<usize>,
        /// Per-slot settings, by exact key or pattern (see [`SlotSettings`](crate::SlotSettings)).
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        slots: BTreeMap<String, SlotFile>,
    }

    /// One entry of [`ConfigFile::slots`] (Scrapy's `DOWNLOAD_SLOTS`).
    ///
    /// `start_delay`, `min_delay`, `max_delay` and `max_concurrency` are the
    /// [`SlotSettings`] of the same names: a start delay and bounds on top of
    /// the slot's policy. Scrapy's `delay` is `start_delay` (add `min_delay` to
    /// keep the slot from going faster), its `concurrency` is
    /// `max_concurrency`. With `policy` or any other policy field, the slot runs
    /// a policy of its own: the named one (or the configuration's) with the
    /// configuration's policy fields when it is the same policy, then this
    /// entry's.
    pub struct SlotFile;
}

/// Seconds, checked, for field `field`.
fn seconds(field: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(secs).map_err(|_| {
        ConfigError::new(
            field,
            format!("must be a finite, non-negative number of seconds, got {secs}"),
        )
    })
}

/// Builds the policy `name` from `p`, refusing fields it has no use for.
fn policy(name: &str, p: &Params) -> Result<Arc<dyn MakePolicy>, ConfigError> {
    // Each policy's fields; any other set field is refused.
    macro_rules! build {
        ($policy:expr, { $($field:ident => |$x:ident, $v:ident| $apply:expr),* $(,)? }) => {{
            let mut policy = $policy;
            let mut used: Vec<&'static str> = Vec::new();
            $(
                used.push(stringify!($field));
                if let Some($v) = p.$field {
                    let $x = policy;
                    policy = $apply;
                }
            )*
            refuse_others(name, p, &used)?;
            let policy: Arc<dyn MakePolicy> = Arc::new(policy);
            policy
        }};
    }
    // The durations are checked here, so that a bad one names its field.
    for (field, value) in [
        ("start_delay", p.start_delay),
        ("min_delay", p.min_delay),
        ("max_delay", p.max_delay),
        ("timeout", p.timeout),
    ] {
        if let Some(secs) = value {
            seconds(field, secs)?;
        }
    }
    let policy = match name {
        Adaptive::NAME | "default" => build!(Adaptive::default(), {
            start_delay => |x, v| x.start_delay_secs(v),
            min_delay => |x, v| x.min_delay_secs(v),
            max_delay => |x, v| x.max_delay_secs(v),
            initial_concurrency => |x, v| x.initial_concurrency(v),
            max_concurrency => |x, v| x.max_concurrency(v),
        }),
        Scrapy::NAME => build!(Scrapy::default(), {
            start_delay => |x, v| x.start_delay_secs(v),
            min_delay => |x, v| x.min_delay_secs(v),
            max_delay => |x, v| x.max_delay_secs(v),
            target_concurrency => |x, v| x.target_concurrency(v),
            max_concurrency => |x, v| x.max_concurrency(v),
        }),
        Scrapy2012::NAME => build!(Scrapy2012::default(), {
            start_delay => |x, v| x.start_delay_secs(v),
            check_period => |x, v| x.check_period(v),
            max_concurrency => |x, v| x.max_concurrency(v),
        }),
        Aimd::NAME => build!(Aimd::default(), {
            initial_concurrency => |x, v| x.initial_concurrency(v),
            min_concurrency => |x, v| x.min_concurrency(v),
            max_concurrency => |x, v| x.max_concurrency(v),
            backoff_ratio => |x, v| x.backoff_ratio(v),
            timeout => |x, v| x.timeout_secs(v),
            min_delay => |x, v| x.min_delay_secs(v),
        }),
        Vegas::NAME => build!(Vegas::default(), {
            initial_concurrency => |x, v| x.initial_concurrency(v),
            max_concurrency => |x, v| x.max_concurrency(v),
            smoothing => |x, v| x.smoothing(v),
            probe_multiplier => |x, v| x.probe_multiplier(v),
            min_delay => |x, v| x.min_delay_secs(v),
        }),
        Gradient2::NAME => build!(Gradient2::default(), {
            initial_concurrency => |x, v| x.initial_concurrency(v),
            min_concurrency => |x, v| x.min_concurrency(v),
            max_concurrency => |x, v| x.max_concurrency(v),
            smoothing => |x, v| x.smoothing(v),
            queue_size => |x, v| x.queue_size(v),
            long_window => |x, v| x.long_window(v),
            rtt_tolerance => |x, v| x.rtt_tolerance(v),
            min_delay => |x, v| x.min_delay_secs(v),
        }),
        other => {
            return Err(ConfigError::new(
                "policy",
                format!(
                    "unknown policy {other:?}: expected adaptive, scrapy, scrapy-2012, aimd, vegas or gradient2"
                ),
            ))
        }
    };
    policy.validate()?;
    Ok(policy)
}

/// Refuses the set fields of `p` that are not in `used`.
fn refuse_others(name: &str, p: &Params, used: &[&'static str]) -> Result<(), ConfigError> {
    match p
        .set()
        .into_iter()
        .find(|(field, is_set)| *is_set && !used.contains(field))
    {
        Some((field, _)) => Err(ConfigError::new(
            field,
            format!("does not apply to the {name} policy"),
        )),
        None => Ok(()),
    }
}

impl ConfigFile {
    /// Checks the file's settings into a [`Config`].
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first invalid field; for a field of a
    /// `slots` entry, the field's name within the entry.
    pub fn build(&self) -> Result<Config, ConfigError> {
        let name = self.policy.as_deref().unwrap_or(Adaptive::NAME);
        let params = self.params();
        let mut builder = Config::builder().policy(policy(name, &params)?);
        if let Some(debug) = self.debug {
            builder = builder.debug(debug);
        }
        if let Some(max) = self.max_pending {
            builder = builder.max_pending(max);
        }
        if let Some(jitter) = self.jitter {
            builder = builder.jitter(jitter);
        }
        if let Some(seed) = self.seed {
            builder = builder.seed(seed);
        }
        if let Some(secs) = self.max_retry_after {
            builder = builder.max_retry_after(seconds("max_retry_after", secs)?);
        }
        if let Some(strategy) = &self.key_strategy {
            builder = builder.key_strategy(match strategy.as_str() {
                "authority" => KeyStrategy::Authority,
                "host" => KeyStrategy::Host,
                "registrable-domain" => KeyStrategy::RegistrableDomain,
                "resolved-ip" => KeyStrategy::ResolvedIp,
                other => {
                    return Err(ConfigError::new(
                        "key_strategy",
                        format!(
                            "unknown strategy {other:?}: expected authority, host, registrable-domain or resolved-ip"
                        ),
                    ))
                }
            });
        }
        if let Some(secs) = self.dns_ttl {
            builder = builder.dns_ttl(seconds("dns_ttl", secs)?);
        }
        if let Some(size) = self.dns_cache_size {
            builder = builder.dns_cache_size(size);
        }
        if let Some(secs) = self.idle_timeout {
            builder = builder.idle_timeout(seconds("idle_timeout", secs)?);
        }
        if let Some(max) = self.max_slots {
            builder = builder.max_slots(max);
        }
        for (pattern, slot) in &self.slots {
            builder = builder.slot(pattern.clone(), slot.settings(name, &params)?);
        }
        builder.build()
    }
}

impl SlotFile {
    /// The entry as [`SlotSettings`], given the configuration's policy name
    /// and fields.
    fn settings(&self, default: &str, defaults: &Params) -> Result<SlotSettings, ConfigError> {
        let mut settings = SlotSettings::new();
        let own = self.params();
        // `own` leaves out the fields taken as bounds below: any field set
        // here is for a policy of the slot's own.
        if self.policy.is_some() || own.set().iter().any(|(_, set)| *set) {
            let name = self.policy.as_deref().unwrap_or(default);
            fn canonical(name: &str) -> &str {
                if name == "default" {
                    Adaptive::NAME
                } else {
                    name
                }
            }
            let params = if canonical(name) == canonical(default) {
                defaults.overlay(own)
            } else {
                own
            };
            settings = settings.policy(policy(name, &params)?);
        }
        if let Some(secs) = self.start_delay {
            settings = settings.start_delay(seconds("start_delay", secs)?);
        }
        if let Some(secs) = self.min_delay {
            settings = settings.min_delay(seconds("min_delay", secs)?);
        }
        if let Some(secs) = self.max_delay {
            settings = settings.max_delay(seconds("max_delay", secs)?);
        }
        if let Some(max) = self.max_concurrency {
            settings = settings.max_concurrency(max);
        }
        Ok(settings)
    }
}

impl TryFrom<ConfigFile> for Config {
    type Error = ConfigError;

    fn try_from(file: ConfigFile) -> Result<Self, Self::Error> {
        file.build()
    }
}

impl TryFrom<&ConfigFile> for Config {
    type Error = ConfigError;

    fn try_from(file: &ConfigFile) -> Result<Self, Self::Error> {
        file.build()
    }
}

impl<'de> Deserialize<'de> for Config {
    /// Reads a [`ConfigFile`] and checks it; an invalid value is reported
    /// as the format's error, with the [`ConfigError`]'s message (which
    /// names the field).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ConfigFile::deserialize(deserializer)?
            .build()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_build() {
        let config = ConfigFile::default().build().unwrap();
        assert_eq!(config.policy().name(), "adaptive");
    }

    #[test]
    fn fields_that_do_not_apply_are_named() {
        let file = ConfigFile {
            policy: Some("scrapy-2012".into()),
            max_delay: Some(3.0),
            ..ConfigFile::default()
        };
        let err = file.build().unwrap_err();
        assert_eq!(err.field(), "max_delay");
        assert!(err.reason().contains("scrapy-2012"), "{err}");
    }

    #[test]
    fn bad_numbers_are_named() {
        for (file, field) in [
            (
                ConfigFile {
                    start_delay: Some(-1.0),
                    ..ConfigFile::default()
                },
                "start_delay",
            ),
            (
                ConfigFile {
                    idle_timeout: Some(f64::NAN),
                    ..ConfigFile::default()
                },
                "idle_timeout",
            ),
            (
                ConfigFile {
                    max_slots: Some(0),
                    ..ConfigFile::default()
                },
                "max_slots",
            ),
            (
                ConfigFile {
                    policy: Some("nope".into()),
                    ..ConfigFile::default()
                },
                "policy",
            ),
            (
                ConfigFile {
                    key_strategy: Some("ip".into()),
                    ..ConfigFile::default()
                },
                "key_strategy",
            ),
        ] {
            assert_eq!(file.build().unwrap_err().field(), field);
        }
    }
}
