"""ONNX's backend node tests (``onnx.backend.test``, kind "node") through `HidetBackend`:
which apply (every op of the test's graph claimed by this frontend), which are
excluded (``conformance_exclusions.py``, a reason each), and running one.

Shared by ``scripts/onnx_conformance.py`` (the per-op table) and the test suite.
"""
from __future__ import annotations

import re
from typing import Any

import attrs
import numpy as np

from .conformance_exclusions import EXCLUSIONS
from .errors import OnnxImportError, UnsupportedOperatorsError
from .op_table import CONVERTERS
from .read_model import DEFAULT_DOMAINS


@attrs.frozen
class CaseResult:
    name: str
    op: str
    status: str  # "passed", "failed", "excluded", "unavailable" (an operator's plugin is not installed)
    detail: str = ""


def node_cases() -> list:
    """Every node test case ONNX ships (built in memory by onnx)."""
    import warnings

    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sorted(load_model_tests(kind="node"), key=lambda c: c.name)


def _snake(op_type: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op_type).lower()


# ONNX names its tests by the op in snake case (gather_elements), in lower case
# (argmax, constantofshape) or by a short form
_ALIASES = {"BatchNormalization": ["batchnorm"], "InstanceNormalization": ["instancenorm"],
            "LayerNormalization": ["layernorm"], "GroupNormalization": ["group_normalization", "groupnorm"],
            "GreaterOrEqual": ["greater_equal"], "LessOrEqual": ["less_equal"], "Trilu": ["tril", "triu"],
            "Pad": ["constant_pad", "edge_pad", "reflect_pad", "wrap_pad"]}
_PREFIXES = sorted({(form, op) for op in CONVERTERS
                    for form in [_snake(op), op.lower(), *_ALIASES.get(op, [])]}, key=lambda p: -len(p[0]))


def op_types(case: Any) -> set[str]:
    return {n.op_type if n.domain in DEFAULT_DOMAINS else f"{n.domain}.{n.op_type}" for n in case.model.graph.node}


def is_claimed(case: Any) -> bool:
    """All the ops of the test's graph have a converter here."""
    return all(op in CONVERTERS for op in op_types(case))


def op_of(case: Any) -> str:
    """The op a test is about, from its name (``test_gather_elements_0`` ->
    GatherElements); tests of ops this frontend does not claim that run as their
    expansion into claimed ops are grouped as "(expanded functions)"."""
    name = case.name.removeprefix("test_")
    for prefix, op in _PREFIXES:
        if name == prefix or name.startswith(prefix + "_"):
            return op
    # an ONNX function (Celu, Attention...) expanded into claimed ops
    return "(expanded functions)"


def exclusion(case: Any) -> str | None:
    for pattern, reason in EXCLUSIONS:
        if re.fullmatch(pattern, case.name):
            return reason
    return None


def run_case(case: Any, device: str = "CPU") -> CaseResult:
    from .backend import HidetBackend

    op = op_of(case)
    reason = exclusion(case)
    if reason is not None:
        return CaseResult(case.name, op, "excluded", reason)
    try:
        rep = HidetBackend.prepare(case.model, device)
        for inputs, expected in case.data_sets:
            outputs = rep.run(inputs)
            _compare(outputs, expected, case.rtol, case.atol)
    except UnsupportedOperatorsError as exc:
        if all(" provided by " in p for p in exc.problems):
            return CaseResult(case.name, op, "unavailable", "; ".join(exc.problems))
        return CaseResult(case.name, op, "failed", f"{type(exc).__name__}: {str(exc)[:400]}")
    except OnnxImportError as exc:
        status = "unavailable" if " provided by " in str(exc) else "failed"
        return CaseResult(case.name, op, status, f"{type(exc).__name__}: {str(exc)[:400]}")
    except Exception as exc:  # a failed case is a result to report, whatever went wrong
        return CaseResult(case.name, op, "failed", f"{type(exc).__name__}: {str(exc)[:400]}")
    return CaseResult(case.name, op, "passed")


def _compare(outputs: Any, expected: list, rtol: float, atol: float) -> None:
    if len(outputs) < len(expected):
        raise AssertionError(f"{len(outputs)} outputs, expected {len(expected)}")
    from .backend import _array

    for k, (got, want) in enumerate(zip(outputs, expected)):
        got, want = np.asarray(got), _array(want)
        if got.shape != want.shape:
            raise AssertionError(f"output {k}: shape {got.shape}, expected {want.shape}")
        if got.dtype != want.dtype:
            raise AssertionError(f"output {k}: dtype {got.dtype}, expected {want.dtype}")
        if want.dtype.name == "bfloat16":
            got, want = got.astype(np.float32), want.astype(np.float32)
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"output {k}")
