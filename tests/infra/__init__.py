"""Test infrastructure: real Kubernetes control plane (etcd, kube-apiserver, controller-manager,
scheduler, kwok) and a real MinIO server on loopback, built from source by ``tools/build-tools.sh``.

Public surface:
    ControlPlane, FakeNode, GPU_NODE, CPU_NODE  (tests.infra.controlplane)
    MinioServer                                 (tests.infra.minio)
    ToolLocator, ToolUnavailable, require        (tests.infra.tools)
    KubeApi, ApiError                            (tests.infra.api: stdlib REST client)
    run_cli, CommandError                        (tests.infra.cli)
    certificate/kubeconfig builders              (tests.infra.certs, tests.infra.kubeconfig)
    pytest fixtures `control_plane`, `minio_server` (tests.infra.conftest_plugin)
"""
