"""Pure logic of remote (S3) model repositories: URIs, listings, completeness, and what a sync changes per model.

Nothing here performs I/O; `s3.py` lists and downloads, `cache.py` writes the local cache, `sync.py`
applies one model's changes to it and `sources.py` puts them together.

Completeness rule (also in docs/s3.md). A version folder `<model>/<version>/` is *complete*, and may be
materialised into the cache and loaded, when either

1. it contains a marker object named `.complete` (`<model>/<version>/.complete`): complete at once, so
   uploaders that write the marker last get their version picked up by the next sync; or
2. its listing (every key below it with size and ETag) is identical in two consecutive syncs: a version
   appears one poll after its upload finished. A model with no previous listing (every model at the first
   sync of a process, a model new to the repository later) is listed twice, `settle_secs` apart (default 1 s).

A version that is not complete is never downloaded. When a version already in the cache changes in S3, the
cached copy is kept unchanged until the new listing is complete, then replaced as a whole.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from ensemble_contract.repository import RepositoryConfig, describe_error
from pydantic import ValidationError
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.repository.policy import parse_version_dir, select_versions

CONFIG_FILENAME = "config.pbtxt"
COMPLETE_MARKER = ".complete"
DEFAULT_REGION = "us-east-1"

# s3://host:port/bucket/prefix (Triton), optionally with an explicit scheme: s3://https://host:port/...
_ENDPOINT_FORM = re.compile(r"^(?:(?P<scheme>https?)://)?(?P<host>[A-Za-z0-9.\-]+):(?P<port>\d{1,5})/(?P<rest>.*)$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


class RemoteURIError(ValueError):
    """An S3 URI this runtime cannot use; the message names the URI and the problem."""


@dataclass(frozen=True, slots=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing '/'; "" for the bucket's root
    endpoint_url: str | None = None  # from Triton's s3://host:port/... form

    def key_prefix(self) -> str:
        """The prefix as used in ListObjectsV2: "" or "a/b/"."""
        return f"{self.prefix}/" if self.prefix else ""

    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def child(self, name: str) -> S3Location:
        prefix = f"{self.prefix}/{name}" if self.prefix else name
        return S3Location(self.bucket, prefix, self.endpoint_url)


def parse_s3_uri(uri: str) -> S3Location:
    """`s3://bucket[/prefix]` or Triton's `s3://host:port/bucket[/prefix]` (endpoint http://host:port)."""
    if not uri.startswith("s3://"):
        raise RemoteURIError(f"{uri!r}: not an s3:// URI")
    rest = uri[len("s3://") :]
    endpoint: str | None = None
    match = _ENDPOINT_FORM.match(rest)
    if match:
        port = int(match["port"])
        if not 0 < port < 65536:
            raise RemoteURIError(f"{uri!r}: port {port} out of range")
        endpoint = f"{match['scheme'] or 'http'}://{match['host']}:{port}"
        rest = match["rest"]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise RemoteURIError(f"{uri!r}: no bucket name")
    if not _BUCKET_NAME.match(bucket):
        raise RemoteURIError(f"{uri!r}: {bucket!r} is not a valid bucket name")
    parts = [part for part in prefix.split("/") if part]
    if any(part in {".", ".."} for part in parts):
        raise RemoteURIError(f"{uri!r}: '.' and '..' are not allowed in the prefix")
    return S3Location(bucket, "/".join(parts), endpoint)


def choose_region(explicit: str | None, env: Mapping[str, str], session_region: str | None) -> str:
    """An explicit value, else AWS_REGION, else AWS_DEFAULT_REGION / the profile's region, else us-east-1."""
    for candidate in (explicit, env.get("AWS_REGION"), env.get("AWS_DEFAULT_REGION"), session_region):
        if candidate:
            return candidate
    return DEFAULT_REGION


@dataclass(frozen=True, slots=True, order=True)
class ObjectInfo:
    key: str  # relative to the model directory (listing) or the repository (raw listing)
    size: int
    etag: str  # without quotes

    @property
    def multipart(self) -> bool:
        return "-" in self.etag


