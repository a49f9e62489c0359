"""Unregistering system shared memory on the Triton peer, whose refusal while it still holds a region is waited out.

tritonserver 2.51 refuses to unregister a region that a request it has already answered still holds: it drops its
hold when it releases the request, after the answer has left (triton-inference-server/server#7567; #7743, in later
releases, defers the unregister instead). Under load that refusal can meet the next call. Ours must unregister at
once, so only the peer is waited for."""

from __future__ import annotations

import time
from typing import Any

from tritonclient.utils import InferenceServerException

# Triton's words: unregistering one region ("... it is currently in use"), all of them ("Failed to unregister ...")
HELD = ("currently in use", "Failed to unregister")


def unregister_system(client: Any, name: str = "", peer: bool = True, timeout: float = 30.0) -> None:
    """Unregister region `name` (all of them when empty); while the peer says it still holds one, ask again until
    `timeout` passes. Any other refusal, and any refusal from ours (`peer=False`), is raised at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.unregister_system_shared_memory(name)
            return
        except InferenceServerException as exc:
            if not peer or not any(words in str(exc) for words in HELD) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)
