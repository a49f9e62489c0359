"""Who may make runtime pods carry which credentials and run which image: the admission rules (pure).

A runtime pod carries the S3 credentials of every Model its Ensemble uses (the Secret's keys as environment
variables, or the service account it runs as) and runs the code of all those Models. So whoever decides what
such a pod carries or runs must hold the credentials themselves, checked with an access review for the user
of the admission request:

- a Secret named by `spec.s3.secretRef` needs `get` on that Secret;
- a service account named by `spec.s3.serviceAccountName` needs `impersonate` on that ServiceAccount (what
  Kubernetes' own `edit` role grants for the service accounts of a namespace); `default`, which every pod
  without a name runs as, needs nothing;
- a Model create or spec change is checked for its own credentials and for those of the Models it shares
  an Ensemble with (its code then runs beside them); a Model update that leaves the spec alone is not;
- an Ensemble create, or an update that adds a Model, is checked for the credentials of all its Models;
- the Secret named by an Ensemble's `spec.grpcTls.secretName` (its key is mounted in the pods, beside the
  Models' code) needs `get` where the Ensemble names it anew or adds a Model, and for a Model create or spec
  change in that Ensemble.

An Ensemble may name a runtime image only from an allowlist of repositories, and pass in `extraArgs` only
tunables from an allowlist of runtime flags: the operator sets the control mode, repository, addresses,
ports, cache and restricted-API flags itself (an allowlist, so a flag the runtime gains later, or an
abbreviation argparse would expand, is refused until judged safe).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .api.v1alpha1 import EnsembleSpec, Model, ModelSpec

UNCHECKED_SERVICE_ACCOUNT = "default"

# Runtime flags an Ensemble may pass in spec.runtime.extraArgs (the operator's settings may add more).
DEFAULT_ALLOWED_FLAGS = (
    "--log-verbose",
    "--log-info",
    "--log-warning",
    "--log-error",
    "--log-format",
    "--memory-factor",
    "--repository-settle-secs",
    "--event-loop",
    "--thread-policy",
    "--python-gc",
    "--grpc-native-threads",
    "--http-native-threads",
    "--grpc-max-message-bytes",
    "--http-max-body-bytes",
    "--http-max-json-bytes",
    "--http-body-timeout-secs",
    "--http-max-connections",
    "--http-send-timeout-secs",
    "--max-config-bytes",
    "--grpc-keepalive-time",
    "--grpc-keepalive-timeout",
    "--grpc-handshake-timeout-secs",
    "--grpc-max-concurrent-streams",
    "--grpc-max-connections",
    "--grpc-max-incomplete-calls",
    "--grpc-max-open-streams",
    "--grpc-send-timeout-secs",
    "--grpc-max-connection-age-secs",
    "--grpc-max-connection-age-grace-secs",
)
MAX_IMAGE_LENGTH = 512

# An image reference (the distribution grammar, simplified): repository [":" tag] ["@" digest].
_DOMAIN_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"(?P<repository>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_NEGATIVE_NUMBER = re.compile(r"-[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True)
class UserInfo:
    """The requesting user, as the API server hands it to an admission webhook."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_admission(cls, userinfo: Mapping[str, Any] | None) -> UserInfo:
        info: Mapping[str, Any] = userinfo or {}
        return cls(
            username=str(info.get("username", "")),
            uid=str(info.get("uid", "")),
            groups=tuple(str(g) for g in info.get("groups") or ()),
            extra={str(k): tuple(str(x) for x in v) for k, v in (info.get("extra") or {}).items()},
        )


