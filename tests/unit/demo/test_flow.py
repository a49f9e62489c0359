"""The demo's pure parts: which documents it applies, and the summary it ends with."""

from __future__ import annotations

from demo import flow
from demo.cluster import S3Repository, documents_for, manifest_yaml

S3 = S3Repository("http://10.0.0.5:9000", "models", "key", "secret")


def test_documents_for_points_models_at_the_repository_and_fits_ensembles() -> None:
    docs = documents_for(flow.FOLDERS, S3, flow.REPLICAS, "100m")
    ensembles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Ensemble"}
    assert set(ensembles) == set(flow.REPLICAS) == set(flow.CLIENT_CHECKS.values())
    for name, doc in ensembles.items():
        assert doc["spec"]["replicas"] == flow.REPLICAS[name]
        assert doc["spec"]["resources"]["requests"]["cpu"] == "100m"
    models = [d for d in docs if d["kind"] == "Model"]
    assert models and all(m["spec"]["s3"]["endpointUrl"] == S3.endpoint_url for m in models)
    assert all(m["spec"]["source"].startswith("s3://models/") for m in models)
    secrets = [d for d in docs if d["kind"] == "Secret"]
    assert len(secrets) == 1  # each scenario carries the same Secret: applied once
    assert secrets[0]["stringData"] == {"AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"}
    steps = {s["modelRef"]["name"] for e in ensembles.values() for s in e["spec"]["steps"]}
    assert steps == {m["metadata"]["name"] for m in models}  # every step's Model, and no other


def test_documents_for_another_bucket_rewrites_the_sources() -> None:
    docs = documents_for(("dual",), S3Repository("http://s3", "team-models", "k", "s"), {}, "1")
    sources = [d["spec"]["source"] for d in docs if d["kind"] == "Model"]
    assert sources and all(s.startswith("s3://team-models/") for s in sources)


def test_is_ready_needs_all_replicas_for_the_current_generation() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "AllReplicasReady"}
    obj = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "conditions": [ready]}}
    assert flow.is_ready(obj)
    assert not flow.is_ready({**obj, "status": {"observedGeneration": 1, "conditions": [ready]}})
    assert not flow.is_ready({**obj, "status": {"observedGeneration": 2, "conditions": [{**ready, "reason": "Some"}]}})
    assert not flow.is_ready({"metadata": {"generation": 1}})


def test_summary_reports_the_rollover_and_a_failed_client() -> None:
    figures = flow.Figures(cluster="embedded", published="3 models", ready_s=41.25, pods=4,
                           client=["RESULT digits: ensemble 97.1%"], client_ok=False,
                           rollover={"model": "classifier-b", "switch_s": 6.2, "requests": 900, "old": 300,
                                     "new": 600, "failed": 0, "mixed": 0, "wrong": 0})
    text = "\n".join(flow.summary_lines(figures, {"Install: helm": 12.4}, 170.0))
    assert "Ready 41.2 s after kubectl apply" in text
    assert "digits: ensemble 97.1%" in text and "FAILED" in text
    assert "classifier-b 1 -> 2 under load" in text and "0 failed, 0 mixed, 0 wrong" in text
    assert "Install 12s" in text and "total         170 s" in text


def test_manifests_are_written_so_kubectl_reads_back_every_string() -> None:
    """kubectl's YAML 1.1 turns a bare Y into a boolean and -0123456789 into a number: every string is quoted."""
    import yaml

    docs = documents_for(flow.FOLDERS, S3, flow.REPLICAS, "100m")
    text = manifest_yaml(docs)
    assert '"-0123456789"' in text
    assert list(yaml.safe_load_all(text)) == docs
    for line in text.splitlines():
        _key, _, value = line.strip().lstrip("- ").partition(": ")
        if value and not value.startswith(("{", "[")):
            assert value.startswith('"') or value.replace(".", "").isdigit() or value in {"true", "false"}, line
