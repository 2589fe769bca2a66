//! Slot keys: which requests share a delay and a concurrency budget.
//!
//! Every request is assigned to exactly one *slot*, named by a [`SlotKey`].
//! The key is chosen, in this order of precedence:
//!
//! 1. a [`DownloadSlot`] extension on the request (Scrapy's `download_slot`
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
//!      one machine share one budget; see [`Resolve`](crate::Resolve);
//! 4. the fallback slot [`SlotKey::fallback`], shared by every request that
//!    names no host at all.
//!
//! Hosts are always lower-cased and lose a trailing dot (`Example.COM.` is
//! `example.com`); IPv6 literals keep their brackets (`[::1]`); an
//! internationalized name is keyed in the ASCII (punycode) form a URI
//! carries. Key selection never fails and never panics: a failed resolution
//! falls back to the host key.

use std::borrow::{Borrow, Cow};
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
        let mut key = String::new();
        write_authority_key(scheme, authority, &mut key);
        SlotKey(key.into())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Writes the normalized key of [`SlotKey::from_authority`] into `key`.
fn write_authority_key(scheme: Option<&Scheme>, authority: &Authority, key: &mut String) {
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

/// How a request's slot is chosen when neither a [`DownloadSlot`] extension
/// nor the key function decides; see the [module documentation](self).
///
/// The same request, keyed four ways:
///
/// ```
/// use std::convert::Infallible;
/// use tower::{Layer, ServiceExt};
/// use tower_autothrottle::{AutoThrottleLayer, Config, KeyStrategy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// for (strategy, key) in [
///     (KeyStrategy::Authority, "https://www.example.co.uk:8443"),
///     (KeyStrategy::Host, "www.example.co.uk"),
///     (KeyStrategy::RegistrableDomain, "example.co.uk"),
///     (KeyStrategy::ResolvedIp, "192.0.2.7"),
/// ] {
///     let config = Config::builder()
///         .key_strategy(strategy)
///         // A stand-in resolver; by default the system's is used.
///         .resolver(|_host: String| async { Ok::<_, tower_autothrottle::BoxError>(vec!["192.0.2.7".parse().unwrap()]) })
///         .build()
///         .unwrap();
///     let throttle = AutoThrottleLayer::new(config);
///     let service = throttle.layer(tower::service_fn(|_req: http::Request<()>| async {
///         Ok::<_, Infallible>(http::Response::new(String::new()))
///     }));
///     let request = http::Request::get("https://WWW.Example.co.uk:8443/page").body(()).unwrap();
///     service.oneshot(request).await.unwrap();
///     assert_eq!(throttle.slots()[0].key.as_str(), key);
/// }
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyStrategy {
    /// `scheme://host[:port]`, the port left out when it is the default.
    #[default]
    Authority,
    /// The host alone, whatever the scheme and port.
    Host,
    /// The registrable domain (the Public Suffix List's "eTLD+1").
    RegistrableDomain,
    /// The first address the host resolves to.
    ResolvedIp,
}

impl SlotKey {
    /// The key of a host alone: lower-cased, without a trailing dot.
    ///
    /// ```
    /// use tower_autothrottle::SlotKey;
    /// assert_eq!(SlotKey::host("WWW.Example.COM.").as_str(), "www.example.com");
    /// ```
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

/// A function that chooses the slot for a request from its head.
///
/// Returning `None` falls back to the default keying by authority.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<SlotKey> + Send + Sync>;

/// What a request's head says about its slot.
#[derive(Debug)]
pub(crate) enum KeyChoice {
    /// The key is known.
    Ready(SlotKey),
    /// The key is the text written into the buffer given to [`key_in`].
    InBuffer,
    /// The key is the address `host` resolves to, or `fallback` if it does
    /// not resolve.
    Resolve { host: String, fallback: SlotKey },
}

/// Chooses the slot key of a request head, following the precedence in the
/// [module documentation](self).
pub(crate) fn key_for(parts: &Parts, key_fn: Option<&KeyFn>, strategy: KeyStrategy) -> KeyChoice {
    let mut buffer = String::new();
    match key_in(parts, key_fn, strategy, &mut buffer) {
        KeyChoice::InBuffer => KeyChoice::Ready(SlotKey::new(buffer)),
        other => other,
    }
}

/// [`key_for`], writing the default authority key (the common case) into
/// `buffer` instead of allocating it, so that finding an existing slot
/// allocates nothing.
pub(crate) fn key_in(
    parts: &Parts,
    key_fn: Option<&KeyFn>,
    strategy: KeyStrategy,
    buffer: &mut String,
) -> KeyChoice {
    if let Some(DownloadSlot(key)) = parts.extensions.get::<DownloadSlot>() {
        return KeyChoice::Ready(key.clone());
    }
    if let Some(key) = key_fn.and_then(|f| f(parts)) {
        return KeyChoice::Ready(key);
    }
    let Some(authority) = request_authority(parts) else {
        return KeyChoice::Ready(SlotKey::fallback());
    };
    KeyChoice::Ready(match strategy {
        KeyStrategy::Authority => {
            write_authority_key(parts.uri.scheme(), &authority, buffer);
            return KeyChoice::InBuffer;
        }
        KeyStrategy::Host => SlotKey::host(authority.host()),
        KeyStrategy::RegistrableDomain => SlotKey::registrable_domain(authority.host()),
        KeyStrategy::ResolvedIp => {
            let host = normalize_host(authority.host());
            match ip_literal(&host) {
                Some(addr) => SlotKey::ip(addr),
                None => {
                    let fallback = SlotKey::new(host.clone());
                    return KeyChoice::Resolve { host, fallback };
                }
            }
        }
    })
}

/// The URI's authority, else the `Host` header's.
fn request_authority(parts: &Parts) -> Option<Cow<'_, Authority>> {
    if let Some(authority) = parts.uri.authority() {
        // The host can only be empty with user information or a bare
        // `:port`; `Authority::host` is only worth its cost then.
        let text = authority.as_str();
        let suspicious = text.is_empty() || text.starts_with(':') || text.contains('@');
        if !suspicious || !authority.host().is_empty() {
            return Some(Cow::Borrowed(authority));
        }
    }
    parts
        .headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse::<Authority>().ok())
        .filter(|a| !a.host().is_empty())
        .map(Cow::Owned)
}

