"""The executor behind ``helpers.gpu`` on a machine without a Hopper GPU: loading a kernel's module (its global
variables, the deadlock record), tensor maps, packing launch arguments, running, and turning what happened into the
same sentences the GPU path gives."""

from __future__ import annotations

import ctypes
import itertools
import os
import struct
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from helpers.hopper import faults
from helpers.hopper import tensormap as tm

from . import alu, control, hazards, launchcheck, memops, mma, sync, tensor  # noqa: F401  (decoders)
from .errors import ApproximationWarning, EmulationLimit, ParseError, UnsupportedInstruction
from .machine import Deadlock, ExecFault, Machine, Options, StepLimit, Trap
from .memory import Allocation, DeviceMemory, device_memory
from .program import Program, load_program
from .tensor import TMAP_MAGIC

__all__ = ["EmuTensorMap", "make_tensor_map", "run_kernel", "RunInfo", "LoadedModule", "DIAG_BYTES"]

DIAG_BYTES = 112
_ids = itertools.count(1)
_TENSOR_MAPS: dict[int, tm.TensorMap] = {}


class EmuTensorMap:
    """A tensor map on the emulator: the emulator's :class:`helpers.hopper.tensormap.TensorMap` plus the 128 bytes a
    kernel receives for its ``const __grid_constant__ CUtensorMap`` parameter (they name the map).

    Like the driver's ``CUtensorMap`` it holds the global address, not the array: an array whose last reference
    goes away is freed while its map lives on (``gpu.tensor_map_2d(gpu.to_device(A), 64, 64)`` written inline), and
    a copy through the map then faults with a sentence naming the freed array. On the H100 the freed memory goes
    back to the pool and the next allocation may take it: the same kernel there reads that allocation's data."""

    def __init__(self, tmap: tm.TensorMap, keep: Any = None) -> None:
        self.tmap = tmap
        self.id = next(_ids)
        self.source = getattr(keep, "shape", None)  # what the map was built over, for reprs; never kept alive
        _TENSOR_MAPS[self.id] = tmap

    def param_bytes(self) -> bytes:
        return struct.pack("<QQ", TMAP_MAGIC, self.id).ljust(128, b"\0")

    def __repr__(self) -> str:
        t = self.tmap
        return (f"EmuTensorMap(dims={list(t.global_dim)}, box={list(t.box_dim)}, swizzle={t.swizzle.name}, "
                f"address={t.global_address:#x})")


_DTYPES = {np.dtype(np.uint8): tm.DataType.UINT8, np.dtype(np.int8): tm.DataType.UINT8,
           np.dtype(np.uint16): tm.DataType.UINT16, np.dtype(np.int16): tm.DataType.UINT16,
           np.dtype(np.uint32): tm.DataType.UINT32, np.dtype(np.int32): tm.DataType.INT32,
           np.dtype(np.uint64): tm.DataType.UINT64, np.dtype(np.int64): tm.DataType.INT64,
           np.dtype(np.float16): tm.DataType.FLOAT16, np.dtype(np.float32): tm.DataType.FLOAT32,
           np.dtype(np.float64): tm.DataType.FLOAT64}
_SWIZZLE = {0: tm.Swizzle.NONE, 32: tm.Swizzle.B32, 64: tm.Swizzle.B64, 128: tm.Swizzle.B128}
_L2 = {0: tm.L2Promotion.NONE, 64: tm.L2Promotion.L2_64B, 128: tm.L2Promotion.L2_128B, 256: tm.L2Promotion.L2_256B}


def make_tensor_map(dtype: Any, address: int, dims: Sequence[int], strides_bytes: Sequence[int],
                    box: Sequence[int], element_strides: Sequence[int] | None = None, swizzle: int = 128,
                    l2_promotion: int = 256, oob_nan: bool = False, keep: Any = None) -> EmuTensorMap:
    """The emulator's ``cuTensorMapEncodeTiled`` (same arguments as helpers.gpu.encode_tiled)."""
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":
        enum = tm.DataType.BFLOAT16
    else:
        enum = _DTYPES[dt]
    rank = len(dims)
    t = tm.encode_tiled(enum, rank, int(address), tuple(int(d) for d in dims), tuple(int(s) for s in strides_bytes),
                        tuple(int(b) for b in box), tuple(element_strides or [1] * rank), tm.Interleave.NONE,
                        _SWIZZLE[swizzle], _L2[l2_promotion],
                        tm.OOBFill.NAN_REQUEST_ZERO_FMA if oob_nan else tm.OOBFill.NONE)
    return EmuTensorMap(t, keep)


