"""Kernel signatures and launching: what the code generator hands to `load()`.

For every ``extern "C" __global__`` function it prints, the code generator produces a
`KernelSpec`: the kernel's name, its parameters in order (`ParamSpec`), the grid (a
fixed triple or a function of the call's arguments), the block, and the dynamic shared
memory in bytes. `CudaLoadedModule` turns each spec into a `KernelLauncher`, a Python
callable taking the arguments in parameter order.

Tensor arguments may be `DeviceArray`s or any CUDA tensor speaking DLPack (torch,
cupy); numpy arrays are refused, since a kernel cannot read host memory.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any, Callable, Mapping, Sequence, Union

import attrs

from .dtypes import dtype as as_dtype, scalar_argument
from .errors import CudaLaunchError
from .memory import DeviceArray

Dim3 = tuple[int, int, int]
GridSpec = Union[int, Sequence[int], Callable[[Sequence[Any]], Any]]


def as_dim3(value: Any) -> Dim3:
    """(x, y, z) from an int or a sequence of 1–3 ints, missing entries 1."""
    if isinstance(value, int):
        value = (value,)
    dims = tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ValueError(f"launch dimensions must be 1 to 3 positive ints, got {value!r}")
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]


@attrs.frozen
class ParamSpec:
    """One kernel parameter.

    :param name: the parameter's name (for error messages).
    :param kind: ``"tensor"`` (passed as a device pointer) or ``"scalar"``.
    :param dtype: element dtype of a tensor, or the scalar's dtype (IR names).
    :param shape: a tensor's expected shape; an entry that is not an int (None, a
        symbol name) matches any extent. None skips the shape check.
    :param tensor_map: kind ``"tensormap"`` only: ``(source parameter index, swizzle
        bytes, box)``; such parameters come last, take no argument of their own, and
        are encoded from the source tensor's pointer (`TensorMapValue`).
    """

    name: str
    kind: str
    dtype: str
    shape: tuple | None = attrs.field(default=None, converter=lambda s: None if s is None else tuple(s))
    tensor_map: tuple | None = attrs.field(default=None, converter=lambda t: None if t is None else (
        int(t[0]), int(t[1]), tuple(int(b) for b in t[2])))  # lists too: a saved model's JSON

    def __attrs_post_init__(self):
        if self.kind not in ("tensor", "scalar", "tensormap"):
            raise ValueError(f"ParamSpec.kind must be 'tensor', 'scalar' or 'tensormap', got {self.kind!r}")
        if (self.kind == "tensormap") != (self.tensor_map is not None):
            raise ValueError(f"ParamSpec {self.name!r}: a 'tensormap' parameter needs tensor_map (and only it)")
        as_dtype(self.dtype)  # fail early on an unknown dtype


@attrs.frozen
class KernelSpec:
    """How to launch one kernel.

    :param name: the kernel's (unmangled, ``extern "C"``) symbol name.
    :param params: its parameters in order.
    :param grid: blocks per grid: an int, a triple, or ``grid(args) -> int | triple``
        computed from the call's arguments (as given: DeviceArrays, tensors, numbers).
    :param block: threads per block.
    :param dynamic_smem: dynamic shared memory bytes, or ``f(args) -> int``; above
        48 KB the kernel's limit is raised with cuFuncSetAttribute automatically.
    """

    name: str
    params: tuple[ParamSpec, ...] = attrs.field(converter=tuple)
    grid: GridSpec = 1
    block: Any = attrs.field(default=(1, 1, 1), converter=as_dim3)
    dynamic_smem: Union[int, Callable[[Sequence[Any]], int]] = 0


def _tensor_pointer(spec: ParamSpec, value: Any, kernel: str) -> tuple[int, DeviceArray]:
    if isinstance(value, DeviceArray):
        array = value
    elif type(value).__module__ == "numpy" or hasattr(value, "__array_interface__"):
        raise CudaLaunchError(
            f"kernel {kernel!r}, parameter {spec.name!r}: got a numpy (host) array; copy it to the "
            f"device first (backend.device.from_numpy(array)) and pass the DeviceArray")
    elif hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        array = DeviceArray.from_dlpack(value)
    else:
        raise CudaLaunchError(f"kernel {kernel!r}, parameter {spec.name!r}: expected a DeviceArray or a CUDA "
                              f"tensor (DLPack), got {type(value).__name__}")
    if array.dtype.name != as_dtype(spec.dtype).name:
        raise CudaLaunchError(f"kernel {kernel!r}, parameter {spec.name!r}: dtype {array.dtype.name}, "
                              f"expected {spec.dtype}")
    if spec.shape is not None:
        ok = len(spec.shape) == len(array.shape) and all(
            not isinstance(want, int) or want == got for want, got in zip(spec.shape, array.shape))
        if not ok:
            raise CudaLaunchError(f"kernel {kernel!r}, parameter {spec.name!r}: shape {array.shape}, "
                                  f"expected {spec.shape}")
    if not array.is_contiguous():
        raise CudaLaunchError(f"kernel {kernel!r}, parameter {spec.name!r}: the tensor is strided "
                              f"(strides {array.strides}); pass a contiguous one")
    return array.ptr, array


class TensorMapValue(ctypes.Structure):
    """A tensor-map kernel parameter: the 128-byte CUtensorMap of the buffer at `address`
    (encoded by the driver), passed by value."""

    _fields_ = [("words", ctypes.c_uint64 * 16)]

    def __init__(self, param: ParamSpec, address: int) -> None:
        ctypes.Structure.__init__(self)
        self.param = param
        self.encode(address)

    def encode(self, address: int) -> None:
        ctypes.memmove(ctypes.addressof(self), _encoded(self.param, int(address)), 128)


@functools.lru_cache(maxsize=1024)
def _encoded(param: ParamSpec, address: int) -> bytes:
    """The map of `param` over the buffer at `address` (the same buffer is bound again
    and again: the tuner's repeated launches, a call path's arena)."""
    from .hopper import encode_tensor_map

    _, swizzle, box = param.tensor_map
    try:
        return encode_tensor_map(address, param.dtype, tuple(param.shape), tuple(box), swizzle)
    except ValueError as exc:
        raise CudaLaunchError(f"tensor map {param.name!r}: {exc}") from None


class MappedPointer(ctypes.c_uint64):
    """A tensor's pointer argument with tensor maps made from it: setting ``value`` (a
    LaunchPlan binding another buffer) re-encodes them in place."""

    def __init__(self, value: int) -> None:
        ctypes.c_uint64.__init__(self, value)
        self.maps: list[TensorMapValue] = []

    @property
    def value(self) -> int:
        return ctypes.c_uint64.value.__get__(self)

    @value.setter
    def value(self, address: int) -> None:
        ctypes.c_uint64.value.__set__(self, address)
        for m in self.maps:
            m.encode(address)


def pack_arguments(spec: KernelSpec, args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """ctypes values in parameter order, plus the objects that must stay alive
    during the launch (views imported through DLPack). Tensor-map parameters (last)
    are encoded from their source tensors' pointers."""
    given = [p for p in spec.params if p.kind != "tensormap"]
    if len(args) != len(given):
        names = ", ".join(p.name for p in given)
        raise CudaLaunchError(f"kernel {spec.name!r} takes {len(given)} arguments ({names}), "
                              f"got {len(args)}")
    values, keep = [], []
    for param in spec.params[len(given):]:
        if param.kind != "tensormap" or spec.params[param.tensor_map[0]].kind != "tensor":
            raise CudaLaunchError(f"kernel {spec.name!r}: tensor-map parameters come last and map a tensor")
    for param, value in zip(given, args):
        if param.kind == "tensor":
            ptr, array = _tensor_pointer(param, value, spec.name)
            values.append(ctypes.c_uint64(ptr))
            keep.append(array)
        else:
            if hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__") and getattr(value, "ndim", 0):
                raise CudaLaunchError(f"kernel {spec.name!r}, parameter {param.name!r}: expected a scalar "
                                      f"{param.dtype}, got {type(value).__name__}")
            try:
                values.append(scalar_argument(value, param.dtype))
            except (TypeError, ValueError) as exc:
                raise CudaLaunchError(f"kernel {spec.name!r}, parameter {param.name!r}: {exc}") from None
    for param in spec.params[len(given):]:
        index = param.tensor_map[0]
        source = values[index]
        if not isinstance(source, MappedPointer):
            source = values[index] = MappedPointer(source.value)
        source.maps.append(TensorMapValue(param, source.value))
        values.append(source.maps[-1])
    return values, keep


