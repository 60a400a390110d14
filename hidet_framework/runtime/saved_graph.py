"""Saving a compiled graph and loading it back without compiling or tuning.

``fn.save(folder)`` writes what the compiled graph runs — nothing to rebuild:

- ``libs/lib<k>.so`` (cpu) or ``libs/lib<k>.cubin`` (cuda): the built libraries its
  launches call; a cuda launch also records its kernel's parameters and its launch
  configuration (grid, block, dynamic shared memory), worked out at save time for
  the arguments it is bound to;
- ``weights.bin``: the constants, back to back;
- ``plan.json``: the launch plan (per launch: library, function, signature, and each
  argument as an arena slice, a weight or a scalar), the arena size, where inputs are
  copied in and outputs read out;
- ``manifest.json``: the format, the target kind, its arch and fingerprint (on cuda the
  fingerprint covers the GPU's name, compute capability and limits), and the SHA-256
  of every other file.

``hf.load_compiled(folder)`` checks every hash and that this machine's target has the
same fingerprint (a library built with ``-march=native`` elsewhere could fault here),
then loads the libraries (cubins through cuModuleLoadData) and binds the plan: no
codegen, no compiler, no tuner. A cuda model loads only on a GPU whose target has the
same fingerprint: a cubin for sm_90 must not be loaded on another GPU, and the
launch configurations were chosen for that GPU's limits.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any, Sequence

import numpy as np

from hidet_framework.backend.signature import FunctionSignature, numpy_dtype

FORMAT = "hidet-framework-compiled/1"
MANIFEST, PLAN, WEIGHTS = "manifest.json", "plan.json", "weights.bin"

__all__ = ["save_compiled", "load_compiled", "LoadedGraph", "SavedModelError"]


class SavedModelError(ValueError):
    """A saved model cannot be written or loaded here (damaged, foreign or incomplete)."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _address(a: Any) -> int:
    """Where an array's data lies: numpy (host) or a device array (``.ptr``)."""
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return int(a.ptr)


def _nbytes(a: Any) -> int:
    return int(a.nbytes) if hasattr(a, "nbytes") else int(np.prod(a.shape, dtype=np.int64)) * a.dtype.itemsize


def _is_array(a: Any) -> bool:
    return isinstance(a, np.ndarray) or (hasattr(a, "ptr") and hasattr(a, "shape") and hasattr(a, "dtype"))


# ------------------------------------------------------------------ saving

class _PlanWriter:
    def __init__(self, compiled: Any, folder: str) -> None:
        self.arena = compiled._arena
        if not _is_array(self.arena):
            raise SavedModelError(f"saving a compiled graph on {compiled.target!r} is not supported: its "
                                  f"memory is neither host memory nor a device array")
        self.device = compiled.device
        self.folder = folder
        self.base, self.size = _address(self.arena), _nbytes(self.arena)
        self.weights: list[Any] = []
        self.weight_ids: dict[int, int] = {}
        self.libraries: dict[str, int] = {}
        # a loaded kernel (cuda launcher) -> the built artifact it came from
        self.artifacts: dict[int, str] = {}
        for task in compiled.tasks:
            for member in getattr(task, "members", None) or [task]:
                path = getattr(getattr(member, "artifact", None), "path", None)
                for fn in getattr(member, "_functions", {}).values():
                    if path:
                        self.artifacts[id(fn)] = path

    def argument(self, a: Any) -> dict:
        if _is_array(a):
            pointer = _address(a)
            if self.base <= pointer < self.base + max(self.size, 1) and _nbytes(a) <= self.size:
                return {"arena": pointer - self.base, "shape": list(a.shape), "dtype": a.dtype.name}
            if id(a) not in self.weight_ids:
                self.weight_ids[id(a)] = len(self.weights)
                self.weights.append(a)
            return {"weight": self.weight_ids[id(a)]}
        if isinstance(a, (bool, int, float, np.generic)):
            value = a.item() if isinstance(a, np.generic) else a
            return {"scalar": value, "type": type(value).__name__}
        raise SavedModelError(f"cannot save a launch argument of type {type(a).__name__}")

    def library(self, fn: Any) -> int:
        path = getattr(fn, "library", None) or self.artifacts.get(id(fn))
        if path is None or not os.path.isfile(path):
            raise SavedModelError(f"the compiled function {getattr(fn, '__name__', fn)!r} does not say which "
                                  f"library it came from; its backend does not support saving")
        if path not in self.libraries:
            self.libraries[path] = len(self.libraries)
        return self.libraries[path]


