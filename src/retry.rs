//! A retry policy for tower's [`Retry`](tower::retry::Retry), made for this
//! layer (feature `retry`).
//!
//! Put the retry **outside** the throttle: every attempt then passes the
//! gate again, so a retried request waits for whatever the server asked
//! (a `Retry-After` pause, a rate-limit pacing, an overload backoff) and for
//! its slot's delay and limit. [`RetryPolicy`] itself never waits: it says
//! whether to try again, and leaves all the waiting to the throttle.
//!
//! By default it retries, up to 3 times:
//!
//! - `429 Too Many Requests` and `503 Service Unavailable` ([`statuses`]
//!   changes the set);
//! - failures to reach the server: an error whose chain holds an
//!   [`std::io::Error`] of a connection kind (refused, reset, aborted, not
//!   connected, broken pipe, unexpected end, timed out), or a timeout
//!   (tower's or tokio's `Elapsed`): what
//!   [`classify_error`](crate::classify_error) counts as an overload
//!   ([`errors`] changes the test);
//! - only for the idempotent methods of RFC 9110 (GET, HEAD, OPTIONS, TRACE,
//!   PUT, DELETE; [`methods`] and [`any_method`] allow more);
//! - within a retry budget shared by every clone of the policy: tower's
//!   [`TpsBudget`] (retries at most 20 % of the requests over 10 seconds,
//!   with 10 a second always allowed), so that a failing host does not
//!   multiply the load on it.
//!
//! The request is cloned for you (method, URI, version, headers,
//! extensions and body) when its body is [`Clone`], as `Empty`, `Full` and
//! `String` bodies are; a request whose body is not cannot be retried.
//!
//! [`statuses`]: RetryPolicy::statuses
//! [`errors`]: RetryPolicy::errors
//! [`methods`]: RetryPolicy::methods
//! [`any_method`]: RetryPolicy::any_method
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Empty;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//! use tower_autothrottle::retry::RetryPolicy;
//! use tower_autothrottle::{AutoThrottleLayer, Config};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let client = ServiceBuilder::new()
//!     // Outside: each attempt goes through the throttle again.
//!     .retry(RetryPolicy::new())
//!     .layer(AutoThrottleLayer::new(Config::default()))
//!     .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
//! # let _ = client;
//! # }
//! ```

use std::error::Error as StdError;
use std::fmt;
use std::future::Ready;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::Policy;

use crate::policy::Outcome;
use crate::BoxError;

/// Which errors to retry: the default, [`connection_failure`].
pub type ErrorTest = fn(&(dyn StdError + 'static)) -> bool;

/// A [`tower::retry::Policy`] for requests through this layer: see the
/// [module docs](self).
#[derive(Clone)]
pub struct RetryPolicy {
    max_retries: u32,
    statuses: Arc<[StatusCode]>,
    /// `None`: any method.
    methods: Option<Arc<[Method]>>,
    errors: ErrorTest,
    budget: Arc<dyn Budget + Send + Sync>,
    /// This request's retries so far (the policy is cloned per request).
    retries: u32,
    /// This request was counted in the budget.
    deposited: bool,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("statuses", &self.statuses)
            .field("methods", &self.methods)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new()
    }
}

/// RFC 9110's idempotent methods.
const IDEMPOTENT: [Method; 6] = [
    Method::GET,
    Method::HEAD,
    Method::OPTIONS,
    Method::TRACE,
    Method::PUT,
    Method::DELETE,
];

impl RetryPolicy {
    /// The default policy: see the [module docs](self).
    #[must_use]
    pub fn new() -> Self {
        RetryPolicy {
            max_retries: 3,
            statuses: Arc::new([
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::SERVICE_UNAVAILABLE,
            ]),
            methods: Some(Arc::new(IDEMPOTENT)),
            errors: connection_failure,
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2)),
            retries: 0,
            deposited: false,
        }
    }

    /// Retries a request at most `n` times (3 by default; 0 never retries).
    #[must_use]
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The statuses to retry (429 and 503 by default).
    #[must_use]
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// The methods to retry (the idempotent ones by default). A method
    /// that is not idempotent (POST, PATCH) may then be sent twice: allow
    /// it only where the server makes that safe.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = Some(methods.into_iter().collect());
        self
    }

    /// Retries any method (see [`methods`](Self::methods)).
    #[must_use]
    pub fn any_method(mut self) -> Self {
        self.methods = None;
        self
    }

    /// Which errors to retry ([`connection_failure`] by default; `|_| false`
    /// retries none). The test sees the error as the service returned it.
    #[must_use]
    pub fn errors(mut self, test: ErrorTest) -> Self {
        self.errors = test;
        self
    }

    /// The retry budget, shared by every clone of this policy (by default
    /// tower's `TpsBudget::new(10 s, 10, 0.2)`, one per policy made with
    /// [`new`](Self::new)). Share one `Arc` between policies to give them
    /// one budget.
    #[must_use]
    pub fn budget(mut self, budget: Arc<dyn Budget + Send + Sync>) -> Self {
        self.budget = budget;
        self
    }

    fn allows(&self, method: &Method) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|methods| methods.contains(method))
    }
}

