"""NVIDIA's simple_grpc_infer_client and simple_grpc_aio_infer_client with their TLS options (`--ssl`,
`--root-certificates`, `--private-key`, `--certificate-chain`), against ours and the real Triton, both serving
`simple` over mutual TLS with Triton's flags; and a client that presents no certificate, refused alike."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tests.infra.certs import generate_ca, generate_client_cert, generate_serving_cert
from tests.integration.triton_examples.support import check_sum_and_difference, serve, simple_data, simple_inputs
from tests.support.server_process import ClientTls, ServerProcess


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClientTls, list[str]]:
    """How the examples reach the servers (the root and a client certificate, as their -r, -x and -p name
    them), and the servers' flags."""
    directory = tmp_path_factory.mktemp("pki")
    ca = generate_ca("examples-ca")
    pems = {"ca.crt": ca.cert_pem}
    for stem, pair in (("server", generate_serving_cert(ca, "server", ip_addresses=["127.0.0.1"])),
                       ("client", generate_client_cert(ca, "client"))):
        pems[f"{stem}.crt"], pems[f"{stem}.key"] = pair.cert_pem, pair.key_pem
    for name, pem in pems.items():
        (directory / name).write_bytes(pem)
    flags = ["--grpc-use-ssl-mutual=true", f"--grpc-server-cert={directory / 'server.crt'}",
             f"--grpc-server-key={directory / 'server.key'}", f"--grpc-root-cert={directory / 'ca.crt'}"]
    return ClientTls(directory / "ca.crt", (directory / "client.crt", directory / "client.key")), flags


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, tls: tuple[ClientTls, list[str]]
            ) -> Iterator[dict[str, ServerProcess]]:
    client_tls, flags = tls
    with serve(tmp_path_factory.mktemp("examples"), ("simple",), flags, client_tls=client_tls) as pair:
        yield pair


def _options(server: ServerProcess) -> dict[str, str]:
    """The example's -r, -p and -x."""
    assert server.client_tls is not None and server.client_tls.certificate is not None
    chain, key = server.client_tls.certificate
    return {"root_certificates": str(server.client_tls.root), "private_key": str(key), "certificate_chain": str(chain)}


def test_simple_grpc_infer_client_with_ssl(server: ServerProcess) -> None:
    """`simple_grpc_infer_client.py -s -r ca.crt -p client.key -x client.crt`."""
    in0, in1 = simple_data()
    with grpcclient.InferenceServerClient(server.grpc_url, ssl=True, **_options(server)) as client:
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
        result = client.infer(model_name="simple", inputs=simple_inputs(grpcclient, in0, in1), outputs=outputs,
                              headers={"test": "1"})
        assert len(client.get_inference_statistics(model_name="simple").model_stats) == 1
        check_sum_and_difference(result, in0, in1)


def test_simple_grpc_aio_infer_client_with_ssl(server: ServerProcess) -> None:
    """`simple_grpc_aio_infer_client.py -s -r ca.crt -p client.key -x client.crt`."""
    in0, in1 = simple_data()

    async def run() -> None:
        async with grpcaio.InferenceServerClient(server.grpc_url, ssl=True, **_options(server)) as client:
            result = await client.infer(model_name="simple", inputs=simple_inputs(grpcaio, in0, in1))
            check_sum_and_difference(result, in0, in1)

    asyncio.run(run())


def test_a_client_without_a_certificate_is_refused_alike(servers: dict[str, ServerProcess]) -> None:
    """Mutual TLS: the example with -s and -r only (no -p, -x) gets UNAVAILABLE from both."""
    codes = {}
    for name, server in servers.items():
        assert server.client_tls is not None
        with ClientTls(server.client_tls.root).client(server.grpc_url) as anonymous:
            with pytest.raises(InferenceServerException) as refused:
                anonymous.is_server_live(client_timeout=10)
            codes[name] = refused.value.status()
    assert set(codes.values()) == {"StatusCode.UNAVAILABLE"}, codes
