//! Policies: pure state machines that turn samples into a delay and a
//! concurrency limit.
//!
//! A policy sees one [`Sample`] per response (its latency, its status and how
//! many requests of the slot were in flight) and answers with a [`Throttle`]:
//! the download delay (minimum start-to-start spacing between two requests
//! of the slot) and the concurrency limit (maximum requests of the slot in
//! flight). It has no clock and does no I/O, so it can be unit-tested
//! exactly, replayed from a recorded trace and simulated:
//!
//! ```
//! use std::time::Duration;
//! use http::StatusCode;
//! use tower_autothrottle::policy::{MakePolicy, Sample, Scrapy2012};
//! use tower_autothrottle::SlotKey;
//!
//! let mut policy = Scrapy2012::default().make_policy(&SlotKey::new("example"));
//! assert_eq!(policy.throttle().delay(), Duration::from_secs(5));
//! let t = policy.on_sample(&Sample::new(Duration::from_secs(1), StatusCode::OK));
//! assert_eq!(t.delay(), Duration::from_secs(3)); // (5 + 1) / 2
//! assert_eq!(t.concurrency(), 1);
//! ```
//!
//! The layer keeps one policy per slot, created by the [`MakePolicy`] in the
//! [`Config`](crate::Config). What it does between samples (waiting, permits,
//! timers) lives elsewhere: a policy only decides numbers.
//!
//! # Parameters
//!
//! Every policy is built the same way, from its `Default` and `#[must_use]`
//! setters, with one name for one idea across policies: `start_delay`,
//! `min_delay` and `max_delay` for the delay bounds, `initial_concurrency`,
//! `min_concurrency` and `max_concurrency` for the concurrency bounds (the
//! Netflix policies' `initialLimit`, `minLimit` and `maxLimit`; the old
//! names `initial_limit`, `min_limit` and `max_limit` still build, and are
//! deprecated). A duration has two setters: `start_delay(Duration)`, the one
//! to use, and `start_delay_secs(f64)`, which keeps the seconds bit for bit:
//! the policies compute in `f64` seconds, as Scrapy does, and a replayed
//! trace or a config file must give exactly the original's arithmetic, which
//! a round trip through `Duration` (whole nanoseconds) can change in the
//! last bit. Invalid values are refused by
//! [`ConfigBuilder::build`](crate::ConfigBuilder::build) with a
//! [`ConfigError`] naming the parameter.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::error::ConfigError;
use crate::key::SlotKey;

mod adaptive;
mod aimd;
mod bounded;
mod gradient2;
mod held;
mod lazy;
mod params;
mod replay;
mod scrapy;
mod scrapy2012;
mod vegas;

pub use adaptive::Adaptive;
pub use aimd::Aimd;
pub use bounded::Bounded;
pub use gradient2::Gradient2;
pub(crate) use held::Held;
pub use replay::replay;
pub use scrapy::Scrapy;
pub use scrapy2012::Scrapy2012;
pub use vegas::Vegas;

/// How a request ended, as the layer classifies it (after Netflix's
/// concurrency-limits): a usable latency sample, a sign of overload, or
/// neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// A response the server really served: any status but 429, 503 and
    /// the other 5xx.
    Success,
    /// The server is overloaded or refusing work: a 429 or 503 response, a
    /// timeout, or a connection refused or reset.
    Overload,
    /// Neither: another 5xx, or an error that says nothing about load. Also
    /// used for an overload already reacted to (a 429 to a request that was
    /// in flight when an earlier 429 arrived counts once).
    Ignore,
}

impl Outcome {
    /// The outcome of a response with this status.
    ///
    /// ```
    /// use http::StatusCode;
    /// use tower_autothrottle::policy::Outcome;
    ///
    /// assert_eq!(Outcome::of_status(StatusCode::NOT_FOUND), Outcome::Success);
    /// assert_eq!(Outcome::of_status(StatusCode::TOO_MANY_REQUESTS), Outcome::Overload);
    /// assert_eq!(Outcome::of_status(StatusCode::SERVICE_UNAVAILABLE), Outcome::Overload);
    /// assert_eq!(Outcome::of_status(StatusCode::BAD_GATEWAY), Outcome::Ignore);
    /// ```
    #[must_use]
    pub fn of_status(status: StatusCode) -> Self {
        match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => Outcome::Overload,
            s if s.is_server_error() => Outcome::Ignore,
            _ => Outcome::Success,
        }
    }
}

