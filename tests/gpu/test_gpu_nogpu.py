"""Behaviour without a Hopper GPU: one-line messages, compile still works; host-side helpers."""

from __future__ import annotations

import re

import numpy as np
import pytest

from helpers import gpu
from helpers.gpu import diagnostics, tensormaps
from helpers.gpu.examples import VECTOR_ADD


def test_skip_without_hopper_prints_one_line(no_gpu: str, capsys: pytest.CaptureFixture[str]) -> None:
    k = gpu.compile(VECTOR_ADD)
    assert not gpu.hopper_available() and gpu.no_hopper_reason() == no_gpu
    assert gpu.skip_without_hopper(k, checked="compiles, 12 registers") is True
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("compiled for sm_90a: ") and f"run skipped: no sm_90 GPU ({no_gpu}); checked: compiles" in out


@pytest.mark.parametrize("call", [
    lambda k: gpu.launch(k, 1, 32, 0),
    lambda k: gpu.to_device(np.zeros(4, np.float32)),
    lambda k: gpu.empty((4, 4)),
    lambda k: gpu.random((4, 4)),
    lambda k: gpu.time_kernel(lambda: None),
    lambda k: gpu.cublas_gemm(np.zeros((64, 64)), np.zeros((64, 64))),
    lambda k: gpu.encode_tiled(np.float32, 0, [64, 64], [256], [32, 32], swizzle=0),
    lambda k: gpu.gemm_benchmark(lambda a, b, c: None, 64, 64, 64),
])
def test_gpu_calls_say_so_in_one_line(no_gpu: str, call) -> None:  # noqa: ANN001
    k = gpu.compile(VECTOR_ADD)
    with pytest.raises(gpu.NoHopperError) as e:
        call(k)
    msg = str(e.value)
    assert "\n" not in msg and "needs an sm_90 (Hopper) GPU" in msg and no_gpu in msg
    assert e.value._render_traceback_() == [f"NoHopperError: {msg}"]


def test_deadlock_sentence() -> None:
    rec = diagnostics.StuckRecord(parity=1, index=2, bar_smem=0x410, block=(3, 0, 0), thread=128 + 5,
                                  cluster_rank=0, cycles=2_000_000_123, label="full")
    back = diagnostics.StuckRecord.from_bytes(rec.to_bytes())
    assert back == rec
    s = back.sentence()
    assert s.startswith("deadlock: block (3,0) warp 4 waited on full[2] for parity 1 (thread 133;")
    assert diagnostics.StuckRecord.from_bytes(bytes(diagnostics.RECORD_BYTES)) is None
    one = diagnostics.StuckRecord(0, -1, 0x400, (1, 2, 3), 0, 1, 10, "").sentence()
    assert "block (1,2,3) (cluster rank 1) warp 0 waited on the mbarrier at shared address 0x400" in one


def test_record_layout_matches_header() -> None:
    text = gpu.INCLUDE_DIR.joinpath("hopper.cuh").read_text()
    fields = re.findall(r"^\s+(unsigned|int|long long|char) (\w+)(\[\d+\])?;", text.split("struct StuckRecord")[1]
                        .split("};")[0], re.M)
    assert [f[1] for f in fields] == ["magic", "parity", "index", "bar_smem", "block", "thread", "cluster_rank",
                                      "pad", "cycles", "label"]
    assert diagnostics.RECORD_BYTES == 112


def test_error_sentences() -> None:
    class E:
        name = "CUDA_ERROR_ILLEGAL_ADDRESS"

    assert "outside every allocation" in diagnostics.describe_error(E())
    assert "CUDA_ERROR_MISALIGNED_ADDRESS" in diagnostics.STICKY


def test_tensor_map_rules_in_words() -> None:
    bf16 = gpu.bfloat16
    tensormaps.validate(bf16, 0, [4096, 4096], [8192], [64, 64], 128)
    with pytest.raises(gpu.LaunchError, match="at most 128 bytes"):
        tensormaps.validate(bf16, 0, [4096, 4096], [8192], [128, 64], 128)
    with pytest.raises(gpu.LaunchError, match="multiple of 16"):
        tensormaps.validate(bf16, 0, [100, 100], [200], [64, 64], 128)
    with pytest.raises(gpu.LaunchError, match="global address"):
        tensormaps.validate(bf16, 8, [64, 64], [128], [64, 64], 128)
    with pytest.raises(gpu.LaunchError, match="between 1 and 256"):
        tensormaps.validate(np.float32, 0, [1024, 1024], [4096], [16, 512], 0)


def test_roofline_figure() -> None:
    pytest.importorskip("plotly")
    p = gpu.gemm_point("ref 4096³", 4096, 4096, 4096, 0.45e-3)
    assert abs(gpu.ridge_point() - 295) < 1 and p.intensity > gpu.ridge_point()
    fig = gpu.roofline_figure([p, {"name": "copy", "flops": 1e9, "bytes": 1e9, "seconds": 1e-3}])
    assert len(fig.data) == 3 and fig.layout.xaxis.type == "log"


def test_run_isolated_call_and_errors(no_gpu: str) -> None:
    assert gpu.run_isolated("helpers.gpu.compiler:nvrtc_version", timeout=60) == gpu.nvrtc_version()
    with pytest.raises(gpu.KernelDeadlock, match="did not finish within 1 s"):
        gpu.run_isolated("time:sleep", 30, timeout=1)
    with pytest.raises(ValueError, match="module"):
        gpu.run_isolated(lambda: None)


def test_run_isolated_child_without_gpu() -> None:
    import os

    os.environ["HELPERS_NO_GPU"] = "1"
    os.environ["HELPERS_EXECUTOR"] = "off"  # the child's one-line refusal (tests/ptx: the emulator fallback)
    try:
        with pytest.raises(gpu.NoHopperError, match="HELPERS_NO_GPU"):
            gpu.run_isolated("helpers.gpu.examples:vector_add_demo", timeout=60)
    finally:
        del os.environ["HELPERS_NO_GPU"]
        del os.environ["HELPERS_EXECUTOR"]