# ------------------------------------------------------------------------------------------- modules
@dataclass
class LoadedModule:
    """A kernel's module loaded into emulated memory: its .global/.const variables, like cuModuleLoad."""

    program: Program
    globals: Allocation
    memory: DeviceMemory

    def address(self, name: str) -> int | None:
        s = self.program.symbol(None, name)
        if s is None or s.kind not in ("global", "const"):
            return None
        return self.globals.base + s.offset


def load_module(program: Program, memory: DeviceMemory, cache: dict | None = None) -> LoadedModule:
    key = ("emu", id(memory), program.entry)
    if cache is not None and key in cache:
        return cache[key]
    g = memory.alloc(program.globals_bytes, label="the module's global variables")
    lm = LoadedModule(program, g, memory)
    weakref.finalize(lm, memory.free, g)  # unloaded with the kernel that holds it
    for v, off in program.global_vars:
        if v.init:
            g.data[off:off + len(v.init)] = np.frombuffer(v.init, np.uint8)
    for v, off in program.global_vars:
        for at, sym, add, _generic in v.relocs:
            target = lm.address(sym)
            if target is not None:
                g.data[off + at:off + at + 8] = np.frombuffer(struct.pack("<Q", target + add), np.uint8)
    if cache is not None:
        cache[key] = lm
    return lm


_DIAG: dict[int, Allocation] = {}


def diag_record(memory: DeviceMemory) -> Allocation:
    """The emulated host-mapped deadlock record (one per emulated memory)."""
    a = _DIAG.get(id(memory))
    if a is None:
        a = memory.alloc(DIAG_BYTES, label="the deadlock record")
        _DIAG[id(memory)] = a
    return a


def _arm_diagnostics(lm: LoadedModule) -> Allocation | None:
    addr = lm.address("hopper_diag_addr")
    rec = diag_record(lm.memory)
    rec.data[:] = 0
    if addr is None:
        return None
    g = lm.globals
    o = addr - g.base
    g.data[o:o + 8] = np.frombuffer(struct.pack("<Q", rec.base), np.uint8)
    for name in ("hopper_diag_claim", "hopper_diag_done"):
        a = lm.address(name)
        if a is not None:
            g.data[a - g.base:a - g.base + 4] = 0
    return rec


# ------------------------------------------------------------------------------------------- arguments
_CTYPES = (ctypes.c_bool, ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int,
           ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_float,
           ctypes.c_double, ctypes.c_void_p, ctypes.c_size_t)


class ArgumentError(ValueError):
    """An argument the kernel cannot take (the sentence matches the GPU path's)."""


def pack_arguments(program: Program, args: Sequence[Any], name: str) -> bytes:
    """The kernel's parameter block from launch arguments (device arrays, numpy/ctypes scalars, tensor maps)."""
    params = program.kparams
    if len(params) != len(args):
        raise ArgumentError(f"kernel {name} takes {len(params)} arguments, the launch passes {len(args)}")
    buf = bytearray(program.kparam_bytes)
    for i, ((p, off), a) in enumerate(zip(params, args, strict=True)):
        if isinstance(a, EmuTensorMap):
            raw = a.param_bytes()
        elif getattr(a, "_alloc", None) is not None:
            raw = struct.pack("<Q", int(a.ptr))
        elif type(a).__name__ == "DeviceArray":
            raise ArgumentError(f"argument {i} is an array in GPU memory; the emulator runs on arrays made while no "
                                "GPU is in use")
        elif isinstance(a, np.generic):
            raw = np.array(a).tobytes()
        elif isinstance(a, _CTYPES) or isinstance(a, ctypes.Structure | ctypes.Array):
            raw = bytes(a)
        elif type(a).__name__ in ("CUtensorMap", "TensorMapDescriptor"):
            raise ArgumentError(f"argument {i} is a GPU tensor map; on the emulator build it with gpu.tensor_map / "
                                "gpu.encode_tiled while no GPU is in use")
        else:
            raise ArgumentError(faults.bad_argument(i, a))
        w, g = p.size, len(raw)
        if g < w or (w in (1, 2, 4, 8) and g != w) or (w == 128 and g != 128):
            raise ArgumentError(f"argument {i} of kernel {name} is {w} bytes wide but the value passed is {g} bytes "
                                "(e.g. np.int32 for int, np.uint64 or a device array for a pointer)")
        buf[off:off + w] = raw[:w]
    return bytes(buf)


