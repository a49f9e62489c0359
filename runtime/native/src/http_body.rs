//! An infer request's body, read within its limit for the HTTP port (crate::http): refused by its declared lengths
//! (Content-Length, and the JSON header's `Inference-Header-Content-Length`) before a byte is read, or once what
//! arrived passes the limit. A refused body is read and dropped before the answer, so a client still writing it
//! reads the answer instead of a reset connection; one that does not arrive in time is answered 408
//! (crate::http_pace).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, CONTENT_LENGTH};
use hyper::{Response, StatusCode};

use crate::http::{error_body, respond, Body, JSON_CONTENT};
use crate::http_pace::{too_slow, Paced};

/// How long a refused body is read (and dropped) before the answer; aiohttp lingers as long.
const LINGER: Duration = Duration::from_secs(10);

/// A body's limit and the finished 413 body that refuses it.
#[derive(Clone, Debug)]
pub struct Limit {
    pub size: usize,
    pub refusal: Bytes,
}

/// The limits an infer body is read within.
#[derive(Clone, Copy)]
pub struct Limits<'a> {
    /// Any body with binary tensors (`Inference-Header-Content-Length` given).
    pub body: &'a Limit,
    /// A body that is all JSON, and the JSON header of any body.
    pub json: &'a Limit,
    /// A request body's grace period ([`crate::http_pace`]).
    pub grace: Duration,
}

/// The whole body of an infer request whose JSON header is `header_length` long (None: all JSON), or the answer
/// that refuses it: 413 past its limit, 408 not in time, 400 unreadable.
pub async fn read_body(
    headers: &HeaderMap,
    header_length: Option<&str>,
    body: Incoming,
    limits: Limits<'_>,
) -> Result<Bytes, Response<Body>> {
    let limit = match header_length {
        None => limits.json, // all JSON
        Some(value) if header_length_number(value).is_some_and(|n| n > limits.json.size as u64) => {
            return Err(too_large(headers, body, limits.json).await); // a JSON header longer than JSON may be
        }
        Some(_) => limits.body,
    };
    if declared_length(headers).is_some_and(|n| n > limit.size as u64) {
        return Err(too_large(headers, body, limit).await);
    }
    match read_within(Paced::new(body, limits.grace), limit.size).await {
        Read::Whole(bytes) => Ok(bytes),
        Read::TooLarge(rest) => Err(too_large(headers, rest, limit).await),
        Read::Failed(err) => Err(unread(err.as_ref())),
    }
}

/// 413 for a body past `limit` (what is left of it read and dropped first, [`refuse`]).
async fn too_large<B: hyper::body::Body + Unpin>(
    headers: &HeaderMap,
    body: B,
    limit: &Limit,
) -> Response<Body> {
    refuse(
        headers,
        body,
        StatusCode::PAYLOAD_TOO_LARGE,
        limit.refusal.clone(),
    )
    .await
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The JSON header's declared length when it is a plain number (else the Python side explains what is wrong).
fn header_length_number(value: &str) -> Option<u64> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse().unwrap_or(u64::MAX))
}

/// What reading a body within its limit came to.
enum Read {
    Whole(Bytes),
    /// Past the limit: the rest is unread.
    TooLarge(Paced<Incoming>),
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

async fn read_within(mut body: Paced<Incoming>, limit: usize) -> Read {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    total += data.len();
                    if total > limit {
                        return Read::TooLarge(body);
                    }
                    chunks.push(data);
                }
            }
            Err(err) => return Read::Failed(err),
        }
    }
    if chunks.len() == 1 {
        return Read::Whole(chunks.pop().unwrap_or_default());
    }
    let mut whole = Vec::with_capacity(total);
    chunks.iter().for_each(|c| whole.extend_from_slice(c));
    Read::Whole(Bytes::from(whole))
}

/// A refusal that leaves the body unread: the body is read and dropped first (for up to [`LINGER`]; a client
/// that waits for `100 Continue` never sends it), so a client still writing it reads the answer instead of a
/// reset connection, which is then closed.
pub async fn refuse<B: hyper::body::Body + Unpin>(
    headers: &HeaderMap,
    body: B,
    status: StatusCode,
    refusal: Bytes,
) -> Response<Body> {
    let expects_continue = headers
        .get(hyper::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !expects_continue {
        let mut body = body;
        let _ = tokio::time::timeout(LINGER, async {
            while let Some(Ok(_)) = body.frame().await {}
        })
        .await;
    }
    respond(status, JSON_CONTENT, refusal, true)
}

/// The answer to a request whose body could not be read: 408 when it did not come in time, else 400.
pub fn unread(err: &(dyn std::error::Error + 'static)) -> Response<Body> {
    let (status, message) = match too_slow(err) {
        Some(slow) => (StatusCode::REQUEST_TIMEOUT, slow.to_string()),
        None => (
            StatusCode::BAD_REQUEST,
            format!("the request body could not be read: {err}"),
        ),
    };
    respond(status, JSON_CONTENT, error_body(&message), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lengths_that_are_numbers() {
        assert_eq!(header_length_number(" 12 "), Some(12));
        assert_eq!(
            header_length_number("99999999999999999999999"),
            Some(u64::MAX)
        );
        assert_eq!(header_length_number("-1"), None);
        assert_eq!(header_length_number(""), None);
    }
}
