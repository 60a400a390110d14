"""`CudaBackend`: the backend contract for target kind ``cuda``.

codegen (lazily, from ``hidet_plugin_cuda.codegen``) → build (NVRTC or nvcc, through
the build cache) → load (cuModuleLoadData, one `KernelLauncher` per kernel) and a
`CudaDevice`. Nothing here touches the driver before it is needed, and
`availability()` never raises.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

from hidet_framework.backend.contract import Artifact, Availability, Backend, LoadedModule, Target

from .errors import CudaUnavailableError
from .kernel import KernelLauncher, KernelSpec, specs_by_name


class CudaLoadedModule(LoadedModule):
    """A cubin loaded into the primary context; its kernels by name."""

    def __init__(self, cuda_module: Any, specs: dict[str, KernelSpec], smem_limit: int | None = None):
        self.cuda_module = cuda_module  # driver.CudaModule: unloaded when this dies
        self._launchers = {name: KernelLauncher(spec, cuda_module.function(name), smem_limit)
                           for name, spec in specs.items()}

    def function_names(self) -> Sequence[str]:
        return list(self._launchers)

    def __getitem__(self, name: str) -> Callable[..., None]:
        try:
            return self._launchers[name]
        except KeyError:
            raise KeyError(f"no kernel {name!r} in this module; it has {list(self._launchers)}") from None

    def __repr__(self) -> str:
        return f"CudaLoadedModule({list(self._launchers)})"


class CudaBackend(Backend):
    name = "cuda"
    target_kinds = ("cuda",)
    preference = 10  # "auto" takes the GPU over the CPU where one is usable

    def __init__(self, device_id: int = 0, compiler: str | None = None):
        self.device_id = device_id
        self.compiler = compiler  # None: $HIDET_FRAMEWORK_CUDA_COMPILER, else NVRTC
        self._availability: Availability | None = None
        self._device = None

    # -- discovery ------------------------------------------------------------------
    def availability(self) -> Availability:
        """Usable when cuda-bindings imports, libcuda loads, cuInit succeeds and a device
        exists; otherwise the reason names the first missing piece. Never raises."""
        if self._availability is None:
            self._availability = self._probe()
        return self._availability

    def _probe(self) -> Availability:
        try:
            from . import driver

            driver.cuda_driver()
            driver.ensure_initialized()
            count = driver.device_count()
            if count == 0:
                return Availability(False, "the CUDA driver loaded but found no CUDA device")
            if self.device_id >= count:
                return Availability(False, f"no CUDA device {self.device_id} (this machine has {count})")
            # before any compile, also in the tuner's forked build workers (see there)
            from .nvrtc_build import import_torch_first

            import_torch_first()
            return Availability(True)
        except CudaUnavailableError as exc:
            return Availability(False, str(exc))
        except Exception as exc:  # availability must answer, whatever went wrong
            return Availability(False, f"CUDA probe failed: {type(exc).__name__}: {exc}")

    def auto_schedule_kernel(self, stage: Any) -> Any:
        from .auto_schedule import cuda_stage_kernel

        return cuda_stage_kernel(stage)

    def detect_target(self) -> Target:
        """This GPU's target when usable, else the H200 default (sm_90)."""
        from .target import default_cuda_target, detect_cuda_target

        if self.availability():
            return detect_cuda_target(self.device_id)
        return default_cuda_target()

    # -- compile --------------------------------------------------------------------
    def codegen(self, module: Any, target: Target) -> str:
        from . import codegen  # written by the code generator's author; imported on first use

        return codegen.generate(module, target)

    def build(self, source: str, target: Target, *, name: str = "module") -> Artifact:
        from .nvrtc_build import build_cubin

        result = build_cubin(source, arch=target.arch, name=name, compiler=self.compiler,
                             target_fingerprint=target.fingerprint())
        meta = {"name": name, "arch": result.arch, "compiler": result.compiler,
                "compiler_version": result.compiler_version, "options": list(result.options),
                "cache_hit": result.cache_hit}
        return Artifact(result.path, hashlib.sha256(source.encode()).hexdigest(), target, meta)

    def load(self, artifact: Artifact, module: Any) -> CudaLoadedModule:
        """Load the cubin and make one launcher per kernel.

        `module` says what the kernels are: a `KernelSpec`, a list or name→spec map of
        them, an object with a ``kernel_specs`` attribute (list, or a method taking no
        arguments), or an IR module, whose specs come from
        ``hidet_plugin_cuda.codegen.kernel_specs(module)``.
        """
        from hidet_framework.backend.build_cache import read_artifact

        from .driver import CudaModule

        specs = specs_by_name(self._kernel_specs(module))
        image = read_artifact(artifact.path)  # ownership, mode and hash checked on the bytes loaded
        smem_limit = artifact.target.get("smem_per_block_optin")
        return CudaLoadedModule(CudaModule(image, self.device_id), specs, smem_limit)

    @staticmethod
    def _kernel_specs(module: Any) -> Any:
        if isinstance(module, (list, tuple)) and module and all(isinstance(m, dict) for m in module):
            # specs as data (a saved compiled model's plan): name, params, grid, block, dynamic_smem
            from .kernel import ParamSpec

            return [KernelSpec(m["name"], [ParamSpec(*p) for p in m["params"]], tuple(m["grid"]),
                               tuple(m["block"]), int(m["dynamic_smem"])) for m in module]
        if isinstance(module, (KernelSpec, list, tuple, dict)):
            return module
        specs = getattr(module, "kernel_specs", None)
        if specs is not None:
            return specs() if callable(specs) else specs
        from . import codegen

        return codegen.kernel_specs(module)

    # -- runtime --------------------------------------------------------------------
    @property
    def device(self):
        if self._device is None:
            from .device import CudaDevice

            self._device = CudaDevice(self.device_id)
        return self._device