# ------------------------------------------------------------------------------------------- running
@dataclass
class RunInfo:
    """What one emulated launch did."""

    machine: Machine
    seconds: float
    instructions: int


class KernelOutcome(Exception):
    """How an emulated kernel ended badly: ``kind`` is refused (the driver would not launch it; ``error`` is the
    driver's error name), fault, deadlock, limit (the executor's step limit or wall-clock safety net: its own limit,
    never a verdict on the kernel), unsupported or hazard (then ``hazards`` lists them and ``machine`` is the run,
    for its trace)."""

    def __init__(self, kind: str, sentence: str, error: str = "", hazards: list | None = None,
                 machine: Machine | None = None) -> None:
        super().__init__(sentence)
        self.kind = kind
        self.sentence = sentence
        self.error = error
        self.hazards = hazards or []
        self.machine = machine


def run_kernel(ptx: str, entry: str | None, grid: tuple[int, int, int], block: tuple[int, int, int],
               dyn_smem: int, args: Sequence[Any], *, cluster: tuple[int, int, int] | None = None,
               memory: DeviceMemory | None = None, module_cache: dict | None = None, regs: int = 0,
               setmaxnreg_ignored: bool = False, name: str = "", timeout: float | None = None,
               options: Options | None = None, static_smem: int | None = None,
               max_dynamic_smem: int | None = None, nonportable_cluster: bool | None = None) -> RunInfo:
    """Run one kernel on the executor. Raises :class:`KernelOutcome` (refused / fault / deadlock / step-limit /
    unsupported) with the plain-words sentence, or ArgumentError for arguments the kernel cannot take.

    The launch is first checked as the driver checks it (:mod:`.launchcheck`): ``static_smem`` is ptxas's count
    (default: the executor's layout), ``max_dynamic_smem`` the kernel's dynamic shared-memory attribute (default:
    48 KB less the static), ``nonportable_cluster`` whether clusters of more than 8 are allowed (default: when the
    launch asks for one, as helpers.gpu's launch sets the attribute then). A cluster size the kernel fixes
    (``__cluster_dims__``) is used when the launch gives none. ``timeout`` is a wall-clock safety net in seconds
    (None: none); the verdict on a kernel that does not finish comes from counted steps (``Options.step_limit``)."""
    import time

    try:
        program = load_program(ptx, entry)
    except ParseError as e:
        raise KernelOutcome("unsupported", f"the executor cannot read this kernel's PTX: {e} ({LIMIT_WORDS})") from None
    name = name or program.entry
    if nonportable_cluster is None:
        size = cluster[0] * cluster[1] * cluster[2] if cluster is not None else 1
        nonportable_cluster = size > launchcheck.PORTABLE_CLUSTER
    try:
        cluster = launchcheck.check_launch(
            launchcheck.bounds_of(program), tuple(grid), tuple(block), tuple(cluster) if cluster else None, dyn_smem,
            static_smem=program.static_smem() if static_smem is None else static_smem,
            max_dynamic_smem=max_dynamic_smem, nonportable_cluster=nonportable_cluster, registers=regs)
    except launchcheck.LaunchRefused as e:
        raise KernelOutcome("refused", e.reason, e.error) from None
    memory = memory or device_memory()
    params = pack_arguments(program, args, name)
    lm = load_module(program, memory, module_cache)
    rec = _arm_diagnostics(lm)
    opts = options or Options()
    if timeout is not None:
        opts.time_limit = timeout
    t0 = time.monotonic()
    mach = Machine(program, grid, block, cluster, dyn_smem, params, memory, lm, opts, regs, setmaxnreg_ignored,
                   name)
    mach.tensor_maps = _TENSOR_MAPS
    global LAST
    LAST = mach
    try:
        outcome = _run(mach, rec, opts)
    finally:
        memory.free(mach.param_alloc)
    _say_notes(mach, name)
    found = mach.hz.found if mach.hz is not None else []
    if found:
        then = outcome.sentence if outcome is not None else ""
        raise KernelOutcome("hazard", hazards.report(found, then), hazards=found, machine=mach)
    if outcome is not None:
        outcome.machine = mach
        raise outcome
    return RunInfo(mach, time.monotonic() - t0, mach.dispatches)


