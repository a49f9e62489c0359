//! When to let go of the GIL. Releasing it costs a hand-off when another Python thread (a model instance's
//! worker) is waiting for it: that thread runs, and taking the GIL back waits for it. Small copies and encodes
//! are cheaper than that round trip, so only large ones run with the GIL released.

use pyo3::Python;

/// Work on at least this many bytes runs with the GIL released (as `offload.INLINE_BYTES` on the Python side).
pub const OFF_GIL_BYTES: usize = 64 * 1024;

/// `work()`, with the GIL released when it handles `bytes` >= [`OFF_GIL_BYTES`].
pub fn sized<T, F>(py: Python<'_>, bytes: usize, work: F) -> T
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    if bytes >= OFF_GIL_BYTES {
        py.allow_threads(work)
    } else {
        work()
    }
}
