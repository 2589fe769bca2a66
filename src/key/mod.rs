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

mod normalize;
mod resolve;
mod strategy;

pub(crate) use resolve::DnsCache;
pub use resolve::{BoxFuture, Resolve, SystemResolver};
pub(crate) use strategy::{choose, Choice};
pub use strategy::{KeyFn, KeyStrategy};

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use http::uri::{Authority, Scheme, Uri};

use crate::error::ConfigError;
pub(crate) use normalize::normalize as normalize_pattern;
use normalize::{default_port, normalize, push_host};

/// The name of a slot: requests with equal keys share one delay, one
/// concurrency limit and one FIFO queue.
///
/// Every key is normalized the same way, whether it comes from a request or
/// from text a user passes ([`SlotKey::new`], [`SlotKey::parse`], `From<&str>`,
/// and every method that takes a key or a pattern):
///
/// - text with a scheme is a URI: `scheme://host[:port]`, the scheme and the
///   host lower-cased, a trailing dot, user information, a path, a query and
///   a default port dropped (`HTTPS://Example.com:443/a/` is
///   `https://example.com`);
/// - text that looks like a host (`Example.COM.`, `bücher.de:8080`,
///   `[2001:DB8::1]`) is a host: lower-cased, without a trailing dot, an
///   internationalized name in punycode (`xn--bcher-kva.de`), an IPv6
///   literal in its canonical form, a port kept;
/// - any other text (`api budget`) is a name, kept as it is.
///
/// ```
/// use tower_autothrottle::SlotKey;
///
/// assert_eq!(SlotKey::new("https://Example.com:443/").as_str(), "https://example.com");
/// assert_eq!(SlotKey::new("BÜCHER.de").as_str(), "xn--bcher-kva.de");
/// assert!(SlotKey::parse("http://").is_err());
/// ```
///
/// Cloning is cheap (a reference count).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotKey(Arc<str>);

impl SlotKey {
    /// The key named by `text`, normalized (see [`SlotKey`]). Text that
    /// cannot be a key (empty, or a URI without a valid host and port) is
    /// kept as it is; [`SlotKey::parse`] says why instead.
    pub fn new(text: impl AsRef<str>) -> Self {
        let text = text.as_ref();
        match normalize(text, false) {
            Ok(key) => SlotKey(key.into()),
            Err(_) => SlotKey(text.into()),
        }
    }

    /// The key named by `text`, normalized (see [`SlotKey`]).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for `key` when the text cannot be a key: empty, or
    /// a URI without a valid host and port.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        normalize(text, false)
            .map(|key| SlotKey(key.into()))
            .map_err(|reason| ConfigError::new("key", format!("{text:?}: {reason}")))
    }

    /// The key the default keying gives a request to `uri`
    /// ([`KeyStrategy::Authority`]): `None` when the URI has no authority.
    ///
    /// ```
    /// use tower_autothrottle::SlotKey;
    ///
    /// let uri: http::Uri = "https://Example.com:443/robots.txt".parse().unwrap();
    /// assert_eq!(SlotKey::from_uri(&uri).unwrap().as_str(), "https://example.com");
    /// ```
    #[must_use]
    pub fn from_uri(uri: &Uri) -> Option<Self> {
        Some(SlotKey::from_authority(uri.scheme(), uri.authority()?))
    }

    /// A key already in normal form.
    pub(crate) fn verbatim(text: impl Into<Arc<str>>) -> Self {
        SlotKey(text.into())
    }

    /// The slot used for requests that carry neither an authority in their
    /// URI nor a usable `Host` header.
    #[must_use]
    pub fn fallback() -> Self {
        SlotKey::verbatim(FALLBACK)
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
    if !write_plain_authority_key(scheme, authority.as_str(), key) {
        write_normalized_authority_key(scheme, authority, key);
    }
}

