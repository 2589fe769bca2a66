//! The service: [`AutoThrottle`], which takes each request into its slot.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::PollSemaphore;
use tower_service::Service;

use crate::body::ThrottleBody;
use crate::config::Config;
use crate::error::BoxError;
use crate::extensions::DontAdjust;
use crate::future::ResponseFuture;
use crate::shared::{self, Recent, Shared};
use crate::slot::SlotSnapshot;

/// Throttles requests per slot with an adaptive delay and concurrency limit.
///
/// # The `poll_ready` / `call` contract
///
/// `poll_ready` cannot see the request, so it cannot know the slot. It only
/// enforces the optional global bound on pending requests
/// ([`ConfigBuilder::max_pending`](crate::ConfigBuilder::max_pending)): when
/// the bound is reached it returns `Pending` until a request finishes, which
/// gives callers backpressure. Without a bound it is always ready.
///
/// `call` never waits: it picks the request's slot, joins the back of that
/// slot's FIFO queue (or, when nobody waits there and the gate is open,
/// takes its in-flight place at once) and returns a [`ResponseFuture`].
///
/// A request that took its place at once is sent from `call` to the inner
/// service itself, if that is ready at once: `call` asks its `poll_ready`
/// with a no-op waker, and on `Pending` replaces it with a fresh clone (so
/// nothing it reserved meanwhile stays held) and goes the longer way.
/// Otherwise the future waits for the slot's gate, then drives a *clone*
/// of the inner service to readiness and calls it, as tower's
/// documentation prescribes for services that call their inner service
/// from their future. The inner service must therefore be `Clone`; wrap a
/// service that is not in `tower::buffer`.
///
/// Calling `call` without a successful `poll_ready` first does not panic:
/// the request takes a global place if one is free, and otherwise goes
/// ahead outside the bound (with a warning).
///
/// Requests in different slots never wait for each other, except for the
/// global bound, which counts every queued and in-flight request.
///
/// # Errors
///
/// The inner service's errors are passed through, boxed as a [`BoxError`]
/// (downcast to get the original back); the layer adds none of its own. On
/// the way, each is classified (see [`classify_error`](crate::classify_error)):
/// a timeout or a refused or reset connection counts as an overload of the
/// slot.
pub struct AutoThrottle<S> {
    inner: S,
    pub(crate) shared: Arc<Shared>,
    semaphore: Option<PollSemaphore>,
    permit: Option<OwnedSemaphorePermit>,
    recent: Option<Recent>,
}

impl<S> AutoThrottle<S> {
    /// Wraps `inner` with a new, independent throttle.
    pub fn new(inner: S, config: Config) -> Self {
        AutoThrottle::from_shared(inner, Arc::new(Shared::new(config)))
    }

    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        AutoThrottle {
            inner,
            semaphore: shared.pending.clone().map(PollSemaphore::new),
            shared,
            permit: None,
            recent: None,
        }
    }

    /// A snapshot of every slot, sorted by key.
    pub fn slots(&self) -> Vec<SlotSnapshot> {
        self.shared.table.snapshots()
    }

    /// A snapshot of one slot, if it exists.
    pub fn slot(&self, key: &str) -> Option<SlotSnapshot> {
        self.shared.table.snapshot(key)
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the throttle.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for AutoThrottle<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    ResBody: Body,
{
    type Response = Response<ThrottleBody<ResBody>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, Request<ReqBody>>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.permit.is_none() {
            if let Some(semaphore) = &mut self.semaphore {
                // The semaphore is never closed, so `None` cannot happen;
                // if it did, going ahead unbounded beats stalling forever.
                self.permit = std::task::ready!(semaphore.poll_acquire(cx));
            }
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let adjust = request.extensions().get::<DontAdjust>().is_none();
        let span =
            tracing::debug_span!("autothrottle", method = %request.method(), uri = %request.uri());
        // A service that remembers nothing yet (a clone made for this one
        // request) uses this thread's memory, and leaves its own there.
        let fresh = self.recent.is_none();
        let start = if fresh {
            self.shared
                .start_recalled(request.uri(), request.extensions())
        } else {
            self.shared
                .start_recent(request.uri(), request.extensions(), &self.recent)
        };
        // The request (224 bytes with an empty body) goes on from where the
        // caller put it on the common way: no move through a tuple or a
        // variable of its own. It is taken apart only on the longer way.
        match start {
            Some(start) => {
                let pending = self.pending();
                ResponseFuture::new(
                    start,
                    &mut self.inner,
                    request,
                    pending,
                    Arc::clone(&self.shared),
                    adjust,
                    span,
                )
            }
            None => {
                let (parts, body) = request.into_parts();
                let start = self.shared.start(&parts, Some(&mut self.recent));
                if fresh {
                    if let Some(recent) = &self.recent {
                        shared::remember(&self.shared, recent);
                    }
                }
                let pending = self.pending();
                ResponseFuture::new(
                    start,
                    &mut self.inner,
                    Request::from_parts(parts, body),
                    pending,
                    Arc::clone(&self.shared),
                    adjust,
                    span,
                )
            }
        }
    }
}

impl<S> AutoThrottle<S> {
    /// The global place for a request being called: the one `poll_ready`
    /// reserved, or, without one, one taken now if free.
    #[inline]
    fn pending(&mut self) -> Option<OwnedSemaphorePermit> {
        let mut pending = self.permit.take();
        if pending.is_none() {
            if let Some(semaphore) = &self.shared.pending {
                pending = Arc::clone(semaphore).try_acquire_owned().ok();
                if pending.is_none() {
                    tracing::warn!(
                        "AutoThrottle::call without poll_ready while max_pending is reached: \
                         the request goes ahead outside the bound"
                    );
                }
            }
        }
        pending
    }
}

impl<S: Clone> Clone for AutoThrottle<S> {
    /// Shares the slots; the clone starts without a reserved global place.
    fn clone(&self) -> Self {
        AutoThrottle::from_shared(self.inner.clone(), Arc::clone(&self.shared))
    }
}

impl<S: fmt::Debug> fmt::Debug for AutoThrottle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AutoThrottle")
            .field("inner", &self.inner)
            .field("config", &self.shared.config)
            .field("reserved", &self.permit.is_some())
            .finish()
    }
}