/// One observation fed to a policy: how long a request took, its status if a
/// response came, its [`Outcome`], the slot's requests in flight, when it
/// ended, and the pause the server asked for with it.
///
/// The time is data, not a clock the policy reads: the layer stamps each
/// sample with the seconds since it was made (`at`); a sample without one
/// (a replayed trace) is taken to end `latency / in_flight` after the one
/// before, as in a closed loop. A policy stays pure either way.
///
/// The layer also stamps the request's dispatch number in its slot and the
/// slot's count of dispatches when the request ended: which of two requests
/// went out first, where their send instants tie (a paused clock, a coarse
/// timer: a request sent at the instant a window closes may have gone out
/// before or after it closed) or differ by a rounding error (a send time
/// taken as `at - latency`).
#[derive(Clone, Copy, PartialEq)]
pub struct Sample {
    latency: f64,
    status: Option<StatusCode>,
    outcome: Outcome,
    /// Whether `at` is known; `at` is 0 when not, so that the derived
    /// equality is that of an `Option<f64>`. (Two fields instead of an
    /// `Option<f64>`: the flag takes a byte beside the status and the
    /// outcome instead of a word, and a sample 40 bytes instead of 48,
    /// which is what [`lazy`] keeps per early answer.)
    timed: bool,
    in_flight: usize,
    at: f64,
    pause: f64,
    /// The request's dispatch number in its slot, from 1 (0: not known).
    seq: u64,
    /// The slot's count of dispatches when the request ended.
    dispatched: u64,
}

impl fmt::Debug for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sample")
            .field("latency", &self.latency)
            .field("status", &self.status)
            .field("outcome", &self.outcome)
            .field("in_flight", &self.in_flight)
            .field("at", &self.at_secs())
            .field("pause", &self.pause)
            .finish()
    }
}

impl Sample {
    /// A response whose head arrived `latency` after the request was sent;
    /// its outcome follows from the status ([`Outcome::of_status`]).
    #[must_use]
    pub fn new(latency: Duration, status: StatusCode) -> Self {
        Sample::from_secs_f64(latency.as_secs_f64(), status)
    }

    /// Like [`Sample::new`], with the latency in seconds.
    ///
    /// Policies compute in `f64` seconds, as Scrapy does, so that a replayed
    /// trace gives bit-for-bit the original arithmetic.
    #[must_use]
    pub fn from_secs_f64(latency: f64, status: StatusCode) -> Self {
        Sample {
            latency,
            status: Some(status),
            outcome: Outcome::of_status(status),
            timed: false,
            in_flight: 0,
            at: 0.0,
            pause: 0.0,
            seq: 0,
            dispatched: 0,
        }
    }

    /// A request that got no response (a timeout, a connection error, …)
    /// after `latency` seconds, with the layer's classification.
    #[must_use]
    pub fn error(latency: f64, outcome: Outcome) -> Self {
        Sample {
            latency,
            status: None,
            outcome,
            timed: false,
            in_flight: 0,
            at: 0.0,
            pause: 0.0,
            seq: 0,
            dispatched: 0,
        }
    }

    /// Sets how many requests of the slot were in flight when this request
    /// ended (this one included).
    #[must_use]
    pub fn with_in_flight(mut self, in_flight: usize) -> Self {
        self.in_flight = in_flight;
        self
    }

