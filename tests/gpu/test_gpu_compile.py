"""Compile-only mode: everything here runs on a machine with no GPU and no driver (CI)."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import gpu
from helpers.gpu import compiler

HERE = Path(__file__).resolve().parent

ADD = """#include "hopper.cuh"
extern "C" __global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
"""


def test_import_is_cheap_and_loads_no_cuda() -> None:
    code = "import sys, helpers.gpu; print(any(m.startswith('cuda') for m in sys.modules), 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_compile_report_fields(cubin_cache: Path) -> None:
    k = gpu.compile(ADD)
    r = k.report
    assert k.name == "add_one" and r.lowered_name == "add_one" and r.arch == "sm_90a"
    assert 4 <= r.registers <= 32
    assert (r.spill_stores, r.spill_loads, r.spill_bytes, r.local_bytes, r.static_smem) == (0, 0, 0, 0, 0)
    assert not r.uses_wgmma and not r.uses_setmaxnreg
    assert re.fullmatch(r"compiled for sm_90a: \d+ registers, 0 spills", r.summary())
    assert k.cubin[:4] == b"\x7fELF" and ".entry add_one" in k.ptx


def test_registers_from_elf_match_ptxas(cubin_cache: Path, reference_source: str) -> None:
    k = gpu.compile(reference_source, "gemm_64x64")
    facts = compiler.read_cubin(k.cubin, k.lowered_name)
    m = re.search(r"Used (\d+) registers", compiler._ptxas_block(k.report.log, k.lowered_name))
    detail = (facts, k.report.registers, compiler._ptxas_block(k.report.log, k.lowered_name))
    assert m and facts.registers == int(m.group(1)) == k.report.registers, detail
    assert facts.text and len(facts.text) % 16 == 0  # Hopper instructions are 16 bytes


def test_reference_kernel_uses_wgmma(cubin_cache: Path, reference_source: str) -> None:
    r = gpu.compile(reference_source, "gemm_64x64").report
    assert r.uses_wgmma and not r.wgmma_serialized
    assert r.spill_bytes == 0 and 32 <= r.registers <= 128
    assert r.static_smem >= 2 * 64 * 64 * 2
    assert "wgmma" in r.summary()


def test_every_header_wrapper_compiles(cubin_cache: Path) -> None:
    r = gpu.compile((HERE / "every_wrapper.cu").read_text()).report
    assert r.uses_wgmma and r.uses_setmaxnreg


@pytest.mark.parametrize("n", [8, 16, 32, 64, 96, 128, 192, 256])
def test_wgmma_shapes(cubin_cache: Path, n: int) -> None:
    src = f"""#include "hopper.cuh"
extern "C" __global__ void __launch_bounds__(128, 1) k(float* out) {{
  __shared__ alignas(1024) unsigned short a[64 * 64], b[256 * 64];
  float d[{n // 2}];
  for (int i = 0; i < {n // 2}; ++i) d[i] = 0.f;
  hopper::wgmma_fence();
  hopper::wgmma_bf16<{n}>(d, hopper::make_smem_desc(a, 16, 1024), hopper::make_smem_desc(b, 16, 1024), false);
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  float s = 0.f;
  for (int i = 0; i < {n // 2}; ++i) s += d[i];
  out[threadIdx.x] = s;
}}"""
    assert gpu.compile(src).report.uses_wgmma


def test_setmaxnreg_seen_and_ignored(cubin_cache: Path) -> None:
    src = """#include "hopper.cuh"
extern "C" __global__ void BOUNDS k(float* x) {
  if (hopper::warpgroup_id() == 0) hopper::setmaxnreg_inc<232>(); else hopper::setmaxnreg_dec<40>();
  x[threadIdx.x] = 1.0f;
}"""
    kept = gpu.compile(src.replace("BOUNDS", "__launch_bounds__(384, 1)")).report
    assert kept.uses_setmaxnreg and not kept.setmaxnreg_ignored
    ignored = gpu.compile(src.replace("BOUNDS", "")).report
    assert ignored.setmaxnreg_ignored and not ignored.uses_setmaxnreg and "IGNORED" in ignored.summary()


def test_compile_error_points_at_the_cell_line(cubin_cache: Path) -> None:
    bad = ADD.replace("x[i] += 1.0f;", "x[i] += undefined_name;")
    with pytest.raises(gpu.CompileError) as e:
        gpu.compile(bad)
    msg = str(e.value)
    assert "line 4:" in msg and 'identifier "undefined_name" is undefined' in msg
    assert "4 | if (i < n) x[i] += undefined_name;" in msg
    assert "cell.cu(4)" in e.value.log


def test_wgmma_on_plain_sm90_gives_a_hint(cubin_cache: Path, reference_source: str) -> None:
    with pytest.raises(gpu.CompileError, match="sm_90a"):
        gpu.compile(reference_source, "gemm_64x64", arch="sm_90")


def test_kernel_name_detection() -> None:
    two = ADD + '\nextern "C" __global__ void __launch_bounds__(128) other(float* x) {}\n'
    assert compiler.find_kernel_names(two) == ["add_one", "other"]
    with pytest.raises(gpu.CompileError, match="add_one, other"):
        gpu.compile(two)
    tmpl = "template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; }"
    with pytest.raises(gpu.CompileError, match="template"):
        gpu.compile(tmpl)
    k = gpu.compile(tmpl, "scale<4>")
    assert k.lowered_name.startswith("_Z") and k.report.registers > 0


def test_cache_hits_and_keys(cubin_cache: Path) -> None:
    a = gpu.compile(ADD)
    assert not a.report.cached and len(list(cubin_cache.glob("*.cubin"))) == 1
    b = gpu.compile(ADD)
    assert b.report.cached and b.cubin == a.cubin and b.report.registers == a.report.registers
    c = gpu.compile(ADD, options=["-DSOMETHING=1"])
    assert not c.report.cached and len(list(cubin_cache.glob("*.cubin"))) == 2
    assert compiler._cache_key(ADD, "add_one", (), "sm_90a") != compiler._cache_key(ADD, "add_one", (), "sm_90")


def test_kernel_pickles_as_source(cubin_cache: Path) -> None:
    k = gpu.compile(ADD)
    k2 = pickle.loads(pickle.dumps(k))
    assert k2.cubin == k.cubin and k2.name == k.name and k2.report.cached
