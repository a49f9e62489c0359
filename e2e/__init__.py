"""End-to-end test infrastructure (not product code).

`e2e.kubelet` is a stand-in for the kubelet of one node: it runs the pods the scheduler binds to that node
as local processes, so a real control plane (tests.infra.controlplane) can run real Deployments of the
runtime on one machine without a container runtime.
"""
