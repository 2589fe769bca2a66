//! Parsers for the server signals the layer obeys: `Retry-After` and the
//! IETF `RateLimit` / `RateLimit-Policy` fields.
//!
//! They are pure functions: malformed input is an [`Err`] with a reason
//! (the layer logs it as a `tracing` warning and ignores the field), never a
//! panic.

use std::fmt;
use std::time::{Duration, SystemTime};

use http::header::{HeaderMap, HeaderName, HeaderValue, DATE, RETRY_AFTER};

use crate::time::Secs;

/// Why a header was ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderError {
    header: &'static str,
    reason: String,
}

impl HeaderError {
    fn new(header: &'static str, reason: impl Into<String>) -> Self {
        HeaderError {
            header,
            reason: reason.into(),
        }
    }

    /// The header's name.
    #[must_use]
    pub fn header(&self) -> &'static str {
        self.header
    }

    /// What was wrong with it.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed {}: {}", self.header, self.reason)
    }
}

impl std::error::Error for HeaderError {}

/// How long a `Retry-After` value asks the client to wait (RFC 9110 §10.2.3).
///
/// The value is either delay-seconds (digits only) or an HTTP-date in any of
/// the three formats of RFC 9110 §5.6.7 (IMF-fixdate, RFC 850, asctime). A
/// date is measured against the response's `Date` field when it has a valid
/// one (so the two clocks' skew does not matter), else against `now`. A date
/// in the past means no wait.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use tower_autothrottle::headers::retry_after;
///
/// let now = SystemTime::UNIX_EPOCH;
/// let wait = retry_after(&HeaderValue::from_static("120"), None, now).unwrap();
/// assert_eq!(wait, Duration::from_secs(120));
///
/// let date = HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT");
/// let later = HeaderValue::from_static("Sunday, 06-Nov-94 08:50:07 GMT");
/// assert_eq!(retry_after(&later, Some(&date), now).unwrap(), Duration::from_secs(30));
/// assert!(retry_after(&HeaderValue::from_static("soon"), None, now).is_err());
/// ```
pub fn retry_after(
    value: &HeaderValue,
    date: Option<&HeaderValue>,
    now: SystemTime,
) -> Result<Duration, HeaderError> {
    const NAME: &str = "Retry-After";
    let text = value
        .to_str()
        .map_err(|_| HeaderError::new(NAME, "not visible ASCII"))?
        .trim();
    if text.is_empty() {
        return Err(HeaderError::new(NAME, "empty"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: seconds. Huge values saturate; the caller caps them.
        let secs = text.parse::<u64>().unwrap_or(u64::MAX);
        return Ok(Duration::from_secs(secs));
    }
    let target = httpdate::parse_http_date(text).map_err(|_| {
        HeaderError::new(NAME, format!("neither seconds nor an HTTP-date: {text:?}"))
    })?;
    let reference = date
        .and_then(|d| d.to_str().ok())
        .and_then(|d| httpdate::parse_http_date(d.trim()).ok())
        .unwrap_or(now);
    Ok(target.duration_since(reference).unwrap_or(Duration::ZERO))
}

/// What the rate-limit fields of a response allow.
#[derive(Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum RateLimit {
    /// The quota is spent: send nothing more until the window resets.
    Exhausted {
        /// Time until the quota resets.
        reset: Duration,
    },
    /// Send at most one request every `spacing` to stay within the quota.
    Pace {
        /// The minimum time between two requests.
        spacing: Duration,
        /// How long this pacing holds (until the quota window resets).
        valid_for: Duration,
    },
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RateLimit::Exhausted { reset } => f
                .debug_struct("Exhausted")
                .field("reset", &Secs::from(reset))
                .finish(),
            RateLimit::Pace { spacing, valid_for } => f
                .debug_struct("Pace")
                .field("spacing", &Secs::from(spacing))
                .field("valid_for", &Secs::from(valid_for))
                .finish(),
        }
    }
}

/// Whether a field of `headers` is named `ratelimit…`, as every field
/// [`rate_limit`] reads is: without one, it finds nothing.
pub(crate) fn names_rate_limit(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| name.as_str().starts_with("ratelimit"))
}

