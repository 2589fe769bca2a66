//! The response future: wait in the slot, call the inner service, measure.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tower_service::Service;

use crate::body::ThrottleBody;
use crate::classify::classify_error;
use crate::gate::{Permit, Waiting};
use crate::headers;
use crate::key::SlotKey;
use crate::layer::Shared;
use crate::policy::Outcome;
use crate::resolve::BoxFuture;
use crate::slot::{Ended, Hints};
use crate::BoxError;

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
        state: State<S, Req, S::Future>,
        shared: Arc<Shared>,
        // Whether the response adjusts its slot (no `DontAdjust`).
        adjust: bool,
        span: tracing::Span,
    }
}

/// How a response future starts: in its slot's queue, or resolving the
/// host that names its slot.
pub(crate) enum Start {
    Queued(Waiting),
    Resolving(BoxFuture<SlotKey>),
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req, F> {
        Resolving {
            resolving: BoxFuture<SlotKey>,
            service: Option<S>,
            request: Option<Req>,
            pending: Option<OwnedSemaphorePermit>,
        },
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
        start: Start,
        service: S,
        request: Req,
        pending: Option<OwnedSemaphorePermit>,
        shared: Arc<Shared>,
        adjust: bool,
        span: tracing::Span,
    ) -> Self {
        let (service, request) = (Some(service), Some(request));
        let state = match start {
            Start::Queued(waiting) => State::Waiting {
                waiting,
                service,
                request,
                pending,
            },
            Start::Resolving(resolving) => State::Resolving {
                resolving,
                service,
                request,
                pending,
            },
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
                StateProj::Resolving {
                    resolving,
                    service,
                    request,
                    pending,
                } => {
                    let key = ready!(resolving.as_mut().poll(cx));
                    let waiting = this.shared.enqueue(key);
                    let (service, request, pending) =
                        (service.take(), request.take(), pending.take());
                    this.state.set(State::Waiting {
                        waiting,
                        service,
                        request,
                        pending,
                    });
                }
                StateProj::Waiting {
                    waiting,
                    service,
                    request,
                    pending,
                } => {
                    let permit = ready!(waiting.poll_admit(cx, pending));
                    tracing::trace!(slot = %permit.slot().key, seq = permit.seq(), "dispatched");
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
                        let permit = permit.take().expect("the permit is taken only here");
                        this.state.set(State::Done);
                        return Poll::Ready(Err(failed(
                            this.shared,
                            &permit,
                            Duration::ZERO,
                            error,
                            *this.adjust,
                        )));
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
                    let response = match result {
                        Ok(response) => response,
                        // The place is given back when the permit drops.
                        Err(error) => {
                            return Poll::Ready(Err(failed(
                                this.shared,
                                &permit,
                                latency,
                                error,
                                *this.adjust,
                            )));
                        }
                    };
                    let (parts, body) = response.into_parts();
                    adjust(
                        this.shared,
                        &permit,
                        latency,
                        parts.status,
                        &parts.headers,
                        body.size_hint().exact(),
                        *this.adjust,
                    );
                    let body = ThrottleBody::new(body, permit);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}

/// Reports an inner error to its slot and boxes it.
fn failed<E: Into<BoxError>>(
    shared: &Shared,
    permit: &Permit,
    latency: Duration,
    error: E,
    adjust: bool,
) -> BoxError {
    let error: BoxError = error.into();
    let outcome = match &shared.config.classifier {
        Some(classify) => classify(&*error),
        None => classify_error(&*error),
    };
    report_error(permit, latency, &*error, outcome, adjust);
    error
}

/// Reports a failed request, classified as `outcome`, to its slot.
pub(crate) fn report_error(
    permit: &Permit,
    latency: Duration,
    error: &(dyn std::error::Error + 'static),
    outcome: Outcome,
    adjust: bool,
) {
    let slot = permit.slot();
    let ended = Ended {
        latency,
        status: None,
        outcome,
        seq: permit.seq(),
        hints: Hints::default(),
        adjust,
    };
    let adjustment = slot.on_end(Instant::now(), ended);
    tracing::debug!(
        slot = %slot.key,
        error = %error,
        outcome = ?adjustment.outcome,
        delay_ms = adjustment.delay.as_secs_f64() * 1000.0,
        concurrency = adjustment.limit,
        "request failed",
    );
}

/// Reads the server's hints from a response, warning about malformed ones.
fn hints(shared: &Shared, slot: &str, status: StatusCode, headers: &HeaderMap) -> Hints {
    let max = shared.config.max_retry_after;
    let mut hints = Hints::default();
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        if let Some((value, date)) = headers::retry_after_of(headers) {
            match headers::retry_after(value, date, SystemTime::now()) {
                Ok(wait) if wait > max => {
                    tracing::warn!(
                        slot,
                        ?wait,
                        ?max,
                        "Retry-After above max_retry_after: capped"
                    );
                    hints.retry_after = Some(max);
                }
                Ok(wait) => hints.retry_after = Some(wait),
                Err(error) => tracing::warn!(slot, %error, "ignored"),
            }
        }
    }
    match headers::rate_limit(headers, max) {
        Ok(limit) => {
            let window = match limit {
                Some(headers::RateLimit::Exhausted { reset }) => Some(reset),
                Some(headers::RateLimit::Pace { valid_for, .. }) => Some(valid_for),
                None => None,
            };
            if window == Some(max) {
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

/// Feeds a response to its slot and logs the adjustment.
pub(crate) fn adjust(
    shared: &Shared,
    permit: &Permit,
    latency: Duration,
    status: StatusCode,
    headers: &HeaderMap,
    size: Option<u64>,
    adjust: bool,
) {
    let slot = permit.slot();
    let ended = Ended {
        latency,
        status: Some(status),
        outcome: Outcome::of_status(status),
        seq: permit.seq(),
        hints: hints(shared, slot.key.as_str(), status, headers),
        adjust,
    };
    let adjustment = slot.on_end(Instant::now(), ended);
    macro_rules! event {
        ($level:expr) => {
            tracing::event!(
                $level,
                slot = %slot.key,
                concurrency = adjustment.limit,
                delay_ms = adjustment.delay.as_secs_f64() * 1000.0,
                latency_ms = latency.as_secs_f64() * 1000.0,
                size = size,
                status = status.as_u16(),
                outcome = ?adjustment.outcome,
                changed = adjustment.changed,
                "slot: {} | conc:{:2} | delay:{:5.0} ms | latency:{:5.0} ms | size:{:>6} bytes",
                slot.key,
                adjustment.limit,
                adjustment.delay.as_secs_f64() * 1000.0,
                latency.as_secs_f64() * 1000.0,
                size.map_or_else(|| "?".to_owned(), |s| s.to_string()),
            )
        };
    }
    if shared.config.debug {
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
            State::Resolving { .. } => "Resolving".to_owned(),
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
