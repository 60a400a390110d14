"""What the offline Hopper template tests (test_cuda_wgmma.py, test_cuda_hopper_ws.py)
share: the target they build for without a GPU. (On the GPU they take the `hopper`
fixture of conftest.py: `cuda_env` on an sm_90 GPU, skipped elsewhere.)"""
from __future__ import annotations

from hidet_framework.backend.contract import Target


def sm90_target(arch: str = "sm_90", **props) -> Target:
    """The documented default CUDA target (no GPU needed) at `arch`, with `props`
    replacing its properties (e.g. less shared memory)."""
    from hidet_plugin_cuda.target import default_cuda_target

    return Target("cuda", arch, dict(default_cuda_target().properties, **props))
