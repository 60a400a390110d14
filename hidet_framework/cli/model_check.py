"""What ``run`` needs around the compiled model: parsing --input-shape, making or
reading inputs, describing outputs, and the reference run for --check."""
from __future__ import annotations

from typing import Any, Sequence

import click
import numpy as np


def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
            ok = bool(sep and name) and all(d >= 0 for d in shape)
        except ValueError:
            ok = False
        if not ok:
            raise click.BadParameter(f"{item!r}: expected NAME=1x3x224x224", param_hint="--input-shape")
        shapes[name] = shape
    return shapes


def _random(shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    from hidet_framework.backend.signature import numpy_dtype

    carrier = numpy_dtype(dtype)
    if dtype == "bfloat16":
        import ml_dtypes

        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16).view(np.uint16)
    if carrier.kind == "f":
        return rng.standard_normal(shape).astype(carrier)
    if carrier.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 100, shape).astype(carrier)  # small: valid token ids and indices


def input_arrays(specs: Sequence[tuple], inputs_file: str | None, model: str | None) -> list[np.ndarray]:
    """Inputs from the .npz (by name, else arr_0...), else random with a fixed seed."""
    if inputs_file is None:
        rng = np.random.default_rng(0)
        return [_random(tuple(shape), dtype, rng) for _, shape, dtype in specs]
    with np.load(inputs_file, allow_pickle=False) as data:
        arrays = []
        for k, (name, shape, dtype) in enumerate(specs):
            key = name if name in data.files else f"arr_{k}"
            if key not in data.files:
                raise ValueError(f"{inputs_file} has no array {name!r} (nor {key!r}); it has "
                                 f"{', '.join(data.files) or 'nothing'}")
            array = np.asarray(data[key], order="C")
            if array.dtype == np.float32 and dtype in ("float16", "bfloat16"):  # --dtype: the model's float type
                array = _to_float_type(array, dtype)
            arrays.append(array)
    return arrays


def _to_float_type(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return array.astype(np.float16)
    from hidet_framework.graph.passes.convert_float_dtype import float32_to_bfloat16_bits

    return float32_to_bfloat16_bits(array)


def describe_outputs(outputs: Sequence[np.ndarray]) -> str:
    lines = []
    for k, out in enumerate(outputs):
        out = np.asarray(out)
        if out.dtype.name == "bfloat16":
            out = out.astype(np.float32)
        if out.dtype.kind == "f" and out.size:
            finite = np.isfinite(out)
            summary = f"mean {float(out[finite].mean()) if finite.any() else float('nan'):.5g}, " \
                      f"{int(out.size - finite.sum())} non-finite"
        else:
            summary = f"first {out.reshape(-1)[:4].tolist()}"
        lines.append(f"output {k}: {out.dtype}{list(out.shape)} ({summary})")
    return "\n".join(lines)


def _onnx_inputs(model_path: str, specs: Sequence[tuple], arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    feed = {}
    for (_, _, dtype), info, array in zip(specs, inputs, arrays):
        if dtype == "bfloat16":  # uint16 bits -> values
            import ml_dtypes

            array = np.asarray(array).view(ml_dtypes.bfloat16)
        # the model's own input types (run --dtype float16 feeds halves to a float32 model)
        feed[info.name] = np.asarray(array).astype(onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))
    return feed


def check_against_reference(model_path: str, specs: Sequence[tuple], arrays: Sequence[np.ndarray],
                            outputs: Sequence[np.ndarray]) -> tuple[str, list[float]]:
    """(the reference's name, max relative error per output): onnxruntime when it is
    installed, else onnx.reference.ReferenceEvaluator. The error is max|ours - ref|
    over max|ref| (so near-zero elements do not blow it up)."""
    feed = _onnx_inputs(model_path, specs, arrays)
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        options = ort.SessionOptions()
        session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        reference = session.run(None, feed)
        name = f"onnxruntime {ort.__version__}"
    else:
        from onnx.reference import ReferenceEvaluator

        reference = ReferenceEvaluator(model_path).run(None, feed)
        name = "onnx.reference.ReferenceEvaluator"
    return name, [relative_error(ours, ref) for ours, ref in zip(outputs, reference)]


def relative_error(ours: Any, ref: Any) -> float:
    """max|ours - ref| over max|ref|, on the elements finite in both (so near-zero
    elements do not blow it up). NaN and infinities must stand where the reference has
    them, with the same sign (a model fed NaN gives NaN in both); any other difference
    in shape or in where the non-finite values are is an infinite error."""
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    finite = np.isfinite(ref)
    same_nan = np.isnan(ours) == np.isnan(ref)
    same_inf = np.where(np.isinf(ref), ours == ref, ~np.isinf(ours))
    if not (np.all(same_nan) and np.all(same_inf)):
        return float("inf")
    if not np.any(finite):
        return 0.0
    scale = max(float(np.max(np.abs(ref[finite]))), 1e-30)
    return float(np.max(np.abs(ours[finite] - ref[finite]))) / scale