Manifest = tuple[ObjectInfo, ...]  # sorted by key; keys relative to the version folder


@dataclass(frozen=True, slots=True)
class VersionListing:
    version: int
    files: Manifest  # the objects to download (the marker excluded)
    marked_complete: bool = False


@dataclass(frozen=True, slots=True)
class ModelListing:
    name: str
    config: ObjectInfo | None = None
    versions: Mapping[int, VersionListing] = field(default_factory=dict)

    def manifests(self) -> dict[int, Manifest]:
        return {version: listing.files for version, listing in self.versions.items()}


def strip_etag(etag: str) -> str:
    return etag.strip().strip('"')


def group_model(name: str, objects: Iterable[ObjectInfo]) -> ModelListing:
    """One model's objects (keys relative to its folder) as config + version folders (Triton's rules).

    Folder placeholder objects (keys ending in '/') and anything outside `config.pbtxt` and numeric
    version folders are ignored, as Triton ignores them on a local disk.
    """
    config: ObjectInfo | None = None
    files: dict[int, list[ObjectInfo]] = {}
    marked: set[int] = set()
    for item in objects:
        if item.key.endswith("/") or not item.key:
            continue
        if item.key == CONFIG_FILENAME:
            config = item
            continue
        head, sep, rest = item.key.partition("/")
        version = parse_version_dir(head) if sep else None
        if version is None or not rest:
            continue
        if rest == COMPLETE_MARKER:
            marked.add(version)
            files.setdefault(version, [])
            continue
        files.setdefault(version, []).append(ObjectInfo(rest, item.size, item.etag))
    versions = {
        version: VersionListing(version, tuple(sorted(items)), version in marked)
        for version, items in sorted(files.items())
        if items  # a marker alone is not a version
    }
    return ModelListing(name, config, versions)


def split_repository(objects: Iterable[ObjectInfo]) -> dict[str, ModelListing]:
    """A repository listing (keys relative to its prefix) grouped into models by first path component."""
    per_model: dict[str, list[ObjectInfo]] = {}
    for item in objects:
        model, sep, rest = item.key.partition("/")
        if not sep or not model or model.startswith("."):
            continue  # objects at the repository's top level are not models
        per_model.setdefault(model, []).append(ObjectInfo(rest, item.size, item.etag))
    return {name: group_model(name, items) for name, items in sorted(per_model.items())}


def complete_versions(current: ModelListing, previous: ModelListing | None) -> set[int]:
    """The versions of `current` that are complete (see the module docstring)."""
    before = previous.manifests() if previous is not None else {}
    return {
        version
        for version, listing in current.versions.items()
        if listing.marked_complete or before.get(version) == listing.files
    }


@dataclass(frozen=True, slots=True)
class VersionChanges:
    download: tuple[int, ...] = ()  # complete, selected, and absent from the cache or different there
    remove: tuple[int, ...] = ()  # cached but no longer in S3 or no longer selected, and not in use
    kept_in_use: tuple[int, ...] = ()  # would be removed but are being served: removed by a later sync
    pending: tuple[int, ...] = ()  # present in S3 but not complete yet (cached copies, if any, are kept)
    selected: tuple[int, ...] = ()  # what the cache holds for this model once the changes are made
    missing: tuple[int, ...] = ()  # asked for by a `specific` policy but not (completely) in S3
    empty_version: bool = False  # ensemble without version folders: create `<model>/1/`
    awaited: tuple[int, ...] = ()  # pending versions the policy would select once complete (upload in flight)


def needs_second_listing(listed: Collection[str], previous: Collection[str], settle: bool) -> bool:
    """Whether a sync lists again, settle_secs later, before comparing: asked to (`settle`: an explicit load
    cannot wait for the next poll), or some listed model has no earlier listing to compare with (the first sync
    of a process, a model new to the repository)."""
    return settle or any(name not in previous for name in listed)


