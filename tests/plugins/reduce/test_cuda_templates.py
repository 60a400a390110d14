"""The CUDA templates of the reduce plugin.

- compile-only (marker ``nvcc``, CI without a GPU): every space-2 candidate of the row
  and column templates, for every operator family and for a lone operator (vector
  accesses) and a fusion anchor (element accesses), generates CUDA that NVRTC/nvcc
  compiles to an sm_90 cubin (2 processes, a fresh build cache).
- GPU (marker ``cuda``): every space-1 candidate runs on odd and prime shapes (short
  rows per warp, rows per block, streamed rows; column tiles split over blocks) against
  float64 numpy, outputs poisoned with NaN first.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

import hidet_framework as hf


def _target():
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def _templates():
    from hidet_plugin_reduce.cuda_template import cuda_templates

    return cuda_templates()


def _cases(dtype):
    """(output tensor, its inputs) for every family, rows of several lengths."""
    out = []
    for shape in ((37, 320), (5, 3001), (3, 70001)):
        x = hf.symbol(shape, dtype)
        s, b = hf.symbol(shape[-1:], dtype), hf.symbol(shape[-1:], dtype)
        out += [(hf.ops.softmax(x), [x]), (hf.ops.log_softmax(x), [x]), (hf.ops.layer_norm(x, s, b), [x, s, b]),
                (hf.ops.rms_norm(x, s), [x, s]), (hf.ops.reduce_sum(x, -1, keepdims=True), [x]),
                (hf.ops.reduce_max(x, -1), [x]), (hf.ops.argmax(x, -1), [x])]
    x = hf.symbol((2, 6, 5, 7), dtype)
    c1, c2 = hf.symbol((6,), dtype), hf.symbol((6,), dtype)
    out += [(hf.ops.group_norm(x, c1, c2, 3), [x, c1, c2]), (hf.ops.instance_norm(x, c1, c2), [x, c1, c2])]
    for shape, axes in (((301, 129), 0), ((7, 64, 33), 1), ((4099, 64), 0)):
        x = hf.symbol(shape, dtype)
        out += [(hf.ops.reduce_sum(x, axes), [x]), (hf.ops.reduce_mean(x, axes, keepdims=True), [x]),
                (hf.ops.reduce_min(x, axes), [x]), (hf.ops.reduce_l2(x, axes), [x])]
    x, x2 = hf.symbol((37, 320), dtype), hf.symbol((301, 129), dtype)
    out += [(hf.ops.cumsum(x, -1, exclusive=True), [x]), (hf.ops.cumsum(x2, 0, reverse=True), [x2])]
    return out


def _jobs(level, dtypes=("float16", "float32"), cases=None):
    """(template, task, attributes, params, target) for every candidate; candidates
    that give one shape the same plan (the build clamps to the shape) appear once."""
    target = _target()
    templates = _templates()
    jobs, seen = [], set()
    for dtype in dtypes:
        for y, _ in (cases or _cases)(dtype):
            op = y.producer
            for template in templates.values():
                if template.operator != op.name or not template.applies(op.task, op.attributes):
                    continue
                for params in template.space(target, level):
                    for graft in (False, True):
                        attributes = dict(op.attributes, **({"fusion.anchor": True} if graft else {}))
                        plan = template.build(op.task, attributes, params, target).params["plan"]
                        key = (template.name, op.task.fingerprint(), graft, tuple(sorted(plan.items())))
                        if key not in seen:
                            seen.add(key)
                            jobs.append((template, op.task, attributes, params, target))
    return jobs


def _compile_cases(dtype):
    """One shape per kernel form: short rows (vector accesses), streamed rows, grouped
    rows, columns split over blocks."""
    return [c for k, c in enumerate(_cases(dtype)) if k in (0, 2, 4, 6, 9, 14, 16, 18, 21, 22, 25, 31, 35, 36)]


def test_spaces_come_from_the_target_and_start_with_the_default():
    from hidet_framework.backend.contract import Target

    target = _target()
    for template in list(_templates().values())[:4]:
        s0, s1, s2 = (template.space(target, level) for level in (0, 1, 2))
        assert len(s0) == 1 and s0[0] == s1[0] == s2[0] and 1 < len(s1) <= 30 and len(s2) <= 200
    small = Target("cuda", "sm_80", dict(target.properties, regs_per_sm=32768, max_threads_per_block=512))
    from hidet_plugin_reduce.cuda_space import rows_space

    assert rows_space(small, 0)[0]["cache_bytes"] == 64 and all(c["block"] <= 512 for c in rows_space(small, 2))


def _compile_one(job):
    from hidet_framework.extension import plugin_host
    from hidet_framework.runtime.compiled_task import generate_source
    from hidet_plugin_cuda.nvrtc_build import build_cubin

    index, (template, task, attributes, params, target) = job
    try:
        source = generate_source(template.build(task, attributes, params, target), plugin_host().backend_for("cuda"),
                                 target)
        build_cubin(source, arch="sm_90", name=f"cand{index}", target_fingerprint=target.fingerprint())
        return index, None
    except Exception as exc:  # reported with the candidate below
        return index, f"{type(exc).__name__}: {str(exc)[:2000]}"


@pytest.mark.nvcc
def test_every_space2_candidate_compiles_to_sm90(tmp_path, monkeypatch):
    import multiprocessing

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "cache"))
    jobs = _jobs(2, ("float16",), _compile_cases) + _jobs(0, ("float32", "bfloat16"), _compile_cases)
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_compile_one, list(enumerate(jobs)))
    failures = [(jobs[i][0].name, jobs[i][3], err) for i, err in results if err]
    assert not failures, f"{len(failures)} of {len(jobs)} candidates failed; first: {failures[0]}"
    print(f"\ncompiled {len(jobs)} CUDA reduce candidates in {time.perf_counter() - started:.1f} s")


# ------------------------------------------------------------------ on the GPU

def _reference(y, arrays):
    """float64 numpy value of `y` (its graph over the inputs), through the CPU path's
    own reference: the tests of test_operators cover the CPU against numpy, so here
    the CPU-compiled graph in float64 is the reference."""
    op = y.producer
    e = [a.astype(np.float64) for a in arrays]
    kind, attrs = op.name, op.attributes
    x = e[0]
    if kind in ("softmax", "log_softmax"):
        z = np.exp(x - x.max(-1, keepdims=True))
        sm = z / z.sum(-1, keepdims=True)
        return sm if kind == "softmax" else np.log(sm)
    if kind in ("layer_norm", "rms_norm"):
        if kind == "rms_norm":
            return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * e[1]
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * e[1] + e[2]
    if kind in ("group_norm", "instance_norm"):
        groups = attrs["groups"]
        g = x.reshape(x.shape[0], groups, -1)
        out = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
        return out * e[1].reshape(1, -1, 1, 1) + e[2].reshape(1, -1, 1, 1)
    if kind == "argmax":
        return np.argmax(x, -1)
    if kind == "cumsum":
        axis = attrs["axes"][0]
        src = np.flip(x, axis) if attrs["reverse"] else x
        out = np.cumsum(src, axis) - (src if attrs["exclusive"] else 0)
        return np.flip(out, axis) if attrs["reverse"] else out
    axes = tuple(attrs["axes"])
    keep = attrs["keepdims"]
    fn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min}.get(kind)
    if fn is not None:
        return fn(x, axis=axes, keepdims=keep)
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=keep))


@pytest.mark.cuda
@pytest.mark.parametrize("case", range(37))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_space1_candidate_on_the_gpu(dtype, case, rng):
    """Each distinct plan of the space-1 candidates (lone operator and fusion anchor) of
    one case, outputs poisoned first."""
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_framework.extension import plugin_host

    backend = plugin_host().backend_for("cuda")
    target = backend.detect_target()
    device = backend.device
    y, inputs = _cases(dtype)[case]
    op = y.producer
    arrays = [rng.uniform(-2, 2, size=t.shape).astype(dtype) for t in inputs]
    ref = _reference(y, arrays)
    failures, seen = [], set()
    for template in _templates().values():
        if template.operator != op.name or not template.applies(op.task, op.attributes):
            continue
        for params in template.space(target, 1):
            for graft in (False, True):
                attributes = dict(op.attributes, **({"fusion.anchor": True} if graft else {}))
                scheduled = template.build(op.task, attributes, params, target)
                key = (template.name, graft, tuple(sorted(scheduled.params["plan"].items())))
                if key in seen:
                    continue
                seen.add(key)
                compiled = compile_scheduled(op.task, scheduled, backend, target)
                out_dtype = np.dtype(y.dtype.numpy_name)
                poison = np.full(y.shape, 77 if out_dtype.kind == "i" else np.nan, out_dtype)
                outs = [device.from_numpy(poison)]
                compiled.run([device.from_numpy(a) for a in arrays], outs)
                got = device.to_numpy(outs[0]).astype(np.float64)
                tol = 2e-2 if dtype == "float16" else 1e-4
                scale = max(1.0, float(np.abs(ref).max()))
                bad = (not np.array_equal(got, ref)) if op.name == "argmax" else \
                    not np.allclose(got, ref, rtol=tol, atol=tol * scale)
                if bad:
                    failures.append(f"{template.name} {y.shape} {scheduled.params['plan']} graft={graft}: "
                                    f"max error {np.nanmax(np.abs(got - ref))}, nan {int(np.isnan(got).sum())}")
    assert seen, f"no template applies to {op.name} {y.shape}"
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:20])
