"""libcu++ (CCCL) spellings of the barrier and TMA operations, and the PTX each one compiles to.

Much published Hopper code uses ``cuda::barrier`` and the ``cuda::device::experimental`` (``cde::``) TMA functions
instead of inline PTX. The course writes PTX (``hopper.cuh``); this table says which libcu++ call is which
instruction, and :func:`ptx_of` proves it by compiling the call with NVRTC against the CCCL headers of the wheels
(no GPU needed) and keeping the PTX lines that call added.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Row", "ROWS", "cccl_dir", "defined_in_cccl", "ptx_of", "table"]


@dataclass(frozen=True)
class Row:
    """One libcu++ call: how it is written, what it does, the course's wrapper, the PTX mnemonic it must emit."""

    libcudacxx: str  # the call as a kernel writes it
    name: str  # the function's name, looked up in the CCCL headers
    does: str
    hopper: str  # the hopper.cuh wrapper doing the same
    opcode: str  # the PTX instruction (prefix) the call compiles to
    setup: str = ""  # code the call needs before it (compiled in the baseline too)


ROWS: tuple[Row, ...] = (
    Row("init(&bar, count)", "init", "makes the 8 shared bytes a barrier expecting `count` arrivals per phase",
        "mbar_init(&bar, count)", "mbarrier.init"),
    Row("bar.arrive()", "arrive", "one arrival; returns a token naming the phase", "mbar_arrive(&bar)",
        "mbarrier.arrive"),
    Row("bar.arrive(3)", "arrive", "three arrivals in one instruction", "mbar_arrive(&bar, 3)", "mbarrier.arrive"),
    Row("bar.wait(std::move(token))", "wait", "waits for the phase the token names (a token, not a parity)",
        "mbar_wait(&bar, parity)", "mbarrier.try_wait", setup="auto token = bar.arrive();"),
    Row("cuda::device::barrier_arrive_tx(bar, 1, bytes)", "barrier_arrive_tx",
        "announces `bytes` and makes ONE arrival, in one instruction", "mbar_arrive_expect_tx(&bar, bytes)",
        "mbarrier.arrive.expect_tx"),
    Row("cuda::device::barrier_expect_tx(bar, bytes)", "barrier_expect_tx", "announces `bytes`, no arrival",
        "mbar_expect_tx(&bar, bytes)", "mbarrier.expect_tx"),
    Row("cde::cp_async_bulk_tensor_2d_global_to_shared(tile, &tmap, c0, c1, bar)",
        "cp_async_bulk_tensor_2d_global_to_shared", "TMA load; its bytes count down the barrier's tx-count",
        "tma_load_2d(tile, &tmap, &bar, c0, c1)", "cp.async.bulk.tensor.2d.shared::cluster.global"),
    Row("cde::cp_async_bulk_tensor_2d_shared_to_global(&tmap, c0, c1, tile)",
        "cp_async_bulk_tensor_2d_shared_to_global", "TMA store, tracked by bulk groups",
        "tma_store_2d(&tmap, tile, c0, c1)", "cp.async.bulk.tensor.2d.global.shared::cta"),
    Row("cde::fence_proxy_async_shared_cta()", "fence_proxy_async_shared_cta",
        "generic-proxy writes to shared memory become visible to the async proxy", "fence_proxy_async()",
        "fence.proxy.async.shared::cta"),
    Row("cde::cp_async_bulk_commit_group()", "cp_async_bulk_commit_group", "closes a group of bulk stores",
        "tma_store_commit()", "cp.async.bulk.commit_group"),
    Row("cde::cp_async_bulk_wait_group_read<0>()", "cp_async_bulk_wait_group_read",
        "waits until no group still reads shared memory", "tma_store_wait_read<0>()", "cp.async.bulk.wait_group.read"),
)

_KERNEL = r"""
#include <cuda/barrier>
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };   // cuda/barrier only declares it
using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;
extern "C" __global__ void row(const __grid_constant__ CUtensorMap tmap, int c0, int c1, unsigned bytes,
                               unsigned count) {
  __shared__ alignas(1024) unsigned char tile[8192];
  __shared__ barrier bar;
  SETUP
  CALL;
}
"""

_INSTRUCTION = re.compile(r"^\s*((?:mbarrier|cp\.async|fence|bar\.|barrier\.)[\w.:]*)")


@lru_cache(maxsize=1)
def cccl_dir() -> str | None:
    """The CCCL include directory of the installed wheels (None when not found)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        return find_nvidia_header_directory("cccl")
    except Exception:
        return None


def defined_in_cccl(name: str) -> bool:
    """Whether `name` is defined as a function or member in the CCCL headers <cuda/barrier> pulls in."""
    from pathlib import Path

    root = cccl_dir()
    if root is None:
        return False
    pattern = re.compile(rf"\b{re.escape(name)}\s*(<[^;{{]*>)?\s*\(")
    for sub in ("cuda/barrier", "cuda/__barrier", "cuda/std/__barrier"):
        path = Path(root) / sub
        for f in [path] if path.is_file() else sorted(path.glob("*.h")) if path.is_dir() else []:
            if pattern.search(f.read_text(errors="replace")):
                return True
    return False


def _full_lines(setup: str, call: str) -> list[str]:
    from helpers import gpu

    src = _KERNEL.replace("SETUP", setup).replace("CALL", call)
    lines = [" ".join(line.split("//")[0].split()) for line in gpu.compile(src, "row").ptx.splitlines()
             if _INSTRUCTION.match(line)]
    return [re.sub(r"%[a-z]+\d+", "%r", line) for line in lines]  # registers renamed: compare instructions


def ptx_of(row: Row) -> list[str]:
    """The PTX instructions `row`'s call adds to a kernel (compiled with NVRTC; setup subtracted)."""
    base = Counter(_full_lines(row.setup, "(void)0"))
    added: list[str] = []
    for line in _full_lines(row.setup, row.libcudacxx):
        if base[line]:
            base[line] -= 1
        elif not added or added[-1] != line:  # a wait loop's test appears twice: once is enough
            added.append(line)
    return added


def table() -> list[tuple[str, str, str, str]]:
    """(libcu++ call, what it does, hopper.cuh wrapper, the PTX it compiled to) for every row."""
    return [(r.libcudacxx, r.does, r.hopper, "; ".join(ptx_of(r))) for r in ROWS]
