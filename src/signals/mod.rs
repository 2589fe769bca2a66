//! What a response means: its outcome ([`classify_error`] for errors), the
//! server's hints in its headers ([`headers`]), and the per-slot state that
//! turns them into pauses, pacing and overload backoff (`state`).
//!
//! Nothing here waits, and the per-slot state reads no clock: the time
//! comes in as an argument, so it can be tested exactly.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};

use crate::policy::Outcome;
use headers::RateLimit;

mod classify;
pub mod headers;
mod state;

pub use classify::{classify_error, ErrorClassifier};
pub(crate) use state::{Reaction, Signals};

/// The server's hints read from a response.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Hints {
    pub(crate) retry_after: Option<Duration>,
    pub(crate) rate_limit: Option<RateLimit>,
}

impl Hints {
    /// Whether the response gave no hint at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.retry_after.is_none() && self.rate_limit.is_none()
    }

    /// The pause the server asked for: `Retry-After`, else an exhausted
    /// `RateLimit` quota's reset.
    pub(crate) fn pause(&self) -> Option<Duration> {
        self.retry_after.or(match self.rate_limit {
            Some(RateLimit::Exhausted { reset }) => Some(reset),
            _ => None,
        })
    }
}

/// How a request ended, as reported to its slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    /// When it ended, in seconds on the slot's clock (see [`Sample::with_at`](crate::policy::Sample::with_at)).
    pub(crate) at: f64,
    pub(crate) latency: Duration,
    pub(crate) status: Option<StatusCode>,
    pub(crate) outcome: Outcome,
    pub(crate) seq: u64,
    pub(crate) hints: Hints,
    /// Whether the request adjusts its slot (see [`DontAdjust`](crate::DontAdjust)).
    pub(crate) adjust: bool,
    /// Requests in flight fleet-wide when this one went, when a fleet shares
    /// the slot: what the policy is told instead of the local count.
    pub(crate) fleet_in_flight: Option<usize>,
    /// The request's place goes back with this report (its response's body
    /// was over before it began): one lock for both.
    pub(crate) release: bool,
}

/// Reads the server's hints from a response, warning about malformed ones.
///
/// Inlined, for the common case: a status that carries no `Retry-After`
/// the layer reads, and no `RateLimit` field, hint nothing (what the rest,
/// out of line, finds then too).
#[inline]
pub(crate) fn hints(status: StatusCode, headers: &HeaderMap, max: Duration, slot: &str) -> Hints {
    if !overloaded(status) && !headers::names_rate_limit(headers) {
        return Hints::default();
    }
    read_hints(status, headers, max, slot)
}

/// Whether `status` is one whose `Retry-After` the layer reads.
fn overloaded(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
}

/// [`hints`], the whole way.
fn read_hints(status: StatusCode, headers: &HeaderMap, max: Duration, slot: &str) -> Hints {
    let mut hints = Hints::default();
    if overloaded(status) {
        if let Some((value, date)) = headers::retry_after_of(headers) {
            match headers::retry_after(value, date, SystemTime::now()) {
                Ok(wait) if wait > max => {
                    // `max_retry_after` zero: these pauses are off.
                    if !max.is_zero() {
                        tracing::warn!(
                            slot,
                            ?wait,
                            ?max,
                            "Retry-After above max_retry_after: capped"
                        );
                    }
                    hints.retry_after = Some(max);
                }
                Ok(wait) => hints.retry_after = Some(wait),
                Err(error) => tracing::warn!(slot, %error, "ignored"),
            }
        }
    }
    // The common case, no `RateLimit` field: nothing more to read (the
    // same test `rate_limit` starts with, without its result to unpack).
    if !headers::names_rate_limit(headers) {
        return hints;
    }
    match headers::rate_limit(headers, max) {
        Ok(limit) => {
            let window = match limit {
                Some(RateLimit::Exhausted { reset }) => Some(reset),
                Some(RateLimit::Pace { valid_for, .. }) => Some(valid_for),
                None => None,
            };
            if window == Some(max) && !max.is_zero() {
                tracing::warn!(
                    slot,
                    ?max,
                    "RateLimit window at or above max_retry_after: capped"
                );
            }
            hints.rate_limit = limit;
        }
        Err(error) => tracing::warn!(slot, %error, "ignored"),
    }
    hints
}
