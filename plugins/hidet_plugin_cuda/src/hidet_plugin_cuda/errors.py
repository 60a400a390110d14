"""Exceptions of the CUDA backend.

Kept in a module of their own, importing nothing, so that code on a machine without
cuda-bindings can still catch them.
"""
from __future__ import annotations


class CudaError(RuntimeError):
    """Base class of every error the CUDA backend raises."""


class CudaUnavailableError(CudaError):
    """CUDA cannot be used here; the message says which piece is missing."""


class CudaDriverError(CudaError):
    """A driver-API call returned an error code.

    :param call: the driver function that failed, e.g. ``"cuMemAlloc"``.
    :param code: the numeric ``CUresult``.
    :param name: its symbolic name, e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``.
    :param description: the driver's own sentence for the error.
    """

    def __init__(self, call: str, code: int, name: str, description: str = ""):
        self.call = call
        self.code = code
        self.name = name
        self.description = description
        text = f"{call} failed: {name} ({code})"
        if description:
            text += f": {description}"
        super().__init__(text)


class CudaCompileError(CudaError):
    """NVRTC or nvcc rejected a source.

    :param log: the compiler's full log.
    :param source: the source that failed.
    :param functions: names (from ``/* hidet function: NAME */`` markers) of the
        functions that hold the failing lines, in order of first error.
    """

    def __init__(self, message: str, *, log: str = "", source: str = "", functions: tuple[str, ...] = ()):
        self.log = log
        self.source = source
        self.functions = functions
        super().__init__(message)


class CudaLaunchError(CudaError, TypeError):
    """Arguments given to a kernel do not match its parameters (also a TypeError)."""
