"""`build_in_parallel(..., skip_renamed=True)`, the compile-only checks' mode: a source that
equals an earlier one up to the module name is compiled once, and a broken candidate is
still reported by its own index (issue 11, suite time). Uses NVRTC (marker ``nvcc``)."""
from __future__ import annotations

import pytest

from hidet_framework.runtime.compiled_task import build_in_parallel

pytestmark = pytest.mark.nvcc


class CountingBackend:
    """The CUDA backend, counting builds; `broken` names get a line that cannot compile."""

    def __init__(self, broken: tuple = ()) -> None:
        from hidet_plugin_cuda import CudaBackend

        self.inner, self.broken, self.built = CudaBackend(), broken, []

    def codegen(self, lowered, target):
        source = self.inner.codegen(lowered, target)
        return source + "\nthis_does_not_compile;\n" if lowered.name in self.broken else source

    def build(self, source, target, *, name="module"):
        self.built.append(name)
        return self.inner.build(source, target, name=name)


def _jobs():
    """Hopper skinny candidates on M=100, K=1000: split 8 and split 12 print the same kernel
    under two names (the split is a launch parameter here); 3 stages is another kernel."""
    from hidet_plugin_cuda.target import default_cuda_target
    from hidet_plugin_matmul.cuda_hopper_skinny import CudaHopperSkinnyMatmul
    from hidet_plugin_matmul.operators import matmul_task

    target = default_cuda_target()
    task, attrs = matmul_task((100, 1000), (1000, 136), "float16")
    base = dict(warpgroups=1, k_groups=1, stages=2)
    params = [dict(base, split=8), dict(base, split=12), dict(base, split=8, stages=3)]
    return [lambda p=p: CudaHopperSkinnyMatmul().build(task, attrs, p, target) for p in params], target


def _names(jobs, target):
    from hidet_framework.lowering.pipeline import lower

    return [lower(make().module, target.kind).name for make in jobs]


def test_renamed_duplicates_compile_once_and_every_job_gets_a_cubin(tmp_path, monkeypatch):
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    jobs, target = _jobs()
    names = _names(jobs, target)
    assert len(set(names)) == 3
    backend = CountingBackend()
    results = build_in_parallel(jobs, backend, target, workers=1, skip_renamed=True)
    assert backend.built == [names[0], names[2]]  # job 1 is job 0 renamed
    assert [r[0] for r in results] == [0, 1, 2] and all(r[2] is None for r in results)
    assert results[1][1] == results[0][1] != results[2][1]
    for _, path, _, _ in results:
        with open(path, "rb") as f:
            assert f.read(4) == b"\x7fELF"
    everything = CountingBackend()  # without the option: every job is built
    build_in_parallel(jobs, everything, target, workers=1)
    assert everything.built == names


@pytest.mark.parametrize("workers", [1, 2])
def test_a_broken_candidate_fails_by_its_own_index(tmp_path, monkeypatch, workers):
    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    jobs, target = _jobs()
    names = _names(jobs, target)
    results = build_in_parallel(jobs, CountingBackend(broken=(names[2],)), target, workers=workers,
                                skip_renamed=True)
    assert results[0][2] is None and results[1][2] is None
    assert results[2][1] is None and "this_does_not_compile" in results[2][2]
    # both renamed copies broken: the first fails with NVRTC's log, the second names the first
    results = build_in_parallel(jobs, CountingBackend(broken=names[:2]), target, workers=workers,
                                skip_renamed=True)
    assert results[0][1] is None and "this_does_not_compile" in results[0][2]
    assert results[1][1] is None and results[1][2].startswith("same source as job 0, which failed:")
    assert results[2][2] is None
