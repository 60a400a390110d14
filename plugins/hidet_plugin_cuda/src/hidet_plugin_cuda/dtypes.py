"""Scalar data types as the CUDA runtime sees them: size, numpy dtype, DLPack code and
the ctypes type a kernel argument of that type is passed as.

Names are the IR's dtype names (``float16``, ``bfloat16``, ``int32``...). numpy has no
bfloat16: it maps to ``ml_dtypes.bfloat16`` when that package is importable, else to
raw ``uint16`` bits (see `numpy_dtype`).
"""
from __future__ import annotations

import ctypes
import struct
from typing import Any

import attrs

# DLPack type codes (dlpack.h, DLDataTypeCode)
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT, DL_BOOL = 0, 1, 2, 4, 6


@attrs.frozen
class DType:
    name: str
    itemsize: int
    dl_code: int
    ctype: Any  # the ctypes type of a kernel argument of this type (16-bit floats: raw bits)


_TABLE = {
    d.name: d
    for d in [
        DType("bool", 1, DL_BOOL, ctypes.c_bool),
        DType("int8", 1, DL_INT, ctypes.c_int8),
        DType("int16", 2, DL_INT, ctypes.c_int16),
        DType("int32", 4, DL_INT, ctypes.c_int32),
        DType("int64", 8, DL_INT, ctypes.c_int64),
        DType("uint8", 1, DL_UINT, ctypes.c_uint8),
        DType("uint16", 2, DL_UINT, ctypes.c_uint16),
        DType("uint32", 4, DL_UINT, ctypes.c_uint32),
        DType("uint64", 8, DL_UINT, ctypes.c_uint64),
        DType("float16", 2, DL_FLOAT, ctypes.c_uint16),
        DType("bfloat16", 2, DL_BFLOAT, ctypes.c_uint16),
        DType("float32", 4, DL_FLOAT, ctypes.c_float),
        DType("float64", 8, DL_FLOAT, ctypes.c_double),
    ]
}
_BY_DLPACK = {(d.dl_code, d.itemsize * 8): d for d in _TABLE.values()}
_BY_DLPACK[(DL_UINT, 8)] = _TABLE["uint8"]  # older producers sent bool as uint8: keep uint8


def dtype(name: Any) -> DType:
    """The `DType` for a name, a numpy dtype, or a DType."""
    if isinstance(name, DType):
        return name
    key = getattr(name, "name", None) or str(name)
    key = {"float": "float32", "half": "float16", "double": "float64", "int": "int32"}.get(key, key)
    try:
        return _TABLE[key]
    except KeyError:
        raise TypeError(f"the CUDA runtime has no dtype {name!r}; known: {sorted(_TABLE)}") from None


def from_dlpack_code(code: int, bits: int, lanes: int) -> DType:
    if lanes != 1:
        raise TypeError(f"DLPack vector types (lanes={lanes}) are not supported")
    try:
        return _BY_DLPACK[(code, bits)]
    except KeyError:
        raise TypeError(f"unsupported DLPack dtype (code={code}, bits={bits})") from None


def numpy_dtype(dt: DType | str):
    """numpy dtype holding values of `dt`; bfloat16 → ml_dtypes.bfloat16 or uint16 bits."""
    import numpy as np

    dt = dtype(dt)
    if dt.name == "bfloat16":
        try:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            return np.dtype("uint16")
    return np.dtype(dt.name)


def scalar_argument(value: Any, dt: DType | str) -> Any:
    """A ctypes object holding `value` converted to `dt`, for a kernel argument."""
    dt = dtype(dt)
    if dt.name == "float16":
        import numpy as np

        return ctypes.c_uint16(int(np.array(value, dtype=np.float16).view(np.uint16)))
    if dt.name == "bfloat16":
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even, like the hardware
        return ctypes.c_uint16((bits >> 16) & 0xFFFF)
    if dt.name.startswith(("int", "uint")):
        if isinstance(value, float) and not value.is_integer():
            raise TypeError(f"{value!r} is not an integer (parameter type {dt.name})")
        return dt.ctype(int(value))
    if dt.name == "bool":
        return ctypes.c_bool(bool(value))
    return dt.ctype(float(value))
