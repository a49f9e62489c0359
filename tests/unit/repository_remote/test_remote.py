"""Pure parts of remote repositories: URIs, regions, listings, completeness, version changes, the JSON config."""

from __future__ import annotations

import pytest
from ensemble_runtime.repository.remote import (
    DEFAULT_REGION,
    ModelListing,
    ObjectInfo,
    RemoteURIError,
    RepositoryConfigError,
    S3Location,
    VersionListing,
    choose_region,
    complete_versions,
    group_model,
    needs_second_listing,
    parse_repository_config,
    parse_s3_uri,
    removed_model_changes,
    settled_baseline,
    split_repository,
    version_changes,
)
from tritonclient.grpc import model_config_pb2 as mc


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://models", S3Location("models", "")),
        ("s3://models/", S3Location("models", "")),
        ("s3://models/repo", S3Location("models", "repo")),
        ("s3://models/a//b/", S3Location("models", "a/b")),
        ("s3://127.0.0.1:9000/models/repo", S3Location("models", "repo", "http://127.0.0.1:9000")),
        ("s3://minio.svc:9000/models", S3Location("models", "", "http://minio.svc:9000")),
        ("s3://https://s3.example.com:443/models/x", S3Location("models", "x", "https://s3.example.com:443")),
        ("s3://my.bucket-1/x", S3Location("my.bucket-1", "x")),
    ],
)
def test_parse_s3_uri(uri: str, expected: S3Location) -> None:
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("gs://models", "not an s3:// URI"),
        ("s3://", "no bucket"),
        ("s3:///repo", "no bucket"),
        ("s3://Models/x", "not a valid bucket name"),
        ("s3://host:99999/models", "out of range"),
        ("s3://models/../etc", "'..'"),
    ],
)
def test_parse_s3_uri_rejects(uri: str, problem: str) -> None:
    with pytest.raises(RemoteURIError, match=problem):
        parse_s3_uri(uri)


def test_location_helpers() -> None:
    root = S3Location("b", "")
    assert root.key_prefix() == "" and root.uri() == "s3://b"
    child = root.child("m")
    assert child == S3Location("b", "m") and child.key_prefix() == "m/" and child.child("1").uri() == "s3://b/m/1"


@pytest.mark.parametrize(
    ("explicit", "env", "session", "expected"),
    [
        (None, {}, None, DEFAULT_REGION),
        ("eu-west-1", {"AWS_REGION": "x"}, "y", "eu-west-1"),
        (None, {"AWS_REGION": "eu-north-1", "AWS_DEFAULT_REGION": "x"}, "y", "eu-north-1"),
        (None, {"AWS_DEFAULT_REGION": "ap-south-1"}, None, "ap-south-1"),
        (None, {}, "us-west-2", "us-west-2"),
        ("", {"AWS_REGION": ""}, None, DEFAULT_REGION),
    ],
)
def test_choose_region(explicit: str | None, env: dict[str, str], session: str | None, expected: str) -> None:
    assert choose_region(explicit, env, session) == expected


def obj(key: str, size: int = 1, etag: str = "e") -> ObjectInfo:
    return ObjectInfo(key, size, etag)


def test_group_model_follows_triton_layout() -> None:
    listing = group_model(
        "m",
        [
            obj("config.pbtxt", 10, "c"),
            obj("1/model.onnx", 5, "a"),
            obj("1/sub/data.bin", 7, "d"),
            obj("2/"),  # folder placeholder
            obj("2/.complete", 0),  # marker alone is not a version
            obj("3/model.onnx"),
            obj("3/.complete", 0),
            obj("03/model.onnx"),  # leading zero: ignored by Triton
            obj("x/model.onnx"),
            obj("README.md"),
        ],
    )
    assert listing.config == obj("config.pbtxt", 10, "c")
    assert sorted(listing.versions) == [1, 3]
    assert listing.versions[1].files == (obj("model.onnx", 5, "a"), obj("sub/data.bin", 7, "d"))
    assert not listing.versions[1].marked_complete
    assert listing.versions[3].marked_complete and listing.versions[3].files == (obj("model.onnx"),)


def test_split_repository_groups_by_model() -> None:
    models = split_repository([obj("a/config.pbtxt"), obj("a/1/m"), obj("b/2/m"), obj("top.txt"), obj(".x/1/m")])
    assert sorted(models) == ["a", "b"]
    assert models["b"].config is None and sorted(models["b"].versions) == [2]