    /// Replaces the outcome (the layer marks repeated overloads `Ignore`).
    #[must_use]
    pub fn with_outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = outcome;
        self
    }

    /// Sets when the request ended, in seconds on the slot's clock (the
    /// layer's: seconds since the layer was made; any fixed origin works,
    /// as long as it does not go back).
    #[must_use]
    pub fn with_at(mut self, secs: f64) -> Self {
        self.at = secs;
        self.timed = true;
        self
    }

    /// Sets the pause, in seconds, that the server asked for with this
    /// answer (`Retry-After`, an exhausted `RateLimit` quota), as the layer
    /// enforces it.
    #[must_use]
    pub fn with_pause(mut self, secs: f64) -> Self {
        self.pause = secs;
        self
    }

    /// Sets the request's dispatch number in its slot (from 1) and the
    /// slot's count of dispatches when it ended (the layer's).
    #[must_use]
    pub(crate) fn with_order(mut self, seq: u64, dispatched: u64) -> Self {
        self.seq = seq;
        self.dispatched = dispatched;
        self
    }

    /// The request's dispatch number and the slot's count of dispatches
    /// when it ended, if known (see [`with_order`](Self::with_order)).
    pub(crate) fn order(&self) -> Option<(u64, u64)> {
        (self.seq > 0 && self.dispatched >= self.seq).then_some((self.seq, self.dispatched))
    }

    /// The latency in seconds.
    #[must_use]
    pub fn latency_secs(&self) -> f64 {
        self.latency
    }

    /// The response status, if a response came.
    #[must_use]
    pub fn status(&self) -> Option<StatusCode> {
        self.status
    }

    /// How the request ended.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Requests of the slot in flight when the request ended, this one
    /// included (0 when unknown, as in a replayed trace).
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When the request ended, in seconds on the slot's clock, if known.
    #[must_use]
    pub fn at_secs(&self) -> Option<f64> {
        self.timed.then_some(self.at)
    }

    /// The pause the server asked for with this answer, in seconds (0 if
    /// none).
    #[must_use]
    pub fn pause_secs(&self) -> f64 {
        self.pause
    }
}

/// What a policy allows a slot: a download delay and a concurrency limit.
///
/// The delay is a spacing between two dispatches of the slot (start to
/// start, as Scrapy's `DOWNLOAD_DELAY`), either strict ([`new`](Self::new):
/// every dispatch waits for it) or a pacing ([`paced`](Self::paced): only
/// the dispatches that open new places wait for it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttle {
    delay: f64,
    concurrency: usize,
    paced: bool,
}

impl Throttle {
    /// A delay in seconds that spaces every dispatch, and a concurrency
    /// limit.
    #[must_use]
    pub fn new(delay_secs: f64, concurrency: usize) -> Self {
        Throttle {
            delay: delay_secs,
            concurrency,
            paced: false,
        }
    }

    /// A delay in seconds that paces the dispatches, and a concurrency
    /// limit: a request that takes a place an answer freed (one for each
    /// answer whose place no request has taken again yet) goes as soon as
    /// the place is free, without the delay; the others are spaced by it.
    ///
    /// The answers so clock the requests that replace them, as
    /// acknowledgements clock TCP's segments, and the delay spreads only
    /// what no answer clocks: the requests of a raise of the limit, or of
    /// a slot that starts. A strict spacing at the limit would hold a
    /// request back whenever two answers come back closer together than
    /// the delay, and leave a place idle meanwhile (with answers coming
    /// back at random, at a pacing of half the mean gap between them,
    /// about a tenth of the time). What the layer adds on top of the
    /// policy (a floor, a backoff, a server's rate, a pause) spaces every
    /// dispatch still.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_autothrottle::policy::Throttle;
    ///
    /// // 8 in flight, a raise's requests 50 ms apart.
    /// let paced = Throttle::paced(0.05, 8);
    /// assert!(paced.is_paced());
    /// assert_eq!(paced.delay(), Duration::from_millis(50));
    /// // Scrapy's spacing: every request 50 ms after the one before.
    /// assert!(!Throttle::new(0.05, 8).is_paced());
    /// ```
    #[must_use]
    pub fn paced(delay_secs: f64, concurrency: usize) -> Self {
        Throttle {
            paced: true,
            ..Throttle::new(delay_secs, concurrency)
        }
    }

    /// Whether the delay is a pacing (see [`paced`](Self::paced)) rather
    /// than a spacing of every dispatch.
    #[must_use]
    pub fn is_paced(&self) -> bool {
        self.paced
    }

    /// The delay in seconds, exactly as the policy computed it.
    #[must_use]
    pub fn delay_secs(&self) -> f64 {
        self.delay
    }