/// The default keying: by authority.
#[cfg(test)]
fn authority_key(parts: &Parts) -> SlotKey {
    match key_for(parts, None, KeyStrategy::Authority) {
        KeyChoice::Ready(key) => key,
        KeyChoice::InBuffer => unreachable!("key_for allocates its key"),
        KeyChoice::Resolve { fallback, .. } => fallback,
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

    fn ready(choice: KeyChoice) -> String {
        match choice {
            KeyChoice::Ready(key) => key.as_str().to_owned(),
            other => panic!("not ready: {other:?}"),
        }
    }

    #[test]
    fn precedence_extension_then_key_fn() {
        let key_fn: KeyFn = Arc::new(|_| Some(SlotKey::new("from-fn")));
        let (mut parts, ()) = http::Request::get("http://a.com/")
            .body(())
            .unwrap()
            .into_parts();
        let strategy = KeyStrategy::ResolvedIp;
        assert_eq!(ready(key_for(&parts, Some(&key_fn), strategy)), "from-fn");
        parts.extensions.insert(DownloadSlot::new("from-ext"));
        assert_eq!(ready(key_for(&parts, Some(&key_fn), strategy)), "from-ext");
        let none_fn: KeyFn = Arc::new(|_| None);
        parts.extensions.clear();
        let auth = KeyStrategy::Authority;
        assert_eq!(ready(key_for(&parts, Some(&none_fn), auth)), "http://a.com");
    }

    fn with(uri: &str, strategy: KeyStrategy) -> KeyChoice {
        let (parts, ()) = http::Request::get(uri).body(()).unwrap().into_parts();
        key_for(&parts, None, strategy)
    }

    #[test]
    fn host_strategy_ignores_scheme_and_port() {
        let h = KeyStrategy::Host;
        assert_eq!(ready(with("http://A.com:8080/x", h)), "a.com");
        assert_eq!(ready(with("https://a.com./", h)), "a.com");
        assert_eq!(ready(with("http://[::1]:80/", h)), "[::1]");
        assert_eq!(
            ready(with("http://xn--bcher-kva.example/", h)),
            "xn--bcher-kva.example"
        );
    }

    #[test]
    fn registrable_domain_strategy() {
        let r = KeyStrategy::RegistrableDomain;
        assert_eq!(ready(with("http://a.example.co.uk/", r)), "example.co.uk");
        assert_eq!(
            ready(with("https://B.Example.CO.UK.:8443/", r)),
            "example.co.uk"
        );
        assert_eq!(
            ready(with("http://www.xn--85x722f.xn--55qx5d.cn/", r)),
            "xn--85x722f.xn--55qx5d.cn"
        );
        assert_eq!(ready(with("http://a.b.c.github.io/", r)), "c.github.io");
        assert_eq!(ready(with("http://localhost:3000/", r)), "localhost");
        assert_eq!(ready(with("http://co.uk/", r)), "co.uk");
        assert_eq!(ready(with("http://192.168.0.1/", r)), "192.168.0.1");
        assert_eq!(ready(with("http://[2001:db8::1]/", r)), "[2001:db8::1]");
    }

    #[test]
    fn resolved_ip_strategy_resolves_names_but_not_literals() {
        let ip = KeyStrategy::ResolvedIp;
        assert_eq!(ready(with("http://10.0.0.7:81/", ip)), "10.0.0.7");
        assert_eq!(ready(with("http://[2001:DB8::1]/", ip)), "[2001:db8::1]");
        match with("http://WWW.Example.com./", ip) {
            KeyChoice::Resolve { host, fallback } => {
                assert_eq!(host, "www.example.com");
                assert_eq!(fallback.as_str(), "www.example.com");
            }
            other => panic!("{other:?}"),
        }
        // Without any host: the fallback slot, never a resolution.
        assert_eq!(ready(with("/", ip)), "default");
    }
}
