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


#: Clusters of 1, 2 and 4 one-block-per-SM blocks resident at once on the H100 (132 SMs), measured with
#: cuOccupancyMaxActiveClusters (384 threads, 200-227 KB of shared memory each; shared/notes/h100-facts.md): the
#: GPCs do not all hold a multiple of 4 SMs, so 4-block clusters leave 12 SMs idle.
H100_CLUSTERS_OF_ONE_BLOCK_PER_SM = {1: 132, 2: 66, 4: 30}
H100_SM = {"threads": 2048, "registers": 65536, "smem": 233472, "blocks": 32, "smem_per_block_reserved": 1024}


def _modelled_active_clusters(kernel: Kernel, block: int, shared_mem: int, cluster: int) -> int:
    """The emulator's answer (no GPU to ask): blocks per SM from the H100's per-SM limits and the kernel's compile
    report, then the measured cluster packing. Sizes without a measurement are refused in words."""
    rep = kernel.report
    regs = max(rep.registers, 1) * ((block + 31) // 32 * 32)
    smem = shared_mem + rep.static_smem + H100_SM["smem_per_block_reserved"]
    per_sm = min(H100_SM["threads"] // block, H100_SM["registers"] // regs, H100_SM["smem"] // smem, H100_SM["blocks"])
    if per_sm < 1:
        raise LaunchError(f"no block of kernel {kernel.name} fits on an H100 SM ({block} threads, {rep.registers} "
                          f"registers per thread, {shared_mem} bytes of dynamic shared memory)")
    if cluster not in H100_CLUSTERS_OF_ONE_BLOCK_PER_SM:
        raise LaunchError(f"the emulator knows the H100's co-resident clusters of 1, 2 and 4 blocks, not {cluster}: "
                          "ask on a real H100")
    if per_sm == 1:
        return H100_CLUSTERS_OF_ONE_BLOCK_PER_SM[cluster]
    return 132 * per_sm // cluster


def persistent_grid(kernel: Kernel, block: int, shared_mem: int, cluster: int = 1,
                    work: int | None = None) -> int:
    """Blocks to launch for a persistent kernel: every resident cluster, or fewer when there are only `work`
    units for clusters to take (so no cluster starts with nothing to do)."""
    n = max_active_clusters(kernel, block, shared_mem, cluster)
    if work is not None:
        n = max(1, min(n, work))
    return n * cluster