def _say_notes(mach: Machine, name: str) -> None:
    """Once per run, for each instruction known only within a bound: a warning in words."""
    if not mach.notes:
        return
    import sys
    import warnings

    try:  # point at the caller's line (the cell that launched), past helpers.gpu's own frames
        f = sys._getframe(1)
        while f.f_back is not None and "/helpers/gpu/" in f.f_code.co_filename.replace("\\", "/"):
            f = f.f_back
        where = (f.f_code.co_filename, f.f_lineno, f.f_globals.get("__name__", "?"))
    except ValueError:
        where = ("<executor>", 0, "?")
    for note in mach.notes.values():  # a fresh registry: said at every run (an "ignore" filter still silences it)
        warnings.warn_explicit(f"kernel {name} on the executor: {note}", ApproximationWarning, where[0], where[1],
                               module=where[2], registry={})


#: The machine of the last emulated launch (its trace and hazards), for helpers.gpu.executor.last_run().
LAST: Machine | None = None


def _run(mach: Machine, rec: Allocation | None, opts: Options) -> KernelOutcome | None:
    """Run the machine; how it ended badly, or None."""
    try:
        mach.run()
    except Trap as e:
        stuck = faults.StuckRecord.from_bytes(bytes(rec.data[:DIAG_BYTES])) if rec is not None else None
        if stuck is not None:
            return KernelOutcome("deadlock", stuck.sentence())
        return KernelOutcome("fault", f"{faults.describe_error(_Err(e.error))}. On the emulator: {e.detail} "
                                      f"{e.where}", e.error)
    except ExecFault as e:
        return KernelOutcome("fault", f"{faults.describe_error(_Err(e.error))}. On the emulator: {e.detail} "
                                      f"{e.where}", e.error)
    except Deadlock as e:
        return KernelOutcome("deadlock", e.sentence)
    except StepLimit as e:
        return KernelOutcome("limit", step_limit_sentence(e.steps, opts.step_limit, e.where))
    except TimeoutError:
        return KernelOutcome("limit", f"the executor stopped the kernel after {opts.time_limit:g} s of wall-clock time "
                                      f"({mach.steps:,} warp instructions run): that is the executor's own safety "
                                      "net on this machine, not a verdict on the kernel; the verdict on a kernel "
                                      f"that never finishes comes from its step limit ({opts.step_limit:,} warp "
                                      "instructions). Raise the net with executor_options(time_limit=...) or "
                                      "HELPERS_EXECUTOR_WALL_LIMIT")
    except (UnsupportedInstruction, EmulationLimit) as e:
        return KernelOutcome("unsupported", f"{e} ({LIMIT_WORDS})")
    except hazards.HazardsFound:
        return None  # the checker stopped the run: its hazards are the report
    return None


#: How every sentence about something the executor cannot do ends: the limit is the executor's.
LIMIT_WORDS = "a limit of the executor, not a mistake in the kernel"


def step_limit_sentence(steps: int, limit: int, where: str = "") -> str:
    """What the executor says when a launch reaches its step limit (the same on every machine)."""
    at = f"; the last block it ran: {where}" if where else ""
    return (f"the kernel ran {steps:,} warp instructions on the executor without finishing: an endless loop, or a "
            "wait that nothing satisfies (a deadlock the machine could not prove, e.g. a loop that counts while it "
            f"waits), or more work than the executor runs in one launch. The executor's limit is {limit:,} warp "
            "instructions, counted the same on every machine; raise it with "
            f"helpers.gpu.executor.executor_options(step_limit=...){at}")


class _Err:
    def __init__(self, name: str) -> None:
        self.name = name


def executor_mode() -> str:
    """``off`` (HELPERS_EXECUTOR=off), ``force`` (HELPERS_EXECUTOR=force) or ``auto``."""
    v = os.environ.get("HELPERS_EXECUTOR", "auto").strip().lower()
    return v if v in ("off", "force") else "auto"
