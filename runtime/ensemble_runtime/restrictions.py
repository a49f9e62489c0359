"""Triton's endpoint restrictions: `--grpc-restricted-protocol` / `--http-restricted-api`. Pure.

`<category>[,<category>...]:<key>=<value>`, repeatable: each listed API category then answers only requests
that carry the header `<key>` (HTTP) or the metadata `triton-grpc-protocol-<key>` (gRPC) with exactly
`<value>`; a category may appear in one group only. Categories not named stay open. Values are compared in
constant time. The transports (protocol/) map each route and RPC to a category and refuse with Triton's
answers: HTTP 403 `This API is restricted, expecting header '<key>'`, gRPC UNAVAILABLE
`This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'`.
"""

from __future__ import annotations

import enum
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an HTTP header name (RFC 9110 token)
_UNEXPANDED = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_]*\)")  # a Kubernetes $(VAR) that was not expanded


class Category(enum.Enum):
    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


class RestrictionError(ValueError):
    """A malformed restriction flag; the message names the problem."""


@dataclass(frozen=True, slots=True)
class Restriction:
    header: str  # as the client sends it (lower case for gRPC metadata)
    value: str = field(repr=False)

    def allows(self, presented: str | None) -> bool:
        """Whether a request carrying `presented` (None: header absent) may use the category; constant time."""
        if presented is None:
            return False
        return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), self.value.encode("utf-8"))

    def refusal(self, api: str) -> str:
        """Triton's message: `This API is restricted, ...` (HTTP) / `This protocol is restricted, ...` (gRPC)."""
        return f"This {api} is restricted, expecting header '{self.header}'"


@dataclass(frozen=True, slots=True)
class Restrictions:
    """Category -> the restriction on it; categories absent are open."""

    by_category: Mapping[Category, Restriction] = field(default_factory=dict)

    def get(self, category: Category | None) -> Restriction | None:
        return None if category is None else self.by_category.get(category)


def parse_group(text: str) -> tuple[list[Category], str, str]:
    """One flag value: `cat1,cat2:key=value` -> (categories, key, value)."""
    categories_text, colon, pair = text.partition(":")
    key, equals, value = pair.partition("=")
    if not colon or not equals:
        raise RestrictionError(
            f"'{text}': expected <category>[,<category>...]:<key>=<value>"
        )
    names = [c.strip() for c in categories_text.split(",")]
    known = {c.value: c for c in Category}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise RestrictionError(
            f"'{categories_text}': unknown categor{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(repr(n) for n in unknown)} (known: {', '.join(known)})"
        )
    key = key.strip()
    if not _TOKEN.match(key):
        raise RestrictionError(f"restricted key '{key}' is not a valid header name")
    if not value:
        raise RestrictionError(f"restricted key '{key}' has an empty value")
    if _UNEXPANDED.search(value):
        raise RestrictionError(
            f"the value for '{key}' contains an unexpanded variable reference (is the environment variable set?)"
        )
    return [known[n] for n in names], key, value


def parse_restrictions(groups: Iterable[str], *, grpc: bool) -> Restrictions:
    """All groups of one flag; a category named twice is an error, as in Triton."""
    out: dict[Category, Restriction] = {}
    for text in groups:
        categories, key, value = parse_group(text)
        header = f"{GRPC_HEADER_PREFIX}{key}".lower() if grpc else key.lower()
        for category in categories:
            if category in out:
                raise RestrictionError(f"category '{category.value}' is named in more than one restricted group")
            out[category] = Restriction(header, value)
    return Restrictions(out)
