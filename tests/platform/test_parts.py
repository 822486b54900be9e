"""Any Hopper part: the profiles the emulator runs as, the H200's counts against its capture, the choice rule on
parts with other SM counts, the executor under three profiles, and the words that name where a kernel ran."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import gpu
from helpers.course.checks import _common as C
from helpers.gpu import gemm, hardware
from helpers.hopper import parts, scheduler, streamk

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def _default_part(monkeypatch):
    monkeypatch.delenv("HELPERS_GPU", raising=False)
    parts.select(None)
    yield
    parts.select(None)


def test_the_h200_profile_is_its_capture():
    cap = json.loads((DATA / "parts_h200.json").read_text())
    p = parts.get("h200")
    assert cap["meta"]["gpu"] == "NVIDIA H200" and cap["meta"]["date"] and cap["meta"]["driver"]
    assert (p.sms, p.l2_bytes, p.smem_optin) == (cap["sms"], cap["l2_bytes"], cap["smem_optin"])
    assert {str(k): v for k, v in p.clusters.items()} == {k: cap["clusters"][k] for k in ("1", "2", "4")}
    assert p.power_w == cap["power_limit_w"] and p.max_clock_mhz == cap["max_sm_clock_mhz"]
    assert p.hbm_tbs == pytest.approx(cap["hbm_tbs_from_clock"], rel=0.01)
    assert not p.clusters_estimated and "2026-12-02" in p.measured
    assert hardware.profile_for_name(cap["meta"]["gpu"]).key == "h200"


def test_the_h100_sxm_profile_is_the_measured_h100():
    p = parts.get("h100-sxm")
    cap = json.loads((DATA / "lab56_h100.json").read_text())["clusters"]  # cuOccupancyMaxActiveClusters on the H100
    assert p.sms == cap["sm_count"] and not p.clusters_estimated
    assert {str(k): v for k, v in p.clusters.items()} == {k: cap["lab5_gemm"][k] for k in ("1", "2", "4")}
    assert p.ridge_point == pytest.approx(295, abs=1)
    assert parts.get("h200").ridge_point == pytest.approx(206, abs=1)


@pytest.mark.parametrize("name, key", [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
                                       ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200", "h200"),
                                       ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA H800", "h800"),
                                       ("NVIDIA H20", "h20")])
def test_a_device_name_finds_its_profile(name, key):
    assert hardware.profile_for_name(name).key == key


def test_every_profile_is_consistent():
    for p in parts.PROFILES.values():
        assert p.clusters[1] == p.sms and p.clusters[2] <= p.sms // 2 and 4 * p.clusters[4] <= p.sms
        assert p.measured or p.clusters_estimated, p.key


def test_the_emulated_part_comes_from_helpers_gpu_or_a_call(monkeypatch):
    assert gpu.this_gpu().key == "h100-sxm" if not gpu.hopper_available() else True
    monkeypatch.setenv("HELPERS_GPU", "h100-pcie")
    assert parts.selected().sms == 114
    gpu.use_part("h20")
    assert parts.selected().sms == 78 and parts.current().sms == 78
    gpu.use_part(None)
    assert parts.selected().sms == 114
    with pytest.raises(KeyError, match="the emulator knows h100-sxm, h200, h100-pcie"):
        parts.get("a100")


def test_the_models_defaults_follow_the_part():
    gpu.use_part("h100-pcie")
    assert scheduler.waves(2048).workers == 114
    assert streamk.predict(1024, 1024, 16384, "data-parallel").ctas == 57
    gpu.use_part("h20")
    assert scheduler.waves(2048).workers == 78 and streamk.predict(1024, 1024, 4096).ctas == 39


def test_the_choice_on_114_and_78_sms():
    """What changes with the part and why: the waves are counted on its own resident pairs."""
    sxm, pcie, h20 = (parts.get(k).resident(2) for k in ("h100-sxm", "h100-pcie", "h20"))
    assert (sxm, pcie, h20) == (66, 57, 39)
    # 4096³: 256 pairs. On 66 clusters the last of four waves keeps 58 busy (0.88): whole pairs. On 57, the fifth
    # wave keeps 28 busy (0.49), and 64 K steps × 0.51 idle is worth Stream-K. On 39, the seventh keeps 22 (0.56).
    assert gemm.choose(4096, 4096, 4096, sxm).name == "lab7"
    assert gemm.last_wave(4096, 4096, pcie) == pytest.approx(28 / 57)
    assert gemm.choose(4096, 4096, 4096, pcie).name == "lab9"
    assert gemm.choose(4096, 4096, 4096, h20).name == "lab7"
    # 512×4096: 32 wide pairs; twice as many narrow ones fit in one wave of 66, not of 57 or 39
    assert gemm.choose(512, 4096, 4096, sxm).bn == gemm.NARROW
    assert gemm.choose(512, 4096, 4096, pcie).bn == gemm.WIDE == gemm.choose(512, 4096, 4096, h20).bn
    # the default is the GPU here, or the emulated part
    gpu.use_part("h100-pcie")
    if not gpu.hopper_available():
        assert gemm.resident_pairs() == 57 and gemm.choose(4096, 4096, 4096).name == "lab9"


_SMID = r"""extern "C" __global__ void smid(unsigned *out) {
    unsigned s, n;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(n));
    out[2 * blockIdx.x] = s;
    out[2 * blockIdx.x + 1] = n;
}
"""


@pytest.mark.timeout(300)
def test_the_executor_runs_as_the_selected_part():
    k = gpu.compile(_SMID, "smid")
    for key, sms in (("h100-sxm", 132), ("h100-pcie", 114), ("h20", 78)):
        gpu.use_part(key)
        out = gpu.run_on_executor(k, 3, 32, 0, np.zeros(6, np.uint32), hazards=False).arrays[0]
        assert list(out[1::2]) == [sms] * 3 and all(int(s) < sms for s in out[0::2]), (key, out)


@pytest.mark.timeout(300)
def test_the_course_gemm_gives_the_same_bits_as_every_part(monkeypatch):
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((200, 136)).astype(gpu.bfloat16)
    b = rng.standard_normal((136, 264)).astype(gpu.bfloat16)
    seen = {}
    for key in ("h100-sxm", "h100-pcie", "h20"):
        gpu.use_part(key)
        seen[key] = np.asarray(gpu.matmul(a, b)).view(np.uint16)
    assert all(np.array_equal(seen["h100-sxm"], v) for v in seen.values())
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(seen["h20"].view(gpu.bfloat16).astype(np.float64) - want).max() < 0.1 * np.abs(want).max()


def test_check_lines_name_the_gpu_they_ran_on(monkeypatch):
    monkeypatch.setattr(C, "on_h100", lambda: True)
    for name, short in (("NVIDIA H200", "H200"), ("NVIDIA H100 PCIe", "H100"), ("NVIDIA H20", "H20")):
        monkeypatch.setattr(hardware, "device_info", lambda n=name: type("I", (), {"name": n})())
        monkeypatch.setattr(hardware, "hopper_available", lambda: True)
        assert C.where() == f"ran on the {short}"
        assert gpu.where_name() == f"the {short}"


def test_no_machine_count_outside_the_profiles():
    """The runtime and the model count with the part (``parts``, ``gpu.this_gpu``), never with a literal SM or
    cluster count of one machine; the course's widgets never with an SM count."""
    import tokenize

    root = Path(__file__).resolve().parents[2] / "helpers"
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "parts.py":
            continue
        banned = {"132", "114", "78"} | ({"66"} if path.parts[-3] != "course" and "course" not in path.parts else set())
        with path.open("rb") as f:
            for tok in tokenize.tokenize(f.readline):
                if tok.type == tokenize.NUMBER and tok.string in banned:
                    found.append(f"{path.relative_to(root)}:{tok.start[0]}: {tok.line.strip()}")
    assert not found, "\n".join(found)


def test_the_stream_k_split_on_114_and_78_sms():
    """1024×1024×16384 at 128×128 tiles: 16 wide pairs of 256 K steps. On the H100 SXM's 66 pairs of SMs each pair is
    cut in four equal ranges on 64 of them; on the H100 PCIe's 57 three ranges would keep only 48 busy (under 90 %),
    so all 57 take uneven ranges; on the H20's 39, two ranges keep 32 (82 %): all 39 again."""
    sxm, pcie, h20 = (parts.get(k).resident(2) for k in ("h100-sxm", "h100-pcie", "h20"))
    assert gemm.streamk_clusters(16, 256, sxm) == 64
    assert gemm.streamk_clusters(16, 256, pcie) == 57
    assert gemm.streamk_clusters(16, 256, h20) == 39
    assert gemm.streamk_clusters(19, 255, pcie) == 57  # three ranges of 85 K steps for each of 19 pairs: every cluster
