"""Load a built shared library with ctypes and call its public functions from numpy.

Per-call overhead matters (a compiled graph calls many small kernels), so each function
gets a wrapper specialised once for its signature: a small Python function generated
from the signature (parameters are positional ``a0, a1, ...``; no user text reaches the
generated Python) that checks every argument with cheap identity/flag tests and passes
array pointers via ``byref(c_char.from_buffer(a))`` (about 4x cheaper than
``a.ctypes.data``). Anything the fast path does not accept — a wrong argument, a
read-only or empty array, a numpy scalar — falls to a slow path that runs the full
:func:`check_args` (clear error messages) and converts generically.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from hidet_framework.backend.build_cache import read_artifact
from hidet_framework.backend.contract import LoadedModule
from hidet_framework.backend.private_files import load_library_bytes
from hidet_framework.backend.naming import c_identifier
from hidet_framework.backend.param_access import python_extent
from hidet_framework.backend.signature import FunctionSignature, check_args, numpy_dtype

__all__ = ["CpuLoadedModule", "CTYPES_SCALAR", "make_caller", "signatures_of"]

_CHAR_P = ctypes.POINTER(ctypes.c_char)

# C types of scalar parameters. 16-bit floats travel as their bit patterns (uint16): C
# has no portable half type in a function signature, so the code generator declares
# them as uint16_t and reinterprets inside.
CTYPES_SCALAR: dict[str, Any] = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16,
    "int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
    "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16,
    "float32": ctypes.c_float, "float64": ctypes.c_double,
}


_MISSING = object()


def _bfloat16_bits(value: float) -> int:
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it a (quiet) NaN
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def _slow_convert(sig: FunctionSignature, args: Sequence[Any]) -> list[Any]:
    """Checked, generic conversion of every argument (the path errors come from)."""
    check_args(sig, args)
    out: list[Any] = []
    for spec, value in zip(sig.params, args):
        if spec.kind == "tensor":
            out.append(ctypes.cast(value.ctypes.data, _CHAR_P))
        elif spec.dtype == "float16":
            out.append(int(np.array(value, dtype=np.float16).view(np.uint16)))
        elif spec.dtype == "bfloat16":
            out.append(_bfloat16_bits(float(value)))
        elif spec.dtype == "bool":
            out.append(bool(value))
        elif spec.dtype in ("float32", "float64"):
            out.append(float(value))
        else:
            out.append(int(value))
    return out


def make_caller(sig: FunctionSignature, cfunc: Any) -> Callable[..., None]:
    """A Python callable for the C function `cfunc` with signature `sig`."""
    cfunc.argtypes = [_CHAR_P if p.kind == "tensor" else CTYPES_SCALAR[p.dtype] for p in sig.params]
    cfunc.restype = None
    names = [f"a{i}" for i in range(len(sig.params))]
    env: dict[str, Any] = {
        "cfunc": cfunc, "ndarray": np.ndarray, "byref": ctypes.byref,
        "buf": ctypes.c_char.from_buffer, "slow": _slow_convert, "sig": sig,
    }
    checks: list[str] = []
    extent_checks: list[str] = []  # last: they read scalar arguments already type-checked
    passed: list[str] = []
    for i, (spec, a) in enumerate(zip(sig.params, names)):
        if spec.kind == "tensor":
            env[f"dt{i}"] = numpy_dtype(spec.dtype)
            # carray = C-contiguous + aligned + writeable; read-only arrays take the slow path
            # because from_buffer needs a writable buffer.
            checks.append(f"type({a}) is ndarray and {a}.dtype is dt{i} and {a}.flags.carray")
            if spec.shape is not None:
                if all(d is not None for d in spec.shape):
                    env[f"shape{i}"] = tuple(spec.shape)
                    checks.append(f"{a}.shape == shape{i}")
                else:
                    checks.append(f"len({a}.shape) == {len(spec.shape)}")
                    checks += [f"{a}.shape[{d}] == {n}" for d, n in enumerate(spec.shape) if n is not None]
            for d, expr in enumerate(spec.extents or ()):
                if expr is not None:  # validated grammar; only a0, a1... names reach the code
                    extent_checks.append(f"{a}.shape[{d}] == {python_extent(expr, len(names), dict(enumerate(names)))}")
            passed.append(f"byref(buf({a}))")  # raises on size-0 arrays -> slow path
        elif spec.dtype in ("float32", "float64"):
            checks.append(f"type({a}) is float")
            passed.append(a)
        elif spec.dtype.startswith(("int", "uint")):
            info = np.iinfo(numpy_dtype(spec.dtype))
            checks.append(f"type({a}) is int and {int(info.min)} <= {a} <= {int(info.max)}")
            passed.append(a)
        else:  # bool and 16-bit floats: rare as scalars, always converted on the slow path
            checks.append("False")
            passed.append(a)
    # Defaults and *extra keep a wrong arity off Python's own unhelpful TypeError: a
    # missing argument fails the type checks, and the slow path then reports the arity.
    params = ", ".join(f"{a}=MISSING" for a in names)
    given = ", ".join(names)
    cond = " and ".join(["not extra", *checks, *extent_checks])
    code = (
        f"def call({params}{', ' if names else ''}*extra):\n"
        f"    if {cond}:\n"
        f"        try:\n"
        f"            return cfunc({', '.join(passed)})\n"
        f"        except (TypeError, ValueError, ArgumentError):\n"
        f"            pass\n"
        f"    args = tuple(x for x in ({given}{',' if len(names) == 1 else ''}) if x is not MISSING) + extra\n"
        f"    cfunc(*slow(sig, args))\n"
    )
    env.update(MISSING=_MISSING, ArgumentError=ctypes.ArgumentError)
    exec(compile(code, f"<cpu caller for {sig.name!r}>", "exec"), env)  # noqa: S102 - built from the signature only
    caller = env["call"]
    caller.signature = sig  # type: ignore[attr-defined]
    caller.__name__ = c_identifier(sig.name)
    caller.__doc__ = f"Compiled CPU function {sig}"
    return caller


def signatures_of(module: Any) -> list[FunctionSignature]:
    """Signatures of a module's public functions. `module` may be a sequence or mapping
    of :class:`FunctionSignature` (or their JSON form), an object with a `signatures`
    attribute, or an IR module (then the code generator's ``public_signatures`` is used)."""
    if module is None:
        return []
    if isinstance(module, FunctionSignature):
        return [module]
    if isinstance(module, Mapping):
        module = list(module.values())
    if isinstance(module, (list, tuple)):
        return [s if isinstance(s, FunctionSignature) else FunctionSignature.from_json(s) for s in module]
    if hasattr(module, "signatures"):
        return signatures_of(module.signatures)
    from . import codegen  # lazy: written alongside the C code generator

    return list(codegen.public_signatures(module))


def _attach_thread_pool(lib: Any) -> None:
    """Give a module with parallel loops the process's thread pool (thread_pool.py)."""
    try:
        setter = lib.hidet_set_parallel_for
    except AttributeError:
        return  # no parallel loop in this module
    from .thread_pool import pool_function_address

    address = pool_function_address()
    if address is not None:
        setter.argtypes, setter.restype = [ctypes.c_void_p], None
        setter(address)


class CpuLoadedModule(LoadedModule):
    """A shared library loaded with ctypes; functions callable with numpy arrays.

    :param path: the ``.so`` to load.
    :param signatures: the public functions' signatures.
    :param symbols: C symbol per function name; by default ``c_identifier(name)``, which
        is how the code generator names public functions.
    """

    def __init__(self, path: str, signatures: Sequence[FunctionSignature],
                 symbols: Mapping[str, str] | None = None) -> None:
        self.path = path
        # On an AMX machine, the tile permission (target.amx_permission) is requested
        # before any kernel of this library runs, also for libraries loaded from a saved
        # model in a process that built nothing (once per process: cached).
        from hidet_plugin_cpu.target import detect_cpu_target

        detect_cpu_target()
        # The checked bytes of the file, loaded from a private copy: nothing reopens
        # `path` between the ownership/mode/hash checks and dlopen (private_files.py).
        self._lib = load_library_bytes(read_artifact(path), os.path.basename(path))
        _attach_thread_pool(self._lib)
        self._functions: dict[str, Callable[..., None]] = {}
        for sig in signatures:
            symbol = (symbols or {}).get(sig.name) or c_identifier(sig.name)
            try:
                cfunc = getattr(self._lib, symbol)
            except AttributeError:
                raise KeyError(f"{path} exports no symbol {symbol!r} for function {sig.name!r}") from None
            if sig.name in self._functions:
                raise ValueError(f"duplicate function name {sig.name!r}")
            self._functions[sig.name] = make_caller(sig, cfunc)
            self._functions[sig.name].library = path  # type: ignore[attr-defined] - what a saved model copies

    def function_names(self) -> Sequence[str]:
        return list(self._functions)

    def __getitem__(self, name: str) -> Callable[..., None]:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"no function {name!r} in {self.path}; have {sorted(self._functions)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def __repr__(self) -> str:
        return f"CpuLoadedModule({self.path!r}, functions={list(self._functions)})"
