"""Triton's Python backend (`backend: "python"`): `model.py` files written for Triton, run in process."""

from __future__ import annotations

import asyncio
import logging
import types
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.backends.base import InstanceSlot, LoadContext, ModelInitError, ModelInstance, instance_slots
from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python.auto_complete import ModelConfig, to_model_config, triton_config_json
from ensemble_runtime.backends.python.instance import ModelExitError, PythonInstance
from ensemble_runtime.backends.python.loader import ModelModule, load_model_module
from ensemble_runtime.backends.python.metric_scope import MetricScope
from ensemble_runtime.backends.python.threads import CallQueue
from ensemble_runtime.config import paths
from ensemble_runtime.config.model_config import ConfigError, model_filename
from ensemble_runtime.dtypes import config_to_wire
from ensemble_runtime.errors import must_propagate

log = logging.getLogger(__name__)

MODEL_CLASS = "TritonPythonModel"
# What `import triton_python_backend_utils` gives a model, even where the top-level shim is not installed.
_ALIASES = types.MappingProxyType({"triton_python_backend_utils": "ensemble_runtime.backends.python.pb_utils"})


class PythonBackend:
    name = "python"

    def prepare_config(self, config: mc.ModelConfig, version_path: Path) -> mc.ModelConfig:
        """Check `model.py` is there; apply its `auto_complete_config` when it defines one."""
        path = _model_file(config, version_path)
        if "auto_complete_config" not in path.read_text(encoding="utf-8", errors="replace"):
            return config  # skip importing the model twice when it cannot have the hook
        module = _import(path, config, version_path)
        try:
            auto_complete = getattr(getattr(module.module, MODEL_CLASS, None), "auto_complete_config", None)
            if auto_complete is None:
                return config
            completed = auto_complete(ModelConfig(triton_config_json(config)))
        except Exception as exc:
            raise ConfigError(f"{path}: auto_complete_config failed: {type(exc).__name__}: {exc}") from None
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: contained, as any other error
            if must_propagate(exc):
                raise
            raise ConfigError(f"model '{config.name}' version {version_path.name}: auto_complete_config "
                              f"raised {exc!r}") from None
        finally:
            module.release()
        if not isinstance(completed, ModelConfig):
            raise ConfigError(
                f"{path}: auto_complete_config must return the pb_utils.ModelConfig it was given, "
                f"got {type(completed).__name__}"
            )
        return to_model_config(completed, str(path))

    async def load(self, context: LoadContext) -> list[ModelInstance]:
        config = context.config
        path = _model_file(config, context.version_path)
        loop = asyncio.get_running_loop()
        module = await loop.run_in_executor(None, _import, path, config, context.version_path)
        model_class = getattr(module.module, MODEL_CLASS, None)
        if not isinstance(model_class, type):
            module.release()
            raise ConfigError(f"model '{config.name}': {path} defines no class {MODEL_CLASS}")
        slots = instance_slots(config)
        scope = MetricScope(context.custom_metrics) if context.custom_metrics is not None else None
        release = _Countdown(len(slots), module, scope)
        target = bls.BlsTarget(caller=context.caller, loop=loop, model_name=config.name,
                               stream_caller=context.stream_caller, metrics=scope)
        output_types = {o.name: config_to_wire(mc.DataType.Name(o.data_type)) for o in config.output if o.data_type}
        config_json = triton_config_json(config)
        instances: list[PythonInstance] = []
        calls = CallQueue(len(slots))  # the version's: a free instance takes the next execution
        inline = execute_inline(config)
        try:
            for slot in slots:
                model = model_class()
                instances.append(
                    PythonInstance(model, config.name, slot.name, target, output_types, release, calls, inline=inline,
                                   version=context.version, decoupled=config.model_transaction_policy.decoupled)
                )
        except BaseException as exc:
            if must_propagate(exc):
                raise
            for instance in instances:
                instance.discard()
            for _ in range(len(slots) - len(instances)):
                release()
            raise ModelInitError(
                f"model '{config.name}': creating {MODEL_CLASS} from {path} failed: {type(exc).__name__}: {exc}"
            ) from None
        try:
            results = await asyncio.gather(
                *(
                    instance.initialize(_initialize_args(config, context, config_json, slot))
                    for instance, slot in zip(instances, slots, strict=True)
                ),
                return_exceptions=True,
            )
        except asyncio.CancelledError:  # the load timed out or the server stops: a hung initialize is left
            for instance in instances:  # behind on its (daemon) thread, which ends if initialize ever returns
                instance.discard()
            raise
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for instance, result in zip(instances, results, strict=True):
                if isinstance(result, BaseException):
                    instance.discard()
                else:
                    await instance.close()
            first = failures[0]
            if isinstance(first, ModelExitError):  # already names the model, version and what it raised
                raise ModelInitError(first.message) from None
            raise ModelInitError(
                f"model '{config.name}' version {context.version}: initialize() in {path} failed: "
                f"{type(first).__name__}: {first}"
            ) from None
        return list(instances)


def _initialize_args(config: mc.ModelConfig, context: LoadContext, config_json: str, slot: InstanceSlot) -> dict[str, str]:
    return {
        "model_config": config_json,
        "model_instance_kind": slot.kind,
        "model_instance_name": slot.name,
        "model_instance_device_id": str(slot.device_id),
        "model_repository": str(context.model_path),
        "model_version": str(context.version),
        "model_name": config.name,
    }


def _model_file(config: mc.ModelConfig, version_path: Path) -> Path:
    path = paths.model_file(config, version_path, model_filename(config))
    if not path.is_file():
        raise ConfigError(f"model '{config.name}' version {version_path.name}: model file '{path}' not found")
    return path


def _import(path: Path, config: mc.ModelConfig, version_path: Path) -> ModelModule:
    version = int(version_path.name) if version_path.name.isdigit() else 0
    try:
        return load_model_module(path, config.name, version, _ALIASES)
    except SyntaxError as exc:
        raise ConfigError(
            f"model '{config.name}': syntax error in {exc.filename or path} line {exc.lineno}: {exc.msg}"
        ) from None
    except Exception as exc:
        raise ConfigError(f"model '{config.name}': importing {path} failed: {type(exc).__name__}: {exc}") from None
    except BaseException as exc:  # SystemExit or KeyboardInterrupt at import: the model fails, not the server
        if must_propagate(exc):
            raise
        raise ConfigError(f"model '{config.name}' version {version_path.name}: importing {path} raised "
                          f"{exc!r}") from None


class _Countdown:
    """Releases the model's modules and its custom metrics once every instance has closed."""

    def __init__(self, count: int, module: ModelModule, metrics: MetricScope | None) -> None:
        self._left = count
        self._module = module
        self._metrics = metrics

    def __call__(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._module.release()
            if self._metrics is not None:
                self._metrics.close()


INLINE_PARAMETER = "EXECUTE_INLINE"


def execute_inline(config: mc.ModelConfig) -> bool:
    """Opt-in (`parameters { key: "EXECUTE_INLINE" value: { string_value: "true" } }`): run a synchronous
    `execute` on the event loop instead of the instance's thread. For steps that take microseconds, it saves
    two thread hops per call (and on the native front ends the request's task: it runs in the wake-up that
    took it); it blocks the server while `execute` runs, and a synchronous BLS `exec()` in such a model must
    become `await async_exec()`. Triton ignores the parameter."""
    value = config.parameters[INLINE_PARAMETER].string_value if INLINE_PARAMETER in config.parameters else ""
    return value.strip().lower() in ("1", "true", "yes", "on")
