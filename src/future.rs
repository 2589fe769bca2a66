//! The response future: wait in the slot, call the inner service, measure.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{Response, StatusCode};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tower_service::Service;

use crate::body::ThrottleBody;
use crate::gate::{Permit, Waiting};

pin_project! {
    /// The future returned by [`AutoThrottle`](crate::AutoThrottle).
    ///
    /// It waits in the request's slot until the gate admits it, drives the
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
        state: State<S, Req, S::Future>,
        debug: bool,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req, F> {
        Waiting {
            waiting: Waiting,
            service: Option<S>,
            request: Option<Req>,
            pending: Option<OwnedSemaphorePermit>,
        },
        Ready {
            permit: Option<Permit>,
            service: S,
            request: Option<Req>,
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
        waiting: Waiting,
        service: S,
        request: Req,
        pending: Option<OwnedSemaphorePermit>,
        debug: bool,
    ) -> Self {
        ResponseFuture {
            state: State::Waiting {
                waiting,
                service: Some(service),
                request: Some(request),
                pending,
            },
            debug,
        }
    }
}

impl<S, Req, ResBody> Future for ResponseFuture<S, Req>
where
    S: Service<Req, Response = Response<ResBody>>,
    ResBody: Body,
{
    type Output = Result<Response<ThrottleBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Waiting {
                    waiting,
                    service,
                    request,
                    pending,
                } => {
                    let permit = ready!(waiting.poll_admit(cx, pending));
                    let (Some(service), request) = (service.take(), request.take()) else {
                        unreachable!("the service is taken only when leaving this state");
                    };
                    this.state.set(State::Ready {
                        permit: Some(permit),
                        service,
                        request,
                    });
                }
                StateProj::Ready {
                    permit,
                    service,
                    request,
                } => {
                    if let Err(error) = ready!(service.poll_ready(cx)) {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(error));
                    }
                    let request = request.take().expect("the request is taken only here");
                    let permit = permit.take();
                    let started = Instant::now();
                    let future = service.call(request);
                    this.state.set(State::Calling {
                        future,
                        permit,
                        started,
                    });
                }
                StateProj::Calling {
                    future,
                    permit,
                    started,
                } => {
                    let result = ready!(future.poll(cx));
                    let latency = started.elapsed();
                    let permit = permit.take().expect("the permit is taken only here");
                    this.state.set(State::Done);
                    // An error gives the place back (the permit drops here)
                    // and leaves the policy alone, as Scrapy does for
                    // download errors.
                    let response = result?;
                    let (parts, body) = response.into_parts();
                    adjust(&permit, latency, parts.status, &body, *this.debug);
                    let body = ThrottleBody::new(body, permit);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}

/// Feeds a response to its slot's policy and logs the adjustment.
fn adjust<B: Body>(permit: &Permit, latency: Duration, status: StatusCode, body: &B, debug: bool) {
    let slot = permit.slot();
    let adjustment = slot.on_response(latency, status);
    let throttle = adjustment.throttle;
    let size = body.size_hint().exact();
    macro_rules! event {
        ($level:expr) => {
            tracing::event!(
                $level,
                slot = %slot.key,
                concurrency = throttle.concurrency(),
                delay_ms = throttle.delay_secs() * 1000.0,
                latency_ms = latency.as_secs_f64() * 1000.0,
                size = size,
                status = status.as_u16(),
                changed = adjustment.changed,
                "slot: {} | conc:{:2} | delay:{:5.0} ms | latency:{:5.0} ms | size:{:>6} bytes",
                slot.key,
                throttle.concurrency(),
                throttle.delay_secs() * 1000.0,
                latency.as_secs_f64() * 1000.0,
                size.map_or_else(|| "?".to_owned(), |s| s.to_string()),
            )
        };
    }
    if debug {
        event!(tracing::Level::INFO);
    } else {
        event!(tracing::Level::DEBUG);
    }
}

impl<S, Req> fmt::Debug for ResponseFuture<S, Req>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Waiting { waiting, .. } => format!("Waiting({waiting:?})"),
            State::Ready { .. } => "Ready".to_owned(),
            State::Calling { .. } => "Calling".to_owned(),
            State::Done => "Done".to_owned(),
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
