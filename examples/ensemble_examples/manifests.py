"""The operator manifests of the five end-to-end scenarios (`examples/manifests/<folder>/`), for tests to apply.

Each folder holds `models.yaml` (the S3 credentials Secret and the Models, sources `s3://models/<model>`) and
`ensemble.yaml` (the Ensemble). `scenario_documents` reads them and can point them at another S3 endpoint
and credentials, e.g. a test's MinIO server, without editing the files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE_BUCKET = "models"
MANIFEST_FILES = ("models.yaml", "ensemble.yaml")


@dataclass(frozen=True, slots=True)
class Scenario:
    folder: str  # under examples/manifests/
    ensemble: str  # the Ensemble resource's name, which is also the model name the runtime serves it as
    repository_ensemble: str  # the same ensemble's name in the example repository
    gpu: bool  # whether each runtime replica asks for one nvidia.com/gpu


SCENARIOS: Mapping[str, Scenario] = {
    s.folder: s
    for s in (
        Scenario("image", "image-pipeline", "image_pipeline", gpu=True),
        Scenario("segmentation", "seg-pipeline", "seg_pipeline", gpu=True),
        Scenario("ocr", "ocr-pipeline", "ocr_pipeline", gpu=True),
        Scenario("text", "text-pipeline", "text_pipeline", gpu=False),
        Scenario("dual", "dual-classifier", "dual_classifier", gpu=True),
    )
}


def resource_name(model: str) -> str:
    """The Model resource's name for a repository model: Kubernetes names have dashes, not underscores."""
    return model.replace("_", "-")


def manifest_root() -> Path:
    """`examples/manifests` of the source checkout this package lives in."""
    root = Path(__file__).resolve().parent.parent / "manifests"
    if not root.is_dir():
        raise FileNotFoundError(f"no manifests at {root}: ensemble_examples is not running from a source checkout")
    return root


def scenario_documents(
    folder: str,
    *,
    s3_endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
) -> list[dict[str, Any]]:
    """The Secret, the Models and the Ensemble of one scenario, in apply order, as plain dicts.

    `s3_endpoint_url` replaces every Model's `spec.s3.endpointUrl`; the keys replace the Secret's values.
    """
    import yaml  # PyYAML: only reading manifests needs it

    if folder not in SCENARIOS:
        raise KeyError(f"unknown scenario '{folder}' (known: {', '.join(SCENARIOS)})")
    documents: list[dict[str, Any]] = []
    for filename in MANIFEST_FILES:
        text = (manifest_root() / folder / filename).read_text(encoding="utf-8")
        documents.extend(doc for doc in yaml.safe_load_all(text) if doc)
    for doc in documents:
        if doc["kind"] == "Model" and s3_endpoint_url is not None:
            doc["spec"]["s3"]["endpointUrl"] = s3_endpoint_url
        if doc["kind"] == "Secret":
            keys = {"AWS_ACCESS_KEY_ID": access_key_id, "AWS_SECRET_ACCESS_KEY": secret_access_key}
            doc["stringData"].update({key: value for key, value in keys.items() if value is not None})
    return documents
