"""Which runtime pods to nudge again because they still run an older repository.json (pure).

After rendering, the operator marks each pod with the config's hash (CONFIG_HASH_ANNOTATION) and the time
(CONFIG_REFRESH_ANNOTATION): a pod update makes the kubelet refresh its mounted ConfigMap at once instead
of at its next periodic sync. The kubelet may still refresh from a cache that has not seen the new
ConfigMap yet; a pod that was marked before this reconcile, yet still reports (GET /v2/repository/status
`config_digest`) the digest of another file `every` seconds after its last mark, is marked again with the
time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from .status import PodReport


def pods_to_refresh(
    reports: Sequence[PodReport],
    annotations_before: Mapping[str, Mapping[str, str]],
    hash_key: str,
    refresh_key: str,
    config_hash: str,
    config_digest: str,
    now: str,
    every: float,
) -> list[str]:
    """Names of ready pods that already carried `config_hash` under `hash_key` before this reconcile but
    report a config digest other than `config_digest`, and were not nudged (`refresh_key`, an RFC 3339
    time) within `every` seconds of `now`. A pod that reports no digest (an older runtime) is left alone."""
    out: list[str] = []
    for report in reports:
        annotations = annotations_before.get(report.name, {})
        if not report.ready or report.config_digest is None or report.config_digest == config_digest:
            continue
        if annotations.get(hash_key) != config_hash:
            continue  # marked only now (or not at all yet): give the kubelet and the runtime's poll a chance
        last = annotations.get(refresh_key)
        if last is not None and _seconds_between(last, now) < every:
            continue
        out.append(report.name)
    return out


def _seconds_between(earlier: str, later: str) -> float:
    try:
        return (_parse(later) - _parse(earlier)).total_seconds()
    except ValueError:
        return float("inf")  # an unreadable mark: nudge again


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
