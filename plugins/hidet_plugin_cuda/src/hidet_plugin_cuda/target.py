"""The CUDA `Target`: hardware facts read off the device, or the H200 offline.

Templates build their schedule spaces from these properties, so the offline default
must be a real machine: the H200 the project is measured on (sm_90).
"""
from __future__ import annotations

from hidet_framework.backend.contract import Target

from . import driver

# H200 SXM (Hopper, compute capability 9.0), as its driver reports it.
H200_PROPERTIES = {
    "name": "NVIDIA H200 (offline default)",
    "sm_count": 132,
    "warp_size": 32,
    "max_threads_per_block": 1024,
    "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32,
    "smem_per_block": 48 * 1024,  # without opting in
    "smem_per_block_optin": 227 * 1024,  # with cuFuncSetAttribute
    "smem_per_sm": 228 * 1024,
    "regs_per_block": 64 * 1024,
    "regs_per_sm": 64 * 1024,
    "compute_capability": (9, 0),
    "l2_bytes": 50 * 1024 * 1024,
}

# property name -> CU_DEVICE_ATTRIBUTE_* suffix
_ATTRIBUTES = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "warp_size": "WARP_SIZE",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "max_blocks_per_sm": "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "smem_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "smem_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "regs_per_block": "MAX_REGISTERS_PER_BLOCK",
    "regs_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "l2_bytes": "L2_CACHE_SIZE",
    "memory_clock_khz": "MEMORY_CLOCK_RATE",
    "memory_bus_bits": "GLOBAL_MEMORY_BUS_WIDTH",
}


def arch_of(compute_capability: tuple[int, int]) -> str:
    major, minor = compute_capability
    return f"sm_{major}{minor}"


def default_cuda_target() -> Target:
    """The target compiled for when no GPU is here: the H200 (sm_90)."""
    return Target("cuda", "sm_90", dict(H200_PROPERTIES))


def detect_cuda_target(device_id: int = 0) -> Target:
    """The target of device `device_id`, read through the driver (raises
    `CudaUnavailableError` when there is none)."""
    driver.set_current_device(device_id)
    props: dict = {"name": driver.device_name(device_id)}
    for key, attribute in _ATTRIBUTES.items():
        try:
            props[key] = driver.device_attribute(attribute, device_id)
        except (AttributeError, driver.CudaDriverError):  # attribute unknown to this driver
            continue
    cc = (driver.device_attribute("COMPUTE_CAPABILITY_MAJOR", device_id),
          driver.device_attribute("COMPUTE_CAPABILITY_MINOR", device_id))
    props["compute_capability"] = cc
    return Target("cuda", arch_of(cc), props)
