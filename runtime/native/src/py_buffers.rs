//! Answer data handed over by Python: buffers checked C-contiguous once, then read in place without the GIL.

use bytes::Bytes;
use pyo3::buffer::PyBuffer;

/// Buffers (numpy arrays, bytes) that are all C-contiguous. A `PyBuffer` holds its exporter alive and its
/// memory in place for as long as it lives, so the bytes can be read with the GIL released. Dropping the
/// buffers takes the GIL: drop them where it is held.
pub struct Contiguous(Vec<PyBuffer<u8>>);

impl Contiguous {
    /// The buffers, or the index of the first one that is not C-contiguous.
    pub fn new(buffers: Vec<PyBuffer<u8>>) -> Result<Self, usize> {
        match buffers.iter().position(|b| !b.is_c_contiguous()) {
            Some(index) => Err(index),
            None => Ok(Self(buffers)),
        }
    }

    /// Each buffer's bytes, in order.
    pub fn slices(&self) -> Vec<&[u8]> {
        self.0
            .iter()
            // SAFETY: C-contiguous (checked in `new`), and kept alive and in place by the PyBuffer itself.
            .map(|b| unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) })
            .collect()
    }

    /// `head` followed by every buffer's bytes, in one allocation.
    pub fn joined(&self, head: &[u8]) -> Bytes {
        let slices = self.slices();
        let mut body =
            Vec::with_capacity(head.len() + slices.iter().map(|s| s.len()).sum::<usize>());
        body.extend_from_slice(head);
        for slice in slices {
            body.extend_from_slice(slice);
        }
        Bytes::from(body)
    }
}