/// Reads the rate-limit fields of a response, if it has any.
///
/// Understood, and combined by taking the most restrictive:
///
/// - `RateLimit: "name";r=R;t=T` (draft-ietf-httpapi-ratelimit-headers,
///   a Structured Field list; several policies may be listed): `R` requests
///   remain for the next `T` seconds, so requests are paced `T / R` apart,
///   or held for `T` seconds when `R` is 0. Without `t`, the window of the
///   policy of the same name in `RateLimit-Policy` is used.
/// - `RateLimit-Policy: "name";q=Q;w=W`: a quota of `Q` per `W` seconds,
///   paced `W / Q` apart.
/// - The earlier drafts' separate `RateLimit-Remaining` and `RateLimit-Reset`
///   (delta seconds), read the same way as `r` and `t`.
///
/// Windows longer than `max_window` are cut to it (the layer logs a warning
/// then). `Ok(None)` means the
/// response has no such fields; an `Err` means a field is present but
/// malformed (the caller ignores it).
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use tower_autothrottle::headers::{rate_limit, RateLimit};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", "\"default\";r=50;t=30".parse().unwrap());
/// let limit = rate_limit(&headers, Duration::from_secs(600)).unwrap();
/// assert_eq!(
///     limit,
///     Some(RateLimit::Pace { spacing: Duration::from_millis(600), valid_for: Duration::from_secs(30) })
/// );
/// ```
pub fn rate_limit(
    headers: &HeaderMap,
    max_window: Duration,
) -> Result<Option<RateLimit>, HeaderError> {
    // Every field read below is named `ratelimit…`: one pass over the names
    // spares the lookups for the many responses that carry none.
    if !names_rate_limit(headers) {
        return Ok(None);
    }
    let policies = match joined(headers, "ratelimit-policy") {
        Some(text) => parse_sf_list("RateLimit-Policy", &text, &["q", "w"])?,
        None => Vec::new(),
    };
    let mut found: Vec<RateLimit> = Vec::new();
    for policy in &policies {
        if let (Some(q), Some(w)) = (policy.params[0], policy.params[1]) {
            if q > 0 {
                let window = secs(w).min(max_window);
                found.push(RateLimit::Pace {
                    spacing: window / u32::try_from(q).unwrap_or(u32::MAX),
                    valid_for: window,
                });
            }
        }
    }
    if let Some(text) = joined(headers, "ratelimit") {
        for item in parse_sf_list("RateLimit", &text, &["r", "t"])? {
            let remaining = item.params[0]
                .ok_or_else(|| HeaderError::new("RateLimit", "an entry has no `r` parameter"))?;
            let reset = item.params[1].or_else(|| {
                policies
                    .iter()
                    .find(|p| p.name == item.name)
                    .and_then(|p| p.params[1])
            });
            if let Some(reset) = reset {
                found.push(pacing(remaining, secs(reset).min(max_window)));
            }
        }
    } else if let (Some(remaining), Some(reset)) = (
        legacy_integer(headers, "ratelimit-remaining")?,
        legacy_integer(headers, "ratelimit-reset")?,
    ) {
        found.push(pacing(remaining, secs(reset).min(max_window)));
    }
    Ok(found.into_iter().reduce(stricter))
}

fn pacing(remaining: u64, reset: Duration) -> RateLimit {
    if remaining == 0 {
        RateLimit::Exhausted { reset }
    } else {
        RateLimit::Pace {
            spacing: reset / u32::try_from(remaining).unwrap_or(u32::MAX),
            valid_for: reset,
        }
    }
}

fn stricter(a: RateLimit, b: RateLimit) -> RateLimit {
    use RateLimit::*;
    match (a, b) {
        (Exhausted { reset: x }, Exhausted { reset: y }) => Exhausted { reset: x.max(y) },
        (e @ Exhausted { .. }, Pace { .. }) | (Pace { .. }, e @ Exhausted { .. }) => e,
        (
            Pace {
                spacing: s1,
                valid_for: v1,
            },
            Pace {
                spacing: s2,
                valid_for: v2,
            },
        ) => {
            if s1 >= s2 {
                Pace {
                    spacing: s1,
                    valid_for: v1,
                }
            } else {
                Pace {
                    spacing: s2,
                    valid_for: v2,
                }
            }
        }
    }
}

