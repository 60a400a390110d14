"""Fixtures of the CUDA matmul template tests: the GPU restricted to Hopper (sm_90: wgmma,
TMA; `cuda_env`, the GPU itself, is tests/plugins/conftest.py's), and one run of a
candidate against a float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

from hidet_plugin_matmul.operators import matmul_task


@pytest.fixture(scope="module")
def hopper(cuda_env):
    """`cuda_env` on an sm_90 GPU (the wgmma and TMA templates); skipped, naming the
    GPU's arch, on any other."""
    if cuda_env[1].arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma and TMA need an sm_90 GPU, this GPU is {cuda_env[1].arch}")
    return cuda_env


def _matmul_error(cuda_env, template, params, a_shape, b_shape, dtype, rng) -> float:
    """Build and run one candidate on fresh random operands, output poisoned with NaN
    first; the relative error against numpy in float64 (unwritten outputs fail)."""
    from hidet_framework.runtime.compiled_task import compile_scheduled

    backend, target, torch = cuda_env
    task, attrs = matmul_task(a_shape, b_shape, dtype)
    st = template.build(task, attrs, params, target)
    compiled = compile_scheduled(task, st, backend, target)
    tdt = getattr(torch, dtype)
    a = torch.from_numpy(rng.standard_normal(a_shape).astype(np.float32)).to("cuda", tdt)
    b = torch.from_numpy(rng.standard_normal(b_shape).astype(np.float32)).to("cuda", tdt)
    c = torch.full(tuple(task.outputs[0].shape), float("nan"), dtype=tdt, device="cuda")
    compiled.run([a, b], [c])
    torch.cuda.synchronize()
    ref = np.matmul(a.double().cpu().numpy(), b.double().cpu().numpy())
    got = c.double().cpu().numpy()
    assert not np.isnan(got).any(), "unwritten outputs"
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


@pytest.fixture
def matmul_error():
    return _matmul_error
