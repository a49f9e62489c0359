"""Import a model version's `model.py` under a package name of its own, without touching `sys.path`.

Triton runs each Python model in its own process, appends the version directory and the model directory to
`sys.path` and imports `<version>.model`; sibling files are therefore importable both relatively
(`from .utils import f`) and absolutely (`import utils`). Here many models share one process, so appending
to `sys.path` would make every model's `utils.py` collide in `sys.modules`. Instead the version directory
becomes a package with a unique name (relative imports just work), and the model's modules get an
`__import__` of their own (through their `__builtins__`) that maps an absolute import of a sibling, when
nothing installed has that name (Triton appends, so installed packages win there too), onto that package.
`sys.modules` holds the package while the model is loaded; `ModelModule.release` removes it.
`aliases` maps module names the model imports onto modules of ours (`triton_python_backend_utils`), so a model
finds the API whether or not the top-level shim is importable. Limitation: `importlib.import_module("utils")`
bypasses `__import__` and sees neither sibling files nor aliases.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import re
import sys
import threading
import types
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelModule:
    package: str
    module: types.ModuleType

    def release(self) -> None:
        """Forget the model's modules (the package and everything imported under it)."""
        prefix = self.package + "."
        for name in [n for n in sys.modules if n == self.package or n.startswith(prefix)]:
            sys.modules.pop(name, None)


def load_model_module(
    path: Path, model_name: str, version: int, aliases: Mapping[str, str] | None = None
) -> ModelModule:
    """Execute `path` (e.g. `<repo>/<model>/1/model.py`) as `<unique package>.model`; exceptions propagate."""
    safe = re.sub(r"\W", "_", model_name)
    package = f"_triton_model_{safe}_v{version}_{uuid.uuid4().hex[:8]}"
    root = path.parent
    spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
    spec.submodule_search_locations = [str(root)]
    package_module = importlib.util.module_from_spec(spec)
    package_module.__path__ = [str(root)]
    handle = ModelModule(package, package_module)
    sys.modules[package] = package_module
    try:
        module = _ScopedImporter(package, root, aliases or {}).load(f"{package}.{path.stem}")
    except BaseException:
        handle.release()
        raise
    return ModelModule(package, module)


class _ScopedImporter:
    """The `__import__` the model's modules see; everything not theirs goes to the real one."""

    def __init__(self, package: str, root: Path, aliases: Mapping[str, str]) -> None:
        self._package = package
        self._root = root
        self._aliases = dict(aliases)
        self._lock = threading.RLock()
        self._local: dict[str, bool] = {}
        self._builtins = dict(vars(builtins))
        self._builtins["__import__"] = self.import_

    def import_(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> types.ModuleType:
        if level == 0 and name in self._aliases:
            return importlib.import_module(self._aliases[name])
        absolute = self._resolve(name, globals or {}, level)
        if absolute is None:
            return builtins.__import__(name, globals, locals, fromlist or (), level)
        module = self.load(absolute)
        if fromlist:
            self._load_fromlist(module, absolute, fromlist)
            return module
        if level == 0:
            first = name.partition(".")[0]
            return sys.modules[self._package if first == self._package else f"{self._package}.{first}"]
        return module

    def _resolve(self, name: str, globals: Mapping[str, Any], level: int) -> str | None:
        ours = self._package
        if level > 0:
            package = globals.get("__package__") or ""
            bits = package.rsplit(".", level - 1)
            if len(bits) < level:
                return None
            absolute = f"{bits[0]}.{name}" if name else bits[0]
        else:
            first = name.partition(".")[0]
            absolute = name if first == ours else f"{ours}.{name}" if self._is_local(first) else ""
        if absolute == ours or absolute.startswith(ours + "."):
            return absolute
        return None

    def _is_local(self, first: str) -> bool:
        if first in sys.modules:
            return False
        with self._lock:
            known = self._local.get(first)
            if known is None:
                present = (self._root / f"{first}.py").is_file() or (self._root / first).is_dir()
                known = present and _not_installed(first)
                self._local[first] = known
            return known

    def load(self, absolute: str) -> types.ModuleType:
        with self._lock:
            existing = sys.modules.get(absolute)
            if existing is not None:
                return existing
            parent_name, _, child = absolute.rpartition(".")
            parent = self.load(parent_name)
            relative = absolute[len(self._package) + 1 :].split(".")
            base = self._root.joinpath(*relative)
            if (base / "__init__.py").is_file():
                module = self._exec_source(absolute, base / "__init__.py", base)
            elif (base.parent / f"{base.name}.py").is_file():
                module = self._exec_source(absolute, base.parent / f"{base.name}.py", None)
            elif base.is_dir():
                module = _namespace(absolute, base)
                sys.modules[absolute] = module
            else:
                raise ModuleNotFoundError(f"No module named '{'.'.join(relative)}'", name=absolute)
            setattr(parent, child, module)
            return module

    def _exec_source(self, absolute: str, file: Path, package_dir: Path | None) -> types.ModuleType:
        loader = importlib.machinery.SourceFileLoader(absolute, str(file))
        locations = [str(package_dir)] if package_dir is not None else None
        spec = importlib.util.spec_from_file_location(
            absolute, file, loader=loader, submodule_search_locations=locations
        )
        if spec is None:  # pragma: no cover - only for paths without a loader
            raise ImportError(f"cannot import {file}", name=absolute)
        module = importlib.util.module_from_spec(spec)
        module.__dict__["__builtins__"] = self._builtins
        sys.modules[absolute] = module
        try:
            loader.exec_module(module)
        except BaseException:
            sys.modules.pop(absolute, None)
            raise
        return module

    def _load_fromlist(self, module: types.ModuleType, absolute: str, fromlist: Sequence[str]) -> None:
        if not hasattr(module, "__path__"):
            return
        names = list(getattr(module, "__all__", ())) if "*" in fromlist else list(fromlist)
        for item in names:
            if item != "*" and not hasattr(module, item):
                try:
                    self.load(f"{absolute}.{item}")
                except ModuleNotFoundError as exc:
                    if exc.name != f"{absolute}.{item}":
                        raise


def _not_installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _namespace(absolute: str, directory: Path) -> types.ModuleType:
    spec = importlib.machinery.ModuleSpec(absolute, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [str(directory)]
    return module
