//! The crate's errors: [`ConfigError`] for a setting that cannot be used,
//! and [`BoxError`], what the throttled service's errors are boxed into.

use std::borrow::Cow;
use std::fmt;

/// The error type of [`AutoThrottle`](crate::AutoThrottle): the inner
/// service's error, boxed (as tower's own middleware does).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    #[must_use]
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why it is invalid.
    #[must_use]
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
