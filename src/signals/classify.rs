//! Classifying inner errors into [`Outcome`]s.

use std::error::Error;
use std::io::ErrorKind;
use std::sync::Arc;

use crate::policy::Outcome;

/// A function that classifies an inner service's error.
pub type ErrorClassifier = Arc<dyn Fn(&(dyn Error + 'static)) -> Outcome + Send + Sync>;

/// The default classification of inner errors.
///
/// Walks the error and its [`source`](Error::source) chain: a timeout
/// (tower's `timeout::error::Elapsed`, tokio's `time::error::Elapsed`, or an
/// I/O error of kind `TimedOut`) or a connection refused, reset, aborted or
/// closed mid-response (I/O kinds `ConnectionRefused`, `ConnectionReset`,
/// `ConnectionAborted`, `NotConnected`, `BrokenPipe`, `UnexpectedEof`) is an
/// [`Outcome::Overload`]; anything else is [`Outcome::Ignore`]. Supply your
/// own with [`ConfigBuilder::error_classifier`](crate::ConfigBuilder::error_classifier)
/// for errors this cannot see into.
///
/// ```
/// use tower_autothrottle::{classify_error, policy::Outcome};
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// assert_eq!(classify_error(&refused), Outcome::Overload);
/// let other = std::io::Error::from(std::io::ErrorKind::InvalidData);
/// assert_eq!(classify_error(&other), Outcome::Ignore);
/// ```
pub fn classify_error(error: &(dyn Error + 'static)) -> Outcome {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<tower::timeout::error::Elapsed>() || e.is::<tokio::time::error::Elapsed>() {
            return Outcome::Overload;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ErrorKind::TimedOut
                    | ErrorKind::ConnectionRefused
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::NotConnected
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            ) {
                return Outcome::Overload;
            }
        }
        current = e.source();
    }
    Outcome::Ignore
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error")
        }
    }
    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn walks_the_source_chain() {
        let e = Wrapper(std::io::Error::from(ErrorKind::ConnectionReset));
        assert_eq!(classify_error(&e), Outcome::Overload);
        let boxed: crate::error::BoxError = Box::new(tower::timeout::error::Elapsed::new());
        assert_eq!(classify_error(&*boxed), Outcome::Overload);
        let e = Wrapper(std::io::Error::other("nope"));
        assert_eq!(classify_error(&e), Outcome::Ignore);
    }
}
