"""NVIDIA's health and metadata examples, as the project's tests, against ours (run with --server-name=triton,
the name they check) and the real Triton: simple_{grpc,http}_health_metadata and
simple_{grpc,http}_aio_health_metadata, plus the server metadata both must report."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from tests.integration.triton_examples.support import serve
from tests.support.server_process import ServerProcess

MODELS = ("simple",)
HEADERS = {"test": "1", "dummy": "2"}
QUERY = {"test_1": 1, "test_2": 2}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    with serve(tmp_path_factory.mktemp("examples"), MODELS) as pair:
        yield pair


def test_simple_grpc_health_metadata(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live(headers=HEADERS)
        assert client.is_server_ready()
        assert client.is_model_ready("simple")
        assert client.get_server_metadata().name == "triton"
        assert client.get_model_metadata("simple", headers=HEADERS).name == "simple"
        with pytest.raises(InferenceServerException) as wrong:
            client.get_model_metadata("wrong_model_name")
        assert "Request for unknown model" in wrong.value.message(), wrong.value
        assert client.get_model_config("simple").config.name == "simple"


def test_simple_http_health_metadata(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_live(query_params=QUERY)
        assert client.is_server_ready()
        assert client.is_model_ready("simple")
        assert client.get_server_metadata()["name"] == "triton"
        assert client.get_model_metadata("simple", query_params=QUERY)["name"] == "simple"
        with pytest.raises(InferenceServerException) as wrong:
            client.get_model_metadata("wrong_model_name")
        assert "Request for unknown model" in wrong.value.message(), wrong.value
    finally:
        client.close()


def test_simple_grpc_aio_health_metadata(server: ServerProcess) -> None:
    async def main() -> None:
        client = grpcaio.InferenceServerClient(url=server.grpc_url)
        try:
            assert await client.is_server_live(headers=HEADERS)
            assert await client.is_server_ready()
            assert await client.is_model_ready("simple")
            assert (await client.get_server_metadata()).name == "triton"
            assert (await client.get_model_metadata("simple", headers=HEADERS)).name == "simple"
            with pytest.raises(InferenceServerException) as wrong:
                await client.get_model_metadata("wrong_model_name")
            assert "Request for unknown model" in wrong.value.message(), wrong.value
            assert (await client.get_model_config("simple")).config.name == "simple"
        finally:
            await client.close()

    asyncio.run(main())


def test_simple_http_aio_health_metadata(server: ServerProcess) -> None:
    async def main() -> None:
        client = httpaio.InferenceServerClient(url=server.http_url)
        try:
            assert await client.is_server_live(query_params=QUERY)
            assert await client.is_server_ready()
            assert await client.is_model_ready("simple")
            assert (await client.get_server_metadata())["name"] == "triton"
            assert (await client.get_model_metadata("simple", query_params=QUERY))["name"] == "simple"
            with pytest.raises(InferenceServerException) as wrong:
                await client.get_model_metadata("wrong_model_name")
            assert "Request for unknown model" in wrong.value.message(), wrong.value
        finally:
            await client.close()

    asyncio.run(main())


def test_server_metadata_lists_the_extensions_both_implement(servers: dict[str, ServerProcess]) -> None:
    """Every extension ours lists is one Triton lists too (the name is what --server-name sets)."""
    found: dict[str, Any] = {}
    for name, server in servers.items():
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            found[name] = client.get_server_metadata()
    assert found["ours"].name == "triton"
    assert {"classification", "model_configuration", "model_repository", "statistics",
            "binary_tensor_data"} <= set(found["ours"].extensions)
    if "triton" in found:
        assert set(found["ours"].extensions) <= set(found["triton"].extensions), found
