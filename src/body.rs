//! The response body wrapper that holds the request's in-flight place.

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::slot::gate::Permit;

pin_project! {
    /// A response body that holds its request's in-flight place in the slot
    /// until the body ends, fails or is dropped, so that the concurrency
    /// limit bounds what the server is really serving.
    ///
    /// A body that is empty from the start gives its place back at once.
    pub struct ThrottleBody<B> {
        #[pin]
        inner: B,
        permit: Option<Permit>,
    }
}

impl<B: Body> ThrottleBody<B> {
    pub(crate) fn new(inner: B, permit: Permit) -> Self {
        let permit = if inner.is_end_stream() {
            None
        } else {
            Some(permit)
        };
        ThrottleBody { inner, permit }
    }
}

impl<B> ThrottleBody<B> {
    /// A reference to the wrapped body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// Whether this body still holds its in-flight place.
    pub fn holds_place(&self) -> bool {
        self.permit.is_some()
    }
}

impl<B: Body> Body for ThrottleBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        let ended = match &frame {
            None | Some(Err(_)) => true,
            Some(Ok(_)) => this.inner.is_end_stream(),
        };
        if ended {
            this.permit.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> fmt::Debug for ThrottleBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleBody")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}
