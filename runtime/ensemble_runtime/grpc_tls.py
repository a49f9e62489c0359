"""TLS on the gRPC port, from Triton's flags: `--grpc-use-ssl`, `--grpc-use-ssl-mutual` (which implies it),
`--grpc-server-cert`, `--grpc-server-key` and, for mutual TLS, `--grpc-root-cert` (the certificates a client's
must chain to). The files are read at start, and again while serving (ensemble_runtime.tls_watch) to take
renewed ones; what is in them is checked by the native core's rules, which name the file that is wrong."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# A certificate chain or key is a few KiB; a file far larger is not one (and is not read whole).
MAX_PEM_BYTES = 1024 * 1024


@dataclass(frozen=True)
class GrpcTls:
    """The PEM text the gRPC port serves TLS with."""

    certificate_chain: bytes
    private_key: bytes
    client_roots: bytes | None  # mutual TLS: a client must present a certificate these signed

    @property
    def mutual(self) -> bool:
        return self.client_roots is not None

    def describe(self) -> str:
        return "mutual TLS" if self.mutual else "TLS"

    @property
    def pem(self) -> tuple[bytes, bytes, bytes | None]:
        """(certificate chain, private key, client roots), as the native core takes them."""
        return self.certificate_chain, self.private_key, self.client_roots

    @property
    def flag(self) -> str:
        """The flag that asked for it, for what is said about it."""
        return "--grpc-use-ssl-mutual" if self.mutual else "--grpc-use-ssl"


def tls_from_flags(use_ssl: bool, use_ssl_mutual: bool, server_cert: Path | None, server_key: Path | None,
                   root_cert: Path | None) -> GrpcTls | None:
    """The port's TLS as the flags ask for it (None: plaintext); ValueError naming the flag that is wrong."""
    if not (use_ssl or use_ssl_mutual):
        return None
    why = "--grpc-use-ssl-mutual" if use_ssl_mutual else "--grpc-use-ssl"
    chain = read_pem("--grpc-server-cert", server_cert, why)
    key = read_pem("--grpc-server-key", server_key, why)
    roots = read_pem("--grpc-root-cert", root_cert, why) if use_ssl_mutual else None
    return GrpcTls(chain, key, roots)


def read_pem(flag: str, path: Path | None, why: str) -> bytes:
    """The file `flag` names, which `why` requires; ValueError if it is missing, unreadable, empty or too large."""
    if path is None:
        raise ValueError(f"{why} needs {flag}")
    try:
        with path.open("rb") as file:
            text = file.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r}: {exc.strerror or exc}") from None
    if not text.strip():
        raise ValueError(f"{flag} {str(path)!r}: the file is empty")
    if len(text) > MAX_PEM_BYTES:
        raise ValueError(f"{flag} {str(path)!r}: larger than {MAX_PEM_BYTES} bytes, not a certificate or key")
    return text
