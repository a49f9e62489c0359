"""The registered shared memory regions: register, unregister, status, and bounds-checked windows. Thread-safe.

System regions are POSIX shared memory objects (`/dev/shm/<key>`), mapped read-write once at registration
(the descriptor is closed at once, as Triton does) and unmapped at unregistration and at exit. A mapping some
request still views (a numpy array over its bytes) is never unmapped under it: Python's mmap refuses to close
while views exist, and the region then goes when the last view does. CUDA regions are device allocations
opened from a cudaIpc handle (`cuda_ipc`).

Errors carry Triton's codes and messages (src/shared_memory_manager.cc); client-supplied names are clipped.
"""

from __future__ import annotations

import contextlib
import enum
import mmap
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ensemble_runtime.errors import ErrorCode, InferenceError, invalid, not_found, quote_name

SHM_DIR = "/dev/shm"
MAX_REGIONS = 4096  # regions held at once (each is a mapping; the kernel allows ~65530 per process)
MAX_NAME = 1024  # characters of a region name the server keeps
_KEY_MAX = 255  # NAME_MAX: a POSIX shared memory object name is one file name under /dev/shm


class Kind(enum.Enum):
    SYSTEM = "system"
    CUDA = "cuda"


class DeviceMemory(Protocol):
    """An opened CUDA IPC allocation (see cuda_ipc.CudaIpcMapping)."""

    def read(self, offset: int, size: int) -> bytes: ...
    def write(self, offset: int, data: memoryview) -> None: ...
    def close(self) -> None: ...


CudaOpener = Callable[[str, bytes, int, int], DeviceMemory]  # (name, raw handle, device id, byte size) -> memory


@dataclass(eq=False)
class Region:
    name: str
    kind: Kind
    byte_size: int
    key: str = ""
    offset: int = 0
    device_id: int = 0
    _host: memoryview | None = field(default=None, repr=False)  # system: the region's bytes, writable
    _map: mmap.mmap | None = field(default=None, repr=False)
    _device: DeviceMemory | None = field(default=None, repr=False)

    def close(self) -> None:
        """Release the mapping; one still viewed by a running request goes when its last view does."""
        if self._host is not None:
            self._host.release()
            self._host = None
        if self._map is not None:
            with contextlib.suppress(BufferError):  # exported views remain: freed with the last of them
                self._map.close()
            self._map = None
        if self._device is not None:
            device, self._device = self._device, None
            device.close()


@dataclass(frozen=True, eq=False)
class Window:
    """`size` bytes at `offset` of one region, as a request names them (bounds already checked)."""

    region: Region
    offset: int
    size: int
    _host: memoryview | None  # system: its own view of these bytes (keeps the mapping alive while it lives)
    _device: DeviceMemory | None

    def read(self) -> memoryview:
        """The bytes, read-only: a view of the mapping (system) or a host copy (CUDA)."""
        if self._host is not None:
            return self._host.toreadonly()
        assert self._device is not None
        return memoryview(self._device.read(self.offset, self.size))

    def write(self, data: memoryview) -> None:
        """Copy `data` (at most `size` bytes, checked by the caller) to the start of the window."""
        if self._host is not None:
            self._host[: len(data)] = data
            return
        assert self._device is not None
        self._device.write(self.offset, data)


def _register_failed(name: str, why: str) -> InferenceError:
    return invalid(f"failed to register shared memory region {quote_name(name)}: {why}")


def shm_path(key: str) -> str:
    """The file under /dev/shm that `shm_open(key)` opens, refusing what glibc refuses (a '/' past the leading
    ones, an empty or too long name) and '.'/'..', so a key never names anything outside /dev/shm."""
    stripped = key.lstrip("/")
    if not stripped or len(stripped) > _KEY_MAX or "/" in stripped or "\0" in stripped or stripped in (".", ".."):
        raise InferenceError(ErrorCode.INTERNAL, f"Unable to open shared memory region: {quote_name(key)}")
    return os.path.join(SHM_DIR, stripped)


