"""What the CUDA driver checks when a kernel is launched, applied before the executor runs it: the executor refuses
what ``cuLaunchKernelEx`` refuses, with the driver's error name and a sentence that says which rule the launch broke.

The kernel's own launch directives come from its PTX, as the driver reads them from the cubin:

* ``.reqnctapercluster X, Y, Z`` (``__cluster_dims__``) — the cluster size when the launch gives none; a launch
  that gives another size is refused.
* ``.explicitcluster`` — the kernel must run in clusters (a size from the kernel or from the launch).
* ``.maxclusterrank N`` (``__launch_bounds__``'s third value) — at most N blocks in a cluster.
* ``.maxntid`` (``__launch_bounds__``' first value) and ``.reqntid`` — the most threads a block may have, and the
  exact block size.
* ``.minnctapersm`` / ``.maxnctapersm`` — hints to ptxas for the register budget; the driver launches any grid.

The device limits are the H100's (``cuDeviceGetAttribute``): 1024 threads a block (1024, 1024, 64 per
dimension), a grid of (2**31 - 1, 65535, 65535) blocks, 65536 registers an SM, 227 KB of shared memory a block
with the opt-in attribute (48 KB without it, static included), clusters of 8 blocks (16 with the non-portable
attribute). ``tools/h100/executor_vs_h100.py`` asks the H100 the same questions (``launch_refusals``) and
``tests/ptx/test_launch_rules.py`` holds the executor to its answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import PTXError

__all__ = ["LaunchRefused", "KernelBounds", "bounds_of", "check_launch", "MAX_BLOCK", "MAX_GRID", "DEFAULT_SMEM",
           "OPTIN_SMEM", "REGS_PER_SM", "PORTABLE_CLUSTER", "MAX_CLUSTER"]

MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
DEFAULT_SMEM = 48 * 1024  # static + dynamic shared memory of a block without the opt-in attribute
OPTIN_SMEM = 232448  # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN on an H100
REGS_PER_SM = 65536
REG_ALLOC_UNIT = 256  # registers are given to a warp in blocks of 256
PORTABLE_CLUSTER = 8
MAX_CLUSTER = 16


class LaunchRefused(PTXError):
    """The driver would refuse this launch: ``error`` is its error name, ``reason`` the rule in words."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(f"{reason} [{error}]")
        self.error = error
        self.reason = reason


@dataclass(frozen=True)
class KernelBounds:
    """A kernel's launch directives, as its PTX declares them (None: not declared)."""

    reqnctapercluster: tuple[int, int, int] | None = None
    explicitcluster: bool = False
    maxclusterrank: int | None = None
    maxntid: tuple[int, int, int] | None = None
    reqntid: tuple[int, int, int] | None = None
    minnctapersm: int | None = None


def _dim3(v: tuple) -> tuple[int, int, int]:
    t = tuple(int(x) for x in v)
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


def bounds_of(program: Any) -> KernelBounds:
    """The launch directives of ``program``'s kernel (a :class:`helpers.gpu.executor.program.Program`)."""
    d = program.function.directives
    cl = d.get("reqnctapercluster")
    return KernelBounds(
        reqnctapercluster=_dim3(cl) if cl else None,
        explicitcluster="explicitcluster" in d,
        maxclusterrank=int(d["maxclusterrank"][0]) if d.get("maxclusterrank") else None,
        maxntid=_dim3(d["maxntid"]) if d.get("maxntid") else None,
        reqntid=_dim3(d["reqntid"]) if d.get("reqntid") else None,
        minnctapersm=int(d["minnctapersm"][0]) if d.get("minnctapersm") else None,
    )


def _prod(t: tuple[int, int, int]) -> int:
    return t[0] * t[1] * t[2]


