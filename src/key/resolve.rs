//! Resolving hosts to addresses, for [`KeyStrategy::ResolvedIp`](crate::KeyStrategy::ResolvedIp).

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::SlotKey;
use crate::error::BoxError;

/// A boxed future, as resolvers return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Resolves a host name to its addresses.
///
/// The layer calls it at most once per host per TTL (concurrent requests
/// for the same host share one resolution), before the request joins a
/// slot. Implement it to share your client's resolver, or to fake one in
/// tests; any `Fn(String) -> impl Future<Output = Result<Vec<IpAddr>, BoxError>>`
/// is a resolver:
///
/// ```
/// use std::net::IpAddr;
/// use tower_autothrottle::{Config, KeyStrategy};
///
/// let config = Config::builder()
///     .key_strategy(KeyStrategy::ResolvedIp)
///     .resolver(|host: String| async move {
///         let addr: IpAddr = if host.ends_with(".example") { "10.0.0.1" } else { "10.0.0.2" }
///             .parse()
///             .unwrap();
///         Ok::<_, tower_autothrottle::BoxError>(vec![addr])
///     })
///     .build()
///     .unwrap();
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (lower-case, without a trailing dot).
    fn resolve(&self, host: &str) -> BoxFuture<Result<Vec<IpAddr>, BoxError>>;
}

impl<F, Fut> Resolve for F
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<IpAddr>, BoxError>> + Send + 'static,
{
    fn resolve(&self, host: &str) -> BoxFuture<Result<Vec<IpAddr>, BoxError>> {
        Box::pin(self(host.to_owned()))
    }
}

/// The system's resolver (`getaddrinfo`, through tokio).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str) -> BoxFuture<Result<Vec<IpAddr>, BoxError>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Resolutions by host, each shared by the requests that wait for it and
/// kept for a TTL, in a bounded table.
pub(crate) struct DnsCache {
    resolver: Arc<dyn Resolve>,
    ttl: Duration,
    max_entries: usize,
    entries: DashMap<String, Entry>,
}

#[derive(Clone)]
struct Entry {
    created: Instant,
    /// `None` inside: the host did not resolve.
    result: Arc<OnceCell<Option<IpAddr>>>,
}

impl DnsCache {
    pub(crate) fn new(resolver: Arc<dyn Resolve>, ttl: Duration, max_entries: usize) -> Self {
        DnsCache {
            resolver,
            ttl,
            max_entries: max_entries.max(1),
            entries: DashMap::new(),
        }
    }

    /// The slot key of `host` if a fresh resolution is known.
    pub(crate) fn cached(&self, host: &str, fallback: &SlotKey) -> Option<SlotKey> {
        let entry = self.entries.get(host)?;
        if entry.created.elapsed() >= self.ttl {
            return None;
        }
        let result = entry.result.get()?;
        Some(result.map_or_else(|| fallback.clone(), SlotKey::ip))
    }

    /// Resolves `host` (or joins a resolution under way) and gives its slot
    /// key: the first address, or `fallback` if it does not resolve.
    pub(crate) fn key(self: &Arc<Self>, host: String, fallback: SlotKey) -> BoxFuture<SlotKey> {
        let entry = self.entry(&host);
        let resolver = Arc::clone(&self.resolver);
        Box::pin(async move {
            let result = entry
                .result
                .get_or_init(|| async {
                    match resolver.resolve(&host).await {
                        Ok(addrs) if !addrs.is_empty() => {
                            tracing::debug!(host, addr = %addrs[0], "resolved for the slot key");
                            Some(addrs[0])
                        }
                        Ok(_) => {
                            tracing::warn!(host, "no address: keyed by host name");
                            None
                        }
                        Err(error) => {
                            tracing::warn!(host, %error, "resolution failed: keyed by host name");
                            None
                        }
                    }
                })
                .await;
            result.map_or(fallback, SlotKey::ip)
        })
    }

    /// The fresh entry of `host`, made if needed.
    fn entry(&self, host: &str) -> Entry {
        let now = Instant::now();
        if let Some(entry) = self.entries.get(host) {
            if now.saturating_duration_since(entry.created) < self.ttl {
                return entry.clone();
            }
        }
        let entry = Entry {
            created: now,
            result: Arc::new(OnceCell::new()),
        };
        let entry = match self.entries.entry(host.to_owned()) {
            dashmap::Entry::Occupied(mut o) => {
                if now.saturating_duration_since(o.get().created) < self.ttl {
                    o.get().clone()
                } else {
                    o.insert(entry.clone());
                    entry
                }
            }
            dashmap::Entry::Vacant(v) => v.insert(entry).clone(),
        };
        if self.entries.len() > self.max_entries {
            self.shrink(now);
        }
        entry
    }

    /// Drops expired entries, then, if still too many, the oldest ones down
    /// to nine tenths of the bound.
    fn shrink(&self, now: Instant) {
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.created) < self.ttl);
        if self.entries.len() <= self.max_entries {
            return;
        }
        let mut ages: Vec<(Instant, String)> = self
            .entries
            .iter()
            .map(|e| (e.value().created, e.key().clone()))
            .collect();
        ages.sort();
        let target = self.max_entries - self.max_entries / 10;
        let excess = self.entries.len().saturating_sub(target);
        for (_, host) in ages.into_iter().take(excess) {
            self.entries.remove(&host);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

impl fmt::Debug for DnsCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsCache")
            .field("ttl", &self.ttl)
            .field("max_entries", &self.max_entries)
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(calls: Arc<AtomicUsize>) -> Arc<dyn Resolve> {
        Arc::new(move |host: String| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                match host.as_str() {
                    "a.test" | "b.test" => Ok(vec!["10.0.0.1".parse().unwrap()]),
                    "empty.test" => Ok(vec![]),
                    _ => Err::<Vec<IpAddr>, BoxError>("NXDOMAIN".into()),
                }
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_lookups_share_one_resolution_until_the_ttl() {
        let calls = Arc::new(AtomicUsize::new(0));
        let cache = Arc::new(DnsCache::new(
            counting(calls.clone()),
            Duration::from_secs(60),
            100,
        ));
        let fb = SlotKey::new("a.test");
        let keys = futures_join_all((0..50).map(|_| cache.key("a.test".into(), fb.clone()))).await;
        assert!(keys.iter().all(|k| k.as_str() == "10.0.0.1"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.cached("a.test", &fb).unwrap().as_str(), "10.0.0.1");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(cache.cached("a.test", &fb).is_none());
        cache.key("a.test".into(), fb).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_fall_back_to_the_host_key() {
        let cache = Arc::new(DnsCache::new(
            counting(Arc::new(AtomicUsize::new(0))),
            Duration::from_secs(60),
            100,
        ));
        for host in ["nx.test", "empty.test"] {
            let key = cache.key(host.into(), SlotKey::new(host)).await;
            assert_eq!(key.as_str(), host);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_table_stays_bounded() {
        let cache = Arc::new(DnsCache::new(
            counting(Arc::new(AtomicUsize::new(0))),
            Duration::from_secs(60),
            100,
        ));
        for i in 0..1000 {
            let host = format!("h{i}.test");
            cache.key(host.clone(), SlotKey::new(host)).await;
            assert!(cache.len() <= 100);
        }
    }

    async fn futures_join_all<F: Future<Output = SlotKey> + Send + 'static>(
        futures: impl Iterator<Item = F>,
    ) -> Vec<SlotKey> {
        let handles: Vec<_> = futures.map(tokio::spawn).collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }
}
