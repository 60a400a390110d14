"""The backend contract: the one small interface every codegen backend plugin implements.

A backend serves one or more target kinds ("cpu", "cuda"). It says whether it is usable
on this machine (and why not), describes the hardware it would run on (the `Target`
that templates read their schedule spaces from), turns an IR module into source,
builds the source into an artifact on disk (cached by content), loads the artifact into
callable functions, and exposes a device interface for memory, copies and timing.

Backends reach the core only through ``register_backends(register)``; the core never
imports a backend plugin.
"""
from __future__ import annotations

import abc
import hashlib
import json
from typing import Any, Callable, Mapping, Sequence

import attrs


@attrs.frozen
class Availability:
    """Whether a backend can run code here; `reason` says why not (empty when usable)."""

    usable: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.usable


@attrs.frozen
class Target:
    """The hardware a module is compiled for.

    :param kind: target kind, e.g. ``"cpu"`` or ``"cuda"``.
    :param arch: architecture string, e.g. ``"x86-64"`` or ``"sm_90"``.
    :param properties: hardware facts templates build their spaces from. CPU: ``cores``,
        ``vector_bits``, ``l1d_bytes``, ``l2_bytes``, ``l3_bytes``, ``flags``. CUDA:
        ``sm_count``, ``warp_size``, ``max_threads_per_block``, ``smem_per_block``,
        ``smem_per_block_optin``, ``smem_per_sm``, ``regs_per_block``, ``regs_per_sm``,
        ``compute_capability`` (a ``(major, minor)`` tuple).
    """

    kind: str
    arch: str
    properties: Mapping[str, Any] = attrs.field(factory=dict, converter=lambda m: dict(m))

    def __getitem__(self, key: str) -> Any:
        return self.properties[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.properties.get(key, default)

    def fingerprint(self) -> str:
        """A stable short hash of the target, for cache keys."""
        payload = json.dumps([self.kind, self.arch, _jsonable(self.properties)], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@attrs.frozen
class Artifact:
    """A built library or binary on disk and what it was built from."""

    path: str
    source_hash: str
    target: Target
    meta: Mapping[str, Any] = attrs.field(factory=dict)


class LoadedModule(abc.ABC):
    """A built module loaded into this process: its public functions by name."""

    @abc.abstractmethod
    def function_names(self) -> Sequence[str]:
        """Names of the callable public functions (kernels on CUDA)."""

    @abc.abstractmethod
    def __getitem__(self, name: str) -> Callable[..., None]:
        """The function `name`, callable with arrays and scalars in parameter order."""


class DeviceInterface(abc.ABC):
    """Memory, copies, synchronisation and timing on one device.

    ``view_alignment``: the byte alignment every buffer handed to this backend's kernels
    must start on. The compiled graph places some buffers inside others (the inputs of a
    concat written in place, ``runtime/concat_in_place.py``) only at offsets that are
    multiples of it; the default is the arena's own alignment.
    """

    view_alignment: int = 256

    @abc.abstractmethod
    def empty(self, shape: Sequence[int], dtype: str) -> Any:
        """A new uninitialised array on the device."""

    @abc.abstractmethod
    def from_numpy(self, array: Any) -> Any:
        """Copy a numpy array to the device."""

    @abc.abstractmethod
    def to_numpy(self, array: Any) -> Any:
        """Copy a device array back into a new numpy array."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until all work queued on the device has finished."""

    @abc.abstractmethod
    def time(self, fn: Callable[[], None], *, warmup: int = 3, repeat: int = 10) -> list[float]:
        """Run `fn` warmup + repeat times; return the repeat run times in seconds,
        measured with the device's own timers (events on CUDA)."""


class Backend(abc.ABC):
    """A codegen backend. Subclasses set `name`, `target_kinds` and `preference`.

    ``preference``: ``target="auto"`` compiles for the usable backend with the highest
    preference (ties: the first registered), so a GPU backend sets a higher one than the
    CPU backend.
    ``host``: True when its device arrays are host (numpy) arrays and its code runs on
    the host CPU; constant folding compiles for such a backend.
    """

    name: str = ""
    target_kinds: tuple[str, ...] = ()
    preference: int = 0
    host: bool = False

    @abc.abstractmethod
    def availability(self) -> Availability:
        """Whether code for this backend can run on this machine, and why not."""

    @abc.abstractmethod
    def detect_target(self) -> Target:
        """The target of this machine; without a device, a documented default target
        that code can still be compiled for (CUDA: sm_90)."""

    @abc.abstractmethod
    def codegen(self, module: Any, target: Target) -> str:
        """Print a lowered IR module (``hidet_framework.ir.Module``) as source code."""

    @abc.abstractmethod
    def build(self, source: str, target: Target, *, name: str = "module") -> Artifact:
        """Compile source to an artifact on disk, served from the build cache when the
        same source, flags and compiler were built before."""

    @abc.abstractmethod
    def load(self, artifact: Artifact, module: Any) -> LoadedModule:
        """Load an artifact; `module` is the IR module it came from (for signatures)."""

    @property
    @abc.abstractmethod
    def device(self) -> DeviceInterface:
        """The device interface of this backend."""

    @abc.abstractmethod
    def auto_schedule_kernel(self, stage: Any) -> Any:
        """The kernel of one stage for the rule-based auto-scheduler: an IR ``Function``
        computing every element of ``stage.output`` (a
        ``hidet_framework.schedule.auto_scheduler.StageKernel``, whose methods give the
        element's store, axis binding and index arithmetic). What differs by target —
        which workers compute which elements, the function kind, launch dimensions —
        is decided here."""

    def compile(self, module: Any, target: Target | None = None) -> LoadedModule:
        """codegen → build → load, the usual path."""
        target = target or self.detect_target()
        source = self.codegen(module, target)
        return self.load(self.build(source, target, name=getattr(module, "name", "module")), module)
