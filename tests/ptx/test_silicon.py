"""Truth from silicon: the committed comparisons of every course kernel on a Hopper GPU and on the executor
(tests/data/ptx_vs_<gpu>.json, one per part it was checked against, made by tools/h100/executor_vs_h100.py) say
bit-identical everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
#: the parts the executor was checked against, each with its own file
PARTS = ("h100", "h200")


@pytest.fixture(scope="module", params=PARTS)
def fixture(request) -> dict:
    path = DATA / f"ptx_vs_{request.param}.json"
    if not path.exists():
        pytest.skip(f"no comparison on the {request.param.upper()} committed yet: run tools/h100/executor_vs_h100.py "
                    f"there and commit $OUT/{path.name} as tests/data/{path.name}")
    data = json.loads(path.read_text())
    data["part"] = request.param.upper()
    return data


def test_fixture_comes_from_the_gpu_it_is_named_after(fixture: dict) -> None:
    meta = fixture["meta"]
    assert fixture["part"] in meta["gpu"] and meta["driver_cuda_version"] and meta["date"]
    assert meta["made_by"] == "tools/h100/executor_vs_h100.py"


def test_every_kernel_is_bit_identical(fixture: dict) -> None:
    bad = [f"{k['name']}: {k.get('error') or k.get('first_difference')}" for k in fixture["kernels"]
           if not k["bit_identical"]]
    assert not bad, "\n".join(bad)
    names = {k["name"] for k in fixture["kernels"]}
    assert {"alu_probe", "lab1 lab1_copy", "lab2_gemm (CUDA cores)", "lab3_gemm", "bench gemm_64x64",
            "ws_gemm 128x256", "lab4 128x128 ring", "lab4 128x256 warp-specialized", "lab5 TMA-store epilogue",
            "lab6 persistent clusters", "lab7 Stream-K", "cluster_demo x2", "shared-memory layout"} <= names


def test_lab9_with_128x128_tiles_is_bit_identical(fixture: dict) -> None:
    """Lab 9's kernel compiled with -DLAB9_BN=128 (gpu.matmul's choice where 128×256 tiles are few), Stream-K
    splits included: the H100's bits are the executor's."""
    name = "lab9 Stream-K, 128x128 tiles"  # NARROW_CASE of tools/h100/executor_vs_h100.py
    record = next((k for k in fixture["kernels"] if k["name"] == name), None)
    if record is None:
        pytest.skip("the committed comparison has no record of Lab 9 with 128×128 tiles yet: run "
                    "tools/h100/executor_vs_h100.py on an H100 and commit its ptx_vs_h100.json")
    assert record["bit_identical"], record


def test_lab7_with_128x128_tiles_is_bit_identical(fixture: dict) -> None:
    """Lab 7's kernel compiled with -DLAB7_BN=128 (one consumer warpgroup computes each 128×128 tile as two 64-row
    halves; gpu.matmul's choice where those tiles fill one wave), ten pairs per cluster with partial tiles and K: the
    H100's bits are the executor's."""
    name = "lab7 128x128 tiles, one consumer warpgroup"  # ONE_CONSUMER_CASE of tools/h100/executor_vs_h100.py
    record = next((k for k in fixture["kernels"] if k["name"] == name), None)
    assert record is not None, "run tools/h100/executor_vs_h100.py on an H100 and commit its ptx_vs_h100.json"
    assert record["bit_identical"], record


def test_lab9_as_matmul_builds_it_is_bit_identical(fixture: dict) -> None:
    """Lab 9's kernel as gpu.matmul builds it (gemm.OPTIONS: the partial sums handed on in parallel, the producer's
    tail), splits three deep, at both tile widths: the H100's bits are the executor's."""
    names = [f"lab9 Stream-K, parallel fix-up, {bn} wide" for bn in (256, 128)]  # PARALLEL_CASE
    records = [k for k in fixture["kernels"] if k["name"] in names]
    assert [r["name"] for r in records] == names, "run tools/h100/executor_vs_h100.py on an H100 and commit it"
    assert all(r["bit_identical"] for r in records), records


def test_lab7_as_matmul_builds_it_is_bit_identical(fixture: dict) -> None:
    """Lab 7's kernel as gpu.matmul builds it (gemm.OPTIONS: the first cluster barrier arrived on .relaxed, the
    producer's tail instead of the last one), several pairs per cluster with partial tiles, at both tile widths: the
    H100's bits are the executor's."""
    names = [f"lab7 as gpu.matmul builds it, producer tail, {bn} wide" for bn in (256, 128)]  # TAIL_CASE
    records = [k for k in fixture["kernels"] if k["name"] in names]
    assert [r["name"] for r in records] == names, "run tools/h100/executor_vs_h100.py on an H100 and commit it"
    assert all(r["bit_identical"] for r in records), records


def test_every_alu_op_is_bit_identical(fixture: dict) -> None:
    from helpers.gpu.executor.probes import ALU_OPS

    ops = {a["op"]: a for a in fixture["alu"]}
    assert set(ops) == {op[0] for op in ALU_OPS}
    bad = [f"{name}: {a.get('first_difference')}" for name, a in ops.items() if not a["bit_identical"]]
    assert not bad, "\n".join(bad)


def test_failure_sentences_are_the_gpus(fixture: dict) -> None:
    assert {s["demo"] for s in fixture["sentences"]} == {"deadlock_demo", "out_of_bounds_demo", "misaligned_demo"}
    # a deadlock is reported by whichever waiting thread gives up first: on the GPU a race among the waiters
    bad = [f"{s['demo']}:\n  gpu: {s['gpu']}\n  emulator: {s['emulator']}" for s in fixture["sentences"]
           if not (s["identical"] or (s["demo"] == "deadlock_demo" and s.get("same_but_waiter")))]
    assert not bad, "\n".join(bad)


def test_the_executor_refuses_what_the_h100_refused(fixture: dict) -> None:
    """Each launch the H100 was asked (tools/h100/executor_vs_h100.py, ``launch_refusals``), asked again of the
    executor as it is now: the same verdict, the driver's error name."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("executor_vs_h100", DATA.parents[1] / "tools" / "h100" /
                                                  "executor_vs_h100.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    saved = os.environ.get("HELPERS_EXECUTOR")
    try:
        now = {r["launch"]: r["emulator"] for r in tool.launch_refusals()}
    finally:
        os.environ.pop("HELPERS_EXECUTOR", None) if saved is None else os.environ.__setitem__("HELPERS_EXECUTOR", saved)
    assert fixture["refusals"], "the fixture holds the H100's launch verdicts"
    differ = [f"{r['launch']}: H100 {r['gpu']}, executor {now.get(r['launch'])}" for r in fixture["refusals"]
              if now.get(r["launch"]) != r["gpu"]]
    assert differ == []


def test_a_map_that_outlives_its_array(fixture: dict) -> None:
    """``freed_maps``: with the arrays kept both sides compute A.B^T; with A's array dropped before the launch the
    H100 computes from whatever now lies in the freed memory (recorded, not asserted: it depends on the allocator),
    and the executor refuses the copy in words."""
    rows = {r["mode"]: r for r in fixture.get("freed_maps", [])}
    if not rows:
        pytest.skip("this comparison predates freed_maps: re-run tools/h100/executor_vs_h100.py on an H100")
    assert rows["gpu"]["arrays kept"] == rows["emulator"]["arrays kept"] == "A.B^T (right)"
    assert rows["emulator"]["A dropped before the launch"].startswith("refused CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "freed before the kernel" in rows["emulator"]["A dropped before the launch"]
    assert rows["gpu"]["A dropped before the launch"]  # what the H100 made of it: whatever the freed memory held
