//! The two compressions both ports speak, gzip and deflate (the zlib format, as gRPC and HTTP mean it): the
//! one type for both, inflating (compressed gRPC requests, `inflate.rs`) and compressing (HTTP answers,
//! `http_coding.rs`).

use std::io::{Cursor, Read, Write};

use bytes::Bytes;
use flate2::bufread::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Deflate,
}

impl Coding {
    pub fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Deflate => "deflate",
        }
    }

    /// A reader of what `message` inflates to.
    pub fn decoder(self, message: Bytes) -> Box<dyn Read + Send> {
        match self {
            Self::Gzip => Box::new(GzDecoder::new(Cursor::new(message))),
            Self::Deflate => Box::new(ZlibDecoder::new(Cursor::new(message))),
        }
    }

    /// `body` compressed at zlib's default level.
    pub fn compress(self, body: &[u8]) -> Bytes {
        let out = Vec::with_capacity(body.len() / 2 + 64);
        let written = match self {
            Self::Gzip => {
                let mut encoder = GzEncoder::new(out, Compression::default());
                encoder.write_all(body).and_then(|()| encoder.finish())
            }
            Self::Deflate => {
                let mut encoder = ZlibEncoder::new(out, Compression::default());
                encoder.write_all(body).and_then(|()| encoder.finish())
            }
        };
        Bytes::from(written.expect("writing to a Vec does not fail"))
    }
}
