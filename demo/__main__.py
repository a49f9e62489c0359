"""`python -m demo` (`make demo`): the main job end to end on the embedded cluster, or with `--kubeconfig` on
a cluster of yours.

    make demo                                   # embedded: builds what it needs on the first run (root)
    make demo DEMO_ARGS="--kubeconfig ..."      # the same as below
    python -m demo --kubeconfig [PATH] \\
        --runtime-image registry.example.com/ensemble-runtime:0.1.0 \\
        --operator-image registry.example.com/ensemble-operator:0.1.0 \\
        --s3-endpoint http://minio.storage.svc:9000 --s3-bucket models   # keys: AWS_ACCESS_KEY_ID/SECRET

With --kubeconfig the S3 endpoint must be reachable from this machine (the demo uploads the models) and from
the cluster's pods under the same URL, and the images must be pullable by the cluster (`make images`, then
push the tarballs' images to your registry). The runtime-only demo is `make demo-runtime`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from demo import build, flow
from demo.cluster import S3Repository, Target, embedded, external
from demo.progress import Progress
from tests.infra.tools import ToolLocator

CACHE = Path.home() / ".cache" / "ensemble-operator" / "demo"
LOG_DIR = CACHE / "logs"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description="make demo: the main job end to end",
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--kubeconfig", type=Path, nargs="?", default=None,
                        const=Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config"),
                        help="deploy to this cluster instead of the embedded one (opt-in; without a path: "
                             "$KUBECONFIG, else ~/.kube/config)")
    parser.add_argument("--runtime-image", default=None, help="with --kubeconfig: the runtime image reference")
    parser.add_argument("--operator-image", default=None, help="with --kubeconfig: the operator image repository:tag")
    parser.add_argument("--s3-endpoint", default=None, help="with --kubeconfig: S3 endpoint URL")
    parser.add_argument("--s3-bucket", default="models", help="with --kubeconfig: bucket for the models")
    parser.add_argument("--keep", action="store_true", help="leave everything running at the end (Ctrl-C stops)")
    args = parser.parse_args(argv)
    if args.kubeconfig is not None:
        missing = [flag for flag, value in (("--runtime-image", args.runtime_image),
                                            ("--operator-image", args.operator_image),
                                            ("--s3-endpoint", args.s3_endpoint)) if not value]
        if missing:
            parser.error(f"--kubeconfig needs {', '.join(missing)}")
    return args


def _s3_from_env(endpoint: str, bucket: str) -> S3Repository:
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        raise SystemExit("--s3-endpoint needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
    return S3Repository(endpoint, bucket, access, secret)


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = parse(argv)
    locator = ToolLocator()
    stages = 6 if args.kubeconfig is not None else 8
    progress = Progress(out, stages, interactive=out.isatty())
    figures = flow.Figures()
    workdir = Path(tempfile.mkdtemp(prefix="ensemble-demo-"))
    print(f"ensemble-operator demo: {'your cluster' if args.kubeconfig else 'an embedded cluster on this machine'}"
          f" (work files in {workdir})", file=out, flush=True)
    began = time.monotonic()
    failed: BaseException | None = None
    with ExitStack() as stack:
        target: Target
        if args.kubeconfig is None:
            if os.geteuid() != 0:
                raise SystemExit("the embedded cluster runs a real kubelet and containerd: run as root "
                                 "(or pass --kubeconfig for a cluster of yours)")
            with progress.stage("Building what the demo needs (cached after the first run)"):
                build.ensure_tools(progress, LOG_DIR, locator)
                images = build.ensure_images(progress, LOG_DIR)
            with progress.stage("Starting the embedded cluster: control plane, MinIO, a real node"):
                target = stack.enter_context(embedded(progress, locator, images["runtime-cpu"], images["operator"],
                                                      workdir))
                progress.say(target.kube.kubectl("get", "nodes", "-o", "wide").stdout.rstrip())
        else:
            s3 = _s3_from_env(args.s3_endpoint, args.s3_bucket)
            target = external(args.kubeconfig, locator, args.runtime_image, args.operator_image, s3)
        figures.cluster = target.description
        published: list[str] = []
        installed = False
        try:
            with progress.stage("Training the example models and publishing them to the S3 repository"):
                root, published = flow.publish_models(progress, target.s3, workdir, figures, CACHE)
            with progress.stage("Installing the operator with Helm"):
                installed = flow.install_operator(progress, target, workdir)
            with progress.stage("kubectl apply: Models and Ensembles, until Ready"):
                flow.deploy(progress, target, figures)
            with progress.stage("The example client, in a pod, through the Ensembles' Services (gRPC)"):
                flow.run_client(progress, target, figures)
            with progress.stage(f"Publishing {flow.ROLL_MODEL} version 2 while a load runs"):
                flow.rollover(progress, target, root, figures)
        except BaseException as exc:  # still clean up, then report
            failed = exc
        if args.keep and failed is None:
            progress.say(f"--keep: KUBECONFIG={target.kube.kubeconfig} kubectl get ensembles -n {flow.NAMESPACE}; "
                         "Ctrl-C to stop")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        with progress.stage("Cleaning up"):
            flow.clean_up(progress, target, published, uninstall=installed)
            if target.embedded:
                with progress.ticking("stopping the embedded cluster", 10):
                    stack.close()
    total = time.monotonic() - began
    print("\nSummary", file=out)
    for line in flow.summary_lines(figures, progress.durations, total):
        print(f"  {line}", file=out)
    if failed is not None:
        print(f"\nthe demo FAILED: {type(failed).__name__}: {failed}", file=out, flush=True)
        return 1
    ok = figures.client_ok and figures.rollover.get("failed") == 0 and figures.rollover.get("mixed") == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
