"""The Hopper part kernels run on here, as the counts a GEMM's schedule uses: :func:`this_gpu`.

With a Hopper GPU, the counts are the machine's own: its SM count, L2 and shared memory from the driver, the clusters
of one-block-per-SM blocks resident at once from ``cuOccupancyMaxActiveClusters`` (a 384-thread block with 200 KB of
shared memory, the size of the course's last kernels), the power limit and the SM clock's maximum from NVML. The
datasheet figures the driver cannot give (HBM bandwidth, the bf16 peak) come from the profile whose name matches the
device (``helpers.hopper.parts``). Without one, kernels run on the emulator as the part ``HELPERS_GPU`` or
:func:`use_part` names (the H100 SXM by default), so a student whose class has H100 PCIe sees the waves their GPU
will run.
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache

from helpers.hopper import parts

from .device import device_info, executor_active, hopper_available

__all__ = ["this_gpu", "use_part", "profile_for_name", "resident_clusters", "where_name"]

#: the block the resident-cluster counts are asked for: the course's last kernels' threads and shared memory
PROBE_THREADS = 384
PROBE_SMEM = 200 * 1024


def profile_for_name(name: str) -> parts.Part:
    """The profile of the part a device name names ("NVIDIA H100 80GB HBM3" → the H100 SXM; "NVIDIA H200" → the
    H200; an unknown Hopper → the H100 SXM's datasheet figures)."""
    n = name.upper()
    for key, pattern in (("gh200", r"GH200"), ("h200", r"\bH200"), ("h100-pcie", r"H100.*PCIE"),
                         ("h100-nvl", r"H100.*NVL"), ("h800", r"\bH800"), ("h20", r"\bH20\b"),
                         ("h100-sxm", r"\bH100")):
        if re.search(pattern, n):
            return parts.PROFILES[key]
    return parts.PROFILES[parts.DEFAULT]


def use_part(key: str | None) -> parts.Part:
    """Emulate this Hopper part from now on (``"h100-pcie"``, ``"h200"``, …; ``None``: back to ``HELPERS_GPU`` or
    the H100 SXM). A real GPU is always itself: this changes what the emulator runs as."""
    return parts.select(key)


def this_gpu() -> parts.Part:
    """The part kernels run on here: the GPU's own counts, or the emulated part's profile."""
    if executor_active() or not hopper_available():
        return parts.selected()
    return _device_part()


def _short_name(name: str) -> str:
    m = re.search(r"\b(GH200|H\d{2,3})\b", name.upper())
    return m.group(1) if m else "GPU"


@lru_cache(maxsize=1)
def _device_part() -> parts.Part:
    info = device_info()
    assert info is not None
    base = profile_for_name(info.name)
    from .clocks import max_sm_clock_mhz, power_limit_watts

    clusters = resident_clusters()
    power = power_limit_watts()
    clock = max_sm_clock_mhz()
    part = dataclasses.replace(
        base, key=f"device:{base.key}", name=info.name, short=_short_name(info.name),
        sms=info.sm_count, clusters=clusters, clusters_estimated=False, l2_bytes=info.l2_bytes,
        smem_optin=info.max_smem_optin, power_w=int(round(power)) if power else base.power_w,
        max_clock_mhz=clock or base.max_clock_mhz,
        measured=f"{info.name}: read from the device (driver {info.driver_version[0]}.{info.driver_version[1]})")
    parts.use_device(part)
    return part


_PROBE = """extern "C" __global__ void __launch_bounds__(384, 1) resident_probe(int *x) {
    extern __shared__ int s[];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (x) x[blockIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
"""


def resident_clusters(sizes: tuple[int, ...] = (1, 2, 4)) -> dict[int, int]:
    """Clusters of each size of one-block-per-SM blocks (:data:`PROBE_THREADS` threads, :data:`PROBE_SMEM` bytes of
    shared memory) resident at once on this GPU, from ``cuOccupancyMaxActiveClusters``."""
    from .compiler import compile
    from .occupancy import max_active_clusters

    kernel = compile(_PROBE, "resident_probe")
    return {c: max_active_clusters(kernel, PROBE_THREADS, PROBE_SMEM, c) for c in sizes}


def where_name() -> str:
    """How a sentence names the GPU here: "the H200", "the H100", or "the GPU" (also while kernels run on the
    emulator beside it); without one, the emulated part's name."""
    info = device_info()
    short = _short_name(info.name) if info is not None and hopper_available() else this_gpu().short
    return f"the {short}" if short != "GPU" else "the GPU"
