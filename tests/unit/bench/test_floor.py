"""bench.pa.floor against real tritonclient calls: the floor echoes a request's first input, through Python (one
loop wake-up) or, with `in_core`, answered by the native core alone, Python never seeing the request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import uvloop

from bench.pa.floor import Floor, serve


@pytest.fixture(params=[False, True], ids=["loop", "in-core"])
def floor(request: pytest.FixtureRequest) -> Iterator[tuple[Floor, bool]]:
    in_core: bool = request.param
    floor = Floor(threads=1, in_core=in_core)
    loop = uvloop.new_event_loop()
    stop = asyncio.Event()
    serving = threading.Thread(target=loop.run_until_complete, args=(serve(floor, "127.0.0.1", 0, stop),))
    serving.start()
    try:
        for _ in range(3000):  # the port, once bound (up to 30 s on a loaded machine)
            if floor.port or not serving.is_alive():
                break
            threading.Event().wait(0.01)
        assert floor.port, "the floor did not start"
        yield floor, in_core
    finally:
        loop.call_soon_threadsafe(stop.set)
        serving.join(60)
        loop.close()


def test_the_first_input_comes_back_and_is_counted_where_it_was_answered(floor: tuple[Floor, bool]) -> None:
    server, in_core = floor
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.port}")
    data = np.arange(16, dtype=np.float32)
    sent = grpcclient.InferInput("INPUT0", [16], "FP32")
    sent.set_data_from_numpy(data)
    for _ in range(3):
        result = client.infer("add_one_0", [sent])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    # in the core: Python never saw the requests; through the loop: the core answered none itself
    expected = (3, {}) if in_core else (0, {"add_one_0": 3})
    assert (server.core.answered_in_core, dict(server.counted)) == expected
    stats = client.get_inference_statistics("add_one_0", as_json=True)
    assert int(stats["model_stats"][0]["inference_count"]) == 3
    client.close()
