"""Importing model.py: unique package per load, sibling imports, the pb_utils alias, and release."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ensemble_runtime.backends.python import pb_utils
from ensemble_runtime.backends.python.loader import load_model_module

ALIASES = {"triton_python_backend_utils": "ensemble_runtime.backends.python.pb_utils"}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_alias_gives_the_api_and_loads_are_independent(tmp_path: Path) -> None:
    model = write(tmp_path / "m" / "1" / "model.py", "import triton_python_backend_utils as pb\nSTATE = []\n")
    first = load_model_module(model, "m", 1, ALIASES)
    second = load_model_module(model, "m", 1, ALIASES)
    try:
        assert first.module.pb is pb_utils
        assert first.module is not second.module
        first.module.STATE.append(1)
        assert second.module.STATE == []
        assert first.module.__file__ == str(model)
    finally:
        first.release()
        second.release()
    assert first.package not in sys.modules and second.package not in sys.modules


def test_installed_packages_win_over_siblings_as_in_triton(tmp_path: Path) -> None:
    write(tmp_path / "m" / "1" / "json.py", "raise AssertionError('the sibling must not shadow json')\n")
    model = write(tmp_path / "m" / "1" / "model.py", "import json\nDUMPS = json.dumps\n")
    loaded = load_model_module(model, "m", 1)
    try:
        assert loaded.module.DUMPS({"a": 1}) == '{"a": 1}'
    finally:
        loaded.release()


def test_a_missing_sibling_is_a_module_not_found_error(tmp_path: Path) -> None:
    model = write(tmp_path / "m" / "1" / "model.py", "from .nothing_here import x\n")
    with pytest.raises(ModuleNotFoundError, match="nothing_here"):
        load_model_module(model, "m", 1)
    assert not [name for name in sys.modules if name.startswith("_triton_model_m_v1_")]
