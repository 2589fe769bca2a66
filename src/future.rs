//! The response future: the state machine that takes a request through its
//! slot's gate, calls the inner service and measures the answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
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
use crate::slot::gate::{Joined, Permit, Waiting};

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
    /// A request that its slot admits at once, when it is called, to an
    /// inner service that is ready at once (the common case) is sent to the
    /// service itself from `call`, and the future only waits for the answer.
    ///
    /// Dropping it at any point gives back whatever it holds: its place in
    /// the queue, or its in-flight place.
    pub struct ResponseFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req, S::Future>,
        shared: Arc<Shared>,
        // Whether the response adjusts its slot (no `DontAdjust`).
        adjust: bool,
        span: tracing::Span,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req, F> {
        // Not yet sent: waiting in the slot, for the fleet or for the
        // inner service; boxed, so that the common case, sent at once,
        // moves a small future.
        Before {
            before: Box<Before<S, Req>>,
        },
        Calling {
            #[pin]
            future: F,
            permit: Option<Permit>,
            // When it was sent, as the time since the table's origin (see
            // `SlotTable::since_origin`): the answer's instant measured
            // so gives both its latency and its `at`, for one difference
            // of `Instant`s.
            started: Duration,
        },
        // The inner service failed its readiness when the request was
        // called: the error, already reported to the slot.
        Failed {
            error: Option<BoxError>,
        },
        Done,
    }
}

/// What a request holds until it is sent: where it stands, a clone of the
/// inner service and the request itself.
struct Before<S, Req> {
    stage: Stage,
    service: S,
    request: Option<Req>,
}

enum Stage {
    Resolving {
        resolving: BoxFuture<SlotKey>,
        pending: Option<OwnedSemaphorePermit>,
    },
    Waiting {
        waiting: Waiting,
        pending: Option<OwnedSemaphorePermit>,
    },
    // Admitted by the slot, not yet asked the fleet.
    Admitted {
        permit: Option<Permit>,
    },
    // Admitted by the slot, waiting for the fleet's reservation.
    Reserving {
        reserving: BoxFuture<Option<Lease>>,
        permit: Option<Permit>,
    },
    // Admitted, waiting for the inner service's readiness.
    Ready {
        permit: Option<Permit>,
    },
}

impl<S, Req> Before<S, Req> {
    /// Drives the request to its admission (and the fleet's reservation);
    /// the place it was given.
    fn poll_admitted(&mut self, cx: &mut Context<'_>, shared: &Shared) -> Poll<Permit> {
        loop {
            match &mut self.stage {
                Stage::Resolving { resolving, pending } => {
                    let key = ready!(resolving.as_mut().poll(cx));
                    let pending = pending.take();
                    self.stage = match shared.enqueue(key) {
                        Joined::Admitted(permit, _) => Stage::Admitted {
                            permit: Some(permit.with_pending(pending)),
                        },
                        Joined::Queued(waiting) => Stage::Waiting { waiting, pending },
                    };
                }
                Stage::Waiting { waiting, pending } => {
                    let permit = ready!(waiting.poll_admit(cx, pending));
                    self.stage = Stage::Admitted {
                        permit: Some(permit),
                    };
                }
                Stage::Admitted { permit } => {
                    let permit = permit.take().expect("the permit is taken only here");
                    tracing::trace!(slot = %permit.slot().key, seq = permit.seq(), "dispatched");
                    match shared.reserve(&permit) {
                        Some(reserving) => {
                            self.stage = Stage::Reserving {
                                reserving,
                                permit: Some(permit),
                            }
                        }
                        None => return Poll::Ready(permit),
                    }
                }
                Stage::Reserving { reserving, permit } => {
                    let lease = ready!(reserving.as_mut().poll(cx));
                    let mut permit = permit.take().expect("the permit is taken only here");
                    shared.set_lease(&mut permit, lease);
                    return Poll::Ready(permit);
                }
                Stage::Ready { permit } => {
                    return Poll::Ready(permit.take().expect("the permit is taken only here"));
                }
            }
        }
    }
}

