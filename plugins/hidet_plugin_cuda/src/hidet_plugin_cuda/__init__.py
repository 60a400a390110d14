"""hidet-plugin-cuda: the ``cuda`` backend of hidet-framework.

Importing this package is cheap and needs neither a GPU, a driver nor cuda-bindings:
``cuda.bindings`` is imported on first use, and `CudaBackend.availability()` says why
the backend cannot run here when it cannot.
"""
from __future__ import annotations

from hidet_framework.extension import hookimpl

from .backend import CudaBackend, CudaLoadedModule
from .errors import CudaCompileError, CudaDriverError, CudaError, CudaLaunchError, CudaUnavailableError
from .kernel import KernelSpec, ParamSpec

__all__ = [
    "CudaBackend", "CudaLoadedModule", "KernelSpec", "ParamSpec",
    "CudaError", "CudaCompileError", "CudaDriverError", "CudaLaunchError", "CudaUnavailableError",
    "register_backends",
]


@hookimpl
def register_backends(register):
    register("cuda", CudaBackend())
