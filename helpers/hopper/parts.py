"""The Hopper parts a student may have, each as the numbers a GEMM's design depends on.

A GEMM kernel meets the machine through a few counts: how many SMs run blocks (the wave), how many clusters of 2 or
4 blocks are resident at once (a persistent grid's size), how much L2 and HBM bandwidth feed them (the roofline's
ridge point), and how much power the part may draw (whether the clock holds under a long GEMM). The parts differ in
exactly these, while the SM itself (sm_90: its shared memory, tensor cores, TMA unit, mbarriers) is one design.

With a GPU, the runtime reads the machine's own counts from the device (``helpers.gpu.hardware``); without one, the
emulator runs as the part selected here: ``HELPERS_GPU=h100-pcie`` in the environment, or :func:`select` in a
notebook. The default is the H100 SXM.

Each profile says where its numbers come from. ``measured`` names a capture on that part (SM count and resident
clusters from ``cuOccupancyMaxActiveClusters``, L2 from the device); the rest are datasheet figures. A part nobody
here has measured gets its cluster counts from the SM count with the H100 SXM's packing of 4-block clusters (the GPCs
do not all hold a multiple of 4 SMs there, so 30 clusters of 4 leave 12 of its SMs idle); ``clusters_estimated``
marks it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["Part", "PROFILES", "DEFAULT", "get", "select", "selected", "current", "use_device", "ridge_point", "waves"]


@dataclass(frozen=True)
class Part:
    """One Hopper part: the counts a GEMM's schedule and roofline use."""

    key: str  # the name HELPERS_GPU takes: "h100-sxm"
    name: str  # how people name it: "H100 SXM"
    short: str  # how a sentence names where a kernel ran: "H100"
    sms: int
    #: clusters of 1, 2 and 4 one-block-per-SM blocks resident at once (a persistent grid of each size)
    clusters: dict[int, int]
    l2_bytes: int
    hbm_gib: float
    hbm_tbs: float  # HBM bandwidth, TB/s (datasheet)
    peak_bf16_tflops: float  # dense bf16 tensor-core peak (datasheet)
    power_w: int  # board power limit
    max_clock_mhz: int
    smem_optin: int = 232448  # shared memory a block may opt in to (bytes)
    measured: str = ""  # the capture behind sms, clusters and L2, when one was made on this part
    clusters_estimated: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ridge_point(self) -> float:
        """FLOP per byte of HBM traffic where the tensor cores and the memory take the same time."""
        return ridge_point(self)

    def resident(self, cluster: int = 1) -> int:
        """Clusters of ``cluster`` one-block-per-SM blocks resident at once."""
        if cluster in self.clusters:
            return self.clusters[cluster]
        raise KeyError(f"the {self.name} profile has resident counts for clusters of "
                       f"{', '.join(map(str, sorted(self.clusters)))} blocks, not {cluster}")


