"""Fixtures for the operator unit tests: the example manifests as real pydantic objects."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT / "operator") not in sys.path:  # the package may not be installed in the venv
    sys.path.insert(0, str(REPO_ROOT / "operator"))

from ensemble_operator.api.v1alpha1 import Ensemble, Model  # noqa: E402

EXAMPLES = REPO_ROOT / "examples" / "manifests"
NAMESPACE = "ml"


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def with_meta(doc: dict[str, Any], uid: str, generation: int = 1) -> dict[str, Any]:
    meta = {**doc["metadata"], "namespace": NAMESPACE, "uid": uid, "generation": generation}
    return {**doc, "metadata": meta}


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def models() -> dict[str, Model]:
    docs = [d for d in load_docs(EXAMPLES / "models.yaml") if d["kind"] == "Model"]
    return {
        d["metadata"]["name"]: Model.model_validate(with_meta(d, f"uid-{d['metadata']['name']}"))
        for d in docs
    }


@pytest.fixture
def ensemble() -> Ensemble:
    (doc,) = load_docs(EXAMPLES / "ensemble.yaml")
    return Ensemble.model_validate(with_meta(doc, "uid-ensemble", generation=3))
