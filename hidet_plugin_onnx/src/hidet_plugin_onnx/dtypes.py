"""ONNX element types as hidet-framework dtype names."""
from __future__ import annotations

from .errors import OnnxImportError

# TensorProto.DataType values (stable in the ONNX spec) -> hidet dtype name
ONNX_TO_HIDET = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
}
_NAMES = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN",
          18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
          23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}


def hidet_dtype(elem_type: int, what: str) -> str:
    """The hidet dtype of ONNX element type `elem_type`; `what` names the tensor."""
    try:
        return ONNX_TO_HIDET[int(elem_type)]
    except (KeyError, TypeError, ValueError):
        kind = _NAMES.get(elem_type, f"unknown element type {elem_type!r}")
        raise OnnxImportError(f"{what} has element type {kind}, which hidet-framework does not support "
                              f"(supported: {', '.join(sorted(set(ONNX_TO_HIDET.values())))})") from None


def onnx_elem_type(dtype_name: str) -> int:
    for code, name in ONNX_TO_HIDET.items():
        if name == dtype_name:
            return code
    raise KeyError(dtype_name)


def to_array(proto) -> "np.ndarray":
    """A TensorProto's values; bfloat16 as ml_dtypes.bfloat16 (onnx gives its bits)."""
    import numpy as np
    from onnx import numpy_helper

    array = numpy_helper.to_array(proto)
    if int(proto.data_type) == 16 and array.dtype == np.uint16:
        import ml_dtypes

        array = array.view(ml_dtypes.bfloat16)
    return array


def value_dtype(dtype) -> "np.dtype":
    """The numpy dtype holding *values* of a hidet dtype (bfloat16: ml_dtypes', not the
    uint16 bits the framework stores)."""
    import numpy as np

    if dtype.name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.numpy_name)
