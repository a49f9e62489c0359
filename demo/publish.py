"""The demo's models in S3: train (or reuse) the example repository, publish it and a model's next version the way
a pipeline would (files first, the `.complete` marker last), and remove what the demo published."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from demo.cluster import S3Repository
from demo.progress import Progress

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

COMPLETE_MARKER = ".complete"
REPOSITORY_ENSEMBLES = ("dual_classifier", "ocr_pipeline", "text_pipeline")
# The rollover publishes version 2 of this model (trained beside the repository, under next/).
ROLL_MODEL = "classifier_b"



def upload(s3: S3Repository, root: Path) -> list[str]:
    """Every file under `root` to `<bucket>/<relative path>`, then a `.complete` marker in each version
    directory, markers last (the runtime takes a version only once its marker is there). Returns the keys."""
    client = s3.client()
    files = sorted(p for p in root.rglob("*") if p.is_file())
    keys: list[str] = []
    for path in files:
        key = path.relative_to(root).as_posix()
        client.put_object(Bucket=s3.bucket, Key=key, Body=path.read_bytes())
        keys.append(key)
    versions = sorted({p.relative_to(root).parts[:2] for p in files if len(p.relative_to(root).parts) > 2})
    for model, version in versions:
        if version.isdigit():
            key = f"{model}/{version}/{COMPLETE_MARKER}"
            client.put_object(Bucket=s3.bucket, Key=key, Body=b"")
            keys.append(key)
    return keys


def upload_version(s3: S3Repository, root: Path, model: str, version: int) -> list[str]:
    """The files of `root/<model>/<version>/`, then its `.complete` marker: a new version as a pipeline would
    publish it."""
    client = s3.client()
    keys: list[str] = []
    directory = root / model / str(version)
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        key = path.relative_to(root).as_posix()
        client.put_object(Bucket=s3.bucket, Key=key, Body=path.read_bytes())
        keys.append(key)
    marker = f"{model}/{version}/{COMPLETE_MARKER}"
    client.put_object(Bucket=s3.bucket, Key=marker, Body=b"")
    return [*keys, marker]


def repository_key() -> str:
    """What the trained example repository depends on: the examples package's files and the versions of the
    libraries that train and export it. Same key, same repository (training is seeded)."""
    import importlib.metadata

    import ensemble_examples

    package = Path(ensemble_examples.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    for library in ("scikit-learn", "numpy", "onnx", "onnxruntime", "scipy"):
        digest.update(f"{library}=={importlib.metadata.version(library)}".encode())
    return digest.hexdigest()[:16]


def trained_repository(progress: Progress, cache: Path, workdir: Path) -> tuple[Path, list[str]]:
    """A copy, under `workdir`, of the example repository the demo's Ensembles need, and beside it (`next/`)
    the version the rollover publishes: trained into `cache/<key>` the first time, copied from there later
    (training takes a while on 2 cores)."""
    from ensemble_examples.repository import build_repository, write_new_version

    cached = cache / f"repository-{repository_key()}"
    if not cached.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".repository-", dir=cache))
        try:
            with progress.ticking("training the example models (scikit-learn) and exporting them to ONNX", 40):
                build_repository(partial / "repository", only=REPOSITORY_ENSEMBLES)
                about = write_new_version(partial / "next", ROLL_MODEL, 2)
                (partial / "next" / "ABOUT").write_text(about)
            partial.rename(cached)
        finally:
            shutil.rmtree(partial, ignore_errors=True)  # gone after the rename; what a failure left otherwise
    else:
        progress.say(f"trained models: cached ({cached})")
    shutil.copytree(cached, workdir, dirs_exist_ok=True)
    root = workdir / "repository"
    return root, sorted(p.name for p in root.iterdir() if p.is_dir())


def remove_models(s3: S3Repository, models: Iterable[str]) -> int:
    """Delete every object under `<model>/` of `models` (what the demo published, finished or not)."""
    client = s3.client()
    removed = 0
    for model in models:
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=s3.bucket, Prefix=f"{model}/"):
            keys: list[ObjectIdentifierTypeDef] = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=s3.bucket, Delete={"Objects": keys})
                removed += len(keys)
    return removed
