//! How a request's slot is chosen: the [`KeyStrategy`], the key function,
//! and the precedence between them and the request's own `DownloadSlot`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use http::header::HOST;
use http::request::Parts;
use http::uri::Authority;

use super::{
    ip_literal, normalize_host, write_authority_key, write_normalized_authority_key,
    write_plain_authority_key, SlotKey,
};

/// How a request's slot is chosen when neither a [`DownloadSlot`](crate::DownloadSlot) extension
/// nor the key function decides; see the [module documentation](super).
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

/// A function that chooses the slot for a request from its head.
///
/// Returning `None` falls back to the default keying by authority.
pub type KeyFn = Arc<dyn Fn(&Parts) -> Option<SlotKey> + Send + Sync>;

/// What a request's head says about its slot.
#[derive(Debug)]
enum KeyChoice {
    /// The key is known.
    Ready(SlotKey),
    /// The key is the text written into the buffer given to [`key_in`].
    InBuffer,
    /// The key is the address `host` resolves to, or `fallback` if it does
    /// not resolve.
    Resolve { host: String, fallback: SlotKey },
}

/// The slot key of a request, as [`choose`] hands it on.
#[derive(Debug)]
pub(crate) enum Choice<'a> {
    /// The key's text, borrowed from a buffer the thread reuses (the
    /// common case: finding an existing slot then allocates nothing).
    Text(&'a str),
    /// The key.
    Key(SlotKey),
    /// The key is the address `host` resolves to, or `fallback` if it does
    /// not resolve.
    Resolve { host: String, fallback: SlotKey },
}

/// Chooses the slot key of a request head, following the precedence in the
/// [module documentation](super): `download_slot` is the request's
/// [`DownloadSlot`](crate::DownloadSlot) extension, if it has one. The
/// choice goes to `then`.
pub(crate) fn choose<R>(
    download_slot: Option<&SlotKey>,
    parts: &Parts,
    key_fn: Option<&KeyFn>,
    strategy: KeyStrategy,
    then: impl FnOnce(Choice<'_>) -> R,
) -> R {
    thread_local! {
        static BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
    }
    let mut then = Some(then);
    let chosen = BUFFER.with(|buffer| {
        // A policy or key function that sent a request from in here would
        // find the buffer taken: it then gets a key of its own.
        let Ok(mut buffer) = buffer.try_borrow_mut() else {
            return Err(key_for(download_slot, parts, key_fn, strategy));
        };
        buffer.clear();
        match key_in(download_slot, parts, key_fn, strategy, &mut buffer) {
            KeyChoice::InBuffer => {
                let then = then.take().expect("called once");
                Ok(then(Choice::Text(&buffer)))
            }
            other => Err(other),
        }
    });
    let then = match chosen {
        Ok(result) => return result,
        Err(choice) => (then.take().expect("not called yet"), choice),
    };
    match then {
        (then, KeyChoice::Ready(key)) => then(Choice::Key(key)),
        // `key_for` never leaves the key in a buffer.
        (then, KeyChoice::InBuffer) => then(Choice::Key(SlotKey::fallback())),
        (then, KeyChoice::Resolve { host, fallback }) => then(Choice::Resolve { host, fallback }),
    }
}

/// Chooses the slot key of a request head, allocating it.
fn key_for(
    download_slot: Option<&SlotKey>,
    parts: &Parts,
    key_fn: Option<&KeyFn>,
    strategy: KeyStrategy,
) -> KeyChoice {
    let mut buffer = String::new();
    match key_in(download_slot, parts, key_fn, strategy, &mut buffer) {
        KeyChoice::InBuffer => KeyChoice::Ready(SlotKey::verbatim(buffer)),
        other => other,
    }
}

/// [`key_for`], writing the default authority key (the common case) into
/// `buffer` instead of allocating it, so that finding an existing slot
/// allocates nothing.
fn key_in(
    download_slot: Option<&SlotKey>,
    parts: &Parts,
    key_fn: Option<&KeyFn>,
    strategy: KeyStrategy,
    buffer: &mut String,
) -> KeyChoice {
    if let Some(key) = download_slot {
        return KeyChoice::Ready(key.clone());
    }
    if let Some(key) = key_fn.and_then(|f| f(parts)) {
        return KeyChoice::Ready(key);
    }
    if strategy == KeyStrategy::Authority {
        // The common case: a URI's authority that is its own key (then it
        // is also the authority `request_authority` would choose), checked
        // and written in one pass.
        if let Some(authority) = parts.uri.authority() {
            if write_plain_authority_key(parts.uri.scheme(), authority.as_str(), buffer) {
                return KeyChoice::InBuffer;
            }
        }
    }
    let Some(authority) = request_authority(parts) else {
        return KeyChoice::Ready(SlotKey::fallback());
    };
    KeyChoice::Ready(match strategy {
        KeyStrategy::Authority => {
            match &authority {
                // The URI's own: the one pass above found it is not its
                // own key, so only the long way is left.
                Cow::Borrowed(uri) => {
                    write_normalized_authority_key(parts.uri.scheme(), uri, buffer)
                }
                // The `Host` header's: either way may fit.
                Cow::Owned(host) => write_authority_key(parts.uri.scheme(), host, buffer),
            }
            return KeyChoice::InBuffer;
        }
        KeyStrategy::Host => SlotKey::host(authority.host()),
        KeyStrategy::RegistrableDomain => SlotKey::registrable_domain(authority.host()),
        KeyStrategy::ResolvedIp => {
            let host = normalize_host(authority.host());
            match ip_literal(&host) {
                Some(addr) => SlotKey::ip(addr),
                None => {
                    let fallback = SlotKey::verbatim(host.clone());
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
    match key_for(None, parts, None, KeyStrategy::Authority) {
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
        let (parts, ()) = http::Request::get("http://a.com/")
            .body(())
            .unwrap()
            .into_parts();
        let strategy = KeyStrategy::ResolvedIp;
        assert_eq!(
            ready(key_for(None, &parts, Some(&key_fn), strategy)),
            "from-fn"
        );
        let ext = SlotKey::new("from-ext");
        assert_eq!(
            ready(key_for(Some(&ext), &parts, Some(&key_fn), strategy)),
            "from-ext"
        );
        let none_fn: KeyFn = Arc::new(|_| None);
        let auth = KeyStrategy::Authority;
        assert_eq!(
            ready(key_for(None, &parts, Some(&none_fn), auth)),
            "http://a.com"
        );
    }

    fn with(uri: &str, strategy: KeyStrategy) -> KeyChoice {
        let (parts, ()) = http::Request::get(uri).body(()).unwrap().into_parts();
        key_for(None, &parts, None, strategy)
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
