"""`ensemble-runtime`: composition root."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from ensemble_runtime import log_settings, thread_policy
from ensemble_runtime.server import StartError, serve
from ensemble_runtime.settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    logging.basicConfig(
        level=logging.DEBUG if settings.log_verbose else logging.INFO,
        format=log_settings.LINE,
        stream=sys.stderr,
    )
    why_not = thread_policy.apply(settings.thread_policy)  # before the runtime starts its threads: they inherit it
    if why_not is not None:
        logging.getLogger("ensemble_runtime").warning("%s", why_not)
    try:
        if settings.event_loop == "uvloop":
            import uvloop

            uvloop.run(serve(settings))
        else:
            asyncio.run(serve(settings))
    except StartError as exc:
        logging.getLogger("ensemble_runtime").error("cannot start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
