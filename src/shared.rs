//! What a layer and its services share, and the request's way through the
//! rooms: keyed ([`crate::key`]), queued in its slot ([`crate::slot`]),
//! admitted by the gate and the fleet, and, once answered, read into a
//! report for its slot ([`crate::signals`]).
//!
//! The tower future ([`crate::future`]) and the reqwest middleware both go
//! this way; neither knows the rooms' insides.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::request::Parts;
use http::uri::{Scheme, Uri};
use http::{Extensions, HeaderMap, StatusCode};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::Config;
use crate::error::BoxError;
use crate::extensions::DownloadSlot;
use crate::fleet::{Lease, Local};
use crate::key::{self, BoxFuture, Choice, DnsCache, KeyStrategy, SlotKey};
use crate::policy::Outcome;
use crate::signals;
use crate::slot::gate::{Joined, Permit, Waiting};
use crate::slot::{Adjustment, Slot, SlotSnapshot, SlotTable};

/// What a layer and its services share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) table: SlotTable,
    pub(crate) pending: Option<Arc<Semaphore>>,
    /// Resolutions, for [`KeyStrategy::ResolvedIp`] only.
    dns: Option<Arc<DnsCache>>,
}

/// How a request starts: admitted by its slot at once, in its slot's
/// queue, or resolving the host that names its slot.
pub(crate) enum Start {
    /// Its place, and the instant it was admitted at, as the time since
    /// the table's origin (see [`SlotTable::since_origin`]).
    Admitted(Permit, Duration),
    Queued(Waiting),
    Resolving(BoxFuture<SlotKey>),
}

impl From<Joined> for Start {
    fn from(joined: Joined) -> Self {
        match joined {
            Joined::Admitted(permit, at) => Start::Admitted(permit, at),
            Joined::Queued(waiting) => Start::Queued(waiting),
        }
    }
}

/// The slot a service's last request went to (see [`Shared::start`]). A
/// request goes there again when its scheme and authority spell the slot's
/// key byte for byte: the key is the normalized `scheme://authority`, and
/// normalizing a key changes nothing, so such a request is keyed to it.
#[derive(Clone, Debug)]
pub(crate) struct Recent {
    slot: Arc<Slot>,
}

thread_local! {
    /// The slot this thread's last request went to, and the layer whose it
    /// is, for a service that remembers nothing yet: a clone made for one
    /// request (`svc.clone().oneshot(request)`, the README's own pattern)
    /// finds here what a service reused keeps in its [`Recent`]. The layer
    /// is held weakly and compared by address (the weak reference keeps
    /// the address from being reused); a slot evicted since is refused as
    /// a service's own memory is (see [`Shared::start_recent`]).
    static LAST: RefCell<Option<(Weak<Shared>, Recent)>> = const { RefCell::new(None) };
}

impl Recent {
    /// Whether `uri`'s scheme and authority spell the slot's key, byte for
    /// byte: a request that differs only in case, or names a default port,
    /// takes the longer way, to the same slot.
    fn spelled_by(&self, uri: &Uri) -> bool {
        let Some(authority) = uri.authority() else {
            return false;
        };
        let key = self.slot.key.as_str();
        let scheme = uri.scheme().map_or("http", Scheme::as_str);
        // The two usual schemes as constants: a prefix of a length known
        // at compile time is compared inline, where one known only at run
        // time takes a call to `memcmp`.
        let rest = match scheme {
            "http" => key.strip_prefix("http://"),
            "https" => key.strip_prefix("https://"),
            _ => key
                .strip_prefix(scheme)
                .and_then(|rest| rest.strip_prefix("://")),
        };
        rest == Some(authority.as_str())
    }
}

/// Makes `recent` this thread's memory for `shared`.
pub(crate) fn remember(shared: &Arc<Shared>, recent: &Recent) {
    LAST.with(|last| *last.borrow_mut() = Some((Arc::downgrade(shared), recent.clone())));
}

