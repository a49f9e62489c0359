"""Run by test_node_teardown in a child process that is then SIGKILLed, like a crashed test session:
a control plane and a real node with one pod, announced on stdout once the pod is Running."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tests.infra.controlplane import ControlPlane
from tests.infra.node import RealNode
from tests.infra.node_host import primary_ipv4
from tests.infra.node_images import ImageArchive

from .support import create, pod, wait_pod_ready


def main() -> None:
    image = ImageArchive(Path(sys.argv[1]), sys.argv[2])
    with ControlPlane(nodes=(), routable_address=primary_ipv4()) as cp, RealNode(cp, images=[image]):
        create(cp, pod("left-behind", image.tag, security={"runAsUser": 1000}))
        wait_pod_ready(cp, "left-behind")
        print("READY", flush=True)
        signal.pause()  # until the test kills us


if __name__ == "__main__":
    main()
