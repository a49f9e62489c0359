"""The pods bound to the node: list + watch through the API, one `PodWorker` per pod UID."""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable

from .api import JSON, ApiError, KubeClient, pod_path
from .worker import PodWorker

log = logging.getLogger(__name__)

WATCH_SECONDS = 5  # each watch request ends after this long (and resumes), so stop() is prompt


class PodManager:
    """Keeps one worker per pod bound to `node_name` until the pod object is removed."""

    def __init__(self, client: KubeClient, node_name: str, make_worker: Callable[[JSON], PodWorker]) -> None:
        self._client = client
        self._node = node_name
        self._make_worker = make_worker
        self._workers: dict[str, PodWorker] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"pods of {node_name}", daemon=True)
        self.synced = threading.Event()  # the first list has been handled

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and kill every pod's processes (pod objects stay; the node is going away)."""
        self._stop.set()
        self._thread.join(WATCH_SECONDS + 20)
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.shutdown()
        for worker in workers:
            worker.join(30)

    def workers(self) -> list[PodWorker]:
        with self._lock:
            return list(self._workers.values())

    def _loop(self) -> None:
        params = {"fieldSelector": f"spec.nodeName={self._node}"}
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._relist(params)
                for event in self._client.watch(
                    "/api/v1/pods", {**params, "resourceVersion": version, "allowWatchBookmarks": "true"}, WATCH_SECONDS
                ):
                    if event["type"] == "ERROR":
                        version = ""  # e.g. 410 Gone: the version is too old; list again
                        break
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        self._handle(event["type"], event["object"])
                    if self._stop.is_set():
                        break
            except Exception:  # the API server being slow or away must not end the loop
                log.exception("pod watch failed; listing again")
                version = ""
                self._stop.wait(0.5)

    def _relist(self, params: dict[str, str]) -> str:
        query = urllib.parse.urlencode(params)
        listing = self._client.request("GET", f"/api/v1/pods?{query}")
        seen = set()
        for pod in listing.get("items") or []:
            seen.add(pod["metadata"]["uid"])
            self._handle("MODIFIED", pod)
        with self._lock:
            vanished = [w for uid, w in self._workers.items() if uid not in seen]
        for worker in vanished:
            self._handle("DELETED", worker.pod)
        self.synced.set()
        version: str = listing["metadata"]["resourceVersion"]
        return version

    def _handle(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            worker = self._workers.get(uid)
            if kind == "DELETED":
                self._workers.pop(uid, None)
        if kind == "DELETED":
            if worker is not None:
                worker.gone()
            return
        if worker is not None:
            worker.update(pod)
            return
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return  # finished before we saw it (e.g. by an earlier stand-in); nothing to run
        if pod["metadata"].get("deletionTimestamp"):
            self._remove_unstarted(pod)
            return
        worker = self._make_worker(pod)
        with self._lock:
            self._workers[uid] = worker
        log.info("pod %s/%s bound to %s: starting", pod["metadata"]["namespace"], pod["metadata"]["name"], self._node)
        worker.start()

    def _remove_unstarted(self, pod: JSON) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        try:
            self._client.request("DELETE", pod_path(meta["namespace"], meta["name"]), body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `predicate` until true; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
