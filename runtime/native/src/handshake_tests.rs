//! Unit tests of `handshake.rs`.
use super::*;
use std::collections::VecDeque;
use std::time::Instant;

const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A SETTINGS frame's header announcing `length` bytes of payload.
fn settings_head(length: u32) -> Vec<u8> {
    let mut out = length.to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[0x4, 0, 0, 0, 0, 0]);
    out
}

fn handshake(payload: usize) -> Vec<u8> {
    let mut out = CLIENT_PREFACE.to_vec();
    out.extend(settings_head(payload as u32));
    out.extend(std::iter::repeat_n(0u8, payload));
    out
}

/// A peer that sends these chunks, one per read (as much of one as the read has room for), then nothing (its
/// reads stay pending).
struct Peer(VecDeque<Vec<u8>>);

impl AsyncRead for Peer {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.pop_front() {
            Some(mut chunk) => {
                if chunk.len() > buf.remaining() {
                    self.0.push_front(chunk.split_off(buf.remaining()));
                }
                buf.put_slice(&chunk);
                Poll::Ready(Ok(()))
            }
            None => Poll::Pending,
        }
    }
}

fn peer(wire: &[u8], chunk: usize) -> Peer {
    Peer(wire.chunks(chunk).map(<[u8]>::to_vec).collect())
}

/// Reads until the peer has nothing more (pending for `quiet`) or a read fails.
async fn read_until_quiet(conn: &mut Deadlined<Peer>, quiet: Duration) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let mut space = [0u8; 64];
        let mut buf = ReadBuf::new(&mut space);
        let read = std::future::poll_fn(|cx| Pin::new(&mut *conn).poll_read(cx, &mut buf));
        match tokio::time::timeout(quiet, read).await {
            Err(_) => return Ok(total),
            Ok(Err(e)) => return Err(e),
            Ok(Ok(())) => total += buf.filled().len(),
        }
    }
}

fn run<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn the_handshake_left_counts_the_first_frames_payload() {
    assert_eq!(handshake_left(b""), 33);
    assert_eq!(handshake_left(CLIENT_PREFACE), 9);
    assert_eq!(handshake_left(&handshake(0)), 0);
    assert_eq!(handshake_left(&handshake(18)[..33]), 18);
    let mut big = CLIENT_PREFACE.to_vec();
    big.extend(settings_head(0x01_02_03));
    assert_eq!(handshake_left(&big), 0x01_02_03);
}

#[test]
fn a_peer_that_sends_nothing_is_refused_at_the_deadline() {
    run(async {
        let start = Instant::now();
        let mut conn = Deadlined::new(Peer(VecDeque::new()), Duration::from_millis(50));
        let failed = read_until_quiet(&mut conn, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut);
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(4),
            "{took:?}"
        );
    });
}

#[test]
fn a_handshake_cut_short_anywhere_is_refused() {
    let whole = handshake(12);
    for cut in [1, 10, 24, 30, 33, 40, whole.len() - 1] {
        for chunk in [1, 7, 1000] {
            run(async {
                let mut conn =
                    Deadlined::new(peer(&whole[..cut], chunk), Duration::from_millis(30));
                let failed = read_until_quiet(&mut conn, Duration::from_secs(5)).await;
                let kind = failed.unwrap_err().kind();
                assert_eq!(kind, io::ErrorKind::TimedOut, "cut at {cut}, chunk {chunk}");
            });
        }
    }
}

#[test]
fn a_whole_handshake_in_any_chunks_disarms_the_deadline() {
    for payload in [0, 6, 18] {
        for chunk in [1, 5, 24, 33, 1000] {
            run(async {
                let mut wire = handshake(payload);
                let more = b"frames after the handshake";
                wire.extend_from_slice(more);
                let mut conn = Deadlined::new(peer(&wire, chunk), Duration::from_millis(30));
                let read = read_until_quiet(&mut conn, Duration::from_millis(100)).await;
                assert_eq!(
                    read.unwrap(),
                    wire.len(),
                    "payload {payload}, chunk {chunk}"
                );
                assert!(conn.deadline.is_none(), "payload {payload}, chunk {chunk}");
                // Well past the deadline, reads go on.
                conn.io.0.push_back(b"later".to_vec());
                assert_eq!(
                    read_until_quiet(&mut conn, Duration::from_millis(20))
                        .await
                        .unwrap(),
                    5
                );
            });
        }
    }
}

#[test]
fn the_deadline_holds_from_the_accept_not_from_the_last_byte() {
    // One byte at a time, each within the deadline of the last, the whole not within the deadline.
    run(async {
        let whole = handshake(0);
        let mut conn = Deadlined::new(Peer(VecDeque::new()), Duration::from_millis(60));
        let mut sent = 0;
        let failed = loop {
            if sent < whole.len() {
                conn.io.0.push_back(vec![whole[sent]]);
                sent += 1;
            }
            if let Err(e) = read_until_quiet(&mut conn, Duration::from_millis(10)).await {
                break e;
            }
        };
        assert_eq!(failed.kind(), io::ErrorKind::TimedOut);
        assert!(
            sent < whole.len(),
            "the drip finished within the deadline: make it slower"
        );
    });
}
