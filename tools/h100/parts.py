"""What the course reads off the GPU here, written as the part's fixture: the device's name and counts, the clusters
of one-block-per-SM blocks resident at once (``cuOccupancyMaxActiveClusters``, 384 threads, 200 KB of shared memory
per block, as the course's last kernels), L2, shared memory, the memory's clock and bus width, the power limit and the
SM clock's maximum.

    python3 tools/h100/parts.py OUT_DIR      (writes OUT_DIR/parts_<short name>.json)
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402
from helpers.gpu import hardware  # noqa: E402
from helpers.gpu.clocks import max_sm_clock_mhz, power_limit_watts  # noqa: E402


def main(out: Path) -> None:
    from cuda.bindings import driver

    info = gpu.device_info()
    assert info is not None and gpu.hopper_available(), gpu.no_hopper_reason()
    dev = driver.cuDeviceGet(0)[1]
    a = driver.CUdevice_attribute

    def attr(x):
        return int(driver.cuDeviceGetAttribute(x, dev)[1])

    mem_khz = attr(a.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
    bus_bits = attr(a.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
    total = int(driver.cuDeviceTotalMem(dev)[1])
    clusters = hardware.resident_clusters((1, 2, 4, 8))
    part = hardware.this_gpu()
    rec = {
        "meta": {"gpu": info.name, "driver": ".".join(map(str, info.driver_version)),
                 "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                 "how": "tools/h100/parts.py: device attributes, cuOccupancyMaxActiveClusters for a 384-thread block "
                        f"with {hardware.PROBE_SMEM} bytes of dynamic shared memory, NVML"},
        "sms": info.sm_count, "l2_bytes": info.l2_bytes, "smem_optin": info.max_smem_optin,
        "clusters": {str(k): v for k, v in clusters.items()}, "memory_bytes": total,
        "memory_clock_khz": mem_khz, "memory_bus_bits": bus_bits,
        "hbm_tbs_from_clock": round(2 * mem_khz * 1e3 * bus_bits / 8 / 1e12, 3),
        "power_limit_w": power_limit_watts(), "max_sm_clock_mhz": max_sm_clock_mhz(),
        "profile": hardware.profile_for_name(info.name).key, "short": part.short,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"parts_{part.short.lower()}.json"
    path.write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
