"""pods_to_refresh: which pods get nudged again because they still report an older repository.json."""

from __future__ import annotations

import pytest
from ensemble_operator.refresh import pods_to_refresh
from ensemble_operator.status import PodReport

HASH_KEY, REFRESH_KEY = "h", "r"
NOW = "2026-11-22T10:00:00Z"
CURRENT, OLD = "digest-new", "digest-old"


def report(digest: str | None, ready: bool = True) -> PodReport:
    return PodReport(name="p", ready=ready, versions=None, config_digest=digest)


@pytest.mark.parametrize(
    ("case", "pod", "annotations", "nudged"),
    [
        ("marked earlier, still old", report(OLD), {HASH_KEY: "H"}, True),
        ("on the current config", report(CURRENT), {HASH_KEY: "H"}, False),
        ("an older runtime reports nothing", report(None), {HASH_KEY: "H"}, False),
        ("not ready", report(OLD, ready=False), {HASH_KEY: "H"}, False),
        ("marked only in this reconcile", report(OLD), {}, False),
        ("marked for an older config", report(OLD), {HASH_KEY: "older"}, False),
        ("nudged 10 s ago", report(OLD), {HASH_KEY: "H", REFRESH_KEY: "2026-11-22T09:59:50Z"}, False),
        ("nudged 40 s ago", report(OLD), {HASH_KEY: "H", REFRESH_KEY: "2026-11-22T09:59:20Z"}, True),
        ("unreadable nudge time", report(OLD), {HASH_KEY: "H", REFRESH_KEY: "yesterday"}, True),
    ],
)
def test_pods_to_refresh(case: str, pod: PodReport, annotations: dict[str, str], nudged: bool) -> None:
    names = pods_to_refresh([pod], {"p": annotations}, HASH_KEY, REFRESH_KEY, "H", CURRENT, NOW, every=30.0)
    assert names == (["p"] if nudged else []), case