/// [`write_authority_key`] the long way, normalizing every part (for an
/// authority already found not to be its own key).
pub(crate) fn write_normalized_authority_key(
    scheme: Option<&Scheme>,
    authority: &Authority,
    key: &mut String,
) {
    let scheme = scheme.map(Scheme::as_str).unwrap_or("http");
    let scheme = scheme.to_ascii_lowercase();
    key.reserve(scheme.len() + 3 + authority.as_str().len());
    key.push_str(&scheme);
    key.push_str("://");
    if push_host(key, authority.host(), false).is_err() {
        // Not reached: a URI's host is ASCII.
        key.push_str(&authority.host().to_ascii_lowercase());
    }
    if let Some(port) = authority
        .port_u16()
        .filter(|&p| default_port(&scheme) != Some(p))
    {
        use std::fmt::Write;
        let _ = write!(key, ":{port}");
    }
}

/// The common case of [`write_authority_key`], with nothing to normalize:
/// when `authority` (a URI's authority, as text) is a lower-case name or
/// IPv4 address without a trailing dot, maybe with a port that is not the
/// scheme's default and has no leading zero, and the scheme is lower case,
/// writes `scheme://authority` into `key` and returns `true`; otherwise
/// writes nothing and returns `false`. One pass over the bytes, a table
/// lookup each: such an authority has no user information and a host, so
/// it is also the authority a request is keyed by (see `strategy`).
pub(crate) fn write_plain_authority_key(
    scheme: Option<&Scheme>,
    authority: &str,
    key: &mut String,
) -> bool {
    let scheme = scheme.map(Scheme::as_str).unwrap_or("http");
    if !plain_authority(scheme, authority) {
        return false;
    }
    key.reserve(scheme.len() + 3 + authority.len());
    key.push_str(scheme);
    key.push_str("://");
    key.push_str(authority);
    true
}

/// Bytes that a normalized host keeps as they are: lower-case letters,
/// digits, `.` and `-`.
const PLAIN_HOST_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-';
        b += 1;
    }
    table
};

/// Whether `authority` under `scheme` is its own normalized key (see
/// [`write_plain_authority_key`]).
fn plain_authority(scheme: &str, authority: &str) -> bool {
    if scheme.bytes().any(|b| b.is_ascii_uppercase()) {
        return false;
    }
    let bytes = authority.as_bytes();
    // The host is the longest run of plain bytes; what follows must be
    // nothing, or a port.
    let host = bytes
        .iter()
        .position(|&b| !PLAIN_HOST_BYTE[usize::from(b)])
        .unwrap_or(bytes.len());
    if host == 0 || bytes[host - 1] == b'.' {
        return false;
    }
    match &bytes[host..] {
        [] => true,
        [b':', port @ ..] => {
            !port.is_empty()
                && port[0] != b'0'
                && port.len() <= 5
                && port.iter().all(u8::is_ascii_digit)
                && u16::try_from(port.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')))
                    .is_ok_and(|p| default_port(scheme) != Some(p))
        }
        _ => false,
    }
}

const FALLBACK: &str = "default";

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

/// Normalizes, as [`SlotKey::new`].
impl From<&str> for SlotKey {
    fn from(s: &str) -> Self {
        SlotKey::new(s)
    }
}

/// Normalizes, as [`SlotKey::new`].
impl From<String> for SlotKey {
    fn from(s: String) -> Self {
        SlotKey::new(s)
    }
}

/// Parses, as [`SlotKey::parse`].
impl FromStr for SlotKey {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SlotKey::parse(s)
    }
}

