"""CUDA C source → cubin, in process with NVRTC (default) or with ``nvcc`` when asked.

Choice of compiler: the `compiler` argument, else ``$HIDET_FRAMEWORK_CUDA_COMPILER``
(``nvrtc`` | ``nvcc``), else NVRTC, falling back to nvcc when NVRTC cannot be loaded.
Results go through the content-addressed build cache, keyed by the source, the
options, the compiler and its version, the arch, the target fingerprint and the
backend name, so the same kernel is compiled once per machine.

NVRTC searches no include directory by itself, so the CUDA headers (cuda_fp16.h,
cuda_bf16.h) are located at run time: CUDA_HOME / CUDA_PATH, the toolkit around the
``nvcc`` on PATH, the conventional /usr/local/cuda, and the ``nvidia`` pip packages.
A candidate is used only if it holds ``cuda_fp16.h``.
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from typing import Sequence

import attrs

from hidet_framework.backend.c_style import function_at, source_excerpt

from .errors import CudaCompileError, CudaUnavailableError

COMPILER_ENV = "HIDET_FRAMEWORK_CUDA_COMPILER"
DEFAULT_ARCH = "sm_90"
# Instructions that exist only on the arch-specific sm_90a target.
_ARCH_SPECIFIC_MARKERS = ("wgmma.", "setmaxnreg.")
# "name.cu(12): error: ..." (NVRTC and nvcc, the latter with a directory in front)
_ERROR_LINE = re.compile(r"^(?P<file>[^\n(]*)\((?P<line>\d+)\): (?P<kind>error|catastrophic error|warning)",
                         re.MULTILINE)


@attrs.frozen
class CubinBuild:
    """A compiled cubin on disk and how it was made."""

    path: str
    arch: str
    compiler: str  # "nvrtc" | "nvcc"
    compiler_version: str
    options: tuple[str, ...]
    cache_hit: bool


# -- include directories -----------------------------------------------------------------
def _site_package_dirs() -> list[str]:
    dirs = []
    for entry in sys.path:
        if entry and os.path.isdir(os.path.join(entry, "nvidia")):
            dirs.append(os.path.join(entry, "nvidia"))
    return dirs


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> tuple[str, ...]:
    """Folders holding the CUDA headers, best first, deduplicated."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots.append("/usr/local/cuda")  # the conventional location, checked like the others
    candidates = []
    for root in filter(None, roots):
        candidates += [os.path.join(root, "include"), os.path.join(root, "targets", "x86_64-linux", "include"),
                       os.path.join(root, "targets", "sbsa-linux", "include")]
    for nvidia in _site_package_dirs():  # pip wheels: nvidia/cu13/include, nvidia/cuda_runtime/include...
        candidates += sorted(glob.glob(os.path.join(nvidia, "*", "include")))
    found: list[str] = []
    for path in candidates:
        real = os.path.realpath(path)
        if os.path.isfile(os.path.join(real, "cuda_fp16.h")) and real not in found:
            found.append(real)
    return tuple(found)


# -- compilers ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def import_torch_first() -> None:
    """Import torch, when it is installed, before NVRTC is loaded into this process.

    Seen on the GPU machine (torch 2.11 cu130, cuda-bindings 13.3, NVRTC 13.0.88): after
    an in-process NVRTC compile, a later ``import torch`` fails while parsing its own
    operator schemas ("expected ident but found ')'"), while torch imported first works
    with every later compile (every benchmark does that). The cause is not known yet;
    loading NVRTC with RTLD_LOCAL did not help. Since torch tensors are a main way in
    and out of compiled code (DLPack), the CUDA backend makes sure of the working order.
    """
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (imported for its side effect on the process)


def _nvrtc():
    import_torch_first()
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise CudaUnavailableError(f"cuda-bindings is not installed ({exc})") from None
    return nvrtc


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str:
    """"13.0" etc.; raises CudaUnavailableError when NVRTC cannot be loaded."""
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # libnvrtc missing: cuda-bindings raises its own type
        raise CudaUnavailableError(f"NVRTC could not be loaded: {exc}") from None
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaUnavailableError(f"nvrtcVersion failed: {err}")
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CudaUnavailableError("nvcc is not on PATH")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"release (\S+),", out)
    return match.group(1) if match else out.strip().splitlines()[-1]


def choose_compiler(compiler: str | None = None) -> str:
    choice = (compiler or os.environ.get(COMPILER_ENV) or "").strip().lower()
    if choice in ("nvrtc", "nvcc"):
        return choice
    if choice:
        raise ValueError(f"unknown CUDA compiler {choice!r} (from {COMPILER_ENV}?): use 'nvrtc' or 'nvcc'")
    try:
        nvrtc_version()
        return "nvrtc"
    except CudaUnavailableError:
        if shutil.which("nvcc"):
            return "nvcc"
        raise


def default_arch() -> str:
    """The arch of device 0 when a GPU is usable, else sm_90."""
    try:
        from . import driver

        driver.ensure_initialized()
        major = driver.device_attribute("COMPUTE_CAPABILITY_MAJOR")
        minor = driver.device_attribute("COMPUTE_CAPABILITY_MINOR")
        return f"sm_{major}{minor}"
    except Exception:  # no cuda-bindings, no driver, no device: compile for the H200
        return DEFAULT_ARCH


