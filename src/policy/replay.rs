//! Replaying a recorded trace through a policy.

use std::io::{self, BufRead, Write};

use http::StatusCode;

use super::{MakePolicy, Outcome, Sample};
use crate::key::SlotKey;

/// Replays a trace through a fresh policy of one slot.
///
/// Each input line is `LATENCY_SECONDS STATUS [IN_FLIGHT]` (blank lines and
/// lines starting with `#` are skipped); after each, one line
/// `DELAY_SECONDS CONCURRENCY` is written, the delay with 6 decimals. This
/// is what `cargo run --example replay` does with standard input and
/// output.
///
/// `STATUS` is an HTTP status (its [`Outcome`] follows from it), or
/// `timeout` (a request that timed out: an overload) or `error` (another
/// failure, ignored by the policies that classify outcomes). `IN_FLIGHT`,
/// the slot's requests in flight when the response came, matters to the
/// Netflix-style policies; without it the policy's current limit is
/// assumed, as for a client that keeps its slot full.
///
/// A line that does not parse, a latency that is not a finite number, or a
/// status outside 100–999 stops the replay with an [`io::ErrorKind::InvalidData`]
/// error naming the line. The output is flushed after every line, so a
/// replay can be driven interactively.
///
/// ```
/// use tower_autothrottle::policy::{replay, Scrapy2012};
///
/// let mut out = Vec::new();
/// replay(&Scrapy2012::default(), "1.0 200\n0.5 404\n".as_bytes(), &mut out).unwrap();
/// assert_eq!(String::from_utf8(out).unwrap(), "3.000000 1\n3.000000 1\n");
/// ```
pub fn replay<R: BufRead, W: Write>(
    policy: &dyn MakePolicy,
    input: R,
    mut output: W,
) -> io::Result<()> {
    let mut state = policy.make_policy(&SlotKey::new("replay"));
    for (number, line) in input.lines().enumerate() {
        let line = line?;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let sample = parse_line(trimmed, state.throttle().concurrency()).map_err(|reason| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line {}: {reason}: {line:?}", number + 1),
            )
        })?;
        let throttle = state.on_sample(&sample);
        writeln!(
            output,
            "{:.6} {}",
            throttle.delay_secs(),
            throttle.concurrency()
        )?;
        output.flush()?;
    }
    Ok(())
}

fn parse_line(line: &str, limit: usize) -> Result<Sample, &'static str> {
    let mut fields = line.split_whitespace();
    let (Some(latency), Some(status), in_flight, None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err("expected `LATENCY_SECONDS STATUS [IN_FLIGHT]`");
    };
    let latency: f64 = latency.parse().map_err(|_| "the latency is not a number")?;
    if !latency.is_finite() {
        return Err("the latency is not finite");
    }
    let in_flight = match in_flight {
        Some(n) => n
            .parse()
            .map_err(|_| "the in-flight count is not a whole number")?,
        None => limit,
    };
    let sample = match status {
        "timeout" => Sample::error(latency, Outcome::Overload),
        "error" => Sample::error(latency, Outcome::Ignore),
        status => {
            let status = status
                .parse::<u16>()
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .ok_or("the status is not an HTTP status code (100-999), `timeout` or `error`")?;
            Sample::from_secs_f64(latency, status)
        }
    };
    Ok(sample.with_in_flight(in_flight))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Scrapy2012;

    #[test]
    fn bad_lines_name_the_line() {
        for (input, needle) in [
            ("1.0 200\nfast 200\n", "line 2: the latency is not a number"),
            ("1.0\n", "line 1: expected"),
            ("1.0 200 x\n", "not a whole number"),
            ("1.0 200 3 4\n", "line 1: expected"),
            ("nan 200\n", "not finite"),
            ("1.0 42\n", "not an HTTP status"),
            ("1.0 abc\n", "not an HTTP status"),
        ] {
            let err = replay(&Scrapy2012::default(), input.as_bytes(), Vec::new()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[test]
    fn in_flight_defaults_to_the_limit_and_errors_are_samples() {
        use crate::policy::Aimd;
        let mut out = Vec::new();
        // AIMD grows when at least half the limit is in flight: with the
        // default (the limit, 20) it grows; with 3 given it does not; a
        // timeout is a drop.
        replay(
            &Aimd::default(),
            "0.1 200\n0.1 200 3\n0.1 timeout\n0.1 error\n".as_bytes(),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0.000000 21\n0.000000 21\n0.000000 20\n0.000000 20\n"
        );
    }

    #[test]
    fn skips_blank_and_comment_lines() {
        let mut out = Vec::new();
        replay(
            &Scrapy2012::default(),
            "# trace\n\n 1.0   200 \n".as_bytes(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"3.000000 1\n");
    }
}
