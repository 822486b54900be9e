"""What ptxas makes of the two ways Lab 7 can arrive on the other CTA's EMPTY barrier (no GPU needed).

Compiles bench/kernels/lab7_clusters.cu twice with NVRTC — as it is (``hopper::mbar_arrive_cluster``: bare
``mbarrier.arrive.shared::cluster``) and with ``hopper::mbar_arrive_cluster_release`` (``.release.cluster``) —
disassembles both CUBINs with nvdisasm, and records the SASS around every ``SYNCS.ARRIVE`` (the arrive) in the
consumers' loop: tests/data/lab6_arrive_sass.json. Lesson 05 shows it; tests/emulator/test_cluster.py checks the
file's claims and, where nvdisasm is available, that they still hold.

    python tools/h100/arrive_sass.py [path/to/nvdisasm]   (default: $NVDISASM, PATH, or the nvidia-cuda-nvdisasm
                                                             wheel's, e.g. pip install nvidia-cuda-nvdisasm)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from helpers import gpu  # noqa: E402

OUT = ROOT / "tests" / "data" / "lab6_arrive_sass.json"


def find_nvdisasm(explicit: str | None = None) -> str | None:
    """nvdisasm from the argument, $NVDISASM, PATH, or an installed nvidia-cuda-nvdisasm wheel."""
    for cand in (explicit, os.environ.get("NVDISASM"), shutil.which("nvdisasm")):
        if cand and Path(cand).exists():
            return cand
    try:
        import nvidia  # the namespace package of NVIDIA's wheels

        for base in nvidia.__path__:
            for p in Path(base).glob("*/bin/nvdisasm"):
                return str(p)
    except ImportError:
        pass
    return None


def arrive_windows(sass: str, before: int = 5) -> list[list[str]]:
    """The instructions before each SYNCS.ARRIVE (the mbarrier arrive) of the SASS, addresses stripped."""
    lines = [ln.split("*/", 1)[1].strip().rstrip(";").strip() if "*/" in ln else "" for ln in sass.split("\n")]
    ins = [ln for ln in lines if ln and not ln.startswith(("/*", "."))]
    return [ins[max(0, i - before):i + 1] for i, ln in enumerate(ins) if ln.startswith("SYNCS.ARRIVE")]


def capture(nvdisasm: str) -> dict:
    src = (ROOT / "bench" / "kernels" / "lab7_clusters.cu").read_text()
    forms = {"bare": src, "release_cluster": src.replace("hopper::mbar_arrive_cluster(",
                                                         "hopper::mbar_arrive_cluster_release(")}
    version = subprocess.run([nvdisasm, "--version"], capture_output=True, text=True).stdout.strip().split("\n")[-1]
    out = {"meta": {"nvrtc": list(gpu.nvrtc_version() or ()), "nvdisasm": version,
                    "date": dt.date.today().isoformat(), "script": "tools/h100/arrive_sass.py",
                    "kernel": "bench/kernels/lab7_clusters.cu (lab7_gemm)"}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, s in forms.items():
            k = gpu.compile(s, "lab7_gemm", cache=False)
            cubin = Path(tmp) / f"{name}.cubin"
            cubin.write_bytes(k.cubin)
            sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
            out[name] = {"ptx_arrive": [ln.strip() for ln in k.ptx.split("\n") if "mbarrier.arrive" in ln
                                        and "shared::cluster" in ln][:1],
                         "arrive_windows": arrive_windows(sass),
                         "membar_gpu": sum("MEMBAR.ALL.GPU" in ln for ln in sass.split("\n"))}
    return out


def main(argv: list[str]) -> int:
    nvdisasm = find_nvdisasm(argv[0] if argv else None)
    if not nvdisasm:
        print("no nvdisasm: pass its path, set $NVDISASM, or pip install nvidia-cuda-nvdisasm")
        return 1
    data = capture(nvdisasm)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    for name in ("bare", "release_cluster"):
        print(name, data[name]["ptx_arrive"], f"{data[name]['membar_gpu']} MEMBAR.ALL.GPU in the kernel")
        print("   ", " ; ".join(data[name]["arrive_windows"][0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