    /// The delay as a [`Duration`]: negative or NaN delays are zero, and
    /// delays too large for a `Duration` saturate.
    #[must_use]
    pub fn delay(&self) -> Duration {
        crate::time::secs_to_duration(self.delay)
    }

    /// The concurrency limit, as the policy computed it. The gate never uses
    /// less than 1, so a slot can always make progress.
    #[must_use]
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }
}

/// The per-slot state machine of a throttling policy.
///
/// Implementations must be pure: no clock, no I/O, no randomness that is not
/// seeded from their own state. They must not panic on any sample.
///
/// (`Any`, which every `'static` type is, lets a slot tell the default
/// policy's state from others, to hold it without a box.)
pub trait Policy: Any + fmt::Debug + Send + 'static {
    /// What the policy allows now.
    fn throttle(&self) -> Throttle;

    /// Takes one sample into account and returns what the policy allows
    /// from now on.
    fn on_sample(&mut self, sample: &Sample) -> Throttle;

    /// Whether the policy reacts to overload itself. If not (the default),
    /// the layer backs the slot off on an overload (see the crate's
    /// documentation) and hands the policy only the first overload of a
    /// burst; if so, the layer only enforces the pauses servers ask for,
    /// and the policy sees every overload as it came.
    fn owns_overload(&self) -> bool {
        false
    }

    /// Starts from what an earlier run learned, for a warm start (see
    /// [`AutoThrottleLayer::import`](crate::AutoThrottleLayer::import)):
    /// `learned` is the delay and limit the policy allowed then, `latency`
    /// the slot's smoothed latency (seconds), if known. Called on a fresh
    /// policy, before any sample. A policy takes what it can use, within
    /// its own bounds (values outside them are clamped, not-a-number ones
    /// ignored), and keeps learning from there. The default takes nothing:
    /// the policy starts cold.
    fn warm(&mut self, learned: Throttle, latency: Option<f64>) {
        let _ = (learned, latency);
    }
}

/// Makes the policy of each new slot; this is what a [`Config`](crate::Config)
/// holds.
pub trait MakePolicy: fmt::Debug + Send + Sync + 'static {
    /// The policy's name, as `replay --policy` spells it.
    fn name(&self) -> &'static str;

    /// Checks the parameters; called once when the configuration is built.
    fn validate(&self) -> Result<(), ConfigError>;

    /// A fresh policy for the slot `key`.
    fn make_policy(&self, key: &SlotKey) -> Box<dyn Policy>;

    /// The same policy starting from `delay`, if it has a start delay
    /// (used by [`SlotSettings::start_delay`](crate::SlotSettings::start_delay)).
    /// `None`, the default, says it has none.
    fn with_start_delay(&self, delay: Duration) -> Option<Arc<dyn MakePolicy>> {
        let _ = delay;
        None
    }
}

/// Netflix's `lg(L) = max(1, floor(log10 L))`.
pub(crate) fn lg(limit: usize) -> usize {
    if limit < 10 {
        1
    } else {
        (limit as f64).log10().floor().max(1.0) as usize
    }
}

/// A boxed or shared [`MakePolicy`] makes the policies of what it holds.
macro_rules! forward_make_policy {
    ($($pointer:ident),*) => {$(
        impl<P: MakePolicy + ?Sized> MakePolicy for $pointer<P> {
            fn name(&self) -> &'static str {
                (**self).name()
            }
            fn validate(&self) -> Result<(), ConfigError> {
                (**self).validate()
            }
            fn make_policy(&self, key: &SlotKey) -> Box<dyn Policy> {
                (**self).make_policy(key)
            }
            fn with_start_delay(&self, delay: Duration) -> Option<Arc<dyn MakePolicy>> {
                (**self).with_start_delay(delay)
            }
        }
    )*};
}

forward_make_policy!(Box, Arc);

/// A success `latency` seconds long, with `in_flight` requests in flight.
#[cfg(test)]
pub(crate) fn ok(latency: f64, in_flight: usize) -> Sample {
    Sample::from_secs_f64(latency, StatusCode::OK).with_in_flight(in_flight)
}
