//! The one normalization of every key, whether a request's URI or a string
//! a user passes names it: `scheme://host[:port]` for what has a scheme,
//! `host[:port]` for what looks like a host, the text itself for any other
//! name.
//!
//! A host is lower-cased and loses its trailing dots; an internationalized
//! name is written in the ASCII form a URI carries (punycode, RFC 3492, after
//! Unicode lower-casing; the rest of IDNA's mapping is not applied, so give
//! names in NFC); an IPv6 literal is written in its canonical form
//! (`[2001:db8::1]`). A scheme is lower-cased; a port that is the scheme's
//! default is left out; user information, a path, a query and a fragment
//! are dropped.

use std::net::Ipv6Addr;

/// What text cannot be a key.
pub(crate) type Invalid = &'static str;

/// Normalizes a key given as text. With `pattern`, `*` may stand in the
/// host and the port (a pattern of [`SlotSettings`](crate::SlotSettings)).
pub(crate) fn normalize(text: &str, pattern: bool) -> Result<String, Invalid> {
    let text = text.trim();
    if text.is_empty() {
        return Err("a slot key must not be empty");
    }
    if let Some((scheme, rest)) = split_scheme(text) {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = split_host_port(authority).ok_or("not a host and port")?;
        if host.is_empty() {
            return Err("a URI key needs a host");
        }
        let scheme = scheme.to_ascii_lowercase();
        let mut key = String::with_capacity(scheme.len() + 3 + authority.len());
        key.push_str(&scheme);
        key.push_str("://");
        push_host(&mut key, host, pattern)?;
        push_port(&mut key, port, default_port(&scheme), pattern)?;
        return Ok(key);
    }
    if let Ok(addr) = text.parse::<Ipv6Addr>() {
        // A bare IPv6 address: bracketed, as a URI and `SlotKey::ip` write it.
        return Ok(format!("[{addr}]"));
    }
    match split_host_port(text) {
        Some((host, port))
            if looks_like_host(host, pattern)
                && port.is_none_or(|p| {
                    p.bytes()
                        .all(|b| b.is_ascii_digit() || (pattern && b == b'*'))
                }) =>
        {
            let mut key = String::with_capacity(text.len());
            push_host(&mut key, host, pattern)?;
            push_port(&mut key, port, None, pattern)?;
            Ok(key)
        }
        // Any other name (a `DownloadSlot` name, a key function's key):
        // kept as it is.
        _ => Ok(text.to_owned()),
    }
}

/// `scheme` and what follows `scheme://`, if the text starts so.
fn split_scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut bytes = scheme.bytes();
    let first = bytes.next()?;
    let valid = first.is_ascii_alphabetic()
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    valid.then_some((scheme, rest))
}

/// `host` and the text after its `:`, if any; `None` for a malformed
/// bracketed literal.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let close = bracketed.find(']')?;
        let host = &authority[..close + 2];
        return match &authority[close + 2..] {
            "" => Some((host, None)),
            rest => Some((host, Some(rest.strip_prefix(':')?))),
        };
    }
    Some(match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

/// Whether text without a scheme names a host (else it is a plain name).
fn looks_like_host(host: &str, pattern: bool) -> bool {
    if host.starts_with('[') {
        return true;
    }
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '.' | '_') || (pattern && c == '*'))
}

/// Writes a host, normalized (see the [module documentation](self)).
pub(crate) fn push_host(out: &mut String, host: &str, pattern: bool) -> Result<(), Invalid> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        match inner.parse::<Ipv6Addr>() {
            Ok(addr) => {
                use std::fmt::Write;
                let _ = write!(out, "[{addr}]");
            }
            // A zone or a future literal form: lower-cased only.
            Err(_) => {
                out.push('[');
                out.extend(inner.chars().map(|c| c.to_ascii_lowercase()));
                out.push(']');
            }
        }
        return Ok(());
    }
    // Trailing dots go (`example.com.` is `example.com`), all of them, so
    // that normalizing twice changes nothing; a host of dots alone stays.
    let trimmed = host.trim_end_matches('.');
    let host = if trimmed.is_empty() { host } else { trimmed };
    if host.is_ascii() {
        out.extend(host.chars().map(|c| c.to_ascii_lowercase()));
        return Ok(());
    }
    for (i, label) in host.split('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        let label = label.to_lowercase();
        if label.is_ascii() {
            out.push_str(&label);
        } else if pattern && label.contains('*') {
            return Err("a non-ASCII label of a pattern cannot hold `*`");
        } else {
            out.push_str("xn--");
            punycode(&label, out).ok_or("a host label too long to encode")?;
        }
    }
    Ok(())
}

/// Writes `:port`, unless absent, empty or `default`.
fn push_port(
    out: &mut String,
    port: Option<&str>,
    default: Option<u16>,
    pattern: bool,
) -> Result<(), Invalid> {
    let Some(port) = port.filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    if pattern && port.contains('*') {
        out.push(':');
        out.push_str(port);
        return Ok(());
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the port is not a number");
    }
    let port = port
        .bytes()
        .try_fold(0u16, |n, b| {
            n.checked_mul(10)?.checked_add(u16::from(b - b'0'))
        })
        .ok_or("the port is above 65535")?;
    if default != Some(port) {
        use std::fmt::Write;
        let _ = write!(out, ":{port}");
    }
    Ok(())
}