def _estimated_clusters(sms: int) -> dict[int, int]:
    """Resident clusters for a part not measured here: every SM for clusters of 1, pairs of SMs (a TPC each) for 2,
    and for 4 the H100 SXM's measured packing (30 clusters leave 12 of its SMs idle)."""
    return {1: sms, 2: sms // 2, 4: (sms * 120 // 132) // 4}


def _part(key: str, name: str, short: str, sms: int, *, clusters: dict[int, int] | None = None,
          **kw: object) -> Part:
    return Part(key=key, name=name, short=short, sms=sms, clusters=clusters or _estimated_clusters(sms),
                clusters_estimated=clusters is None, **kw)  # type: ignore[arg-type]


_MB = 1 << 20

PROFILES: dict[str, Part] = {p.key: p for p in (
    _part("h100-sxm", "H100 SXM", "H100", 132, clusters={1: 132, 2: 66, 4: 30}, l2_bytes=50 * _MB, hbm_gib=80,
          hbm_tbs=3.35, peak_bf16_tflops=989.0, power_w=700, max_clock_mhz=1980,
          measured="NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22 (cuOccupancyMaxActiveClusters, 384 threads, "
                   "200-227 KB shared memory per block)"),
    _part("h200", "H200", "H200", 132, clusters={1: 132, 2: 66, 4: 30}, l2_bytes=60 * _MB, hbm_gib=141,
          hbm_tbs=4.8, peak_bf16_tflops=989.0, power_w=700, max_clock_mhz=1980,
          measured="NVIDIA H200, driver 580.159.04, 2026-12-02 (tests/data/parts_h200.json)"),
    _part("h100-pcie", "H100 PCIe", "H100", 114, l2_bytes=50 * _MB, hbm_gib=80, hbm_tbs=2.0,
          peak_bf16_tflops=756.0, power_w=350, max_clock_mhz=1755),
    _part("h100-nvl", "H100 NVL", "H100", 132, l2_bytes=50 * _MB, hbm_gib=94, hbm_tbs=3.9,
          peak_bf16_tflops=835.0, power_w=400, max_clock_mhz=1785),
    _part("gh200", "GH200", "GH200", 132, l2_bytes=60 * _MB, hbm_gib=96, hbm_tbs=4.0,
          peak_bf16_tflops=989.0, power_w=900, max_clock_mhz=1980,
          notes=("the module's power limit is shared with the Grace CPU",)),
    _part("h800", "H800 SXM", "H800", 132, l2_bytes=50 * _MB, hbm_gib=80, hbm_tbs=3.35,
          peak_bf16_tflops=989.0, power_w=700, max_clock_mhz=1980,
          notes=("NVLink between GPUs is narrower than the H100's; one GPU's GEMM is the same",)),
    _part("h20", "H20", "H20", 78, l2_bytes=60 * _MB, hbm_gib=96, hbm_tbs=4.0,
          peak_bf16_tflops=148.0, power_w=400, max_clock_mhz=1980),
)}

DEFAULT = "h100-sxm"

_selected: list[str] = []
_device: list[Part] = []


def get(key: str) -> Part:
    """The profile named ``key`` (a key of :data:`PROFILES`; case and ``_`` for ``-`` do not matter)."""
    k = key.strip().lower().replace("_", "-").replace(" ", "-")
    if k in PROFILES:
        return PROFILES[k]
    for p in PROFILES.values():
        if k == p.name.lower().replace(" ", "-"):
            return p
    raise KeyError(f"no Hopper part called {key!r}: the emulator knows {', '.join(PROFILES)}")


def select(key: str | None) -> Part:
    """Run the emulator as this part from now on (``None``: back to ``HELPERS_GPU`` or the default)."""
    _selected.clear()
    if key is not None:
        _selected.append(get(key).key)
    return selected()


def selected() -> Part:
    """The part the emulator runs as: :func:`select`'s choice, else ``HELPERS_GPU``, else the H100 SXM."""
    if _selected:
        return PROFILES[_selected[0]]
    env = os.environ.get("HELPERS_GPU", "").strip()
    return get(env) if env else PROFILES[DEFAULT]


def use_device(part: Part | None) -> None:
    """Record the GPU kernels really run on (the runtime calls this with the device's own counts), so that the
    model's defaults (:func:`current`) are that machine's; ``None`` forgets it."""
    _device.clear()
    if part is not None:
        _device.append(part)


def current() -> Part:
    """The part the model's defaults describe: the GPU here when the runtime has read it, else :func:`selected`."""
    return _device[0] if _device else selected()


def ridge_point(part: Part) -> float:
    """The roofline's ridge point of ``part`` in FLOP/B: its bf16 peak over its HBM bandwidth."""
    return part.peak_bf16_tflops / part.hbm_tbs


def waves(tiles: int, workers: int) -> tuple[int, float]:
    """(waves, how full the last one is) when ``tiles`` tiles run on ``workers`` resident blocks or clusters."""
    if tiles <= 0:
        return 0, 0.0
    n = -(-tiles // workers)
    last = tiles - (n - 1) * workers
    return n, last / workers
