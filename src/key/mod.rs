//! Slot keys: which requests share a delay and a concurrency budget.
//!
//! Every request is assigned to exactly one *slot*, named by a [`SlotKey`].
//! The key is chosen, in this order of precedence:
//!
//! 1. a [`DownloadSlot`](crate::DownloadSlot) extension on the request (Scrapy's `download_slot`
//!    meta key);
//! 2. the key function of the [`Config`](crate::Config), when it returns
//!    `Some`;
//! 3. the [`KeyStrategy`] of the config, applied to the request URI's
//!    authority, or, when the URI has none, to its `Host` header:
//!    - [`KeyStrategy::Authority`] (the default): scheme, host and the port
//!      when it is not the scheme's default (`http://Example.com:80/` and
//!      `http://user@example.com/` both map to `http://example.com`);
//!    - [`KeyStrategy::Host`]: the host alone (`http://a.com:8080` and
//!      `https://a.com` share `a.com`), as Scrapy keys slots today;
//!    - [`KeyStrategy::RegistrableDomain`]: the host's registrable domain by
//!      the Public Suffix List (`a.example.co.uk` and `b.example.co.uk`
//!      share `example.co.uk`); IP literals, single-label hosts and hosts
//!      that are public suffixes themselves key by themselves;
//!    - [`KeyStrategy::ResolvedIp`]: the address the host resolves to (the
//!      original AutoThrottle's `ip_concurrency`), so that names served by
//!      one machine share one budget; see [`Resolve`];
//! 4. the fallback slot [`SlotKey::fallback`], shared by every request that
//!    names no host at all.
//!
//! Hosts are always lower-cased and lose a trailing dot (`Example.COM.` is
//! `example.com`); IPv6 literals keep their brackets (`[::1]`); an
//! internationalized name is keyed in the ASCII (punycode) form a URI
//! carries. Key selection never fails and never panics: a failed resolution
//! falls back to the host key.
//!
//! This module owns the key type and its normalization; [`KeyStrategy`] and
//! the choice of a request's key are in `strategy`, the resolver for
//! [`KeyStrategy::ResolvedIp`] in `resolve`.

mod resolve;
mod strategy;

pub(crate) use resolve::DnsCache;
pub use resolve::{BoxFuture, Resolve, SystemResolver};
pub(crate) use strategy::{choose, Choice};
pub use strategy::{KeyFn, KeyStrategy};

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use http::uri::{Authority, Scheme};

/// The name of a slot: requests with equal keys share one delay, one
/// concurrency limit and one FIFO queue.
///
/// Cloning is cheap (a reference count).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotKey(Arc<str>);

impl SlotKey {
    /// A key with exactly this text (no normalization).
    pub fn new(key: impl Into<Arc<str>>) -> Self {
        SlotKey(key.into())
    }

    /// The slot used for requests that carry neither an authority in their
    /// URI nor a usable `Host` header.
    #[must_use]
    pub fn fallback() -> Self {
        SlotKey::new(FALLBACK)
    }

    /// The normalized key for a scheme and an authority, as used for the
    /// default keying: `scheme://host[:port]` with the host lower-cased,
    /// user information and a trailing dot removed, and the port left out
    /// when it is the scheme's default.
    ///
    /// ```
    /// use http::uri::{Authority, Scheme};
    /// use tower_autothrottle::SlotKey;
    ///
    /// let a: Authority = "User@Example.COM.:80".parse().unwrap();
    /// assert_eq!(SlotKey::from_authority(Some(&Scheme::HTTP), &a).as_str(), "http://example.com");
    /// let b: Authority = "example.com:8443".parse().unwrap();
    /// assert_eq!(SlotKey::from_authority(Some(&Scheme::HTTPS), &b).as_str(), "https://example.com:8443");
    /// ```
    pub fn from_authority(scheme: Option<&Scheme>, authority: &Authority) -> Self {
        let mut key = String::new();
        write_authority_key(scheme, authority, &mut key);
        SlotKey(key.into())
    }

