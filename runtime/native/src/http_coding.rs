//! Compressed HTTP infer answers: which coding a client's `Accept-Encoding` asks for, and the compressing.
//!
//! Most HTTP clients send `Accept-Encoding` whatever the caller wants (python-requests and httpx send
//! `gzip, deflate`, Go's transport `gzip`), so the answer is compressed here, in the core, rather than by
//! sending the request to the Python app. As Triton does: gzip or deflate (the zlib format), the coding the
//! client prefers, an infer answer only; nothing for `identity`, `*` or a coding weighted `q=0`.

use bytes::Bytes;
use hyper::header::HeaderMap;

pub use crate::codings::Coding;

/// Answers up to this size are compressed on the core's thread; larger ones on tokio's blocking pool, so that
/// compressing a large answer does not hold the core's other connections.
const INLINE_BYTES: usize = 1024 * 1024;

/// The coding for an answer to a request with these `Accept-Encoding` values: the one of ours with the highest
/// weight above 0, the first listed among equals; None when none is acceptable (or the header is absent).
pub fn answer_coding<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<Coding> {
    let mut best: Option<(u16, Coding)> = None;
    for value in values {
        let Ok(text) = std::str::from_utf8(value) else {
            continue;
        };
        for item in text.split(',') {
            let mut parts = item.split(';');
            let coding = match parts.next().unwrap_or("").trim() {
                c if c.eq_ignore_ascii_case("gzip") || c.eq_ignore_ascii_case("x-gzip") => {
                    Coding::Gzip
                }
                c if c.eq_ignore_ascii_case("deflate") => Coding::Deflate,
                _ => continue,
            };
            let Some(weight) = weight(parts) else {
                continue; // a weight that does not parse: the item is ignored
            };
            if weight > 0 && best.is_none_or(|(w, _)| weight > w) {
                best = Some((weight, coding));
            }
        }
    }
    best.map(|(_, coding)| coding)
}

/// An item's `q` parameter in thousandths (1000 when absent); None when it is not a valid qvalue (RFC 9110:
/// 0 to 1 with at most three decimals).
fn weight<'a>(parameters: impl Iterator<Item = &'a str>) -> Option<u16> {
    for parameter in parameters {
        let Some((name, value)) = parameter.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("q") {
            continue;
        }
        let value = value.trim();
        let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
        if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let thousandths = fraction.bytes().chain(std::iter::repeat(b'0')).take(3);
        let fraction = thousandths.fold(0u16, |n, b| n * 10 + u16::from(b - b'0'));
        return match whole {
            "0" => Some(fraction),
            "1" if fraction == 0 => Some(1000),
            _ => None,
        };
    }
    Some(1000)
}

/// Whether the request's body is compressed (`Content-Encoding` other than `identity`): such requests go to the
/// Python app, which inflates them within the body limit in steps.
pub fn compressed_body(headers: &HeaderMap) -> bool {
    headers.get_all("content-encoding").iter().any(|value| {
        let Ok(value) = value.to_str() else {
            return true;
        };
        value.split(',').any(|item| {
            let coding = item.split(';').next().unwrap_or("").trim();
            !(coding.is_empty() || coding.eq_ignore_ascii_case("identity"))
        })
    })
}

/// `body` compressed with `coding`, off the core's thread when it is large.
pub async fn encoded(coding: Coding, body: Bytes) -> Bytes {
    if body.len() <= INLINE_BYTES {
        return coding.compress(&body);
    }
    match tokio::task::spawn_blocking(move || coding.compress(&body)).await {
        Ok(compressed) => compressed,
        Err(err) => std::panic::resume_unwind(err.into_panic()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::{GzDecoder, ZlibDecoder};
    use std::io::Read;

    fn coding(value: &str) -> Option<Coding> {
        answer_coding([value.as_bytes()])
    }

    #[test]
    fn the_clients_first_choice_of_ours() {
        assert_eq!(coding("gzip, deflate"), Some(Coding::Gzip));
        assert_eq!(coding("deflate, gzip"), Some(Coding::Deflate));
        assert_eq!(coding("br, deflate"), Some(Coding::Deflate));
        assert_eq!(coding("x-gzip"), Some(Coding::Gzip));
        assert_eq!(coding("GZIP"), Some(Coding::Gzip));
        assert_eq!(
            answer_coding([&b"br"[..], b"gzip"]),
            Some(Coding::Gzip),
            "over repeated headers"
        );
    }

    #[test]
    fn weights_choose_and_zero_refuses() {
        assert_eq!(coding("gzip;q=0.5, deflate"), Some(Coding::Deflate));
        assert_eq!(coding("gzip;q=0.8, deflate;q=0.9"), Some(Coding::Deflate));
        assert_eq!(coding("gzip; q=1.000, deflate"), Some(Coding::Gzip));
        assert_eq!(coding("gzip;q=0"), None);
        assert_eq!(coding("gzip;q=0.000, deflate;q=0"), None);
        assert_eq!(
            coding("gzip;q=2, deflate;q=0.1"),
            Some(Coding::Deflate),
            "an invalid weight: ignored"
        );
        assert_eq!(coding("gzip;q=0.1234"), None);
        assert_eq!(coding("gzip;q=abc"), None);
    }

    #[test]
    fn nothing_for_identity_wildcards_others_or_no_header() {
        for value in ["identity", "*", "br", "", " , ;", "identity, *;q=0"] {
            assert_eq!(coding(value), None, "{value:?}");
        }
        assert_eq!(answer_coding(std::iter::empty::<&[u8]>()), None);
        assert_eq!(answer_coding([&b"\xffgzip"[..]]), None, "not text");
    }

    #[test]
    fn compressed_bodies_go_to_the_python_app_and_accepted_codings_do_not() {
        use hyper::header::HeaderValue;
        let mut headers = HeaderMap::new();
        assert!(!compressed_body(&headers));
        headers.insert("content-encoding", HeaderValue::from_static("identity"));
        assert!(!compressed_body(&headers));
        headers.insert("accept-encoding", HeaderValue::from_static("gzip, deflate"));
        assert!(
            !compressed_body(&headers),
            "a compressed answer is the core's to give"
        );
        headers.insert("content-encoding", HeaderValue::from_static("gzip"));
        assert!(compressed_body(&headers));
        headers.insert("content-encoding", HeaderValue::from_static("identity, br"));
        assert!(compressed_body(&headers));
    }

    #[test]
    fn large_answers_are_compressed_off_the_thread_all_the_same() {
        let body = Bytes::from(vec![7u8; INLINE_BYTES + 1]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let compressed = runtime.block_on(encoded(Coding::Gzip, body.clone()));
        let mut out = Vec::new();
        GzDecoder::new(&compressed[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
    }

    #[test]
    fn compressed_bodies_inflate_to_the_answer() {
        let body =
            br#"{"model_name":"m","outputs":[{"name":"Y","data":[1.0,2.0,3.0]}]}"#.repeat(20);
        let mut out = Vec::new();
        GzDecoder::new(&Coding::Gzip.compress(&body)[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
        out.clear();
        ZlibDecoder::new(&Coding::Deflate.compress(&body)[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
        assert!(Coding::Gzip.compress(&body).len() < body.len() / 4);
    }
}
