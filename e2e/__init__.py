"""End-to-end test infrastructure (not product code).

The suite runs on a real node (tests.infra.node: kubelet, containerd, kube-proxy) beside a real control plane,
with the images `make images` builds, installed through the chart (`e2e.real_stack`, `e2e.scenario`).
"""