    /// The key's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Writes the normalized key of [`SlotKey::from_authority`] into `key`.
pub(crate) fn write_authority_key(
    scheme: Option<&Scheme>,
    authority: &Authority,
    key: &mut String,
) {
    let scheme = scheme.map(Scheme::as_str).unwrap_or("http");
    // The common case, with nothing to normalize, in one pass over the
    // bytes: a lower-case name or IPv4 address, maybe a port that is not
    // the default one and has no leading zero.
    let text = authority.as_str();
    let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-';
    if !scheme.bytes().any(|b| b.is_ascii_uppercase()) {
        let (host, port) = match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        let host_plain = !host.is_empty() && !host.ends_with('.') && host.bytes().all(plain);
        let port_plain = port.is_none_or(|p| {
            !p.is_empty()
                && !p.starts_with('0')
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u16>()
                    .is_ok_and(|p| default_port(scheme) != Some(p))
        });
        if host_plain && port_plain {
            key.reserve(scheme.len() + 3 + text.len());
            key.push_str(scheme);
            key.push_str("://");
            key.push_str(text);
            return;
        }
    }
    {
        let scheme_lower;
        let scheme = if scheme.bytes().any(|b| b.is_ascii_uppercase()) {
            scheme_lower = scheme.to_ascii_lowercase();
            scheme_lower.as_str()
        } else {
            scheme
        };
        let host = authority.host();
        let host = host
            .strip_suffix('.')
            .filter(|h| !h.is_empty())
            .unwrap_or(host);
        let port = authority
            .port_u16()
            .filter(|&p| default_port(scheme) != Some(p));
        key.reserve(scheme.len() + 3 + host.len() + 6);
        key.push_str(scheme);
        key.push_str("://");
        for c in host.chars() {
            key.push(c.to_ascii_lowercase());
        }
        if let Some(port) = port {
            use std::fmt::Write;
            let _ = write!(key, ":{port}");
        }
    }
}

const FALLBACK: &str = "default";

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

impl fmt::Debug for SlotKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SlotKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Borrow<str> for SlotKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SlotKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SlotKey {
    fn from(s: &str) -> Self {
        SlotKey::new(s)
    }
}

impl From<String> for SlotKey {
    fn from(s: String) -> Self {
        SlotKey::new(s)
    }
}

impl SlotKey {
    /// The key of a host alone: lower-cased, without a trailing dot.
    ///
    /// ```
    /// use tower_autothrottle::SlotKey;
    /// assert_eq!(SlotKey::host("WWW.Example.COM.").as_str(), "www.example.com");
    /// ```
    #[must_use]
    pub fn host(host: &str) -> Self {
        SlotKey::new(normalize_host(host))
    }

    /// The key of a host's registrable domain by the Public Suffix List;
    /// IP literals, single-label hosts and public suffixes themselves key
    /// by themselves.
    ///
    /// ```
    /// use tower_autothrottle::SlotKey;
    /// assert_eq!(SlotKey::registrable_domain("a.b.Example.co.uk").as_str(), "example.co.uk");
    /// assert_eq!(SlotKey::registrable_domain("localhost").as_str(), "localhost");
    /// assert_eq!(SlotKey::registrable_domain("10.0.0.1").as_str(), "10.0.0.1");
    /// ```
    #[must_use]
    pub fn registrable_domain(host: &str) -> Self {
        let host = normalize_host(host);
        if ip_literal(&host).is_some() {
            return SlotKey::new(host);
        }
        match psl::domain_str(&host) {
            Some(domain) if domain.contains('.') => SlotKey::new(domain),
            _ => SlotKey::new(host),
        }
    }

    /// The key of an address: `93.184.216.34`, or `[2001:db8::1]`.
    #[must_use]
    pub fn ip(addr: std::net::IpAddr) -> Self {
        match addr {
            std::net::IpAddr::V4(v4) => SlotKey::new(v4.to_string()),
            std::net::IpAddr::V6(v6) => SlotKey::new(format!("[{v6}]")),
        }
    }
}

/// Lower-cases a host and drops one trailing dot.
pub(crate) fn normalize_host(host: &str) -> String {
    let host = host
        .strip_suffix('.')
        .filter(|h| !h.is_empty())
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

/// The address of an IP-literal host (`10.0.0.1`, `[::1]`), if it is one.
pub(crate) fn ip_literal(host: &str) -> Option<std::net::IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}