def listing_of(**versions: tuple[tuple[ObjectInfo, ...], bool]) -> ModelListing:
    return ModelListing(
        "m", obj("config.pbtxt"), {int(k[1:]): VersionListing(int(k[1:]), f, mark) for k, (f, mark) in versions.items()}
    )


A = (obj("model.onnx", 5, "a"),)
B = (obj("model.onnx", 6, "b"),)


@pytest.mark.parametrize(
    ("current", "previous", "expected"),
    [
        (listing_of(v1=(A, False)), None, set()),  # first sight, no marker: not yet
        (listing_of(v1=(A, True)), None, {1}),  # marker: at once
        (listing_of(v1=(A, False)), listing_of(v1=(A, False)), {1}),  # same listing twice
        (listing_of(v1=(B, False)), listing_of(v1=(A, False)), set()),  # still changing
        (listing_of(v1=(A, False), v2=(B, False)), listing_of(v1=(A, False)), {1}),  # v2 appears one poll later
    ],
)
def test_complete_versions(current: ModelListing, previous: ModelListing | None, expected: set[int]) -> None:
    assert complete_versions(current, previous) == expected


def latest(n: int) -> mc.ModelVersionPolicy:
    policy = mc.ModelVersionPolicy()
    policy.latest.num_versions = n
    return policy


def specific(*versions: int) -> mc.ModelVersionPolicy:
    policy = mc.ModelVersionPolicy()
    policy.specific.versions.extend(versions)
    return policy


THREE = listing_of(v1=(A, False), v2=(A, False), v3=(B, False))


@pytest.mark.parametrize(
    ("case", "listing", "complete", "cached", "policy", "in_use", "want"),
    [
        ("fresh latest 2", THREE, {1, 2, 3}, {}, latest(2), (), {"download": (2, 3), "selected": (2, 3)}),
        ("up to date", THREE, {1, 2, 3}, {2: A, 3: B}, latest(2), (), {"download": (), "selected": (2, 3)}),
        ("changed content", THREE, {1, 2, 3}, {2: A, 3: A}, latest(2), (), {"download": (3,)}),
        ("unknown cached dir", THREE, {1, 2, 3}, {3: None}, latest(1), (), {"download": (3,)}),
        (
            "v3 pending: v1, v2",
            THREE,
            {1, 2},
            {},
            latest(2),
            (),
            {"download": (1, 2), "pending": (3,), "awaited": (3,)},
        ),
        ("v3 pending, v2 served", THREE, {1, 2}, {2: A}, latest(1), (2,), {"selected": (2,), "awaited": (3,)}),
        ("pending but not selected", THREE, {1, 2}, {}, specific(1), (), {"pending": (3,), "awaited": ()}),
        ("cached identical counts complete", THREE, set(), {3: B}, latest(1), (), {"download": (), "selected": (3,)}),
        (
            "pending re-upload keeps cached",
            THREE,
            {1, 2},
            {3: A},
            latest(1),
            (),
            {"download": (), "selected": (3,), "remove": (), "awaited": ()},
        ),
        ("policy to specific 1", THREE, {1, 2, 3}, {2: A, 3: B}, specific(1), (), {"download": (1,), "remove": (2, 3)}),
        (
            "removal kept in use",
            THREE,
            {1, 2, 3},
            {2: A, 3: B},
            specific(1),
            (3,),
            {"remove": (2,), "kept_in_use": (3,)},
        ),
        ("deleted from S3", listing_of(v1=(A, False)), {1}, {1: A, 2: A}, latest(5), (), {"remove": (2,)}),
        ("specific missing", THREE, {1, 2}, {}, specific(1, 3, 7), (), {"download": (1,), "missing": (3, 7)}),
    ],
)
def test_version_changes(
    case: str,
    listing: ModelListing,
    complete: set[int],
    cached: dict[int, tuple[ObjectInfo, ...] | None],
    policy: mc.ModelVersionPolicy,
    in_use: tuple[int, ...],
    want: dict[str, tuple[int, ...]],
) -> None:
    changes = version_changes(listing, complete, cached, policy, in_use)
    for field_name, value in want.items():
        assert getattr(changes, field_name) == value, f"{case}: {field_name}"


def test_version_changes_for_ensemble_without_versions() -> None:
    changes = version_changes(ModelListing("e", obj("config.pbtxt")), set(), {2: None}, latest(1), (), ensemble=True)
    assert changes.empty_version and changes.selected == (1,) and changes.remove == (2,)


