from __future__ import annotations

import pytest
from ensemble_runtime.repository.policy import parse_version_dir, select_versions
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc


def policy(text: str) -> mc.ModelVersionPolicy:
    return text_format.Parse(text, mc.ModelVersionPolicy())


@pytest.mark.parametrize(
    ("text", "available", "selected", "missing"),
    [
        ("", [1, 2, 3], [3], []),  # unset policy = latest 1
        ("latest { }", [1, 2, 3], [3], []),  # num_versions 0 means 1
        ("latest { num_versions: 1 }", [3, 1, 2], [3], []),
        ("latest { num_versions: 2 }", [1, 2, 3], [2, 3], []),
        ("latest { num_versions: 5 }", [1, 2], [1, 2], []),
        ("latest { num_versions: 2 }", [], [], []),
        ("latest { num_versions: 1 }", [2, 10, 9], [10], []),  # numeric, not lexicographic
        ("all { }", [3, 1, 2], [1, 2, 3], []),
        ("all { }", [], [], []),
        ("specific { versions: [1, 3] }", [1, 2, 3], [1, 3], []),
        ("specific { versions: [4] }", [1, 2, 3], [], [4]),
        ("specific { versions: [3, 1, 3] }", [1, 3], [1, 3], []),
        ("specific { versions: [1, 7] }", [1, 2], [1], [7]),
    ],
)
def test_select_versions(text: str, available: list[int], selected: list[int], missing: list[int]) -> None:
    result = select_versions(policy(text), available)
    assert list(result.selected) == selected
    assert list(result.missing) == missing


def test_version_zero_and_non_numbers_are_ignored() -> None:
    assert select_versions(policy("all {}"), [0, 1]).selected == (1,)
    assert [parse_version_dir(n) for n in ["1", "10", "01", "0", "v2", "", "3a"]] == [1, 10, None, None, None, None, None]