def settled_baseline(
    previous: Mapping[str, ModelListing], first: Mapping[str, ModelListing], settle: bool
) -> dict[str, ModelListing]:
    """The listings the second listing is compared with: the first listing for the models it was taken for
    (every listed model when `settle`, else those with no earlier listing); the others keep their listing from
    the previous sync, so their versions still need two consecutive polls to agree."""
    return {**previous, **{name: listing for name, listing in first.items() if settle or name not in previous}}


def version_changes(
    listing: ModelListing,
    complete: Collection[int],
    cached: Mapping[int, Manifest | None],
    policy: mc.ModelVersionPolicy,
    in_use: Collection[int] = (),
    ensemble: bool = False,
    died: Collection[int] = (),
) -> VersionChanges:
    """Which versions to download and remove for one model.

    `cached` maps each version folder in the cache to the manifest it was downloaded with (None when
    unknown, e.g. left by an interrupted sync). Selection follows the version policy over the complete
    versions plus the cached versions whose new upload is still pending (they stay served meanwhile).
    `died`: versions the load journal says killed an earlier process while loading. They stay selected (a
    fixed re-upload under the same number must be seen), and the versions the policy picks without them are
    kept too, so that the runtime has the fallback the journal promises (with `latest: 1`, version 1).
    """
    present = set(listing.versions)
    # What the cache already holds byte for byte (same keys, sizes and ETags) needs no second look.
    complete = set(complete) | {v for v in present if cached.get(v) == listing.versions[v].files}
    pending = sorted(present - complete)
    available = complete | {v for v in pending if cached.get(v) is not None}
    if ensemble and not present:
        return _empty_ensemble_changes(cached, in_use)
    selection = select_versions(policy, available)
    selected = set(selection.selected)
    if selected & set(died):
        selected |= set(select_versions(policy, available - set(died)).selected)
    download = sorted(v for v in selected if v in complete and cached.get(v) != listing.versions[v].files)
    dropping = sorted(v for v in cached if v not in selected)
    remove = tuple(v for v in dropping if v not in in_use)
    kept = tuple(v for v in dropping if v in in_use)
    awaited = set(select_versions(policy, available | set(pending)).selected) - selected
    return VersionChanges(
        download=tuple(download),
        remove=remove,
        kept_in_use=kept,
        pending=tuple(pending),
        selected=tuple(sorted(selected)),
        missing=selection.missing,
        awaited=tuple(sorted(awaited)),
    )


def _empty_ensemble_changes(cached: Mapping[int, Manifest | None], in_use: Collection[int]) -> VersionChanges:
    dropping = sorted(v for v in cached if v != 1)
    return VersionChanges(
        remove=tuple(v for v in dropping if v not in in_use),
        kept_in_use=tuple(v for v in dropping if v in in_use),
        selected=(1,),
        empty_version=True,
    )


def removed_model_changes(cached: Collection[int], in_use: Collection[int]) -> VersionChanges:
    """A model gone from the repository: every cached version goes, except those being served."""
    ordered = sorted(cached)
    return VersionChanges(
        remove=tuple(v for v in ordered if v not in in_use),
        kept_in_use=tuple(v for v in ordered if v in in_use),
    )


def in_use_by_model(in_use: Iterable[tuple[str, int]]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for model, version in in_use:
        out.setdefault(model, set()).add(version)
    return out


# --- the operator's repository config (JSON; schema in ensemble_contract.repository) -------------------


class RepositoryConfigError(ValueError):
    """The repository config file is not usable; the message names the field and the problem."""


def parse_repository_config(data: object) -> RepositoryConfig:
    """The decoded JSON the operator writes, validated by the shared schema; S3 sources must also be URIs this
    runtime can use."""
    try:
        config = RepositoryConfig.model_validate(data)
    except ValidationError as exc:
        raise RepositoryConfigError(describe_error(exc)) from None
    for i, model in enumerate(config.models):
        if model.source.startswith("s3://"):
            try:
                parse_s3_uri(model.source)
            except RemoteURIError as exc:
                raise RepositoryConfigError(f"models[{i}].source: {exc}") from None
    return config
