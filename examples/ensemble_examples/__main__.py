"""`python -m ensemble_examples [DIR]`: write the example model repository (examples/model_repository)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ensemble_examples.repository import build_repository, model_names


def default_root() -> Path:
    """`examples/model_repository` next to the package in a source checkout, else `./model_repository`."""
    package_parent = Path(__file__).resolve().parent.parent
    if package_parent.name == "examples":
        return package_parent / "model_repository"
    return Path.cwd() / "model_repository"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ensemble_examples", description=__doc__)
    parser.add_argument("root", nargs="?", type=Path, default=None, help="repository directory to write")
    parser.add_argument(
        "--only",
        action="append",
        choices=model_names(),
        metavar="MODEL",
        help="write only this model and what it needs (repeatable)",
    )
    args = parser.parse_args(argv)
    root: Path = args.root if args.root is not None else default_root()
    written = build_repository(root, only=args.only)
    print(f"wrote {len(written)} models to {root}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