impl SlotKey {
    /// The key of a host alone: lower-cased, without a trailing dot, an
    /// internationalized name in punycode (see [`SlotKey`]).
    ///
    /// ```
    /// use tower_autothrottle::SlotKey;
    /// assert_eq!(SlotKey::host("WWW.Example.COM.").as_str(), "www.example.com");
    /// assert_eq!(SlotKey::host("BÜCHER.de").as_str(), "xn--bcher-kva.de");
    /// ```
    #[must_use]
    pub fn host(host: &str) -> Self {
        SlotKey::verbatim(normalize_host(host))
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
            return SlotKey::verbatim(host);
        }
        match psl::domain_str(&host) {
            Some(domain) if domain.contains('.') => SlotKey::verbatim(domain),
            _ => SlotKey::verbatim(host),
        }
    }

    /// The key of an address: `93.184.216.34`, or `[2001:db8::1]`.
    #[must_use]
    pub fn ip(addr: std::net::IpAddr) -> Self {
        match addr {
            std::net::IpAddr::V4(v4) => SlotKey::verbatim(v4.to_string()),
            std::net::IpAddr::V6(v6) => SlotKey::verbatim(format!("[{v6}]")),
        }
    }
}

/// A host, normalized (see [`SlotKey`]).
pub(crate) fn normalize_host(host: &str) -> String {
    let mut out = String::with_capacity(host.len());
    if push_host(&mut out, host, false).is_err() {
        // A label too long to encode: lower-cased only.
        out = host.to_lowercase();
    }
    out
}

/// The address of an IP-literal host (`10.0.0.1`, `[::1]`), if it is one.
pub(crate) fn ip_literal(host: &str) -> Option<std::net::IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of writing a key, and whether the one-pass way took it.
    fn both(scheme: &Scheme, authority: &Authority) -> (Option<String>, String) {
        let mut plain = String::new();
        let took = write_plain_authority_key(Some(scheme), authority.as_str(), &mut plain);
        assert!(took || plain.is_empty(), "wrote {plain:?} and declined");
        let mut long = String::new();
        write_normalized_authority_key(Some(scheme), authority, &mut long);
        (took.then_some(plain), long)
    }

    #[test]
    fn the_one_pass_key_is_the_normalized_key_whenever_it_is_taken() {
        // Authorities drawn from the bytes that matter to normalization
        // (case, dots, ports, zeros, user information, brackets), seeded;
        // every one the one-pass check takes must come out as the long
        // way writes it.
        const BYTES: &[u8] = b"aZz09.-:@[]_%8";
        let schemes: Vec<Scheme> = ["http", "https", "ws", "HTTP", "ftp"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let mut state = 7u64;
        let (mut taken, mut parsed) = (0, 0);
        for _ in 0..200_000 {
            let len = 1 + (crate::rng::next_unit(&mut state) * 12.0) as usize;
            let text: String = (0..len)
                .map(|_| {
                    BYTES[(crate::rng::next_unit(&mut state) * BYTES.len() as f64) as usize] as char
                })
                .collect();
            let Ok(authority) = text.parse::<Authority>() else {
                continue;
            };
            parsed += 1;
            let scheme = &schemes[(crate::rng::next_unit(&mut state) * 5.0) as usize];
            let (plain, long) = both(scheme, &authority);
            if let Some(plain) = plain {
                taken += 1;
                assert_eq!(plain, long, "{scheme}://{text}");
            }
        }
        // (The draw reaches both ways.)
        assert!(
            taken > 1_000 && parsed - taken > 1_000,
            "{taken} of {parsed}"
        );
        // And the cases users send, each its own key or not.
        for (scheme, text, took) in [
            ("http", "example.com", true),
            ("https", "host-12.example:8443", true),
            ("http", "10.0.0.1:8080", true),
            ("http", "example.com:80", false),
            ("https", "example.com:443", false),
            ("http", "example.com:0080", false),
            ("http", "example.com:65536", false),
            ("http", "example.com.", false),
            ("http", "Example.com", false),
            ("HTTP", "example.com", false),
            ("http", "user@example.com", false),
            ("http", "[::1]:8080", false),
            ("http", "example.com:", false),
        ] {
            let (plain, long) = both(&scheme.parse().unwrap(), &text.parse().unwrap());
            assert_eq!(plain.is_some(), took, "{scheme}://{text}");
            if let Some(plain) = plain {
                assert_eq!(plain, long);
            }
        }
    }
}