@dataclass(frozen=True)
class Permission:
    """An RBAC permission on one named object of a namespace (core API group unless `group`)."""

    verb: str
    resource: str
    name: str
    namespace: str
    group: str = ""

    def describe(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"'{self.verb}' on {resource}/{self.name} in namespace '{self.namespace}'"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""
    error: str = ""  # the review itself failed: refused (fail closed), with why


Authorizer = Callable[[UserInfo, Permission], Decision]


@dataclass(frozen=True)
class Credential:
    """Something a Model makes its runtime pods carry, the field that names it, and what using it takes."""

    field: str
    what: str
    permission: Permission


@dataclass(frozen=True)
class Podmate:
    """Another Model served in the same pods as the one under admission, through `ensemble`."""

    ensemble: str
    model: str
    spec: ModelSpec


@dataclass(frozen=True)
class Host:
    """An Ensemble whose pods serve the Model under admission."""

    ensemble: str
    spec: EnsembleSpec


def ensemble_credentials(spec: EnsembleSpec, namespace: str) -> list[Credential]:
    """What an Ensemble itself makes its runtime pods carry: the gRPC port's TLS Secret."""
    if spec.grpc_tls is None:
        return []
    name = spec.grpc_tls.secret_name
    return [Credential("spec.grpcTls.secretName", f"Secret '{name}'", Permission("get", "secrets", name, namespace))]


def model_credentials(spec: ModelSpec, namespace: str) -> list[Credential]:
    s3 = spec.s3
    if s3 is None:
        return []
    found: list[Credential] = []
    if s3.secret_ref is not None:
        name = s3.secret_ref.name
        found.append(
            Credential("spec.s3.secretRef.name", f"Secret '{name}'", Permission("get", "secrets", name, namespace))
        )
    if s3.service_account_name is not None and s3.service_account_name != UNCHECKED_SERVICE_ACCOUNT:
        name = s3.service_account_name
        found.append(
            Credential(
                "spec.s3.serviceAccountName",
                f"ServiceAccount '{name}'",
                Permission("impersonate", "serviceaccounts", name, namespace),
            )
        )
    return found


def image_repository(image: str) -> str | None:
    """The repository part of an image reference (no tag, no digest); None if it is not a reference."""
    if len(image) > MAX_IMAGE_LENGTH:
        return None
    match = _REFERENCE.fullmatch(image)
    return match.group("repository") if match else None


@dataclass(frozen=True)
class RuntimePolicy:
    """Allowed runtime image repositories (an entry ending in '/' allows every repository under it) and
    allowed extraArgs flags."""

    allowed_images: tuple[str, ...]
    allowed_flags: frozenset[str] = frozenset(DEFAULT_ALLOWED_FLAGS)

    def image_refusal(self, image: str) -> str | None:
        repository = image_repository(image)
        if repository is None:
            return f"spec.runtime.image: '{image[:100]}' is not an image reference"
        if any(repository == a or (a.endswith("/") and repository.startswith(a)) for a in self.allowed_images):
            return None
        allowed = ", ".join(self.allowed_images) or "none"
        return (
            f"spec.runtime.image: image repository '{repository}' is not in the operator's allowed runtime "
            f"images ({allowed}); leave the field unset for the default image"
        )

    def flag_refusals(self, args: Sequence[str]) -> list[str]:
        refusals: list[str] = []
        for i, arg in enumerate(args):
            if not arg.startswith("-") or _NEGATIVE_NUMBER.fullmatch(arg):
                continue  # a flag's value
            flag = arg.split("=", 1)[0]
            if flag not in self.allowed_flags:
                refusals.append(
                    f"spec.runtime.extraArgs[{i}]: flag '{flag[:100]}' may not be set by an Ensemble (the operator "
                    "sets the control mode, repository, addresses, ports, cache and API restrictions itself); "
                    f"allowed flags: {', '.join(sorted(self.allowed_flags))}"
                )
        return refusals


def runtime_policy(default_image: str, images: Sequence[str] = (), flags: Iterable[str] = ()) -> RuntimePolicy:
    """`images` (empty: the default image's repository) and the built-in flags plus `flags`."""
    repositories = tuple(images) or tuple(r for r in [image_repository(default_image)] if r)
    return RuntimePolicy(repositories, frozenset(DEFAULT_ALLOWED_FLAGS) | frozenset(flags))


def _refusal(where: str, user: UserInfo, cred: Credential, decision: Decision) -> str:
    p = cred.permission
    if decision.error:
        return f"{where}could not check that user '{user.username}' may use {cred.what}: {decision.error}"
    reason = f" ({decision.reason})" if decision.reason else ""
    return f"{where}user '{user.username}' may not use {cred.what}: missing RBAC permission {p.describe()}{reason}"


@dataclass(frozen=True)
class AccessGate:
    """The admission checks of Models and Ensembles for one requesting user; `authorize` asks the API server."""

    policy: RuntimePolicy
    authorize: Authorizer

    def _check(self, user: UserInfo, checks: Iterable[tuple[str, Credential]]) -> list[str]:
        refusals: list[str] = []
        asked: set[Permission] = set()
        for where, cred in checks:
            if cred.permission in asked:
                continue
            asked.add(cred.permission)
            decision = self.authorize(user, cred.permission)
            if not decision.allowed:
                refusals.append(_refusal(where, user, cred, decision))
        return refusals

    def model(
        self,
        user: UserInfo,
        namespace: str,
        spec: ModelSpec,
        old: ModelSpec | None,
        podmates: Callable[[], Sequence[Podmate]],
        hosts: Callable[[], Sequence[Host]] = tuple,
    ) -> list[str]:
        """Refusals for a Model create (`old` None) or update; `podmates` (the other Models in its pods) and
        `hosts` (the Ensembles serving it) are asked only when needed."""
        if old is not None and old == spec:
            return []
        own = [(f"{c.field}: ", c) for c in model_credentials(spec, namespace)]
        shared = [
            (
                f"spec: this Model runs in the pods of Ensemble '{mate.ensemble}', which carry {c.what} "
                f"(Model '{mate.model}' {c.field}); ",
                c,
            )
            for mate in podmates()
            for c in model_credentials(mate.spec, namespace)
        ]
        hosted = [
            (f"spec: this Model runs in the pods of Ensemble '{host.ensemble}', which carry {c.what} ({c.field}); ", c)
            for host in hosts()
            for c in ensemble_credentials(host.spec, namespace)
        ]
        return self._check(user, [*own, *shared, *hosted])

    def ensemble(
        self,
        user: UserInfo,
        namespace: str,
        spec: EnsembleSpec,
        old: EnsembleSpec | None,
        models: Mapping[str, Model],
    ) -> list[str]:
        """Refusals for an Ensemble create (`old` None) or update; `models` are the namespace's Models."""
        refusals: list[str] = []
        rt, old_rt = spec.runtime, old.runtime if old is not None else None
        if rt.image is not None and (old_rt is None or rt.image != old_rt.image):
            refusal = self.policy.image_refusal(rt.image)
            refusals += [refusal] if refusal else []
        if old_rt is None or rt.extra_args != old_rt.extra_args:
            refusals += self.policy.flag_refusals(rt.extra_args)
        used = [s.model_ref.name for s in spec.steps]
        own = [(f"{c.field}: ", c) for c in ensemble_credentials(spec, namespace)]
        if old is not None and set(used) <= {s.model_ref.name for s in old.steps}:
            # no Model added: the pods run nothing new, and carry nothing new unless the TLS Secret is another
            carried = ensemble_credentials(old, namespace)
            return refusals + self._check(user, [(where, c) for where, c in own if c not in carried])
        checks: list[tuple[str, Credential]] = own
        for i, step in enumerate(spec.steps):
            model = models.get(step.model_ref.name)
            for cred in model_credentials(model.spec, namespace) if model else []:
                where = (
                    f"spec.steps[{i}].modelRef.name: Model '{step.model_ref.name}' brings {cred.what} "
                    f"({cred.field}) into the runtime pods; "
                )
                checks.append((where, cred))
        return refusals + self._check(user, checks)
