"""The CPU backend: C with OpenMP, built by gcc, loaded with ctypes."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Any

from hidet_framework.backend.contract import Artifact, Availability, Backend, LoadedModule, Target

from .device import CpuDevice

__all__ = ["CpuBackend", "check_toolchain"]

# Exercises everything a generated module needs: OpenMP (compile, link, run), libm.
_PROBE_SOURCE = r"""
#include <math.h>
#include <omp.h>
int hidet_probe(void) {
    int n = 0;
    #pragma omp parallel reduction(+: n)
    n += 1;
    return n > 0 && sqrt(4.0) == 2.0 ? 1 : 0;
}
"""


@functools.lru_cache(maxsize=None)
def check_toolchain() -> Availability:
    """Whether gcc can build and we can load and run an OpenMP shared library (asked
    once per process: it costs a compiler run)."""
    from .build import CFLAGS, COMPILER, LDFLAGS

    if shutil.which(COMPILER) is None:
        return Availability(False, f"C compiler {COMPILER!r} not found on PATH (install gcc)")
    with tempfile.TemporaryDirectory(prefix="hidet-cpu-probe-") as tmp:
        src, lib = os.path.join(tmp, "probe.c"), os.path.join(tmp, "libprobe.so")
        with open(src, "w") as f:
            f.write(_PROBE_SOURCE)
        try:
            result = subprocess.run([COMPILER, *CFLAGS, "-o", lib, src, *LDFLAGS],
                                    capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Availability(False, f"running {COMPILER} failed: {exc}")
        if result.returncode != 0:
            return Availability(False, f"{COMPILER} cannot build an OpenMP shared library: "
                                       f"{(result.stderr or result.stdout).strip()[:2000]}")
        try:
            if ctypes.CDLL(lib).hidet_probe() != 1:
                return Availability(False, "the OpenMP probe library ran but returned a wrong answer")
        except OSError as exc:
            return Availability(False, f"cannot load an OpenMP shared library: {exc}")
    return Availability(True)


class CpuBackend(Backend):
    name = "cpu"
    target_kinds = ("cpu",)
    preference = 0  # "auto" falls back to the CPU where no preferred backend is usable
    host = True  # numpy arrays in host memory: constant folding compiles here

    def __init__(self) -> None:
        self._device = CpuDevice()

    def availability(self) -> Availability:
        return check_toolchain()

    def auto_schedule_kernel(self, stage: Any) -> Any:
        from .auto_schedule import cpu_stage_kernel

        return cpu_stage_kernel(stage)

    def detect_target(self) -> Target:
        from .target import detect_cpu_target

        return detect_cpu_target()

    def codegen(self, module: Any, target: Target) -> str:
        from . import codegen  # the C code generator lives in its own module

        return codegen.generate(module, target)

    def build(self, source: str, target: Target, *, name: str = "module") -> Artifact:
        from .build import build_shared_library

        path, hit = build_shared_library(source, name=name)
        return Artifact(path=path, source_hash=hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(),
                        target=target, meta={"name": name, "cache_hit": hit})

    def load(self, artifact: Artifact, module: Any) -> LoadedModule:
        """`module`: the IR module, or the functions' signatures directly (a sequence of
        FunctionSignature); with None, signatures stored in ``artifact.meta["signatures"]``."""
        from .runtime import CpuLoadedModule, signatures_of

        if module is None:
            module = artifact.meta.get("signatures")
        return CpuLoadedModule(artifact.path, signatures_of(module))

    @property
    def device(self) -> CpuDevice:
        return self._device

    def __repr__(self) -> str:
        return "CpuBackend()"
