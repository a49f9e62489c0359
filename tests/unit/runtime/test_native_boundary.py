"""Only protocol/ imports the native protocol core. import-linter cannot check it: the core is a compiled
module, which its import graph does not see, so the sources are read here."""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[3] / "runtime" / "ensemble_runtime"
NATIVE = "ensemble_runtime.protocol._native"


def _imports_native(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name == NATIVE for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom):
            if node.module == NATIVE:
                return True
            if node.module == "ensemble_runtime.protocol" and any(a.name == "_native" for a in node.names):
                return True
    return False


def test_only_protocol_imports_the_native_core() -> None:
    importers = {
        path.relative_to(RUNTIME).as_posix()
        for path in RUNTIME.rglob("*.py")
        if _imports_native(ast.parse(path.read_text(), str(path)))
    }
    assert importers, "the check must see the protocol modules that do import it"
    assert all(name.startswith("protocol/") for name in importers), importers


def test_the_check_sees_an_import_from_below() -> None:
    assert _imports_native(ast.parse("from ensemble_runtime.protocol._native import GrpcCore"))
    assert _imports_native(ast.parse("from ensemble_runtime.protocol import _native"))
    assert not _imports_native(ast.parse("from ensemble_runtime.protocol import grpc_codec"))
