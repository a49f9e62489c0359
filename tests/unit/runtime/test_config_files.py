"""config.pbtxt files are parsed once per file identity, within a size limit (pure logic over a temp dir)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from ensemble_runtime.config.config_files import ConfigFiles
from ensemble_runtime.config.model_config import ConfigError


def test_parsed_once_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m" backend: "python"')
    files = ConfigFiles()
    asyncio.run(files.refresh([path]))
    first = files.read(path)
    assert first is not None and first.name == "m"
    asyncio.run(files.refresh([path]))
    assert files.read(path) is first  # unchanged: the same parse, not a new one
    path.write_text('name: "m" backend: "onnxruntime"')
    os.utime(path, ns=(1, 1))
    changed = files.read(path)
    assert changed is not first and changed is not None and changed.backend == "onnxruntime"
    path.unlink()
    assert files.read(path) is None


def test_over_the_limit_and_too_deep_are_config_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.pbtxt"
    big.write_text('name: "m"\n' + "# filler\n" * 200)
    with pytest.raises(ConfigError, match="over the limit of 1000 bytes"):
        ConfigFiles(max_bytes=1000).read(big)
    deep = tmp_path / "deep.pbtxt"
    deep.write_text("parameters { key: \"k\" value " + "{" * 5000)
    with pytest.raises(ConfigError):
        ConfigFiles(max_bytes=1 << 20).read(deep)
