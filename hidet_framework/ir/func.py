"""Functions and modules."""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from hidet_framework.ir.expr import Node
from hidet_framework.ir.stmt import Stmt

# What a function is:
#   public       an entry point callable from Python (exported symbol on CPU)
#   cpu_kernel   a CPU function whose parallel loops become threads; callable from Python
#   cuda_kernel  a __global__ CUDA kernel, launched from Python with its grid/block dims
#   device       a helper called from kernels (inline where the backend likes)
#   host         a host-side helper, not exported
FUNC_KINDS = ("public", "cpu_kernel", "cuda_kernel", "device", "host")

# Keys of Function.attrs that backends read:
#   grid_dim, block_dim      tuples of up to 3 int/Expr (Expr over the scalar params)
#   dynamic_smem_bytes       int, dynamic shared memory of a CUDA kernel
#   min_blocks               int, the launch-bounds hint (blocks per SM)
#   cluster_size             int, CUDA thread-block clusters of that many blocks along x
FUNC_ATTR_KEYS = ("grid_dim", "block_dim", "dynamic_smem_bytes", "min_blocks", "cluster_size")
# Set by the compiler, not the DSL: ``aliased_params``, the positions of parameters that
# may share a buffer (an in-place output and its input, fusion/inplace.py; printed
# without restrict).


class FrozenMapping(Mapping):
    """A read-only mapping that, unlike ``MappingProxyType``, pickles: the tuner's build
    workers send lowered modules back to the process that times them."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenMapping is read-only")

    def __reduce__(self):
        return FrozenMapping, (self._data,)

    def __repr__(self) -> str:
        return f"FrozenMapping({self._data!r})"


def _frozen_mapping(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return FrozenMapping(m)


@attrs.frozen(slots=True, eq=False, repr=False)
class Function(Node):
    """A function.

    :param name: the name callers and Python use (backends map it to a safe identifier).
    :param params: parameter variables, in order.
    :param body: the body statement.
    :param kind: one of `FUNC_KINDS`.
    :param ret_type: the result type, ``None`` for void.
    :param attrs: launch configuration and hints; see `FUNC_ATTR_KEYS`.
    """

    name: str
    params: tuple = attrs.field(converter=tuple)
    body: Stmt = None
    kind: str = attrs.field(default="public", validator=attrs.validators.in_(FUNC_KINDS))
    ret_type: Any = None
    attrs: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)

    def with_body(self, body: Stmt) -> "Function":
        return attrs.evolve(self, body=body)


@attrs.frozen(slots=True, eq=False, repr=False)
class IRModule(Node):
    """A set of functions compiled together.

    :param name: module name (used for file names; made safe by backends).
    :param functions: functions by name, in definition order.
    """

    name: str = "module"
    functions: Mapping[str, Function] = attrs.field(factory=dict, converter=_frozen_mapping)

    def __attrs_post_init__(self) -> None:
        for key, fn in self.functions.items():
            if key != fn.name:
                raise ValueError(f"module {self.name!r}: function registered as {key!r} is named {fn.name!r}")

    def with_functions(self, functions: Mapping[str, Function]) -> "IRModule":
        return attrs.evolve(self, functions=functions)

    def entry_functions(self) -> list[Function]:
        """Functions callable from Python: public, cpu_kernel and cuda_kernel ones."""
        return [f for f in self.functions.values() if f.kind in ("public", "cpu_kernel", "cuda_kernel")]


def module(name: str, functions: list[Function] | tuple[Function, ...]) -> IRModule:
    """A module of the given functions; duplicate names are an error."""
    table: dict[str, Function] = {}
    for f in functions:
        if f.name in table:
            raise ValueError(f"module {name!r} has two functions named {f.name!r}")
        table[f.name] = f
    return IRModule(name, table)
