"""The gRPC port's TLS from Triton's flags (`grpc_tls.tls_from_flags`): which files each mode needs, and files
refused before anything reads them whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_runtime.grpc_tls import MAX_PEM_BYTES, GrpcTls, tls_from_flags
from ensemble_runtime.settings import parse_settings


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name in ("cert", "key", "root"):
        made[name] = tmp_path / f"{name}.pem"
        made[name].write_bytes(f"-----BEGIN {name}-----\n".encode())
    return made


def test_plaintext_unless_asked_whatever_files_are_named(files: dict[str, Path]) -> None:
    assert tls_from_flags(False, False, files["cert"], files["key"], files["root"]) is None


def test_tls_reads_the_certificate_and_key_and_mutual_tls_the_roots_too(files: dict[str, Path]) -> None:
    tls = tls_from_flags(True, False, files["cert"], files["key"], files["root"])
    assert tls == GrpcTls(files["cert"].read_bytes(), files["key"].read_bytes(), None)
    assert (tls.describe(), tls.flag) == ("TLS", "--grpc-use-ssl")
    mutual = tls_from_flags(False, True, files["cert"], files["key"], files["root"])
    assert mutual == GrpcTls(files["cert"].read_bytes(), files["key"].read_bytes(), files["root"].read_bytes())
    assert (mutual.describe(), mutual.flag) == ("mutual TLS", "--grpc-use-ssl-mutual")


@pytest.mark.parametrize(("use_ssl", "mutual", "left_out", "said"), [
    (True, False, "cert", "--grpc-use-ssl needs --grpc-server-cert"),
    (True, False, "key", "--grpc-use-ssl needs --grpc-server-key"),
    (True, True, "root", "--grpc-use-ssl-mutual needs --grpc-root-cert"),
])
def test_each_file_a_mode_needs_is_named_when_missing(files: dict[str, Path], use_ssl: bool, mutual: bool,
                                                       left_out: str, said: str) -> None:
    given = {name: (None if name == left_out else path) for name, path in files.items()}
    with pytest.raises(ValueError, match=said):
        tls_from_flags(use_ssl, mutual, given["cert"], given["key"], given["root"])


def test_an_empty_file_a_directory_and_one_larger_than_any_certificate_are_refused(files: dict[str, Path],
                                                                                    tmp_path: Path) -> None:
    files["key"].write_bytes(b" \n")
    with pytest.raises(ValueError, match=r"--grpc-server-key '.*key\.pem': the file is empty"):
        tls_from_flags(True, False, files["cert"], files["key"], None)
    with pytest.raises(ValueError, match=r"--grpc-server-cert '.*': Is a directory"):
        tls_from_flags(True, False, tmp_path, files["key"], None)
    with files["cert"].open("ab") as grown:
        grown.truncate(MAX_PEM_BYTES + 1)
    with pytest.raises(ValueError, match=f"larger than {MAX_PEM_BYTES} bytes"):
        tls_from_flags(True, False, files["cert"], files["key"], None)


def test_the_flags_are_checked_as_they_are_parsed(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    settings = parse_settings(["--grpc-use-ssl-mutual=true", f"--grpc-server-cert={files['cert']}",
                               f"--grpc-server-key={files['key']}", f"--grpc-root-cert={files['root']}"])
    assert settings.grpc_tls() is not None
    with pytest.raises(SystemExit):
        parse_settings(["--grpc-use-ssl=true", f"--grpc-server-cert={files['cert']}"])
    assert "--grpc-use-ssl needs --grpc-server-key" in capsys.readouterr().err