fn secs(value: u64) -> Duration {
    Duration::from_secs(value)
}

/// All values of a field, joined as one list (RFC 9110 §5.3).
fn joined(headers: &HeaderMap, name: &'static str) -> Option<String> {
    let name = HeaderName::from_static(name);
    let mut values = headers.get_all(&name).iter().peekable();
    values.peek()?;
    let parts: Vec<String> = values
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    Some(parts.join(", "))
}

fn legacy_integer(headers: &HeaderMap, name: &'static str) -> Result<Option<u64>, HeaderError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let header = if name == "ratelimit-remaining" {
        "RateLimit-Remaining"
    } else {
        "RateLimit-Reset"
    };
    let text = value
        .to_str()
        .map_err(|_| HeaderError::new(header, "not visible ASCII"))?
        .trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HeaderError::new(
            header,
            format!("not a non-negative integer: {text:?}"),
        ));
    }
    Ok(Some(text.parse::<u64>().unwrap_or(u64::MAX)))
}

struct Entry {
    name: String,
    params: [Option<u64>; 2],
}

/// Parses a Structured Field list whose members are items with
/// non-negative integer parameters `wanted` (other parameters are ignored,
/// as the draft asks).
fn parse_sf_list(
    header: &'static str,
    text: &str,
    wanted: &[&str; 2],
) -> Result<Vec<Entry>, HeaderError> {
    let list: sfv::List = sfv::Parser::new(text)
        .parse()
        .map_err(|e| HeaderError::new(header, format!("not a structured field list ({e})")))?;
    let mut out = Vec::with_capacity(list.len());
    for member in list {
        let sfv::ListEntry::Item(item) = member else {
            return Err(HeaderError::new(header, "an entry is an inner list"));
        };
        let name = match &item.bare_item {
            sfv::BareItem::String(s) => s.as_str().to_owned(),
            sfv::BareItem::Token(t) => t.as_str().to_owned(),
            _ => return Err(HeaderError::new(header, "an entry's name is not a string")),
        };
        let mut params = [None, None];
        for (slot, key) in params.iter_mut().zip(wanted) {
            if let Some(value) = item.params.get(*key) {
                let value = value
                    .as_integer()
                    .map(i64::from)
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| {
                        HeaderError::new(header, format!("`{key}` is not a non-negative integer"))
                    })?;
                *slot = Some(value as u64);
            }
        }
        out.push(Entry { name, params });
    }
    Ok(out)
}

