"""The runtime's storage status (GET /v2/repository/status): produced by the runtime, decoded by the operator.

Unknown fields are ignored here (unlike repository.json) so that an operator can read a newer runtime; fields
an older runtime did not send decode as their defaults (`models` as None: unknown).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SourceStatus(BaseModel):
    """One model source's last sync: `error` is global (nothing could be listed), `errors` per model[/version]."""

    model_config = ConfigDict(extra="ignore")

    source: str
    error: str | None = None
    errors: dict[str, str] = Field(default_factory=dict)
    last_success: float = 0.0  # unix time of the last sync whose listing worked
    failures: int = 0  # syncs whose listing failed, since start


class StorageStatus(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sources: list[SourceStatus] = Field(default_factory=list)
    reachable: bool = True
    models: dict[str, list[int]] | None = None  # versions found in storage per model
    uploading: dict[str, list[int]] = Field(default_factory=dict)  # versions seen mid-upload, to be selected
    config_digest: str | None = None  # SHA-256 of the repository.json as last applied

    def problem(self) -> str | None:
        """One line when some source cannot be reached, else None."""
        if self.reachable:
            return None
        errors = [f"{s.source}: {s.error}" for s in self.sources if s.error]
        return "; ".join(errors) or "storage unreachable"

    def found(self) -> dict[str, tuple[int, ...]] | None:
        """`models` as sorted tuples without repeats (None: the runtime did not say)."""
        if self.models is None:
            return None
        return {name: tuple(sorted(set(versions))) for name, versions in self.models.items()}


def decode_storage_status(doc: object) -> StorageStatus | None:
    """A decoded JSON document as a StorageStatus; None when it is not one (a malformed answer is unknown)."""
    try:
        return StorageStatus.model_validate(doc, strict=False)
    except ValidationError:
        return None