class KernelLauncher:
    """A loaded kernel, callable as ``launcher(*args, stream=None)``."""

    def __init__(self, spec: KernelSpec, function: Any, smem_limit: int | None = None):
        self.spec = spec
        self.function = function  # driver.CudaFunction
        self.smem_limit = smem_limit
        # A fixed grid and shared memory size give one configuration for every launch,
        # worked out here once; one that is wrong still fails at the launch, as others do.
        self._fixed_config = None
        if not callable(spec.grid) and not callable(spec.dynamic_smem):
            try:
                self._fixed_config = self.launch_config(())
            except (CudaLaunchError, TypeError, ValueError):
                pass

    def launch_config(self, args: Sequence[Any]) -> tuple[Dim3, Dim3, int]:
        if self._fixed_config is not None:
            return self._fixed_config
        grid = self.spec.grid(args) if callable(self.spec.grid) else self.spec.grid
        smem = self.spec.dynamic_smem(args) if callable(self.spec.dynamic_smem) else self.spec.dynamic_smem
        smem = int(smem)
        if self.smem_limit is not None and smem > self.smem_limit:
            raise CudaLaunchError(f"kernel {self.spec.name!r} asks for {smem} bytes of dynamic shared memory; "
                                  f"the device allows {self.smem_limit}")
        return as_dim3(grid), self.spec.block, smem

    def __call__(self, *args: Any, stream: Any = None) -> None:
        values, keep = pack_arguments(self.spec, args)
        grid, block, smem = self.launch_config(args)
        self.function.launch(grid, block, values, dynamic_smem=smem, stream=stream)
        del keep

    def __repr__(self) -> str:
        return f"KernelLauncher({self.spec.name}, block={self.spec.block})"


def specs_by_name(specs: Any) -> dict[str, KernelSpec]:
    """Normalise what `load()` was given: specs, a list of them, or a name→spec map."""
    if isinstance(specs, KernelSpec):
        specs = [specs]
    if isinstance(specs, Mapping):
        specs = list(specs.values())
    out: dict[str, KernelSpec] = {}
    for spec in specs:
        if not isinstance(spec, KernelSpec):
            raise TypeError(f"expected KernelSpec, got {type(spec).__name__}")
        if spec.name in out:
            raise ValueError(f"two kernels named {spec.name!r}")
        out[spec.name] = spec
    return out
