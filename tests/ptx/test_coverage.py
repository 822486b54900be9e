"""Every instruction NVRTC emits for every kernel of the course (solutions, bench kernels, the header's wrappers,
the demo kernels, the lessons' probes) is emulated, apart from the documented gaps."""

from __future__ import annotations

import pytest

from helpers import gpu
from helpers.course import ptx_coverage as coverage

KERNELS = coverage.course_kernels()


def test_the_course_kernels_are_found() -> None:
    names = {k.name for k in KERNELS}
    assert {"lab1_copy", "lab2_gemm", "lab3_gemm", "gemm_64x64", "every_wrapper", "vadd", "stuck", "oob",
            "misaligned", "tma_one_tile", "probe"} <= names


@pytest.mark.parametrize("kernel", KERNELS, ids=[f"{k.where}:{k.name}" for k in KERNELS])
def test_every_instruction_is_emulated(kernel: coverage.CourseKernel) -> None:
    k = gpu.compile(kernel.source, kernel.name)
    missing = [m for m in coverage.unsupported(k.ptx, k.lowered_name)
               if not any(gap in m for gap in coverage.KNOWN_GAPS)]
    assert not missing, "\n".join(missing)
    assert sum(coverage.opcodes(k.ptx).values()) > 0