impl<S, Req> ResponseFuture<S, Req>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
{
    /// Starts the request: sent at once to `service` itself when its slot
    /// admitted it as it joined and `service` is ready at once; otherwise
    /// with a clone of `service`, driven to readiness once admitted.
    // Inlined into `call`, so that the request is not copied into one more
    // argument on its way to the inner service (callgrind: 2 memcpy of
    // 224 bytes a request fewer).
    #[inline(always)]
    pub(crate) fn new(
        start: Start,
        service: &mut S,
        request: Req,
        pending: Option<OwnedSemaphorePermit>,
        shared: Arc<Shared>,
        adjust: bool,
        span: tracing::Span,
    ) -> Self {
        let before = |stage, service: &mut S, request| State::Before {
            before: Box::new(Before {
                stage,
                service: service.clone(),
                request: Some(request),
            }),
        };
        let state = match start {
            Start::Resolving(resolving) => {
                before(Stage::Resolving { resolving, pending }, service, request)
            }
            Start::Queued(waiting) => before(Stage::Waiting { waiting, pending }, service, request),
            // A fleet reserves after admission: the longer way.
            Start::Admitted(permit, _) if shared.config.coordinator.is_some() => {
                let stage = Stage::Admitted {
                    permit: Some(permit.with_pending(pending)),
                };
                before(stage, service, request)
            }
            Start::Admitted(permit, admitted) => {
                let mut permit = permit.with_pending(pending);
                let _entered = span.enter();
                tracing::trace!(slot = %permit.slot().key, seq = permit.seq(), "dispatched");
                // Asked without a waker: when it is not ready, the
                // future asks a clone again, with the task's own.
                let mut cx = Context::from_waker(Waker::noop());
                match service.poll_ready(&mut cx) {
                    Poll::Ready(Ok(())) => State::Calling {
                        future: service.call(request),
                        permit: Some(permit),
                        started: admitted,
                    },
                    Poll::Ready(Err(error)) => State::Failed {
                        error: Some(shared.fail_readiness(&mut permit, error, adjust)),
                    },
                    Poll::Pending => {
                        // Whatever it reserved while pending goes
                        // with it; the service keeps a fresh clone.
                        let fresh = service.clone();
                        drop(std::mem::replace(service, fresh));
                        let stage = Stage::Ready {
                            permit: Some(permit),
                        };
                        before(stage, service, request)
                    }
                }
            }
        };
        ResponseFuture {
            state,
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
            match this.state.as_mut().project() {
                StateProj::Before { before } => {
                    let permit = ready!(before.poll_admitted(cx, this.shared));
                    // Admitted: drive the inner service to readiness, and
                    // call it.
                    match before.service.poll_ready(cx) {
                        Poll::Pending => {
                            before.stage = Stage::Ready {
                                permit: Some(permit),
                            };
                            return Poll::Pending;
                        }
                        Poll::Ready(Err(error)) => {
                            let mut permit = permit;
                            this.state.set(State::Done);
                            return Poll::Ready(Err(this.shared.fail_readiness(
                                &mut permit,
                                error,
                                *this.adjust,
                            )));
                        }
                        Poll::Ready(Ok(())) => {
                            let request = before
                                .request
                                .take()
                                .expect("the request is taken only here");
                            let started = this.shared.table.since_origin(Instant::now());
                            let future = before.service.call(request);
                            this.state.set(State::Calling {
                                future,
                                permit: Some(permit),
                                started,
                            });
                        }
                    }
                }
                StateProj::Calling {
                    future,
                    permit,
                    started,
                } => {
                    let result = ready!(future.poll(cx));
                    let now = Instant::now();
                    // Both after the origin: `now - started`, exactly.
                    let since = this.shared.table.since_origin(now);
                    let latency = since.saturating_sub(*started);
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
                        this.shared.table.clock_since(since),
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
                StateProj::Failed { error } => {
                    let error = error.take().expect("the error is taken only here");
                    this.state.set(State::Done);
                    return Poll::Ready(Err(error));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
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
            State::Before { before } => match &before.stage {
                Stage::Resolving { .. } => "Resolving".to_owned(),
                Stage::Waiting { waiting, .. } => format!("Waiting({waiting:?})"),
                Stage::Admitted { .. } => "Admitted".to_owned(),
                Stage::Reserving { .. } => "Reserving".to_owned(),
                Stage::Ready { .. } => "Ready".to_owned(),
            },
            State::Calling { .. } => "Calling".to_owned(),
            State::Failed { .. } => "Failed".to_owned(),
            State::Done => "Done".to_owned(),
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
