//! Unit tests of `inflate.rs` (kept apart so that the module reads as its code).
use super::*;
use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::io::Write;

fn frame(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// A request body that arrives in these chunks.
struct Chunked(Vec<Bytes>);

impl Body for Chunked {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready((!self.0.is_empty()).then(|| Ok(Frame::data(self.0.remove(0)))))
    }
}

fn chunked(wire: &[u8], chunk: usize) -> Chunked {
    Chunked(wire.chunks(chunk).map(Bytes::copy_from_slice).collect())
}

async fn read_all(body: Inflating<Chunked>) -> Result<Vec<u8>, Status> {
    Ok(body.collect().await?.to_bytes().to_vec())
}

fn run<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn compressed_messages_come_out_plain_and_plain_ones_untouched() {
    let first = b"the first message".repeat(50);
    let second = b"a plain one".to_vec();
    let third = vec![7u8; 3000];
    for (encoding, compress) in [
        (Coding::Gzip, gzip as fn(&[u8]) -> Vec<u8>),
        (Coding::Deflate, zlib),
    ] {
        let mut wire = frame(1, &compress(&first));
        wire.extend(frame(0, &second));
        wire.extend(frame(1, &compress(&third)));
        let mut expected = frame(0, &first);
        expected.extend(frame(0, &second));
        expected.extend(frame(0, &third));
        for chunk in [1, 3, 7, 64, wire.len()] {
            let body = Inflating::new(chunked(&wire, chunk), encoding, 1 << 20, gate());
            assert_eq!(
                run(read_all(body)).unwrap(),
                expected,
                "{encoding:?}, chunks of {chunk}"
            );
        }
    }
}

#[test]
fn inflating_past_the_limit_is_refused_as_grpcio_says() {
    let wire = frame(1, &gzip(&vec![0u8; 5 * STEP]));
    let status = run(read_all(Inflating::new(
        chunked(&wire, 4096),
        Coding::Gzip,
        3 * STEP,
        gate(),
    )))
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(status.message(), "Decompressed message larger than max");
    let exact = frame(1, &gzip(&vec![0u8; 3 * STEP]));
    let plain = run(read_all(Inflating::new(
        chunked(&exact, 4096),
        Coding::Gzip,
        3 * STEP,
        gate(),
    )))
    .unwrap();
    assert_eq!(
        plain.len(),
        HEADER + 3 * STEP,
        "a message of exactly the limit passes"
    );
}

#[test]
fn a_compressed_message_over_the_limit_as_sent_is_refused_before_it_is_read() {
    let mut wire = vec![1u8];
    wire.extend_from_slice(&(1u32 << 30).to_be_bytes()); // no bytes follow: refused on the header alone
    let status = run(read_all(Inflating::new(
        chunked(&wire, 5),
        Coding::Deflate,
        1 << 20,
        gate(),
    )))
    .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(
        status.message(),
        "Received message larger than max (1073741824 vs. 1048576)"
    );
}

#[test]
fn bytes_that_do_not_inflate_are_internal() {
    let good = gzip(b"some message");
    for (encoding, message) in [
        (Coding::Gzip, b"\x00not gzip at all".to_vec()),
        (Coding::Deflate, b"\x00not zlib at all".to_vec()),
        (Coding::Gzip, good[..good.len() / 2].to_vec()),
    ] {
        let wire = frame(1, &message);
        let status = run(read_all(Inflating::new(
            chunked(&wire, 3),
            encoding,
            1 << 20,
            gate(),
        )))
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(
            status.message().starts_with("Error decompressing: "),
            "{}",
            status.message()
        );
    }
}

#[test]
fn a_cut_short_message_goes_on_to_tonic_as_it_came() {
    let wire = frame(1, &gzip(b"abc"));
    let cut = &wire[..wire.len() - 2];
    let status = run(read_all(Inflating::new(
        chunked(cut, 2),
        Coding::Gzip,
        1 << 20,
        gate(),
    )))
    .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (tonic::Code::Internal, "Unexpected EOF decoding stream.")
    );
    let plain = frame(0, b"abcdef");
    let cut = &plain[..8];
    assert_eq!(
        run(read_all(Inflating::new(
            chunked(cut, 3),
            Coding::Gzip,
            1 << 20,
            gate()
        )))
        .unwrap(),
        cut
    );
}

#[test]
fn a_large_message_inflates_in_steps_yielding_between_them() {
    let wire = frame(1, &zlib(&vec![0u8; 6 * STEP]));
    let mut body = Inflating::new(
        chunked(&wire, wire.len()),
        Coding::Deflate,
        8 * STEP,
        gate(),
    );
    let (mut yields, mut out) = (0, Vec::new());
    run(std::future::poll_fn(|cx| loop {
        match Pin::new(&mut body).poll_frame(cx) {
            Poll::Pending => {
                yields += 1;
                return Poll::Pending; // yield_now woke the task: polled again
            }
            Poll::Ready(Some(Ok(frame))) => out.extend_from_slice(&frame.into_data().unwrap()),
            Poll::Ready(None) => return Poll::Ready(()),
            Poll::Ready(Some(Err(status))) => panic!("{status}"),
        }
    }));
    assert_eq!(out.len(), HEADER + 6 * STEP);
    assert!(
        yields >= 5,
        "a yield per step of {STEP} bytes, {yields} seen"
    );
}

#[test]
fn one_message_inflates_at_a_time_per_gate() {
    let shared = gate();
    let wire = frame(1, &zlib(&vec![0u8; 4 * STEP]));
    let mut first = Inflating::new(
        chunked(&wire, wire.len()),
        Coding::Deflate,
        8 * STEP,
        shared.clone(),
    );
    let mut second = Inflating::new(
        chunked(&wire, wire.len()),
        Coding::Deflate,
        8 * STEP,
        shared.clone(),
    );
    run(std::future::poll_fn(|cx| {
        assert!(Pin::new(&mut first).poll_frame(cx).is_pending()); // one step inflated, then a yield
        assert!(first.permit.is_some() && shared.available_permits() == 0);
        assert!(Pin::new(&mut second).poll_frame(cx).is_pending());
        assert!(second.permit.is_none() && matches!(second.state, State::Queued(_)));
        Poll::Ready(())
    }));
    let out = run(async {
        let first = first.collect().await.unwrap().to_bytes();
        // the permit went with the first message, to the one waiting for it
        assert_eq!(shared.available_permits(), 0);
        (first, second.collect().await.unwrap().to_bytes())
    });
    assert_eq!(
        (out.0.len(), out.1.len()),
        (HEADER + 4 * STEP, HEADER + 4 * STEP)
    );
    assert_eq!(shared.available_permits(), 1, "and back once both are done");
}

#[test]
fn only_our_encodings_are_inflated_here() {
    assert_eq!(grpc_encoding(b"gzip"), Some(Coding::Gzip));
    assert_eq!(grpc_encoding(b"deflate"), Some(Coding::Deflate));
    for other in [&b"identity"[..], b"br", b"zstd", b"GZIP", b""] {
        assert_eq!(grpc_encoding(other), None);
    }
    let request = http::Request::builder()
        .header(ENCODING, "gzip")
        .body(tonic::body::Body::new(chunked(b"", 1)))
        .unwrap();
    assert!(inflated(request, 1 << 20, &gate())
        .headers()
        .get(ENCODING)
        .is_none());
    let request = http::Request::builder()
        .header(ENCODING, "br")
        .body(tonic::body::Body::new(chunked(b"", 1)))
        .unwrap();
    assert_eq!(
        inflated(request, 1 << 20, &gate()).headers()[ENCODING],
        "br"
    );
}