impl Shared {
    pub(crate) fn new(config: Config) -> Self {
        let pending = config
            .max_pending
            .map(|max| Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))));
        let dns = (config.key_strategy == KeyStrategy::ResolvedIp).then(|| {
            Arc::new(DnsCache::new(
                Arc::clone(&config.resolver),
                config.dns_ttl,
                config.dns_cache_size,
            ))
        });
        Shared {
            table: SlotTable::new(
                Arc::clone(&config.policy),
                config.overrides.clone(),
                config.jitter,
                config.seed,
                config.idle_timeout,
                config.max_slots,
            ),
            config,
            pending,
            dns,
        }
    }

    /// Joins the back of `key`'s queue (creating the slot if needed), or
    /// goes through at once.
    pub(crate) fn enqueue(&self, key: SlotKey) -> Joined {
        self.table.with_slot(key, |slot| {
            Waiting::enqueue(Arc::clone(slot), self.table.origin())
        })
    }

    /// Keys a request by its head and starts it: in its slot's queue now (so
    /// requests queue in call order), or after resolving its host.
    ///
    /// `recent`, a service's memory of the slot its last request went to, is
    /// set to this request's slot (with the default keying only); see
    /// [`start_recent`](Self::start_recent), which the caller tries first.
    pub(crate) fn start(&self, parts: &Parts, recent: Option<&mut Option<Recent>>) -> Start {
        let Some(recent) = recent.filter(|_| self.cacheable(&parts.extensions)) else {
            return self.start_keyed(parts);
        };
        let start = self.start_keyed(parts);
        *recent = match &start {
            Start::Admitted(permit, _) => Some(Recent {
                slot: Arc::clone(permit.slot()),
            }),
            Start::Queued(waiting) => waiting.slot().map(|slot| Recent {
                slot: Arc::clone(slot),
            }),
            Start::Resolving(_) => None,
        };
        start
    }

    /// Whether a request with these extensions may use a remembered slot:
    /// only with the default keying.
    fn cacheable(&self, extensions: &Extensions) -> bool {
        self.config.key_fn.is_none()
            && self.config.key_strategy == KeyStrategy::Authority
            && extensions.get::<DownloadSlot>().is_none()
    }

    /// Starts the request in the remembered slot, if its scheme and
    /// authority spell that slot's key (see [`Recent`]) and the slot is
    /// still in the table; checked
    /// before the request is taken apart, which the way through the table
    /// needs.
    pub(crate) fn start_recent(
        &self,
        uri: &Uri,
        extensions: &Extensions,
        recent: &Option<Recent>,
    ) -> Option<Start> {
        let memo = recent.as_ref()?;
        if !memo.spelled_by(uri) || !self.cacheable(extensions) {
            return None;
        }
        Waiting::try_enqueue(Arc::clone(&memo.slot), self.table.origin()).map(Start::from)
    }

    /// [`start_recent`](Self::start_recent) with this thread's memory of
    /// the slot its last request through this layer went to (see
    /// [`LAST`]), for a service that remembers nothing yet. The memory
    /// stays where it is: the slot is cloned once, into the request's
    /// place (where a copy of the memory in the service took one more
    /// reference, given back when the service dropped).
    #[inline(never)]
    pub(crate) fn start_recalled(
        self: &Arc<Self>,
        uri: &Uri,
        extensions: &Extensions,
    ) -> Option<Start> {
        if !self.cacheable(extensions) {
            return None;
        }
        let slot = LAST.with(|last| match &*last.borrow() {
            Some((layer, recent))
                if std::ptr::eq(layer.as_ptr(), Arc::as_ptr(self)) && recent.spelled_by(uri) =>
            {
                Some(Arc::clone(&recent.slot))
            }
            _ => None,
        })?;
        Waiting::try_enqueue(slot, self.table.origin()).map(Start::from)
    }

    fn start_keyed(&self, parts: &Parts) -> Start {
        let config = &self.config;
        let download_slot = parts.extensions.get::<DownloadSlot>().map(|d| &d.0);
        key::choose(
            download_slot,
            parts,
            config.key_fn.as_ref(),
            config.key_strategy,
            |choice| match choice {
                // The common case: no allocation when the slot exists.
                Choice::Text(text) => self
                    .table
                    .with_slot_str(text, |slot| {
                        Waiting::enqueue(Arc::clone(slot), self.table.origin())
                    })
                    .into(),
                Choice::Key(key) => self.enqueue(key).into(),
                Choice::Resolve { host, fallback } => match &self.dns {
                    Some(dns) => match dns.cached(&host, &fallback) {
                        Some(key) => self.enqueue(key).into(),
                        None => Start::Resolving(dns.key(host, fallback)),
                    },
                    None => self.enqueue(fallback).into(),
                },
            },
        )
    }

    /// A snapshot of the slot `key` names (normalized), if it exists.
    pub(crate) fn snapshot(&self, key: &str) -> Option<SlotSnapshot> {
        let key = SlotKey::parse(key).ok()?;
        self.table.snapshot(key.as_str())
    }

    /// The key of the slot a request with this head goes to; resolves the
    /// host with [`KeyStrategy::ResolvedIp`]. Creates no slot.
    pub(crate) async fn key_for(&self, parts: &Parts) -> SlotKey {
        let config = &self.config;
        let download_slot = parts.extensions.get::<DownloadSlot>().map(|d| &d.0);
        let chosen = key::choose(
            download_slot,
            parts,
            config.key_fn.as_ref(),
            config.key_strategy,
            |choice| match choice {
                Choice::Text(text) => Ok(SlotKey::verbatim(text)),
                Choice::Key(key) => Ok(key),
                Choice::Resolve { host, fallback } => Err((host, fallback)),
            },
        );
        let (host, fallback) = match chosen {
            Ok(key) => return key,
            Err(resolve) => resolve,
        };
        match &self.dns {
            Some(dns) => match dns.cached(&host, &fallback) {
                Some(key) => key,
                None => dns.key(host, fallback).await,
            },
            None => fallback,
        }
    }

    /// The fleet-wide reservation a request admitted by its slot must wait
    /// for, when a fleet shares the slots.
    pub(crate) fn reserve(&self, permit: &Permit) -> Option<BoxFuture<Option<Lease>>> {
        let coordinator = self.config.coordinator.as_ref()?;
        let slot = permit.slot();
        let (delay, limit) = slot.effective(Instant::now());
        Some(coordinator.reserve(slot.key.clone(), Local { delay, limit }))
    }

    /// Waits for a place under [`max_pending`](crate::ConfigBuilder::max_pending),
    /// if it is set, for callers that are not a `Service` (which take it in
    /// `poll_ready`).
    pub(crate) async fn pending_place(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // The semaphore is never closed; if it were, go ahead unbounded.
        Arc::clone(self.pending.as_ref()?)
            .acquire_owned()
            .await
            .ok()
    }

    /// Waits until a request started with `start` is admitted: the gate as an
    /// `async fn`, for callers that are not a hand-written future (the
    /// reqwest middleware, [`Place`](crate::place::Place)). Dropping it at
    /// any await point leaves the queue.
    pub(crate) async fn admit(
        &self,
        start: Start,
        mut pending: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Permit {
        let joined = match start {
            Start::Admitted(permit, at) => Joined::Admitted(permit, at),
            Start::Queued(waiting) => Joined::Queued(waiting),
            Start::Resolving(key) => self.enqueue(key.await),
        };
        let mut permit = match joined {
            Joined::Admitted(permit, _) => permit.with_pending(pending),
            Joined::Queued(mut waiting) => {
                std::future::poll_fn(|cx| waiting.poll_admit(cx, &mut pending)).await
            }
        };
        if let Some(reserving) = self.reserve(&permit) {
            self.set_lease(&mut permit, reserving.await);
        }
        permit
    }

    /// Gives `permit` the fleet's place the reservation brought, with its
    /// word from the fleet (see [`Permit::set_lease`]).
    pub(crate) fn set_lease(&self, permit: &mut Permit, lease: Option<Lease>) {
        let now = Instant::now();
        permit.set_lease(lease.map(Box::new), now, self.table.clock(now));
    }

    /// Classifies an inner error: by the configured classifier, else by
    /// [`classify_error`](crate::classify_error).
    pub(crate) fn classify(&self, error: &(dyn std::error::Error + 'static)) -> Outcome {
        match &self.config.classifier {
            Some(classify) => classify(error),
            None => crate::classify_error(error),
        }
    }

    /// Reports an inner error to its slot, classified, and boxes it.
    pub(crate) fn fail<E: Into<BoxError>>(
        &self,
        permit: &mut Permit,
        now: Instant,
        latency: Duration,
        error: E,
        adjust: bool,
    ) -> BoxError {
        let error: BoxError = error.into();
        let outcome = self.classify(&*error);
        self.end_error(permit, now, latency, &*error, outcome, adjust);
        error
    }

    /// Reports an inner service that failed its readiness once the request
    /// was admitted: an error with no latency, at once.
    pub(crate) fn fail_readiness<E: Into<BoxError>>(
        &self,
        permit: &mut Permit,
        error: E,
        adjust: bool,
    ) -> BoxError {
        self.fail(permit, Instant::now(), Duration::ZERO, error, adjust)
    }

    /// Reports a failed request, classified as `outcome`, to its slot, and
    /// gives its place back under the same lock (every caller drops the
    /// permit next).
    pub(crate) fn end_error(
        &self,
        permit: &mut Permit,
        now: Instant,
        latency: Duration,
        error: &(dyn std::error::Error + 'static),
        outcome: Outcome,
        adjust: bool,
    ) {
        let at = self.table.clock(now);
        let adjustment = permit.end(now, at, latency, None, outcome, adjust, true);
        tracing::debug!(
            slot = %permit.slot().key,
            error = %error,
            outcome = ?adjustment.outcome,
            delay_ms = adjustment.delay.as_secs_f64() * 1000.0,
            concurrency = adjustment.limit,
            "request failed",
        );
    }

    /// Feeds a response to its slot, logs the adjustment and shares a pause
    /// the server asked for with the fleet. With `release` (the response's
    /// body is over already, or the caller drops the permit next), the
    /// place goes back under the same lock. `at` is `now` on the slots'
    /// clock (`self.table.clock(now)`, which the future has from the
    /// difference that gave it the latency).
    #[allow(clippy::too_many_arguments)] // internal; shared by the future and the reqwest middleware
    pub(crate) fn end_response(
        &self,
        permit: &mut Permit,
        now: Instant,
        at: f64,
        latency: Duration,
        status: StatusCode,
        headers: &HeaderMap,
        size: Option<u64>,
        adjust: bool,
        release: bool,
    ) {
        let max = self.config.max_retry_after;
        let hints = signals::hints(status, headers, max, permit.slot().key.as_str());
        let outcome = Outcome::of_status(status);
        let adjustment = permit.end(
            now,
            at,
            latency,
            Some((status, hints)),
            outcome,
            adjust,
            release,
        );
        self.log(permit.slot(), &adjustment, latency, status, size);
        if let (Some(coordinator), Some(wait)) = (&self.config.coordinator, hints.pause()) {
            coordinator.pause(permit.slot().key.clone(), wait);
        }
    }

    /// Logs what a response did to its slot, in Scrapy's debug format.
    fn log(
        &self,
        slot: &Slot,
        adjustment: &Adjustment,
        latency: Duration,
        status: StatusCode,
        size: Option<u64>,
    ) {
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
        if self.config.debug {
            event!(tracing::Level::INFO);
        } else {
            event!(tracing::Level::DEBUG);
        }
    }
}
