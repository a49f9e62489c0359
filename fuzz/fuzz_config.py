"""Fuzz target: config.pbtxt bytes -> text -> parse_config_text -> apply_defaults -> check_config -> signature, JSON.

Bytes that are not UTF-8 are read as the runtime reads a file (strict UTF-8) and must be refused as a config
error; today read_config lets UnicodeDecodeError out (see the report), so the target decodes them itself.
Run: python -m fuzz.fuzz_config [libFuzzer flags] CORPUS_DIR...   (or `make fuzz` for every target)
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["ensemble_runtime"]):
    from ensemble_runtime.config import model_config as mcfg
    from ensemble_runtime.protocol.http_documents import model_config_json
    from ensemble_runtime.validation import ModelSignature

from fuzz import invariant


def one_input(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return

    def parse_check_serve() -> None:
        parsed = mcfg.parse_config_text(text)
        name = parsed.name or "m"
        config = mcfg.apply_defaults(parsed, name)
        mcfg.check_config(config, name)
        ModelSignature.from_config(config)
        model_config_json(config)  # what GET /v2/models/<m>/config serves

    invariant.check(parse_check_serve)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
