"""repository.json: the models and ensembles a runtime serves, as the operator writes it and the runtime reads it.

Mounted at /etc/ensemble/repository.json and re-read by the runtime on every poll. Unknown fields are refused
on both sides, so a field one side adds and the other does not know fails loudly instead of being ignored.
`describe_error` turns a validation failure into one line naming the field and the problem.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .names import valid_model_name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_name(name: str) -> str:
    if not valid_model_name(name):
        raise ValueError(f"{name!r} is not a valid model name")
    return name


class RepositoryModel(_Strict):
    """A model: where its versions live (s3://... or an absolute directory) and an optional config override."""

    name: str
    source: str = Field(default="", validate_default=True)
    config_pbtxt: str | None = None  # overrides the source's config.pbtxt

    _name = field_validator("name")(_check_name)

    @field_validator("source")
    @classmethod
    def _source_form(cls, source: str) -> str:
        if not source:
            raise ValueError("required (s3://bucket/prefix or an absolute directory)")
        if not source.startswith("s3://") and ("://" in source or not source.startswith("/")):
            raise ValueError(f"{source!r} is neither s3:// nor an absolute directory")
        return source


class RepositoryEnsemble(_Strict):
    """An ensemble: its config.pbtxt (the runtime creates its empty version folder)."""

    name: str
    config_pbtxt: str = ""

    _name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _has_config(self) -> RepositoryEnsemble:
        if not self.config_pbtxt:
            raise ValueError("config_pbtxt is required")
        return self


class S3Settings(_Strict):
    endpoint_url: str | None = None
    region: str | None = None


class RepositoryConfig(_Strict):
    """The whole document. Every name (models and ensembles together) appears once."""

    models: list[RepositoryModel] = Field(default_factory=list)
    ensembles: list[RepositoryEnsemble] = Field(default_factory=list)
    s3: S3Settings | None = None

    @model_validator(mode="after")
    def _names_once(self) -> RepositoryConfig:
        seen: set[str] = set()
        entries = [("models", i, m.name) for i, m in enumerate(self.models)]
        entries += [("ensembles", i, e.name) for i, e in enumerate(self.ensembles)]
        for kind, i, name in entries:
            if name in seen:
                raise ValueError(f"{kind}[{i}].name: '{name}' is declared twice")
            seen.add(name)
        return self

    def names(self) -> set[str]:
        return {m.name for m in self.models} | {e.name for e in self.ensembles}

    @property
    def endpoint_url(self) -> str | None:
        return self.s3.endpoint_url if self.s3 is not None else None

    @property
    def region(self) -> str | None:
        return self.s3.region if self.s3 is not None else None

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True, indent=2) + "\n"


_KINDS = {
    "list_type": "expected a list",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "dict_type": "expected an object",
    "string_type": "expected a string",
    "missing": "required",
}


def describe_error(error: ValidationError) -> str:
    """The first problem of a RepositoryConfig validation as `<where>: <problem>` (e.g. `models[0].source: ...`)."""
    first: Any = error.errors(include_url=False)[0]
    loc: tuple[int | str, ...] = tuple(first["loc"])
    kind: str = first["type"]
    if kind == "extra_forbidden":
        where, field = _where(loc[:-1]), loc[-1]
        if not where:
            return f"unknown top-level field(s): {field}"
        return f"{where}: unknown field(s): {field}"
    if kind == "model_type" and not loc:
        return f"expected a JSON object at the top level, got {type(first['input']).__name__}"
    problem = str(first["ctx"]["error"]) if kind == "value_error" else _KINDS.get(kind, first["msg"])
    where = _where(loc)
    return f"{where}: {problem}" if where else problem


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