def check_launch(bounds: KernelBounds, grid: tuple[int, int, int], block: tuple[int, int, int],
                 cluster: tuple[int, int, int] | None, dyn_smem: int, *, static_smem: int = 0,
                 max_dynamic_smem: int | None = None, nonportable_cluster: bool = False,
                 registers: int = 0) -> tuple[int, int, int] | None:
    """The cluster size the launch runs with (None: no clusters), or :class:`LaunchRefused` with the driver's
    error for the first rule it breaks. ``max_dynamic_smem`` is the kernel's
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (default: 48 KB less the static shared memory)."""
    inval = "CUDA_ERROR_INVALID_VALUE"
    threads = _prod(block)
    for what, got, most in (("block", block, MAX_BLOCK), ("grid", grid, MAX_GRID)):
        for axis, g, m in zip("xyz", got, most, strict=True):
            if g > m:
                raise LaunchRefused(inval, f"the {what}'s {axis} size is {g}; an H100 allows at most {m}")
    if threads > MAX_THREADS:
        raise LaunchRefused(inval, f"a block of {block} has {threads} threads; an H100 allows at most {MAX_THREADS}")
    if bounds.reqntid is not None and block != bounds.reqntid:
        raise LaunchRefused(inval, f"the kernel requires blocks of exactly {bounds.reqntid} threads (.reqntid); the "
                                   f"launch asks for {block}")
    if bounds.maxntid is not None and threads > _prod(bounds.maxntid):
        raise LaunchRefused(inval, f"the kernel was compiled for at most {_prod(bounds.maxntid)} threads a block "
                                   f"(__launch_bounds__, .maxntid); the launch asks for {threads}")
    if registers:
        warps = -(-threads // 32)
        per_warp = -(-registers * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        if warps * per_warp > REGS_PER_SM:
            raise LaunchRefused("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                                f"{registers} registers a thread x {threads} threads need {warps * per_warp} "
                                f"registers; an SM has {REGS_PER_SM}")
    limit = DEFAULT_SMEM - static_smem if max_dynamic_smem is None else max_dynamic_smem
    if dyn_smem > limit:
        raise LaunchRefused(inval, f"the launch asks for {dyn_smem} bytes of dynamic shared memory; the kernel allows "
                                   f"{limit} (its static shared memory takes {static_smem} of the {DEFAULT_SMEM} a "
                                   "block has without the opt-in attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_"
                                   "BYTES)")
    if static_smem + dyn_smem > OPTIN_SMEM:
        raise LaunchRefused(inval, f"static ({static_smem}) and dynamic ({dyn_smem}) shared memory add up to "
                                   f"{static_smem + dyn_smem} bytes; a block can have at most {OPTIN_SMEM}")
    size = _resolve_cluster(bounds, cluster)
    if size is None:
        return None
    n = _prod(size)
    if any(g % c for g, c in zip(grid, size, strict=True)):
        raise LaunchRefused("CUDA_ERROR_INVALID_CLUSTER_SIZE", f"the grid {grid} is not a whole number of clusters "
                                                               f"of {size}")
    if bounds.maxclusterrank is not None and n > bounds.maxclusterrank:
        raise LaunchRefused("CUDA_ERROR_INVALID_CLUSTER_SIZE",
                            f"the kernel allows at most {bounds.maxclusterrank} blocks a cluster (.maxclusterrank); "
                            f"the cluster {size} has {n}")
    most = MAX_CLUSTER if nonportable_cluster else PORTABLE_CLUSTER
    if n > most:
        extra = "" if nonportable_cluster else (" without CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED "
                                                f"({MAX_CLUSTER} with it)")
        raise LaunchRefused("CUDA_ERROR_INVALID_CLUSTER_SIZE",
                            f"a cluster has at most {most} blocks on an H100{extra}; the cluster {size} has {n}")
    return size


def _resolve_cluster(bounds: KernelBounds, cluster: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    inval = "CUDA_ERROR_INVALID_VALUE"
    fixed = bounds.reqnctapercluster
    if fixed is not None and cluster is not None and tuple(cluster) != fixed:
        raise LaunchRefused("CUDA_ERROR_INVALID_CLUSTER_SIZE", f"the kernel fixes its cluster size at {fixed} "
                            f"(__cluster_dims__, .reqnctapercluster); the launch asks for {tuple(cluster)}")
    size = fixed if fixed is not None else (tuple(cluster) if cluster is not None else None)
    if size is None and bounds.explicitcluster:
        raise LaunchRefused(inval, "the kernel must run in clusters (.explicitcluster) and neither the kernel nor the "
                                   "launch gives a cluster size")
    return size  # type: ignore[return-value]