/// The `Retry-After` and `Date` fields of a response, if any.
pub(crate) fn retry_after_of(headers: &HeaderMap) -> Option<(&HeaderValue, Option<&HeaderValue>)> {
    headers.get(RETRY_AFTER).map(|v| (v, headers.get(DATE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(600);

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn retry_after_all_date_formats() {
        let date = hv("Sun, 06 Nov 1994 08:49:37 GMT");
        for later in [
            "Sun, 06 Nov 1994 08:51:37 GMT",
            "Sunday, 06-Nov-94 08:51:37 GMT",
            "Sun Nov  6 08:51:37 1994",
        ] {
            let wait = retry_after(&hv(later), Some(&date), SystemTime::UNIX_EPOCH).unwrap();
            assert_eq!(wait, Duration::from_secs(120), "{later}");
        }
    }

    #[test]
    fn retry_after_without_date_uses_now_and_past_is_zero() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let v = hv("Sun, 06 Nov 1994 08:50:00 GMT");
        assert_eq!(retry_after(&v, None, now).unwrap(), Duration::from_secs(23));
        let past = hv("Sun, 06 Nov 1994 08:00:00 GMT");
        assert_eq!(retry_after(&past, None, now).unwrap(), Duration::ZERO);
        // A malformed Date falls back to now.
        assert_eq!(
            retry_after(&v, Some(&hv("yesterday")), now).unwrap(),
            Duration::from_secs(23)
        );
    }

    #[test]
    fn retry_after_seconds_and_garbage() {
        let now = SystemTime::UNIX_EPOCH;
        assert_eq!(
            retry_after(&hv(" 7 "), None, now).unwrap(),
            Duration::from_secs(7)
        );
        assert_eq!(retry_after(&hv("0"), None, now).unwrap(), Duration::ZERO);
        let huge = retry_after(&hv("99999999999999999999999"), None, now).unwrap();
        assert_eq!(huge, Duration::from_secs(u64::MAX));
        for bad in ["-5", "1.5", "", "soon", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            assert!(retry_after(&hv(bad), None, now).is_err(), "{bad:?}");
        }
        let binary = HeaderValue::from_bytes(b"\xff\xfe").unwrap();
        assert!(retry_after(&binary, None, now).is_err());
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, hv(v));
        }
        h
    }

    #[test]
    fn rate_limit_draft_11() {
        let h = headers(&[("ratelimit", "\"burst\";r=10;t=5")]);
        assert_eq!(
            rate_limit(&h, MAX).unwrap(),
            Some(RateLimit::Pace {
                spacing: Duration::from_millis(500),
                valid_for: Duration::from_secs(5)
            })
        );
        let h = headers(&[("ratelimit", "\"burst\";r=0;t=12")]);
        assert_eq!(
            rate_limit(&h, MAX).unwrap(),
            Some(RateLimit::Exhausted {
                reset: Duration::from_secs(12)
            })
        );
    }

    #[test]
    fn rate_limit_takes_the_strictest_of_several_and_policy_windows() {
        let h = headers(&[
            ("ratelimit", "\"burst\";r=50;t=10, \"day\";r=100;t=3600"),
            ("ratelimit-policy", "\"burst\";q=100;w=10"),
        ]);
        assert_eq!(
            rate_limit(&h, Duration::from_secs(86_400)).unwrap(),
            Some(RateLimit::Pace {
                spacing: Duration::from_secs(36),
                valid_for: Duration::from_secs(3600)
            })
        );
        // `t` missing: the policy of the same name gives the window.
        let h = headers(&[
            ("ratelimit", "\"burst\";r=5"),
            ("ratelimit-policy", "\"burst\";q=100;w=10"),
        ]);
        assert_eq!(
            rate_limit(&h, MAX).unwrap(),
            Some(RateLimit::Pace {
                spacing: Duration::from_secs(2),
                valid_for: Duration::from_secs(10)
            })
        );
        // Windows are capped.
        let h = headers(&[("ratelimit", "\"x\";r=0;t=999999999")]);
        assert_eq!(
            rate_limit(&h, MAX).unwrap(),
            Some(RateLimit::Exhausted { reset: MAX })
        );
    }

    #[test]
    fn rate_limit_legacy_fields() {
        let h = headers(&[("ratelimit-remaining", "4"), ("ratelimit-reset", "2")]);
        assert_eq!(
            rate_limit(&h, MAX).unwrap(),
            Some(RateLimit::Pace {
                spacing: Duration::from_millis(500),
                valid_for: Duration::from_secs(2)
            })
        );
    }

    #[test]
    fn rate_limit_malformed_is_an_error_and_absent_is_none() {
        assert_eq!(rate_limit(&HeaderMap::new(), MAX).unwrap(), None);
        for bad in [
            "\"burst\";r=-1;t=5",
            "\"burst\";t=5",
            "\"burst\";r=1.5;t=5",
            "burst;r=1;t=5,,",
            "(\"a\" \"b\");r=1",
            "\"unterminated",
        ] {
            let h = headers(&[("ratelimit", bad)]);
            assert!(rate_limit(&h, MAX).is_err(), "{bad}");
        }
        let h = headers(&[("ratelimit-remaining", "x"), ("ratelimit-reset", "2")]);
        assert!(rate_limit(&h, MAX).is_err());
    }
}
