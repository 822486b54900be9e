"""How many blocks or clusters of a kernel the GPU holds at once: the size of a persistent grid.

A persistent kernel launches exactly as many blocks as can be resident together and lets each loop over tiles;
a kernel whose blocks wait on each other (Stream-K's fix-up) must never launch more, or a waiting block can sit
on an SM that the block it waits for needs. `max_active_clusters` asks the driver
(`cuOccupancyMaxActiveClusters`) for the kernel's real resources: threads, registers, shared memory, cluster size.
"""

from __future__ import annotations

from .compiler import Kernel
from .device import check, device_info, require_hopper
from .errors import LaunchError

__all__ = ["max_active_clusters", "persistent_grid"]


def max_active_clusters(kernel: Kernel, block: int, shared_mem: int, cluster: int = 1) -> int:
    """Clusters of `cluster` blocks (1-D) of this kernel that the whole GPU holds at once, with `block` threads and
    `shared_mem` bytes of dynamic shared memory per block. Raises LaunchError when not even one fits."""
    require_hopper("asking the occupancy of a kernel")
    from cuda.bindings import driver

    from .launch import _ensure_smem, load

    L = load(kernel)
    _ensure_smem(kernel, L, shared_mem)
    info = device_info()
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (info.sm_count if info else 132) // cluster * cluster, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
    cfg.sharedMemBytes = shared_mem
    at = driver.CUlaunchAttribute()
    at.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = cluster, 1, 1
    cfg.attrs = [at]
    cfg.numAttrs = 1
    n = int(check(driver.cuOccupancyMaxActiveClusters(L["handle"], cfg), "cuOccupancyMaxActiveClusters"))
    if n < 1:
        raise LaunchError(
            f"no cluster of {cluster} blocks of kernel {kernel.name} fits on the GPU at once ({block} threads, "
            f"{kernel.report.registers} registers per thread, {shared_mem} bytes of dynamic shared memory per block): "
            "use fewer blocks per cluster, less shared memory or fewer registers")
    return n


def persistent_grid(kernel: Kernel, block: int, shared_mem: int, cluster: int = 1,
                    work: int | None = None) -> int:
    """Blocks to launch for a persistent kernel: every resident cluster, or fewer when there are only `work`
    units for clusters to take (so no cluster starts with nothing to do)."""
    n = max_active_clusters(kernel, block, shared_mem, cluster)
    if work is not None:
        n = max(1, min(n, work))
    return n * cluster

