"""Where a model's instances run: `instance_group` -> (device, instance index) slots. Pure.

Triton's rules: a KIND_GPU group makes `count` instances on each GPU it lists, or on every visible GPU when it
lists none; `gpus` are CUDA ordinals as the process sees them (after CUDA_VISIBLE_DEVICES); KIND_AUTO is KIND_GPU
when a GPU is visible, else KIND_CPU. A listed GPU that is not visible is a configuration error. A GPU group
with no GPU visible either falls back to CPU (backends that can, with a note for the log) or is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.gpu.devices import GpuInventory

_KIND = mc.ModelInstanceGroup


@dataclass(frozen=True, slots=True)
class Slot:
    """One instance: its group, its device (a CUDA ordinal; None = CPU) and its index on that device."""

    group: str
    device_id: int | None
    index: int
    profiles: tuple[str, ...] = ()  # the group's `profile` list (TensorRT optimization profiles), as given


@dataclass(frozen=True, slots=True)
class Placement:
    slots: tuple[Slot, ...]
    notes: tuple[str, ...] = ()  # fallbacks to log as warnings

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted({s.device_id for s in self.slots if s.device_id is not None}))

    def on(self, device_id: int | None) -> tuple[Slot, ...]:
        return tuple(s for s in self.slots if s.device_id == device_id)


def _visible_text(inventory: GpuInventory) -> str:
    ids = ", ".join(str(i) for i in inventory.ids) or "none"
    return f"visible GPUs: {ids}; {inventory.detail}"


def place_instances(config: mc.ModelConfig, inventory: GpuInventory, *, backend: str, needs_gpu: bool) -> Placement:
    """Slots for every instance group of `config`; raises ConfigError naming the group and the visible GPUs."""
    slots: list[Slot] = []
    notes: list[str] = []
    groups = list(config.instance_group) or [mc.ModelInstanceGroup(kind=_KIND.KIND_AUTO, count=1)]
    for number, group in enumerate(groups):
        name = group.name or f"{config.name}_{number}"
        count = max(1, group.count)
        profiles = tuple(str(p) for p in group.profile)
        where = f"model '{config.name}' instance group '{name}'"
        kind = group.kind
        model_placed = kind == _KIND.KIND_MODEL  # the backend decides: the first visible GPU
        if kind == _KIND.KIND_AUTO:
            kind = _KIND.KIND_GPU if group.gpus or inventory.count else _KIND.KIND_CPU
        if kind == _KIND.KIND_MODEL:
            kind = _KIND.KIND_GPU if needs_gpu else _KIND.KIND_CPU
        if kind == _KIND.KIND_CPU:
            if needs_gpu:
                raise ConfigError(f"{where} is KIND_CPU, but the {backend} backend runs on GPUs only (use KIND_GPU)")
            slots.extend(Slot(name, None, i, profiles) for i in range(count))
            continue
        if kind != _KIND.KIND_GPU:
            raise ConfigError(f"{where}: instance group kind {_KIND.Kind.Name(kind)} is not supported")
        if inventory.count == 0:
            if needs_gpu:
                raise ConfigError(
                    f"{where} asks for KIND_GPU but this runtime sees no GPU ({inventory.detail}); "
                    f"the {backend} backend needs one"
                )
            notes.append(
                f"{where} asks for KIND_GPU but this runtime sees no GPU ({inventory.detail}); "
                f"running its {count} instance(s) on CPU"
            )
            slots.extend(Slot(name, None, i, profiles) for i in range(count))
            continue
        devices = list(group.gpus) if group.gpus else [0] if model_placed else list(inventory.ids)
        missing = [d for d in devices if d not in inventory.ids]
        if missing:
            raise ConfigError(
                f"{where} lists GPU {', '.join(str(d) for d in missing)}, which this runtime cannot see "
                f"({_visible_text(inventory)})"
            )
        if len(set(devices)) != len(devices):
            raise ConfigError(f"{where} lists a GPU more than once: {list(devices)}")
        for device in devices:
            start = sum(1 for s in slots if s.device_id == device)
            slots.extend(Slot(name, device, start + i, profiles) for i in range(count))
    return Placement(tuple(slots), tuple(notes))


def choose_profile(slot: Slot, position: int, num_profiles: int) -> int:
    """The optimization profile of the `position`-th context on a device.

    A group's `profile: ["1", "2"]` list is used round-robin; without one, contexts take profiles 0, 1, ... in
    turn, so an engine built with as many profiles as instances gives each context its own (TensorRT 10 also lets
    contexts share one, which is what happens when there are fewer profiles than instances).
    """
    if num_profiles < 1:
        raise ConfigError("the engine has no optimization profile")
    if slot.profiles:
        chosen = slot.profiles[position % len(slot.profiles)]
        if not chosen.isdigit() or int(chosen) >= num_profiles:
            raise ConfigError(
                f"instance group '{slot.group}' asks for optimization profile '{chosen}', "
                f"but the engine has profiles 0..{num_profiles - 1}"
            )
        return int(chosen)
    return position % num_profiles
