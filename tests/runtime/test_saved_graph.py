"""fn.save(dir) / hf.load_compiled(dir): the manifest (hashes, target fingerprint,
compute capability), the launch plan of cpu libraries and of cuda kernels, and a
round trip on each target (the cuda one marked `cuda`). Loading never compiles."""
from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime import saved_graph
from hidet_framework.runtime.saved_graph import SavedModelError, check_target, load_compiled


def _graph(rng, dtype="float32", m=7, k=33, n=13):
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    x = hf.symbol((m, k), "float32", name="x")
    y = hf.ops.softmax(hf.ops.relu(hf.ops.matmul(x, hf.constant(w)) + hf.constant(b)), axis=-1)

    def reference(xv):
        z = np.maximum(xv.astype(np.float64) @ w + b, 0)
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return hf.trace([y, x], inputs=[x]), reference, (m, k)


def _err(ours, ref):
    return float(np.max(np.abs(np.asarray(ours, np.float64) - ref)) / np.max(np.abs(ref)))


def _no_compiling(monkeypatch):
    from hidet_framework import driver
    from hidet_framework.runtime import compiled_task

    def refuse(*args, **kwargs):
        raise AssertionError("loading a saved model compiled something")

    for module, name in ((compiled_task, "build_scheduled"), (driver, "compile_task"), (driver, "compile")):
        monkeypatch.setattr(module, name, refuse)


def test_cpu_round_trip_and_manifest(rng, tmp_path, monkeypatch):
    graph, reference, (m, k) = _graph(rng)
    fn = hf.compile(graph, target="cpu")
    folder = fn.save(str(tmp_path / "model"))
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    assert manifest["target"] == "cpu" and manifest["target_fingerprint"] and manifest["num_launches"] == fn.num_launches
    assert set(manifest["files"]) >= {"plan.json", "weights.bin"} and any(f.startswith("libs/") for f in manifest["files"])
    _no_compiling(monkeypatch)
    loaded = load_compiled(folder)
    xv = rng.standard_normal((m, k)).astype(np.float32)
    y, echo = loaded(xv)
    assert _err(y, reference(xv)) < 1e-5 and np.array_equal(echo, xv)
    assert loaded.num_launches == fn.num_launches


def test_damage_and_foreign_targets_are_refused(rng, tmp_path):
    graph, _, _ = _graph(rng)
    folder = hf.compile(graph, target="cpu").save(str(tmp_path / "model"))
    lib = next(f for f in os.listdir(os.path.join(folder, "libs")))
    manifest_path = os.path.join(folder, "manifest.json")
    manifest = json.load(open(manifest_path))
    # a foreign target: another fingerprint, another GPU
    foreign = dict(manifest, target_fingerprint="0" * 16, target_name="NVIDIA A100", compute_capability=[8, 0])
    json.dump(foreign, open(manifest_path, "w"))
    with pytest.raises(SavedModelError, match="compiled for another cpu target.*compute capability 8.0"):
        load_compiled(folder)
    json.dump(manifest, open(manifest_path, "w"))
    with open(os.path.join(folder, "libs", lib), "ab") as f:
        f.write(b"\0")
    with pytest.raises(SavedModelError, match="does not match its hash"):
        load_compiled(folder)
    with pytest.raises(SavedModelError, match="no manifest.json"):
        load_compiled(str(tmp_path))
    with pytest.raises(SavedModelError, match="not an empty folder"):
        hf.compile(graph, target="cpu").save(folder)


def test_check_target_names_both_gpus():
    target = types.SimpleNamespace(arch="sm_90", fingerprint=lambda: "abc",
                                   get=lambda key, default=None: {"name": "NVIDIA H200",
                                                                  "compute_capability": (9, 0)}.get(key, default))
    check_target("m", {"target_fingerprint": "abc"}, target, "cuda")  # the same target: no error
    with pytest.raises(SavedModelError) as info:
        check_target("m", {"target_fingerprint": "def", "target_arch": "sm_80", "target_name": "NVIDIA A100",
                           "compute_capability": [8, 0]}, target, "cuda")
    text = str(info.value)
    assert "compute capability 8.0" in text and "compute capability 9.0" in text and "'sm_80'" in text


def test_cuda_kernels_are_written_as_data():
    """A launcher with a spec (the cuda plugin's KernelLauncher) is saved as its params
    and the launch configuration for its bound arguments."""
    params = (types.SimpleNamespace(name="x", kind="tensor", dtype="float16", shape=(4, 8)),
              types.SimpleNamespace(name="n", kind="scalar", dtype="int32", shape=None))
    launcher = types.SimpleNamespace(spec=types.SimpleNamespace(name="k0", params=params),
                                     launch_config=lambda args: ((3, 1, 1), (128, 1, 1), 4096))
    data = saved_graph._kernel_json(launcher, ["buffer", 5])
    assert data == {"params": [["x", "tensor", "float16", [4, 8]], ["n", "scalar", "int32", None]],
                    "grid": [3, 1, 1], "block": [128, 1, 1], "dynamic_smem": 4096}
    json.dumps(data)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [None, "float16"])
def test_cuda_round_trip(rng, tmp_path, monkeypatch, dtype):
    graph, reference, (m, k) = _graph(rng)
    fn = hf.compile(graph, target="cuda", dtype=dtype)
    folder = fn.save(str(tmp_path / "model"))
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    assert manifest["target"] == "cuda" and manifest["compute_capability"]
    assert any(name.endswith(".cubin") for name in manifest["files"])
    _no_compiling(monkeypatch)
    loaded = load_compiled(folder)
    for _ in range(2):  # fresh inputs each call: nothing stale is returned
        xv = rng.standard_normal((m, k)).astype(np.float32 if dtype is None else np.float16)
        y, echo = loaded(xv)
        want, _ = fn(xv)
        assert _err(y, reference(xv)) < (1e-5 if dtype is None else 1e-2)
        assert np.array_equal(y, want) and np.array_equal(echo, xv)
    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(xv).cuda()
    assert np.array_equal(loaded(xt)[0], fn(xv)[0])
    json.dump(dict(manifest, target_fingerprint="f" * 16), open(os.path.join(folder, "manifest.json"), "w"))
    with pytest.raises(SavedModelError, match="compiled for another cuda target"):
        load_compiled(folder)