def _map_system(name: str, key: str, offset: int, byte_size: int) -> tuple[mmap.mmap, memoryview]:
    try:
        fd = os.open(shm_path(key), os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise InferenceError(ErrorCode.INTERNAL, f"Unable to open shared memory region: {quote_name(key)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InferenceError(ErrorCode.INTERNAL, f"Invalid shared memory region: {quote_name(key)}")
        if offset + byte_size > info.st_size:
            raise _register_failed(name, "invalid args")
        start = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap wants an aligned offset; any offset works here
        try:
            mapped = mmap.mmap(fd, byte_size + offset - start, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        except (OSError, ValueError) as exc:
            raise _register_failed(name, f"unable to map it: {exc}") from None
    finally:
        os.close(fd)
    return mapped, memoryview(mapped)[offset - start :]


class SharedMemoryRegistry:
    """Name -> region, for both kinds (one namespace, as in Triton)."""

    def __init__(self, cuda_opener: CudaOpener | None = None, max_regions: int = MAX_REGIONS) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()
        self._cuda_opener = cuda_opener
        self._max = max_regions

    def _check_new(self, name: str) -> None:
        """Under the lock: `name` may be registered now."""
        if len(name) > MAX_NAME:
            raise _register_failed(name, f"the name is longer than {MAX_NAME} characters")
        if name in self._regions:
            raise InferenceError(ErrorCode.ALREADY_EXISTS, f"shared memory region {quote_name(name)} already in manager")
        if len(self._regions) >= self._max:
            raise InferenceError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"failed to register shared memory region {quote_name(name)}: {self._max} regions are registered, "
                "the most this server holds; unregister some first",
            )

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if offset < 0 or byte_size <= 0:
            raise _register_failed(name, "invalid args (offset must be >= 0 and byte_size > 0)")
        with self._lock:
            self._check_new(name)
            mapped, view = _map_system(name, key, offset, byte_size)
            self._regions[name] = Region(name, Kind.SYSTEM, byte_size, key, offset, 0, view, mapped)

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        if device_id < 0 or byte_size <= 0:
            raise _register_failed(name, "invalid args (device_id must be >= 0 and byte_size > 0)")
        with self._lock:
            self._check_new(name)
            if self._cuda_opener is None:
                raise invalid(f"failed to register CUDA shared memory region {quote_name(name)}: GPUs not supported")
            device = self._cuda_opener(name, raw_handle, device_id, byte_size)
            self._regions[name] = Region(name, Kind.CUDA, byte_size, device_id=device_id, _device=device)

    def unregister(self, kind: Kind, name: str = "") -> None:
        """Unregister `name`, or every region of `kind` when empty; an unknown name (or one of the other
        kind) is no error, as in Triton."""
        with self._lock:
            names = [name] if name else list(self._regions)
            gone = [self._regions.pop(n) for n in names if n in self._regions and self._regions[n].kind is kind]
        for region in gone:
            region.close()

    def status(self, kind: Kind, name: str = "") -> list[Region]:
        with self._lock:
            if not name:
                return [r for _, r in sorted(self._regions.items()) if r.kind is kind]
            region = self._regions.get(name)
        label = "cuda" if kind is Kind.CUDA else "system"
        if region is None:
            raise not_found(f"Unable to find {label} shared memory region: {quote_name(name)}")
        if region.kind is not kind:
            held, asked = ("CUDA", "system") if region.kind is Kind.CUDA else ("system", "CUDA")
            raise not_found(f"The region named {quote_name(name)} is registered as {held} shared memory, not {asked} shared memory")
        return [region]

    def window(self, name: str, offset: int, byte_size: int) -> Window:
        """The part of region `name` a request names, checked against the size the client registered."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise not_found(f"Unable to find shared memory region: {quote_name(name)}")
            if offset < 0 or offset >= region.byte_size:
                raise invalid(f"Invalid offset for shared memory region: {quote_name(name)}")
            if byte_size < 0 or offset + byte_size > region.byte_size:
                raise invalid(f"Invalid offset + byte size for shared memory region: {quote_name(name)}")
            # a slice taken under the lock: an unregistration after this leaves these bytes mapped until it goes
            host = region._host[offset : offset + byte_size] if region._host is not None else None
            return Window(region, offset, byte_size, host, region._device)

    def close(self) -> None:
        """Unregister everything (at exit)."""
        with self._lock:
            regions, self._regions = list(self._regions.values()), {}
        for region in regions:
            region.close()

    def __len__(self) -> int:
        return len(self._regions)
