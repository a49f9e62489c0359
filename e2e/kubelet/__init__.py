"""A kubelet stand-in for one node: the pods bound to it run as local processes.

Modules: `api` (REST client from a kubeconfig), `node` (Node object, Ready condition, Lease heartbeat),
`pods` (list + watch of the node's pods, one worker each), `worker` (a pod's life), `container` (a
container's runs, probes, restarts), `process` (environment, command line, private mount namespace),
`volumes` (ConfigMap/Secret/emptyDir/hostPath/projected volumes, kept in sync), `network` (a loopback
address per pod), `probes`, `status` (pod status written through the API), `main` (`KubeletStandIn`, CLI).
"""

from .main import KubeletStandIn, default_base_env, default_runtime_command
from .node import NodeSpec

__all__ = ["KubeletStandIn", "NodeSpec", "default_base_env", "default_runtime_command"]
