//! Slot keys: which requests share a delay and a concurrency budget.
//!
//! Every request is assigned to exactly one *slot*, named by a [`SlotKey`].
//! The key is chosen, in this order of precedence:
//!
//! 1. a [`DownloadSlot`] extension on the request (Scrapy's `download_slot`
//!    meta key);
//! 2. the key function of the [`Config`](crate::Config), when it returns
//!    `Some`;
//! 3. the normalized authority of the request URI: scheme, lower-cased host
//!    without a trailing dot and without user information, and the port when
//!    it is not the scheme's default (`http://Example.com:80/` and
//!    `http://user@example.com/` both map to `http://example.com`);
//! 4. the `Host` header, normalized the same way (with the URI's scheme, or
//!    `http` when the URI has none);
//! 5. the fallback slot [`SlotKey::fallback`], shared by every request that
//!    names no host at all.
//!
//! Key selection never fails and never panics.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use http::header::HOST;
use http::request::Parts;
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
        let scheme = scheme.map(Scheme::as_str).unwrap_or("http");
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
        let mut key = String::with_capacity(scheme.len() + 3 + host.len() + 6);
        key.push_str(scheme);
        key.push_str("://");
        for c in host.chars() {
            key.push(c.to_ascii_lowercase());
        }
        if let Some(port) = port {
            key.push(':');
            key.push_str(&port.to_string());
        }
        SlotKey(key.into())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
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

/// A request extension that puts the request into the named slot, whatever
/// its URI says (Scrapy's `download_slot` request meta key).
///
/// ```
/// use tower_autothrottle::DownloadSlot;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(DownloadSlot::new("api-budget"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DownloadSlot(pub SlotKey);

impl DownloadSlot {
    /// Names the slot for a request.
    pub fn new(key: impl Into<SlotKey>) -> Self {
        DownloadSlot(key.into())
    }
}

/// A function that chooses the slot for a request from its head.
///
/// Returning `None` falls back to the default keying by authority.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<SlotKey> + Send + Sync>;

/// Chooses the slot key of a request head, following the precedence in the
/// [module documentation](self).
pub(crate) fn key_for(parts: &Parts, key_fn: Option<&KeyFn>) -> SlotKey {
    if let Some(DownloadSlot(key)) = parts.extensions.get::<DownloadSlot>() {
        return key.clone();
    }
    if let Some(key) = key_fn.and_then(|f| f(parts)) {
        return key;
    }
    authority_key(parts)
}

/// The default keying: URI authority, then `Host` header, then the fallback.
pub(crate) fn authority_key(parts: &Parts) -> SlotKey {
    let scheme = parts.uri.scheme();
    if let Some(authority) = parts.uri.authority() {
        if !authority.host().is_empty() {
            return SlotKey::from_authority(scheme, authority);
        }
    }
    let from_host = parts
        .headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<Authority>().ok())
        .filter(|a| !a.host().is_empty());
    match from_host {
        Some(authority) => SlotKey::from_authority(scheme, &authority),
        None => SlotKey::fallback(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uri: &str) -> String {
        let (parts, ()) = http::Request::get(uri).body(()).unwrap().into_parts();
        authority_key(&parts).as_str().to_owned()
    }

    #[test]
    fn normalizes_case_default_port_userinfo_and_trailing_dot() {
        assert_eq!(key("http://Example.com/"), "http://example.com");
        assert_eq!(key("http://example.com:80/x"), "http://example.com");
        assert_eq!(key("http://user:pw@example.com/"), "http://example.com");
        assert_eq!(key("http://example.com./"), "http://example.com");
        assert_eq!(key("https://example.com:443/"), "https://example.com");
        assert_eq!(key("https://example.com:80/"), "https://example.com:80");
        assert_eq!(key("HTTP://EXAMPLE.COM:8080"), "http://example.com:8080");
        assert_eq!(key("http://[::1]:8080/"), "http://[::1]:8080");
        assert_eq!(key("http://[::1]/"), "http://[::1]");
    }

    #[test]
    fn schemes_do_not_share() {
        assert_ne!(key("http://example.com/"), key("https://example.com/"));
    }

    #[test]
    fn host_header_then_fallback() {
        let (parts, ()) = http::Request::get("/path")
            .header("host", "Example.org:80")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(authority_key(&parts).as_str(), "http://example.org");

        for bad in [&b"not a host"[..], b"\xff\xfe", b"", b":80"] {
            let (parts, ()) = http::Request::get("/path")
                .header("host", http::HeaderValue::from_bytes(bad).unwrap())
                .body(())
                .unwrap()
                .into_parts();
            assert_eq!(authority_key(&parts), SlotKey::fallback(), "{bad:?}");
        }

        let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
        assert_eq!(authority_key(&parts), SlotKey::fallback());
    }

    #[test]
    fn precedence_extension_then_key_fn() {
        let key_fn: KeyFn = Arc::new(|_| Some(SlotKey::new("from-fn")));
        let (mut parts, ()) = http::Request::get("http://a.com/")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(key_for(&parts, Some(&key_fn)).as_str(), "from-fn");
        parts.extensions.insert(DownloadSlot::new("from-ext"));
        assert_eq!(key_for(&parts, Some(&key_fn)).as_str(), "from-ext");
        let none_fn: KeyFn = Arc::new(|_| None);
        parts.extensions.clear();
        assert_eq!(key_for(&parts, Some(&none_fn)).as_str(), "http://a.com");
    }
}