def test_a_version_that_died_loading_keeps_the_version_to_fall_back_on() -> None:
    """latest(1) over v1..v3 with v3 in the load journal: v3 stays (a fixed re-upload must be seen) and v2, the
    policy's pick without it, is downloaded (or kept) so the restarted runtime has something to serve."""
    fresh = version_changes(THREE, {1, 2, 3}, {3: B}, latest(1), (), died=(3,))
    assert fresh.selected == (2, 3) and fresh.download == (2,) and fresh.remove == ()
    kept = version_changes(THREE, {1, 2, 3}, {2: A, 3: B}, latest(1), (), died=(3,))
    assert kept.selected == (2, 3) and kept.download == () and kept.remove == ()
    # a version the policy does not pick anyway changes nothing; once the journal forgets v3, v2 goes
    assert version_changes(THREE, {1, 2, 3}, {3: B}, latest(1), (), died=(1,)).selected == (3,)
    assert version_changes(THREE, {1, 2, 3}, {2: A, 3: B}, latest(1), ()).remove == (2,)


def test_removed_model_changes() -> None:
    changes = removed_model_changes({1, 2, 3}, {2})
    assert changes.remove == (1, 3) and changes.kept_in_use == (2,)


@pytest.mark.parametrize(
    ("listed", "previous", "settle", "want"),
    [
        ((), (), False, False),  # nothing listed: nothing to compare
        (("a",), (), False, True),  # first sync of a process
        (("a", "b"), ("a",), False, True),  # a model new to the repository
        (("a",), ("a", "b"), False, False),  # every listed model has an earlier listing: the poll compares
        (("a",), ("a",), True, True),  # an explicit load lists twice now
    ],
)
def test_needs_second_listing(listed: tuple[str, ...], previous: tuple[str, ...], settle: bool, want: bool) -> None:
    assert needs_second_listing(listed, previous, settle) is want


def test_settled_baseline_replaces_only_what_the_first_listing_was_taken_for() -> None:
    old_a, old_c = ModelListing("a"), ModelListing("c")
    first_a, first_b = ModelListing("a", obj("config.pbtxt")), ModelListing("b")
    previous = {"a": old_a, "c": old_c}
    first = {"a": first_a, "b": first_b}

    polled = settled_baseline(previous, first, settle=False)
    assert polled == {"a": old_a, "b": first_b, "c": old_c}  # a keeps its last poll: two polls must agree
    assert polled["a"] is old_a

    explicit = settled_baseline(previous, first, settle=True)
    assert explicit["a"] is first_a and explicit["b"] is first_b and explicit["c"] is old_c
    assert previous == {"a": old_a, "c": old_c}  # not changed in place


def test_parse_repository_config() -> None:
    spec = parse_repository_config(
        {
            "models": [
                {"name": "pre", "source": "s3://models/pre"},
                {"name": "cls", "source": "/mnt/cls", "config_pbtxt": "max_batch_size: 4"},
            ],
            "ensembles": [{"name": "pipe", "config_pbtxt": 'platform: "ensemble"'}],
            "s3": {"endpoint_url": "http://minio:9000", "region": "eu-west-1"},
        }
    )
    assert [m.name for m in spec.models] == ["pre", "cls"] and spec.models[1].config_pbtxt == "max_batch_size: 4"
    assert spec.ensembles[0].name == "pipe" and spec.endpoint_url == "http://minio:9000"
    assert spec.names() == {"pre", "cls", "pipe"} and spec.region == "eu-west-1"
    assert parse_repository_config({}).names() == set()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([], "JSON object"),
        ({"model": []}, "unknown top-level field"),
        ({"models": {}}, "models: expected a list"),
        ({"models": ["x"]}, r"models\[0\]: expected an object"),
        ({"models": [{"name": "a/b", "source": "/x"}]}, "not a valid model name"),
        ({"models": [{"name": "a"}]}, r"models\[0\].source: required"),
        ({"models": [{"name": "a", "source": "relative/dir"}]}, "neither s3:// nor an absolute"),
        ({"models": [{"name": "a", "source": "s3://"}]}, "no bucket"),
        ({"models": [{"name": "a", "source": "/x", "extra": 1}]}, "unknown field"),
        ({"models": [{"name": "a", "source": "/x", "config_pbtxt": 3}]}, "expected a string"),
        ({"models": [{"name": "a", "source": "/x"}], "ensembles": [{"name": "a", "config_pbtxt": "x"}]}, "twice"),
        ({"ensembles": [{"name": "e"}]}, "config_pbtxt is required"),
        ({"s3": []}, "s3: expected an object"),
    ],
)
def test_parse_repository_config_rejects(data: object, problem: str) -> None:
    with pytest.raises(RepositoryConfigError, match=problem):
        parse_repository_config(data)