def save_compiled(compiled: Any, folder: str, source: str | None = None) -> str:
    """Write `compiled` (a CompiledGraph) to `folder` (created; must be empty if it
    exists); `source` (the model file it came from) is recorded for ``run --check``.
    Returns the folder."""
    from hidet_framework.extension import plugin_host

    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise SavedModelError(f"{folder}: exists and is not an empty folder")
    os.makedirs(os.path.join(folder, "libs"), exist_ok=True)
    writer = _PlanWriter(compiled, folder)
    launches = []
    for fn, args in compiled._launches:
        signature = getattr(fn, "signature", None)
        if isinstance(signature, FunctionSignature):
            launches.append({"library": writer.library(fn), "function": signature.name,
                             "signature": signature.to_json(), "args": [writer.argument(a) for a in args]})
        elif getattr(fn, "spec", None) is not None and hasattr(fn, "launch_config"):
            launches.append({"library": writer.library(fn), "function": fn.spec.name,
                             "kernel": _kernel_json(fn, args), "args": [writer.argument(a) for a in args]})
        else:
            raise SavedModelError("a compiled function carries no signature; its backend does not support saving")
    inputs = []
    for t, view in zip(compiled.graph.inputs, compiled._input_views):
        inputs.append({"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name,
                       "view": None if view is None else writer.argument(view)})
    outputs = [{"input": x} if kind == "input" else writer.argument(x) for kind, x in compiled._fetch]
    weight_table, offset = [], 0
    with open(os.path.join(folder, WEIGHTS), "wb") as f:
        for w in writer.weights:
            data = np.asarray(w if isinstance(w, np.ndarray) else writer.device.to_numpy(w), order="C")
            carrier = data.view(np.uint16) if data.dtype.name == "bfloat16" else data
            f.write(carrier.tobytes())
            weight_table.append({"offset": offset, "shape": list(data.shape), "dtype": carrier.dtype.name})
            offset += carrier.nbytes
    names = {}
    for path, k in writer.libraries.items():
        names[k] = f"libs/lib{k}{os.path.splitext(path)[1] or '.so'}"
        shutil.copyfile(path, os.path.join(folder, names[k]))
    plan = {"arena_bytes": int(writer.size), "launches": launches, "inputs": inputs, "outputs": outputs,
            "weights": weight_table, "libraries": [names[k] for k in range(len(writer.libraries))]}
    with open(os.path.join(folder, PLAN), "w") as f:
        json.dump(plan, f)
    target = plugin_host().backend_for(compiled.target).detect_target()
    files = [PLAN, WEIGHTS] + plan["libraries"]
    manifest = {"format": FORMAT, "target": compiled.target, "target_arch": target.arch,
                "target_fingerprint": target.fingerprint(), "target_name": target.get("name"),
                "compute_capability": target.get("compute_capability"),
                "num_launches": len(launches), "source": source,
                "files": {name: _sha256(os.path.join(folder, name)) for name in files}}
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
    return folder


def _kernel_json(fn: Any, args: Sequence[Any]) -> dict:
    """A loaded kernel's parameters and its launch configuration for `args` (fixed:
    the compiled graph binds every launch once)."""
    grid, block, smem = fn.launch_config(args)
    return {"params": [[p.name, p.kind, p.dtype, None if p.shape is None else list(p.shape)]
                       + ([getattr(p, "tensor_map")] if getattr(p, "tensor_map", None) else [])
                       for p in fn.spec.params],
            "grid": list(grid), "block": list(block), "dynamic_smem": int(smem)}


# ------------------------------------------------------------------ loading

