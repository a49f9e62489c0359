"""Which errors of the Triton peer are its own stub health window (`stub_missed_health_window`), and what
`peer_request` does with them and with any other error."""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from bench.triton_peer import stub_missed_health_window
from tests.support.peer_requests import peer_request

# what tritonclient raised in a busy rehearsal (stop 50), and the same from a model outside an ensemble
IN_ENSEMBLE = "[StatusCode.INTERNAL] in ensemble 'chain2', Stub process 'add_one_1_0_0' is not healthy."
ALONE = ("[StatusCode.INTERNAL] Failed to process the request(s) for model instance 'add_one_0_0_0', message: "
         "Stub process 'add_one_0_0_0' is not healthy.")


@pytest.mark.parametrize("message", [IN_ENSEMBLE, ALONE])
def test_the_stub_health_window_is_recognised(message: str) -> None:
    assert stub_missed_health_window(message)


@pytest.mark.parametrize("message", [
    "[StatusCode.INTERNAL] Stub process is not healthy.",  # sending to the stub: not the answer's window
    "[StatusCode.INVALID_ARGUMENT] unexpected inference input 'X' for model 'add_one_0'",
    "[StatusCode.UNAVAILABLE] Request for unknown model: 'chain3' is not found",
    "[StatusCode.INTERNAL] model 'add_one_0': RuntimeError: Stub process 'add_one_0' healthy",
])
def test_other_errors_are_not(message: str) -> None:
    assert not stub_missed_health_window(message)


def test_peer_request_skips_on_the_window() -> None:
    with pytest.raises(pytest.skip.Exception, match="add_one_1_0_0"), peer_request():
        raise InferenceServerException(IN_ENSEMBLE)


def test_peer_request_raises_any_other_error() -> None:
    with pytest.raises(InferenceServerException, match="unknown model"), peer_request():
        raise InferenceServerException("Request for unknown model: 'chain3' is not found")


def test_peer_request_lets_an_answer_through() -> None:
    with peer_request():
        answered = True
    assert answered
