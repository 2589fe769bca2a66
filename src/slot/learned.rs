//! What a slot learned, to carry to a new layer: [`Learned`].

use std::time::Duration;

use tokio::time::Instant;

use super::Slot;
use crate::error::ConfigError;
use crate::key::SlotKey;
use crate::policy::{Policy, Throttle};

/// What one slot learned, from
/// [`AutoThrottleLayer::export`](crate::AutoThrottleLayer::export), for
/// [`AutoThrottleLayer::import`](crate::AutoThrottleLayer::import) into a
/// new layer: a warm start. With the `serde` feature it is `Serialize` and
/// `Deserialize` (fields as named here; the optional ones may be left out).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Learned {
    /// The slot's key (see [`SlotKey`]).
    pub key: String,
    /// The delay the slot's policy allowed, in seconds.
    pub delay_secs: f64,
    /// The concurrency limit the slot's policy allowed.
    pub concurrency: usize,
    /// The slot's smoothed latency, in seconds, if it had one.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub latency_secs: Option<f64>,
    /// What was left of a pause the server asked for (`Retry-After`, an
    /// exhausted quota), in seconds, if one was running.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub paused_secs: Option<f64>,
}

/// A [`Learned`] checked, ready for its slot.
#[derive(Debug)]
pub(crate) struct Warm {
    pub(crate) key: SlotKey,
    pub(crate) throttle: Throttle,
    pub(crate) latency: Option<f64>,
    pub(crate) pause: Option<Duration>,
}

impl Learned {
    /// Checks every field; a pause is capped at `max_pause`.
    pub(crate) fn check(&self, max_pause: Duration) -> Result<Warm, ConfigError> {
        let key = SlotKey::parse(&self.key)
            .map_err(|e| ConfigError::new("key", format!("{:?} is no slot key: {e}", self.key)))?;
        if !(self.delay_secs.is_finite() && self.delay_secs >= 0.0) {
            return Err(ConfigError::new(
                "delay_secs",
                format!(
                    "must be a finite number of seconds >= 0, got {}",
                    self.delay_secs
                ),
            ));
        }
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1, got 0"));
        }
        let latency = match self.latency_secs {
            Some(l) if !(l.is_finite() && l >= 0.0) => {
                return Err(ConfigError::new(
                    "latency_secs",
                    format!("must be a finite number of seconds >= 0, got {l}"),
                ))
            }
            other => other,
        };
        let pause = match self.paused_secs {
            None => None,
            Some(p) if p.is_finite() && p >= 0.0 => Some(
                Duration::try_from_secs_f64(p)
                    .unwrap_or(max_pause)
                    .min(max_pause),
            ),
            Some(p) => {
                return Err(ConfigError::new(
                    "paused_secs",
                    format!("must be a finite number of seconds >= 0, got {p}"),
                ))
            }
        };
        Ok(Warm {
            key,
            throttle: Throttle::new(self.delay_secs, self.concurrency),
            latency,
            pause,
        })
    }
}

impl Slot {
    /// What the slot learned, at `now`.
    pub(crate) fn learned(&self, now: Instant) -> Learned {
        let state = self.lock();
        Learned {
            key: self.key.to_string(),
            delay_secs: state.throttle.delay_secs(),
            concurrency: state.throttle.concurrency(),
            latency_secs: state.latency(),
            paused_secs: state
                .signals
                .paused_until()
                .filter(|&until| until > now)
                .map(|until| (until - now).as_secs_f64()),
        }
    }

    /// Starts the slot's policy from `warm`, and its pause, if one was
    /// running; binds the next dispatch.
    pub(crate) fn warm(&self, now: Instant, warm: &Warm) {
        self.change(|state| {
            state.policy.warm(warm.throttle, warm.latency);
            state.throttle = state.policy.throttle();
            if state.latency().is_none() {
                state.set_latency(warm.latency);
            }
            if let Some(pause) = warm.pause {
                state.signals.retry_after(now, pause);
            }
        });
    }
}