def _read_manifest(folder: str) -> dict:
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        raise SavedModelError(f"{folder}: no {MANIFEST}; not a saved compiled model (hidet-framework compile "
                              f"MODEL --out DIR writes one)")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise SavedModelError(f"{path}: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SavedModelError(f"{path}: format {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                              f"expected {FORMAT!r}")
    for name, digest in manifest.get("files", {}).items():
        file = os.path.join(folder, name)
        if os.path.isabs(name) or ".." in name.split("/") or not os.path.isfile(file):
            raise SavedModelError(f"{folder}: {name} is missing")
        if _sha256(file) != digest:
            raise SavedModelError(f"{folder}: {name} does not match its hash in {MANIFEST} (the file was "
                                  f"changed or damaged); not loading it")
    if PLAN not in manifest.get("files", {}):
        raise SavedModelError(f"{path}: lists no {PLAN}")
    return manifest


def check_target(folder: str, manifest: dict, target: Any, kind: str) -> None:
    """Refuse a model compiled for another target (arch, GPU, or CPU features)."""
    if target.fingerprint() == manifest.get("target_fingerprint"):
        return
    saved_cc, here_cc = manifest.get("compute_capability"), target.get("compute_capability")
    gpu = ""
    if saved_cc is not None or here_cc is not None:
        gpu = (f" (saved for {manifest.get('target_name')!r}, compute capability {_cc(saved_cc)}; this GPU is "
               f"{target.get('name')!r}, compute capability {_cc(here_cc)})")
    raise SavedModelError(f"{folder}: compiled for another {kind} target: arch {manifest.get('target_arch')!r}, "
                          f"fingerprint {manifest.get('target_fingerprint')}; here arch {target.arch!r}, "
                          f"fingerprint {target.fingerprint()}{gpu}. Its libraries may use instructions or "
                          f"limits this machine lacks: compile the model again here")


def _cc(value: Any) -> str:
    return "?" if not value else ".".join(str(v) for v in value)


def load_compiled(folder: str) -> "LoadedGraph":
    """A saved compiled model, ready to call; never compiles or tunes."""
    from hidet_framework.extension import plugin_host

    manifest = _read_manifest(folder)
    with open(os.path.join(folder, PLAN)) as f:
        plan = json.load(f)
    kind = manifest["target"]
    backend = plugin_host().backend_for(kind)
    availability = backend.availability()
    if not availability:
        raise SavedModelError(f"{folder}: compiled for {kind!r}, which is not usable here: {availability.reason}")
    target = backend.detect_target()
    check_target(folder, manifest, target, kind)
    missing = [p for p in plan["libraries"] if p not in manifest["files"]] + \
        ([WEIGHTS] if plan["weights"] and WEIGHTS not in manifest["files"] else [])
    if missing:
        raise SavedModelError(f"{folder}: {', '.join(missing)} not covered by the manifest's hashes")
    return LoadedGraph(folder, plan, backend, target, kind)


class _Named:
    """A kernel spec (JSON data) with the name the loader groups it by."""

    def __init__(self, name: str, value: dict) -> None:
        self.name, self.value = name, value


class LoadedGraph:
    """A compiled graph loaded from a folder: call it with numpy arrays in graph input
    order; returns numpy arrays (one, or a tuple)."""

    def __init__(self, folder: str, plan: dict, backend: Any, target: Any, kind: str) -> None:
        from hidet_framework.backend.contract import Artifact

        self.folder, self.target, self.device = folder, kind, backend.device
        self.arena = self.device.empty((max(int(plan["arena_bytes"]), 1),), "uint8")
        raw = np.fromfile(os.path.join(folder, WEIGHTS), dtype=np.uint8) if plan["weights"] else None
        self.weights = []
        for w in plan["weights"]:
            dtype = np.dtype(w["dtype"])
            count = int(np.prod(w["shape"], dtype=np.int64))
            data = raw[w["offset"]:w["offset"] + count * dtype.itemsize].view(dtype).reshape(w["shape"])
            self.weights.append(self.device.from_numpy(data))
        by_library: dict[int, list] = {}
        for launch in plan["launches"]:
            if "kernel" in launch:  # cuda: the kernel spec as data, for the backend's load()
                spec = dict(launch["kernel"], name=launch["function"])
                by_library.setdefault(launch["library"], []).append(_Named(launch["function"], spec))
            else:
                by_library.setdefault(launch["library"], []).append(
                    FunctionSignature.from_json(launch["signature"]))
        modules = {}
        for k, signatures in by_library.items():
            unique = [getattr(s, "value", s) for s in {s.name: s for s in signatures}.values()]
            path = os.path.join(folder, plan["libraries"][k])
            modules[k] = backend.load(Artifact(path=path, source_hash="", target=target), unique)
        self._launches = tuple((modules[launch["library"]][launch["function"]],
                                tuple(self._arg(a) for a in launch["args"])) for launch in plan["launches"])
        self.inputs = [(i["name"], tuple(i["shape"]), i["dtype"]) for i in plan["inputs"]]
        self._input_views = [None if i["view"] is None else self._arg(i["view"]) for i in plan["inputs"]]
        self._outputs = [o for o in plan["outputs"]]

    def _arg(self, a: dict) -> Any:
        if "arena" in a:
            if not isinstance(self.arena, np.ndarray):  # a device arena: a view by pointer
                view = getattr(self.device, "view", None)
                if view is not None:
                    return view(self.arena, a["arena"], tuple(a["shape"]), a["dtype"])
                return type(self.arena)(self.arena.ptr + a["arena"], tuple(a["shape"]), a["dtype"],
                                        device_id=getattr(self.arena, "device_id", 0), owner=self.arena)
            dtype = np.dtype(a["dtype"])
            count = int(np.prod(a["shape"], dtype=np.int64))
            return self.arena[a["arena"]:a["arena"] + count * dtype.itemsize].view(dtype).reshape(a["shape"])
        if "weight" in a:
            return self.weights[a["weight"]]
        return {"int": int, "float": float, "bool": bool}[a["type"]](a["scalar"])

    @property
    def num_launches(self) -> int:
        return len(self._launches)

    def __call__(self, *arrays: Any) -> Any:
        from hidet_framework.runtime.compiled_graph import GraphInputError

        if len(arrays) != len(self.inputs):
            raise GraphInputError(f"the model takes {len(self.inputs)} inputs "
                                  f"({', '.join(f'{n}: {d}{list(s)}' for n, s, d in self.inputs)}), got {len(arrays)}")
        values = []
        for k, ((name, shape, dtype), value) in enumerate(zip(self.inputs, arrays)):
            if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray) and \
                    not isinstance(self.arena, np.ndarray):
                value = self.device.from_dlpack(value)  # a device tensor (torch, cupy): copied on the device
                got = (tuple(value.shape), value.dtype.name)
            else:
                value = np.asarray(value)
                got = (value.shape, numpy_dtype(dtype).name if value.dtype == numpy_dtype(dtype) else value.dtype.name)
            if got != (tuple(shape), numpy_dtype(dtype).name) and got != (tuple(shape), dtype):
                raise GraphInputError(f"input {k} ({name!r}): expected {dtype}{list(shape)}, got "
                                      f"{got[1]}{list(got[0])}")
            values.append(value)
        for view, value in zip(self._input_views, values):
            if view is None:
                continue
            if isinstance(view, np.ndarray):
                np.copyto(view, value, casting="no")
            elif isinstance(value, np.ndarray):
                view.copy_from_host(np.ascontiguousarray(value))
            else:
                view.copy_(value)
        for fn, args in self._launches:
            fn(*args)
        outs = [self._host(values[o["input"]]) if "input" in o else self._host(self._arg(o)) for o in self._outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _host(self, a: Any) -> np.ndarray:
        return np.array(a, copy=True) if isinstance(a, np.ndarray) else self.device.to_numpy(a)

    def __repr__(self) -> str:
        return f"LoadedGraph({self.folder!r}, target={self.target!r}, launches={self.num_launches})"
