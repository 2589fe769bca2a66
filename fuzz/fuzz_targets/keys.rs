//! Key normalization on arbitrary hosts and authorities: never a panic,
//! always lower case.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tower_autothrottle::SlotKey;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let host = SlotKey::host(text);
    assert_eq!(host.as_str(), host.as_str().to_ascii_lowercase());
    let _ = SlotKey::registrable_domain(text);
    if let Ok(authority) = text.parse::<http::uri::Authority>() {
        let _ = SlotKey::from_authority(None, &authority);
        let _ = SlotKey::from_authority(Some(&http::uri::Scheme::HTTPS), &authority);
    }
});
