//! The parameters of the policies, with one name and one wording for the
//! same idea in every policy: `start_delay`, `min_delay` and `max_delay`;
//! `initial_concurrency`, `min_concurrency` and `max_concurrency`.
//!
//! [`policy_params!`] writes a policy's parameter struct, its `Default`, its
//! setters and its `Debug` from one list, so every policy builds the same
//! way. A duration has two setters: `x(Duration)`, the one to use, and
//! `x_secs(f64)`, which keeps seconds bit for bit: the policies compute in
//! `f64` seconds, as Scrapy does, and a replayed trace or a config file
//! gives seconds that a round trip through `Duration` (whole nanoseconds)
//! could change in the last bit. The checks every policy shares are here
//! too.

use crate::error::ConfigError;
#[cfg(doc)]
use crate::policy::MakePolicy;

/// Writes a policy's parameter struct: one field per parameter, `Default`
/// from the listed defaults, a `#[must_use]` setter per parameter (two for
/// a duration, `name(Duration)` and `name_secs(f64)`), a `Debug` that
/// prints durations in seconds, the policy's `NAME`, and its [`MakePolicy`]
/// impl: the bounds are checked here, then the policy's own `check`; a
/// slot's state is the policy's own `state`; a policy with a start delay
/// can be restarted from another one (per-slot settings).
///
/// The delay bounds and the concurrency bounds are written once here, with
/// their docs, for every policy: a policy lists which of them it has, with
/// their defaults, then its own parameters.
///
/// ```text
/// policy_params! {
///     /// Docs of the struct.
///     pub struct Name("name") {
///         delays { start: 5.0, min: 0.0, }
///         concurrency { max: 8, }   // either may be empty: `concurrency {}`
///         /// Docs of the setter.
///         check_period: usize = 10;
///     }
/// }
/// ```
macro_rules! policy_params {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($id:literal) {
            delays { $(start: $start:expr,)? $(min: $min:expr,)? $(max: $max:expr,)? }
            concurrency { $(initial: $initial:expr,)? $(min: $cmin:expr,)? $(max: $cmax:expr,)? }
            $($own:tt)*
        }
    ) => {
        $crate::policy::params::policy_params! {
            @each
            $(#[$meta])*
            pub struct $name($id) {
                $(
                    /// The delay of a new slot, from 0 to a day (raised to
                    /// `min_delay` where the policy has one).
                    start_delay: f64 = $start, seconds start_delay_secs;
                )?
                $(
                    /// The lowest delay, from 0 to a day (Scrapy's
                    /// `DOWNLOAD_DELAY`); the policies that adapt only the
                    /// concurrency hold the delay at it.
                    min_delay: f64 = $min, seconds min_delay_secs;
                )?
                $(
                    /// The highest delay, from `min_delay` to a day.
                    max_delay: f64 = $max, seconds max_delay_secs;
                )?
                $(
                    /// The concurrency of a new slot, at least 1 (Netflix's
                    /// `initialLimit`).
                    initial_concurrency: usize = $initial;
                )?
                $(
                    /// The lowest concurrency, at least 1 (Netflix's
                    /// `minLimit`).
                    min_concurrency: usize = $cmin;
                )?
                $(
                    /// The highest concurrency, at least 1 (Scrapy's
                    /// `CONCURRENT_REQUESTS_PER_DOMAIN`, Netflix's
                    /// `maxLimit`).
                    max_concurrency: usize = $cmax;
                )?
                $($own)*
            }
        }

        impl $crate::policy::MakePolicy for $name {
            fn name(&self) -> &'static str {
                Self::NAME
            }

            fn validate(&self) -> Result<(), $crate::error::ConfigError> {
                self.check_bounds()?;
                self.check()
            }

            fn make_policy(&self, key: &$crate::key::SlotKey) -> Box<dyn $crate::policy::Policy> {
                self.state(key)
            }

            $(
                fn with_start_delay(
                    &self,
                    delay: ::std::time::Duration,
                ) -> Option<::std::sync::Arc<dyn $crate::policy::MakePolicy>> {
                    let _default = $start;
                    Some(::std::sync::Arc::new(self.clone().start_delay(delay)))
                }
            )?
        }

        impl $name {
            /// Checks the delay and concurrency bounds the policy has.
            fn check_bounds(&self) -> Result<(), $crate::error::ConfigError> {
                $crate::policy::params::check_bounds(
                    [
                        None $(.or(Some((self.start_delay, $start).0)))?,
                        None $(.or(Some((self.min_delay, $min).0)))?,
                        None $(.or(Some((self.max_delay, $max).0)))?,
                    ],
                    [
                        None $(.or(Some((self.initial_concurrency, $initial).0)))?,
                        None $(.or(Some((self.min_concurrency, $cmin).0)))?,
                        None $(.or(Some((self.max_concurrency, $cmax).0)))?,
                    ],
                )
            }
        }
    };
    (
        @each
        $(#[$meta:meta])*
        pub struct $name:ident($id:literal) {
            $(
                $(#[doc = $doc:expr])*
                $field:ident: $ty:ty = $default:expr $(, seconds $secs:ident)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq)]
        pub struct $name {
            $($field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }

        impl $name {
            /// The name `replay --policy` and config files know this policy by.
            pub const NAME: &'static str = $id;

            $(
                $crate::policy::params::setter!([$(#[doc = $doc])*] $field: $ty $(, $secs)?);
            )*
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let mut d = f.debug_struct(stringify!($name));
                $(
                    $crate::policy::params::debug_field!(d, self.$field, $field $(, $secs)?);
                )*
                d.finish()
            }
        }
    };
}

/// One parameter's setter (see [`policy_params!`]).
macro_rules! setter {
    ([$(#[$doc:meta])*] $field:ident: $ty:ty, $secs:ident) => {
        $(#[$doc])*
        #[must_use]
        pub fn $field(self, value: ::std::time::Duration) -> Self {
            self.$secs(value.as_secs_f64())
        }

        #[doc = concat!(
            "[`", stringify!($field), "`](Self::", stringify!($field),
            ") in seconds, kept bit for bit (as a replayed trace or a config file gives them)."
        )]
        #[must_use]
        pub fn $secs(mut self, secs: f64) -> Self {
            self.$field = secs;
            self
        }
    };
    ([$(#[$doc:meta])*] $field:ident: $ty:ty) => {
        $crate::builder::setters! {
            $(#[$doc])*
            pub fn $field($ty) => $field;
        }
    };
}

/// One parameter in a `Debug` (see [`policy_params!`]).
macro_rules! debug_field {
    ($d:ident, $value:expr, $field:ident, $secs:ident) => {
        $d.field(stringify!($field), &$crate::time::Secs($value));
    };
    ($d:ident, $value:expr, $field:ident) => {
        $d.field(stringify!($field), &$value);
    };
}

/// The setters of the Netflix policies under their former names
/// (`initial_limit`, `min_limit`, `max_limit`), kept so that code written
/// for them still builds; hidden from the docs.
macro_rules! renamed_limits {
    ($($old:ident => $new:ident),* $(,)?) => {
        $(
            #[doc(hidden)]
            #[deprecated(note = "renamed: `initial_concurrency`, `min_concurrency`, `max_concurrency`")]
            #[must_use]
            pub fn $old(self, value: usize) -> Self {
                self.$new(value)
            }
        )*
    };
}

pub(crate) use {debug_field, policy_params, renamed_limits, setter};

/// The longest delay a policy's parameters may set: a day. A longer one
/// would hold a slot for the life of most processes; to stop a host, set a
/// delay floor of `Duration::MAX`, which blocks its slot until lifted.
pub(crate) const MAX_DELAY_SECS: f64 = 86_400.0;

/// Checks the bounds a policy has (`None`: it has no such parameter): the
/// delays `[start, min, max]` each a number of seconds from 0 to
/// [`MAX_DELAY_SECS`], `min ≤ max`; the concurrencies
/// `[initial, min, max]` each at least 1, `min ≤ max`.
pub(crate) fn check_bounds(
    delays: [Option<f64>; 3],
    concurrency: [Option<usize>; 3],
) -> Result<(), ConfigError> {
    for (field, secs) in ["start_delay", "min_delay", "max_delay"]
        .into_iter()
        .zip(delays)
    {
        if let Some(secs) = secs {
            check_seconds(field, secs)?;
        }
    }
    if let [_, Some(min), Some(max)] = delays {
        if max < min {
            return Err(ConfigError::new(
                "max_delay",
                format!("must not be below min_delay ({min}), got {max}"),
            ));
        }
    }
    let [initial, min, max] = concurrency;
    if min == Some(0) {
        return Err(ConfigError::new("min_concurrency", "must be at least 1"));
    }
    if let Some(max) = max {
        let floor = min.unwrap_or(1);
        if max < floor {
            return Err(ConfigError::new(
                "max_concurrency",
                match min {
                    Some(min) => format!("must not be below min_concurrency ({min}), got {max}"),
                    None => "must be at least 1".to_owned(),
                },
            ));
        }
    }
    if initial == Some(0) {
        return Err(ConfigError::new(
            "initial_concurrency",
            "must be at least 1",
        ));
    }
    Ok(())
}

/// Checks that `field` is a number of seconds from 0 to [`MAX_DELAY_SECS`].
fn check_seconds(field: &'static str, secs: f64) -> Result<(), ConfigError> {
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(ConfigError::new(
            field,
            format!("must be finite and not negative, got {secs}"),
        ));
    }
    if secs > MAX_DELAY_SECS {
        return Err(ConfigError::new(
            field,
            format!(
                "must be at most {MAX_DELAY_SECS} s (a day), got {secs}; \
                 a delay floor of Duration::MAX blocks a slot"
            ),
        ));
    }
    Ok(())
}

/// `x` within `[lo, hi]`, as `clamp` computes it for any `x` that compares
/// (a NaN `x`, which arithmetic on extreme samples can produce, gives
/// `lo`), but without its panic when the bounds are crossed or NaN (a
/// policy made without [`MakePolicy::validate`]): `x` is then left as it is.
pub(crate) fn within<T: PartialOrd>(x: T, lo: T, hi: T) -> T {
    if x.partial_cmp(&x).is_none() {
        return lo;
    }
    if lo
        .partial_cmp(&hi)
        .is_none_or(|o| o == std::cmp::Ordering::Greater)
    {
        return x;
    }
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn within_clamps_and_never_panics() {
        assert_eq!(within(5.0, 1.0, 3.0), 3.0);
        assert_eq!(within(0.0, 1.0, 3.0), 1.0);
        assert_eq!(within(2.0, 1.0, 3.0), 2.0);
        assert_eq!(within(f64::NAN, 1.0, 3.0), 1.0);
        // Crossed or NaN bounds leave x alone.
        assert_eq!(within(2.0, 3.0, 1.0), 2.0);
        assert_eq!(within(2.0, f64::NAN, 1.0), 2.0);
    }
}
