//! [reqwest-middleware](https://docs.rs/reqwest-middleware) integration
//! (feature `reqwest`).
//!
//! [`AutoThrottleMiddleware`] throttles a `reqwest_middleware::ClientWithMiddleware`
//! exactly as [`AutoThrottleLayer`] throttles a tower stack: same keys,
//! slots, policies, signals and settings. Made from a layer with
//! [`AutoThrottleLayer::middleware`], it *shares* that layer's slots, so
//! one throttle can serve a hyper stack and a reqwest client at once: a
//! host's delay and limit hold over both.
//!
//! ```
//! use std::time::Duration;
//! use reqwest_middleware::ClientBuilder;
//! use tower_autothrottle::{policy::Scrapy, AutoThrottleLayer, Config};
//!
//! let throttle = AutoThrottleLayer::new(
//!     Config::builder().policy(Scrapy::default().start_delay(Duration::from_millis(250))).build()?,
//! );
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(throttle.middleware())
//!     .build();
//! // client.get("https://example.com/").send().await? waits for example.com's slot;
//! // throttle.slots() shows every slot, whoever sent the requests.
//! # drop(client);
//! # Ok::<_, tower_autothrottle::ConfigError>(())
//! ```
//!
//! # Per request
//!
//! reqwest requests carry no extensions of their own; give a
//! [`DownloadSlot`] or [`DontAdjust`] through reqwest-middleware's
//! extensions instead (`RequestBuilder::with_extension`).
//!
//! # What is measured
//!
//! The latency runs from handing the request to the next middleware until
//! the response head arrives; the response body keeps the request's
//! in-flight place until it is read to the end or dropped. Errors are
//! classified by the configured classifier, or else: a reqwest timeout
//! (`reqwest::Error::is_timeout`) is an overload, and the rest as
//! [`classify_error`](crate::classify_error) says (a refused or reset connection is an overload).
//! The response keeps its URL, headers and extensions.

use std::sync::Arc;

use http::Extensions;
use reqwest_middleware::{Middleware, Next};
use tokio::time::Instant;
use tracing::Instrument;

use crate::body::ThrottleBody;
use crate::config::Config;
use crate::extensions::{DontAdjust, DownloadSlot};
use crate::layer::AutoThrottleLayer;
use crate::policy::Outcome;
use crate::shared::Shared;

/// Throttles a reqwest-middleware client; see the [module documentation](self).
#[derive(Clone)]
pub struct AutoThrottleMiddleware {
    shared: Arc<Shared>,
}

impl AutoThrottleMiddleware {
    /// A middleware with its own, new throttle.
    #[must_use]
    pub fn new(config: Config) -> Self {
        AutoThrottleLayer::new(config).middleware()
    }

    /// A layer sharing this middleware's slots, for a tower stack.
    #[must_use]
    pub fn layer(&self) -> AutoThrottleLayer {
        AutoThrottleLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl AutoThrottleLayer {
    /// A reqwest-middleware middleware sharing this layer's slots (feature
    /// `reqwest`); see [`crate::reqwest`].
    #[must_use]
    pub fn middleware(&self) -> AutoThrottleMiddleware {
        AutoThrottleMiddleware {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl std::fmt::Debug for AutoThrottleMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoThrottleMiddleware")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// The request's head as the layer would see it, for keying.
fn head(req: &reqwest::Request, extensions: &Extensions) -> http::request::Parts {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = req.method().clone();
    parts.version = req.version();
    // A URL reqwest accepted is a valid URI; if not, the Host header or the
    // fallback slot decides.
    if let Ok(uri) = req.url().as_str().parse() {
        parts.uri = uri;
    }
    parts.headers = req.headers().clone();
    if let Some(slot) = extensions.get::<DownloadSlot>() {
        parts.extensions.insert(slot.clone());
    }
    parts
}

#[async_trait::async_trait]
impl Middleware for AutoThrottleMiddleware {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let shared = &*self.shared;
        let span = tracing::debug_span!("autothrottle", method = %req.method(), uri = %req.url());
        let adjust_slot = extensions.get::<DontAdjust>().is_none();
        async move {
            let pending = shared.pending_place().await;
            let start = shared.start(&head(&req, extensions), None);
            let mut permit = shared.admit(start, pending).await;
            tracing::trace!(slot = %permit.slot().key, seq = permit.seq(), "dispatched");
            let started = Instant::now();
            let result = next.run(req, extensions).await;
            let now = Instant::now();
            let latency = now.saturating_duration_since(started);
            let response = match result {
                Ok(response) => response,
                Err(error) => {
                    // reqwest's timeout error is opaque to `classify_error`.
                    let timeout = matches!(
                        &error,
                        reqwest_middleware::Error::Reqwest(e) if e.is_timeout()
                    );
                    let outcome = if timeout && shared.config.classifier.is_none() {
                        Outcome::Overload
                    } else {
                        shared.classify(&error)
                    };
                    shared.end_error(&mut permit, now, latency, &error, outcome, adjust_slot);
                    return Err(error);
                }
            };
            shared.end_response(
                &mut permit,
                now,
                shared.table.clock(now),
                latency,
                response.status(),
                response.headers(),
                response.content_length(),
                adjust_slot,
                false,
            );
            let url = response.url().clone();
            let (mut parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
            let body = reqwest::Body::wrap(ThrottleBody::new(body, permit));
            // The URL travels in an extension that reqwest's conversion
            // dropped: put it back.
            let (with_url, ()) = reqwest::ResponseBuilderExt::url(http::Response::builder(), url)
                .body(())
                .map(http::Response::into_parts)
                .unwrap_or_else(|_| http::Response::new(()).into_parts());
            parts.extensions.extend(with_url.extensions);
            Ok(reqwest::Response::from(http::Response::from_parts(
                parts, body,
            )))
        }
        .instrument(span)
        .await
    }
}
