//! A call's deadline, as its client sends it (the `grpc-timeout` header): past it, the call is answered
//! DEADLINE_EXCEEDED ("Deadline Exceeded") and what it was waiting for is dropped, as grpc core's server (Triton's,
//! and grpcio's front end) does. tonic's server, which served each connection before crate::driven did, kept the
//! deadline too, but answered CANCELLED.

use std::time::Duration;

pub const HEADER: &str = "grpc-timeout";

/// The timeout a `grpc-timeout` value asks for: up to 8 digits and a unit (H, M, S, m, u, n), as the gRPC
/// protocol spells it; None for anything else (ignored, as tonic and grpc core ignore it).
pub fn parse(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_unit_is_read() {
        assert_eq!(parse(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse(b"99999999S"), Some(Duration::from_secs(99_999_999)));
        assert_eq!(parse(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse(b"7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse(b"0n"), Some(Duration::ZERO));
    }

    #[test]
    fn anything_else_is_no_deadline() {
        for bad in [
            &b""[..],
            b"S",
            b"100",
            b"123456789S",
            b"-1S",
            b"1.5S",
            b"10s",
            b"1 S",
            b"\xff1S",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
