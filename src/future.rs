//! The response future: the state machine that takes a request through its
//! slot's gate, calls the inner service and measures the answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tower_service::Service;

use crate::body::ThrottleBody;
use crate::error::BoxError;
use crate::fleet::Lease;
use crate::key::{BoxFuture, SlotKey};
use crate::shared::{Shared, Start};
use crate::slot::gate::{Permit, Waiting};

pin_project! {
    /// The future returned by [`AutoThrottle`](crate::AutoThrottle).
    ///
    /// With [`KeyStrategy::ResolvedIp`](crate::KeyStrategy::ResolvedIp) it
    /// may first resolve the host (sharing a resolution under way, or using
    /// one kept from before), then joins its slot's queue. It waits in the
    /// request's slot until the gate admits it, drives the
    /// inner service (a clone of it) to readiness, calls it, and times the
    /// call until the response head arrives. The measured latency goes to
    /// the slot's policy; the response body carries the request's in-flight
    /// place.
    ///
    /// Dropping it at any point gives back whatever it holds: its place in
    /// the queue, or its in-flight place.
    pub struct ResponseFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S::Future>,
        // A clone of the inner service, until the request is sent; kept
        // out of `state` so that changing state moves only a little.
        service: S,
        request: Option<Req>,
        shared: Arc<Shared>,
        // Whether the response adjusts its slot (no `DontAdjust`).
        adjust: bool,
        span: tracing::Span,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Resolving {
            resolving: BoxFuture<SlotKey>,
            pending: Option<OwnedSemaphorePermit>,
        },
        Waiting {
            waiting: Waiting,
            pending: Option<OwnedSemaphorePermit>,
        },
        // Admitted by the slot, waiting for the fleet's reservation.
        Reserving {
            reserving: BoxFuture<Option<Lease>>,
            permit: Option<Permit>,
        },
        Ready {
            permit: Option<Permit>,
        },
        Calling {
            #[pin]
            future: F,
            permit: Option<Permit>,
            started: Instant,
        },
        Done,
    }
}

impl<S, Req> ResponseFuture<S, Req>
where
    S: Service<Req>,
{
    pub(crate) fn new(
        start: Start,
        service: S,
        request: Req,
        pending: Option<OwnedSemaphorePermit>,
        shared: Arc<Shared>,
        adjust: bool,
        span: tracing::Span,
    ) -> Self {
        let state = match start {
            Start::Queued(waiting) => State::Waiting { waiting, pending },
            Start::Resolving(resolving) => State::Resolving { resolving, pending },
        };
        ResponseFuture {
            state,
            service,
            request: Some(request),
            shared,
            adjust,
            span,
        }
    }
}

impl<S, Req, ResBody> Future for ResponseFuture<S, Req>
where
    S: Service<Req, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
    ResBody: Body,
{
    type Output = Result<Response<ThrottleBody<ResBody>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        loop {
            // The states before the call end in an admitted request: it
            // goes on below, without a stop in `Ready` when the inner
            // service is ready at once (the common case).
            let permit = match this.state.as_mut().project() {
                StateProj::Resolving { resolving, pending } => {
                    let key = ready!(resolving.as_mut().poll(cx));
                    let waiting = this.shared.enqueue(key);
                    let pending = pending.take();
                    this.state.set(State::Waiting { waiting, pending });
                    continue;
                }
                StateProj::Waiting { waiting, pending } => {
                    let permit = ready!(waiting.poll_admit(cx, pending));
                    tracing::trace!(slot = %permit.slot().key, seq = permit.seq(), "dispatched");
                    if let Some(reserving) = this.shared.reserve(&permit) {
                        this.state.set(State::Reserving {
                            reserving,
                            permit: Some(permit),
                        });
                        continue;
                    }
                    permit
                }
                StateProj::Reserving { reserving, permit } => {
                    let lease = ready!(reserving.as_mut().poll(cx));
                    let mut permit = permit.take().expect("the permit is taken only here");
                    this.shared.set_lease(&mut permit, lease);
                    permit
                }
                StateProj::Ready { permit } => {
                    permit.take().expect("the permit is taken only here")
                }
                StateProj::Calling {
                    future,
                    permit,
                    started,
                } => {
                    let result = ready!(future.poll(cx));
                    let now = Instant::now();
                    let latency = now.saturating_duration_since(*started);
                    let mut permit = permit.take().expect("the permit is taken only here");
                    this.state.set(State::Done);
                    let response = match result {
                        Ok(response) => response,
                        // The place is given back when the permit drops.
                        Err(error) => {
                            return Poll::Ready(Err(this.shared.fail(
                                &mut permit,
                                now,
                                latency,
                                error,
                                *this.adjust,
                            )));
                        }
                    };
                    let (parts, body) = response.into_parts();
                    this.shared.end_response(
                        &mut permit,
                        now,
                        latency,
                        parts.status,
                        &parts.headers,
                        body.size_hint().exact(),
                        *this.adjust,
                        body.is_end_stream(),
                    );
                    let body = ThrottleBody::new(body, permit);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            };
            // Admitted: drive the inner service to readiness, and call it.
            match this.service.poll_ready(cx) {
                Poll::Pending => {
                    this.state.set(State::Ready {
                        permit: Some(permit),
                    });
                    return Poll::Pending;
                }
                Poll::Ready(Err(error)) => {
                    let mut permit = permit;
                    this.state.set(State::Done);
                    return Poll::Ready(Err(this.shared.fail(
                        &mut permit,
                        Instant::now(),
                        Duration::ZERO,
                        error,
                        *this.adjust,
                    )));
                }
                Poll::Ready(Ok(())) => {
                    let request = this.request.take().expect("the request is taken only here");
                    let started = Instant::now();
                    let future = this.service.call(request);
                    this.state.set(State::Calling {
                        future,
                        permit: Some(permit),
                        started,
                    });
                }
            }
        }
    }
}

impl<S, Req> fmt::Debug for ResponseFuture<S, Req>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Resolving { .. } => "Resolving".to_owned(),
            State::Waiting { waiting, .. } => format!("Waiting({waiting:?})"),
            State::Reserving { .. } => "Reserving".to_owned(),
            State::Ready { .. } => "Ready".to_owned(),
            State::Calling { .. } => "Calling".to_owned(),
            State::Done => "Done".to_owned(),
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