/// Whether `error` is a failure to reach the server or to hear from it:
/// what [`classify_error`](crate::classify_error) counts as an overload (a
/// connection refused, reset, aborted or closed mid-response, or a timeout,
/// anywhere in the error's chain, as hyper-util's client and tower's
/// `Timeout` report them).
#[must_use]
pub fn connection_failure(error: &(dyn StdError + 'static)) -> bool {
    crate::classify_error(error) == Outcome::Overload
}

impl<B, Res> Policy<Request<B>, Response<Res>, BoxError> for RetryPolicy
where
    B: Clone,
{
    type Future = Ready<()>;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if !self.deposited {
            // Every request that could be retried earns the budget.
            self.deposited = true;
            self.budget.deposit();
        }
        let retry = match result {
            Ok(response) => self.statuses.contains(&response.status()),
            Err(error) => (self.errors)(error.as_ref()),
        };
        if !retry || self.retries >= self.max_retries {
            return None;
        }
        if !self.budget.withdraw() {
            tracing::debug!(uri = %req.uri(), "retry budget exhausted: not retrying");
            return None;
        }
        self.retries += 1;
        tracing::debug!(uri = %req.uri(), retry = self.retries, "retrying");
        Some(std::future::ready(()))
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        if self.max_retries == 0 || !self.allows(req.method()) {
            return None;
        }
        let mut clone = Request::new(req.body().clone());
        *clone.method_mut() = req.method().clone();
        *clone.uri_mut() = req.uri().clone();
        *clone.version_mut() = req.version();
        *clone.headers_mut() = req.headers().clone();
        *clone.extensions_mut() = req.extensions().clone();
        Some(clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn get() -> Request<String> {
        Request::get("http://example.com/a")
            .header("x-test", "1")
            .body("body".to_owned())
            .unwrap()
    }

    /// `clone_request` for the tests' request and response types.
    fn clone_of(policy: &mut RetryPolicy, req: &Request<String>) -> Option<Request<String>> {
        Policy::<Request<String>, Response<()>, BoxError>::clone_request(policy, req)
    }

    fn failed(error: BoxError) -> Result<Response<()>, BoxError> {
        Err(error)
    }

    fn answer(status: u16) -> Result<Response<()>, BoxError> {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        Ok(response)
    }

    #[test]
    fn retries_429_and_503_up_to_the_maximum() {
        let mut policy = RetryPolicy::new().max_retries(2);
        let mut req = get();
        assert!(policy.retry(&mut req, &mut answer(429)).is_some());
        assert!(policy.retry(&mut req, &mut answer(503)).is_some());
        assert!(
            policy.retry(&mut req, &mut answer(429)).is_none(),
            "at most 2"
        );
        let mut fresh = RetryPolicy::new();
        assert!(fresh.retry(&mut req, &mut answer(200)).is_none());
        assert!(fresh.retry(&mut req, &mut answer(500)).is_none());
        assert!(fresh.retry(&mut req, &mut answer(404)).is_none());
    }

    #[test]
    fn statuses_can_be_chosen() {
        let mut policy = RetryPolicy::new().statuses([StatusCode::BAD_GATEWAY]);
        let mut req = get();
        assert!(policy.retry(&mut req, &mut answer(429)).is_none());
        assert!(policy.retry(&mut req, &mut answer(502)).is_some());
    }

    #[test]
    fn clones_the_whole_request_for_idempotent_methods_only() {
        let mut policy = RetryPolicy::new();
        let mut req = get();
        req.extensions_mut().insert(7u32);
        let clone = clone_of(&mut policy, &req).expect("GET is retried");
        assert_eq!(clone.method(), Method::GET);
        assert_eq!(clone.uri(), req.uri());
        assert_eq!(clone.headers()["x-test"], "1");
        assert_eq!(clone.body(), "body");
        assert_eq!(clone.extensions().get::<u32>(), Some(&7));
        *req.method_mut() = Method::POST;
        assert!(clone_of(&mut policy, &req).is_none(), "POST is not");
        let mut any = RetryPolicy::new().any_method();
        assert!(clone_of(&mut any, &req).is_some());
        let mut post = RetryPolicy::new().methods([Method::POST]);
        assert!(clone_of(&mut post, &req).is_some());
        assert!(clone_of(&mut RetryPolicy::new().max_retries(0), &get()).is_none());
    }

    #[test]
    fn connection_failures_are_retried_other_errors_not() {
        let refused: BoxError = Box::new(io::Error::from(io::ErrorKind::ConnectionRefused));
        let denied: BoxError = Box::new(io::Error::from(io::ErrorKind::PermissionDenied));
        let elapsed: BoxError = Box::new(tower::timeout::error::Elapsed::new());
        let other: BoxError = "a body that was not valid".into();
        assert!(connection_failure(refused.as_ref()));
        assert!(connection_failure(elapsed.as_ref()));
        assert!(!connection_failure(denied.as_ref()));
        assert!(!connection_failure(other.as_ref()));
        // Deep in a chain.
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl fmt::Display for Wrapper {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("client error")
            }
        }
        impl StdError for Wrapper {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let wrapped = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(connection_failure(&wrapped));
        let mut policy = RetryPolicy::new();
        let mut req = get();
        assert!(policy.retry(&mut req, &mut failed(refused)).is_some());
        assert!(policy.retry(&mut req, &mut failed(other)).is_none());
        let mut none = RetryPolicy::new().errors(|_| false);
        let again: BoxError = Box::new(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(none.retry(&mut req, &mut failed(again)).is_none());
    }

    #[derive(Debug, Default)]
    struct Counting {
        deposits: std::sync::atomic::AtomicUsize,
        left: std::sync::atomic::AtomicUsize,
    }

    impl Budget for Counting {
        fn deposit(&self) {
            self.deposits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn withdraw(&self) -> bool {
            use std::sync::atomic::Ordering::Relaxed;
            self.left
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                .is_ok()
        }
    }

    #[test]
    fn the_budget_is_shared_and_bounds_the_retries() {
        let budget = Arc::new(Counting {
            left: 1.into(),
            ..Counting::default()
        });
        let policy = RetryPolicy::new().budget(budget.clone());
        let mut req = get();
        let (mut a, mut b) = (policy.clone(), policy.clone());
        assert!(a.retry(&mut req, &mut answer(429)).is_some());
        assert!(
            b.retry(&mut req, &mut answer(429)).is_none(),
            "the one retry the budget held is spent"
        );
        use std::sync::atomic::Ordering::Relaxed;
        assert_eq!(budget.deposits.load(Relaxed), 2, "one per request");
        a.retry(&mut req, &mut answer(429));
        assert_eq!(budget.deposits.load(Relaxed), 2, "not one per attempt");
    }
}