def needs_arch_specific(source: str) -> bool:
    """True when the source uses sm_90a-only instructions (wgmma, setmaxnreg)."""
    return any(marker in source for marker in _ARCH_SPECIFIC_MARKERS)


def common_options(arch: str, *, fast_math: bool = False, line_info: bool = True) -> list[str]:
    opts = ["-std=c++17"]
    if fast_math:
        opts.append("--use_fast_math")
    if line_info:
        opts.append("-lineinfo")  # source lines for compute-sanitizer and profilers; no cost in SASS
    return opts


def _compile_nvrtc(source: str, name: str, arch: str, options: list[str], out_path: str) -> None:
    nvrtc = _nvrtc()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    if err != ok:
        raise CudaCompileError(f"nvrtcCreateProgram failed: {err}")
    try:
        opts = [f"--gpu-architecture={arch}", "-default-device", *options]
        opts += [f"-I{d}" for d in cuda_include_dirs()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        # NVRTC writes into the buffers it is given: a bytearray, never a bytes object
        # (b" " * 1 is CPython's shared one-byte b" ", which an empty log's NUL would
        # overwrite for the whole process: " ".encode() then gave b"\x00")
        log = bytearray(log_size)
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = bytes(log).rstrip(b"\0 ").decode(errors="replace")
        if err != ok:
            raise compile_error("NVRTC", source, log, arch)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if err != ok or size == 0:
            raise CudaCompileError(f"NVRTC produced no cubin for {arch} ({err}); log:\n{log}", log=log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    with open(out_path, "wb") as f:
        f.write(cubin)


def _nvcc_arch_flags(arch: str) -> list[str]:
    # sm_90a via -gencode: the -arch shorthand also runs a plain sm_90 pass that rejects wgmma
    number = arch[3:]
    return [f"-gencode=arch=compute_{number},code={arch}"]


def _compile_nvcc(source: str, name: str, arch: str, options: list[str], out_path: str) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CudaUnavailableError("nvcc is not on PATH")
    src_path = os.path.join(os.path.dirname(out_path), f"{name}.cu")
    with open(src_path, "w") as f:
        f.write(source)
    cmd = [nvcc, "-cubin", *_nvcc_arch_flags(arch), *options, "-o", out_path, src_path]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise compile_error("nvcc", source, (proc.stdout + proc.stderr).strip(), arch)


# -- errors --------------------------------------------------------------------------------
def compile_error(compiler: str, source: str, log: str, arch: str, context: int = 3,
                  max_errors: int = 5) -> CudaCompileError:
    """A `CudaCompileError` showing the log plus, for each failing line, the source
    around it (±`context` lines) and the ``hidet function`` it belongs to."""
    lines = source.splitlines()
    parts, functions, seen = [], [], set()
    for match in _ERROR_LINE.finditer(log):
        if "error" not in match.group("kind"):
            continue
        lineno = int(match.group("line"))
        if lineno in seen or len(seen) >= max_errors:
            continue
        seen.add(lineno)
        owner = function_at(lines, lineno)
        if owner and owner not in functions:
            functions.append(owner)
        header = f"line {lineno}" + (f", in hidet function {owner}" if owner else "")
        parts.append(header + ":\n" + source_excerpt(lines, lineno, context))
    message = f"{compiler} failed to compile for {arch}"
    if functions:
        message += f" (in {', '.join(functions)})"
    message += f":\n{log}"
    if parts:
        message += "\n\noffending source:\n" + "\n\n".join(parts)
    return CudaCompileError(message, log=log, source=source, functions=tuple(functions))


# -- entry point ---------------------------------------------------------------------------
def build_cubin(source: str, *, arch: str | None = None, name: str = "module", compiler: str | None = None,
                fast_math: bool = False, line_info: bool = True, extra_options: Sequence[str] = (),
                target_fingerprint: str = "", use_cache: bool = True) -> CubinBuild:
    """Compile `source` to a cubin for `arch` (default: this GPU's, else sm_90; sm_90
    becomes sm_90a when the source uses sm_90a-only instructions) and return where it is."""
    arch = arch or default_arch()
    if arch == "sm_90" and needs_arch_specific(source):
        arch = "sm_90a"
    compiler = choose_compiler(compiler)
    version = nvrtc_version() if compiler == "nvrtc" else nvcc_version()
    safe_name = re.sub(r"[^A-Za-z0-9_]", "_", name) or "module"
    options = common_options(arch, fast_math=fast_math, line_info=line_info) + list(extra_options)
    compile_fn = _compile_nvrtc if compiler == "nvrtc" else _compile_nvcc

    def build(tmp_dir: str) -> str:
        out = os.path.join(tmp_dir, f"{safe_name}.cubin")
        compile_fn(source, safe_name, arch, options, out)
        return out

    key_parts = {
        "backend": "cuda",
        "kind": "cubin",
        "source": source,
        "arch": arch,
        "compiler": compiler,
        "compiler_version": version,
        "options": options,
        "include_dirs": list(cuda_include_dirs()) if compiler == "nvrtc" else [],
        "target": target_fingerprint,
    }
    if use_cache:
        from hidet_framework.backend.build_cache import BuildCache

        path, hit = BuildCache.default().get_or_build(key_parts, build, ".cubin", source_suffix=".cu")
    else:
        import tempfile

        path, hit = build(tempfile.mkdtemp(prefix="hidet-cuda-")), False
    return CubinBuild(path, arch, compiler, version, tuple(options), hit)