/// The default port of a scheme, if it has one.
pub(crate) fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// Encodes a label in punycode (RFC 3492, section 6.3), without the `xn--`
/// prefix; `None` if its numbers overflow (a label far beyond DNS's 63).
fn punycode(label: &str, out: &mut String) -> Option<()> {
    const BASE: u32 = 36;
    const T_MIN: u32 = 1;
    const T_MAX: u32 = 26;
    const SKEW: u32 = 38;
    const DAMP: u32 = 700;

    fn adapt(delta: u32, points: u32, first: bool) -> u32 {
        let mut delta = if first { delta / DAMP } else { delta / 2 };
        delta += delta / points;
        let mut k = 0;
        while delta > ((BASE - T_MIN) * T_MAX) / 2 {
            delta /= BASE - T_MIN;
            k += BASE;
        }
        k + (BASE - T_MIN + 1) * delta / (delta + SKEW)
    }
    fn digit(d: u32) -> char {
        // 0..26 are a..z, 26..36 are 0..9.
        char::from(if d < 26 {
            b'a' + d as u8
        } else {
            b'0' + (d - 26) as u8
        })
    }

    let input: Vec<u32> = label.chars().map(u32::from).collect();
    let basic = label.chars().filter(char::is_ascii).count() as u32;
    out.extend(label.chars().filter(char::is_ascii));
    if basic > 0 {
        out.push('-');
    }
    let (mut n, mut delta, mut bias, mut handled) = (128u32, 0u32, 72u32, basic);
    let total = u32::try_from(input.len()).ok()?;
    while handled < total {
        let m = input.iter().copied().filter(|&c| c >= n).min()?;
        delta = delta.checked_add((m - n).checked_mul(handled + 1)?)?;
        n = m;
        for &c in &input {
            if c < n {
                delta = delta.checked_add(1)?;
            }
            if c == n {
                let mut q = delta;
                let mut k = BASE;
                loop {
                    let t = if k <= bias {
                        T_MIN
                    } else if k >= bias + T_MAX {
                        T_MAX
                    } else {
                        k - bias
                    };
                    if q < t {
                        break;
                    }
                    out.push(digit(t + (q - t) % (BASE - t)));
                    q = (q - t) / (BASE - t);
                    k += BASE;
                }
                out.push(digit(q));
                bias = adapt(delta, handled + 1, handled == basic);
                delta = 0;
                handled += 1;
            }
        }
        delta = delta.checked_add(1)?;
        n = n.checked_add(1)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> String {
        normalize(text, false).unwrap()
    }

    #[test]
    fn uris_normalize_as_requests_are_keyed() {
        for (text, want) in [
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
            ("https://Example.com:443/", "https://example.com"),
            (
                "HTTPS://user:pw@EXAMPLE.COM.:0443/a?b#c",
                "https://example.com",
            ),
            ("http://example.com:8443", "http://example.com:8443"),
            ("http://example.com:", "http://example.com"),
            ("http://[2001:DB8:0::1]:80/", "http://[2001:db8::1]"),
            ("ws://a.test:80", "ws://a.test"),
            ("  http://a.test  ", "http://a.test"),
        ] {
            assert_eq!(key(text), want, "{text:?}");
        }
    }

    #[test]
    fn hosts_and_names() {
        assert_eq!(key("WWW.Example.COM."), "www.example.com");
        assert_eq!(key("a.test.."), "a.test");
        assert_eq!(key("ä.."), "xn--4ca");
        assert_eq!(key("example.com:0080"), "example.com:80");
        assert_eq!(key("[::1]:8080"), "[::1]:8080");
        assert_eq!(key("2001:DB8:0::1"), "[2001:db8::1]");
        assert_eq!(key("BÜCHER.de"), "xn--bcher-kva.de");
        assert_eq!(key("München"), "xn--mnchen-3ya");
        assert_eq!(key("中文.example"), "xn--fiq228c.example");
        // A name that is no host is kept as it is.
        assert_eq!(key("api budget"), "api budget");
        assert_eq!(key("my/slot"), "my/slot");
    }

    #[test]
    fn bad_keys() {
        for text in [
            "",
            "   ",
            "http://",
            "http:///path",
            "http://a.test:port",
            "http://a.test:99999",
            "http://[::1",
        ] {
            assert!(normalize(text, false).is_err(), "{text:?}");
        }
    }

    #[test]
    fn patterns() {
        let pat = |t| normalize(t, true).unwrap();
        assert_eq!(pat("HTTPS://*.Example.COM/"), "https://*.example.com");
        assert_eq!(pat("https://*.example.com:*"), "https://*.example.com:*");
        assert_eq!(pat("*.Example.com"), "*.example.com");
        assert_eq!(pat("*example.com*"), "*example.com*");
        assert_eq!(pat("*://example.com"), "*://example.com");
    }

    #[test]
    fn normalizing_twice_changes_nothing() {
        for text in [
            "https://Example.com:443/",
            "BÜCHER.de",
            "[::1]:80",
            "name with spaces",
        ] {
            let once = key(text);
            assert_eq!(key(&once), once);
        }
    }
}
