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
    from .device import executor_active

    if executor_active():
        return _modelled_active_clusters(kernel, block, shared_mem, cluster)
    require_hopper("asking the occupancy of a kernel")
    from cuda.bindings import driver

    from .launch import _ensure_smem, load

    L = load(kernel)
    _ensure_smem(kernel, L, shared_mem)
    info = device_info()
    cfg = driver.CUlaunchConfig()
    sms = info.sm_count if info else cluster
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = max(sms // cluster, 1) * cluster, 1, 1
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


#: What one SM of every Hopper part holds (sm_90): threads, registers, shared memory, blocks, and the shared memory
#: the driver reserves per block.
SM90 = {"threads": 2048, "registers": 65536, "smem": 233472, "blocks": 32, "smem_per_block_reserved": 1024}


def _modelled_active_clusters(kernel: Kernel, block: int, shared_mem: int, cluster: int) -> int:
    """The emulator's answer (no GPU to ask): blocks per SM from sm_90's per-SM limits and the kernel's compile
    report, then the emulated part's resident clusters (``helpers.hopper.parts``). Sizes the profile has no count
    for are refused in words."""
    from helpers.hopper import parts

    part = parts.selected()
    rep = kernel.report
    regs = max(rep.registers, 1) * ((block + 31) // 32 * 32)
    smem = shared_mem + rep.static_smem + SM90["smem_per_block_reserved"]
    per_sm = min(SM90["threads"] // block, SM90["registers"] // regs, SM90["smem"] // smem, SM90["blocks"])
    if per_sm < 1:
        raise LaunchError(f"no block of kernel {kernel.name} fits on a Hopper SM ({block} threads, {rep.registers} "
                          f"registers per thread, {shared_mem} bytes of dynamic shared memory)")
    if cluster not in part.clusters:
        raise LaunchError(f"the emulator knows the {part.name}'s resident clusters of "
                          f"{', '.join(map(str, sorted(part.clusters)))} blocks, not {cluster}: ask on a real GPU")
    if per_sm == 1:
        return part.clusters[cluster]
    return part.sms * per_sm // cluster


def persistent_grid(kernel: Kernel, block: int, shared_mem: int, cluster: int = 1,
                    work: int | None = None) -> int:
    """Blocks to launch for a persistent kernel: every resident cluster, or fewer when there are only `work`
    units for clusters to take (so no cluster starts with nothing to do)."""
    n = max_active_clusters(kernel, block, shared_mem, cluster)
    if work is not None:
        n = max(1, min(n, work))
    return n * cluster

