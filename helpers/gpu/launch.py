"""Kernel launches: argument packing (device arrays, explicitly typed scalars, tensor maps of both kinds),
dynamic shared memory above 48 KB, clusters, and an error check after every launch in plain words."""

from __future__ import annotations

import ctypes
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from helpers.hopper.faults import bad_argument

from . import diagnostics
from .arrays import DeviceArray
from .compiler import Kernel
from .device import check, current, device_info, executor_active, mark_context_lost, require_hopper
from .errors import ExecutorLimit, HazardError, KernelDeadlock, KernelFault, LaunchError

Dim3 = int | Sequence[int]
DEFAULT_SMEM_LIMIT = 48 * 1024


def _dim3(v: Dim3, what: str) -> tuple[int, int, int]:
    t = (int(v),) if np.isscalar(v) else tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise LaunchError(f"{what} must be 1 to 3 positive sizes, got {v!r}")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


def _is_core_tensor_map(a: Any) -> bool:
    return type(a).__name__ == "TensorMapDescriptor"


def _is_driver_tensor_map(a: Any) -> bool:
    return type(a).__name__ == "CUtensorMap"


def _in_child() -> bool:
    return os.environ.get("HELPERS_ISOLATED_CHILD") == "1"


# ------------------------------------------------------------------------------------------- loading
def load(kernel: Kernel) -> dict[str, Any]:
    """Load the kernel's CUBIN into the current context once; attach the deadlock record."""
    require_hopper("launching a kernel")
    current()
    L = kernel._loaded
    if "core" not in L:
        from cuda.bindings import driver
        from cuda.core import ObjectCode

        obj = ObjectCode.from_cubin(kernel.cubin, name=kernel.name)
        ck = obj.get_kernel(kernel.lowered_name)
        handle = ck.handle
        dev = driver.CUdevice(int(os.environ.get("HELPERS_DEVICE", "0")))
        static = int(check(driver.cuKernelGetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle, dev), "reading kernel attributes"))
        L.update(obj=obj, core=ck, handle=handle, device=dev, static_smem=static,
                 smem_limit=DEFAULT_SMEM_LIMIT - static,  # the driver's default: 48 KB, static shared memory included
                 diag=diagnostics.attach(obj.handle), params=_param_sizes(handle), nonportable=False)
    return L


def _param_sizes(handle: Any) -> list[int] | None:
    from cuda.bindings import driver

    fn = getattr(driver, "cuKernelGetParamInfo", None)
    if fn is None:
        return None
    sizes = []
    for i in range(4096):
        err, _offset, size = fn(handle, i)
        if err != driver.CUresult.CUDA_SUCCESS:
            break
        sizes.append(int(size))
    return sizes


def _ensure_smem(kernel: Kernel, L: dict[str, Any], shared_mem: int) -> None:
    from cuda.bindings import driver

    if shared_mem <= L["smem_limit"]:
        return
    info = device_info()
    optin = info.max_smem_optin if info else 232448
    room = optin - L["static_smem"]
    if shared_mem > room:
        raise LaunchError(
            f"kernel {kernel.name} asks for {shared_mem} bytes of dynamic shared memory; a block can have at most "
            f"{optin} bytes, and its static shared memory already takes {L['static_smem']}, leaving {room}")
    check(driver.cuKernelSetAttribute(
        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared_mem), L["handle"],
        L["device"]), "raising the dynamic shared-memory limit")
    L["smem_limit"] = int(shared_mem)


# ------------------------------------------------------------------------------------------- arguments
_CTYPES_SCALARS = (ctypes.c_bool, ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int,
                   ctypes.c_uint, ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong,
                   ctypes.c_float, ctypes.c_double, ctypes.c_void_p, ctypes.c_size_t)


def _pack_driver(args: Sequence[Any]) -> tuple[list[Any], Any, list[int]]:
    """(keep-alive objects, void*[] of argument addresses, argument sizes) for cuLaunchKernelEx."""
    keep: list[Any] = []
    addrs: list[int] = []
    sizes: list[int] = []
    for i, a in enumerate(args):
        if isinstance(a, DeviceArray):
            v: Any = ctypes.c_uint64(a.ptr)
            keep.append(v)
            addrs.append(ctypes.addressof(v))
            sizes.append(8)
        elif _is_driver_tensor_map(a):
            keep.append(a)
            addrs.append(int(a.getPtr()))
            sizes.append(128)
        elif type(a).__name__ == "CUdeviceptr":
            v = ctypes.c_uint64(int(a))
            keep.append(v)
            addrs.append(ctypes.addressof(v))
            sizes.append(8)
        elif isinstance(a, np.generic):
            v = np.array(a)
            keep.append(v)
            addrs.append(v.ctypes.data)
            sizes.append(v.itemsize)
        elif isinstance(a, _CTYPES_SCALARS) or isinstance(a, ctypes.Structure | ctypes.Array):
            keep.append(a)
            addrs.append(ctypes.addressof(a))
            sizes.append(ctypes.sizeof(a))
        else:
            raise LaunchError(bad_argument(i, a))
    arr = (ctypes.c_void_p * max(len(addrs), 1))(*addrs)
    keep.append(arr)
    return keep, arr, sizes


def _core_arg(i: int, a: Any) -> Any:
    if isinstance(a, DeviceArray):
        return a.ptr  # cuda.core takes a plain int as a pointer
    if _is_driver_tensor_map(a):
        raise LaunchError(f"argument {i} is a driver CUtensorMap, another is a cuda.core TensorMapDescriptor: "
                          "build both tensor maps the same way (via='driver' or via='core')")
    if _is_core_tensor_map(a) or isinstance(a, (np.generic, *_CTYPES_SCALARS)):
        return a
    raise LaunchError(bad_argument(i, a))


# ------------------------------------------------------------------------------------------- launches
def _set_shape(launch: Any, kernel: Kernel, grid: Dim3, block: Dim3, shared_mem: int, args: Sequence[Any],
               cluster: Dim3 | None) -> None:
    """The launch's kernel, dimensions and arguments, with the rules every launch checks first."""
    if not isinstance(kernel, Kernel):
        raise LaunchError(f"launch wants a kernel from gpu.compile(...), got {type(kernel).__name__}")
    launch.kernel = kernel
    launch.grid, launch.block = _dim3(grid, "grid"), _dim3(block, "block")
    launch.cluster = _dim3(cluster, "cluster") if cluster is not None else None
    launch.shared_mem = int(shared_mem)
    launch.args = tuple(args)
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    if threads > 1024:
        raise LaunchError(f"a block has at most 1024 threads; block {launch.block} has {threads}")
    if launch.cluster is not None:
        if any(g % c for g, c in zip(launch.grid, launch.cluster, strict=True)):
            raise LaunchError(f"the grid {launch.grid} (in blocks) must be a multiple of the cluster {launch.cluster}")
        if launch.cluster[0] * launch.cluster[1] * launch.cluster[2] > 16:
            raise LaunchError(f"a cluster has at most 16 blocks on an H100, not {launch.cluster}")


class Launcher:
    """A launch with its arguments packed once; calling it enqueues the kernel (no wait). Used for timing."""

    def __init__(self, kernel: Kernel, grid: Dim3, block: Dim3, shared_mem: int, args: Sequence[Any],
                 cluster: Dim3 | None = None, programmatic: bool = False) -> None:
        from cuda.bindings import driver

        _set_shape(self, kernel, grid, block, shared_mem, args, cluster)
        self.programmatic = bool(programmatic)
        L = load(kernel)
        self._L = L
        _ensure_smem(kernel, L, self.shared_mem)
        big_cluster = self.cluster is not None and self.cluster[0] * self.cluster[1] * self.cluster[2] > 8
        if big_cluster and not L["nonportable"]:
            check(driver.cuKernelSetAttribute(
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, L["handle"],
                L["device"]), "allowing a cluster of more than 8 blocks")
            L["nonportable"] = True
        self.stream = current()["stream_handle"]
        self.via_core = any(_is_core_tensor_map(a) for a in self.args)
        if self.via_core and self.programmatic:
            raise LaunchError("a programmatic dependent launch takes driver tensor maps (gpu.tensor_map_2d), not "
                              "cuda.core ones")
        if self.via_core:
            from cuda.core import LaunchConfig

            grid_c = self.grid if self.cluster is None else tuple(
                g // c for g, c in zip(self.grid, self.cluster, strict=True))
            kw = {"cluster": self.cluster} if self.cluster is not None else {}
            self._config = LaunchConfig(grid=grid_c, block=self.block, shmem_size=self.shared_mem, **kw)
            self._core_args = [_core_arg(i, a) for i, a in enumerate(self.args)]
            self._core_stream = current()["stream"]
        else:
            self._keep, self._params, sizes = _pack_driver(self.args)
            self._check_sizes(sizes)
            cfg = driver.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.grid
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block
            cfg.sharedMemBytes = self.shared_mem
            cfg.hStream = self.stream
            attrs = []
            if self.cluster is not None:
                at = driver.CUlaunchAttribute()
                at.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = self.cluster
                attrs.append(at)
            if self.programmatic:  # may start before the previous kernel in the stream ends (griddepcontrol.wait)
                at = driver.CUlaunchAttribute()
                at.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                at.value.programmaticStreamSerializationAllowed = 1
                attrs.append(at)
            if attrs:
                cfg.attrs = attrs
            cfg.numAttrs = len(attrs)
            self._config = cfg
        self._params_addr = ctypes.addressof(self._params) if not self.via_core else 0

    def _check_sizes(self, sizes: list[int]) -> None:
        want = self._L["params"]
        if want is None:
            return
        if len(want) != len(sizes):
            raise LaunchError(f"kernel {self.kernel.name} takes {len(want)} arguments, the launch passes {len(sizes)}")
        for i, (w, g) in enumerate(zip(want, sizes, strict=True)):
            if g < w or (w in (1, 2, 4, 8) and g != w):
                raise LaunchError(f"argument {i} of kernel {self.kernel.name} is {w} bytes wide but the value passed is"
                                  " "
                                  f"{g} bytes (e.g. np.int32 for int, np.uint64 or a device array for a pointer)")

    def retarget(self, stream: Any) -> Launcher:
        """Enqueue on `stream` (a driver CUstream or its handle as an int) from now on instead of the course
        stream, e.g. on a stream that a CUDA graph is capturing. Driver launches only (tensor maps from
        ``gpu.tensor_map``, not cuda.core's)."""
        if self.via_core:
            raise LaunchError("a launch with cuda.core tensor maps stays on the course stream")
        from cuda.bindings import driver

        self.stream = stream if isinstance(stream, driver.CUstream) else driver.CUstream(int(stream))
        self._config.hStream = self.stream
        return self

    def describe(self) -> str:
        c = f", cluster {self.cluster}" if self.cluster else ""
        c += ", programmatic dependent launch" if getattr(self, "programmatic", False) else ""
        return f"kernel {self.kernel.name} (grid {self.grid}, block {self.block}{c}, {self.shared_mem} B dynamic smem)"

    def __call__(self) -> None:
        """Enqueue the kernel on the course stream; raise on a launch error (no wait for completion)."""
        if self.via_core:
            from cuda.core import launch as core_launch

            try:
                core_launch(self._core_stream, self._config, self._L["core"], *self._core_args)
            except Exception as e:
                raise LaunchError(f"{self.describe()} could not be launched: {e}") from None
            return
        from cuda.bindings import driver

        (err,) = driver.cuLaunchKernelEx(self._config, self._L["handle"], self._params_addr, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise_for(err, self)


def in_cells(sentence: str, source: str) -> str:
    """A run-time report's "line N of the CUDA source" (a line of the source as compiled, often several cells
    joined) also named as the student's cell and line where a cell run in this notebook holds that line."""
    from . import notebook

    lines = source.splitlines()

    def name(m: Any) -> str:
        n = int(m.group(1))
        cell = notebook.find_line(lines, n - 1) if 0 < n <= len(lines) else None
        return f"{cell} (line {n} of the CUDA source)" if cell is not None else m.group(0)

    return re.sub(r"line (\d+) of the CUDA source", name, sentence)


def refusal_sentence(where: str, error: str, reason: str) -> str:
    """The sentence for a launch the driver refuses (the same on the GPU and on the executor)."""
    return f"{where} could not be launched: {reason} [{error}]"


def _explain_refusal(launcher: Launcher, name: str) -> str | None:
    """Which launch rule the driver's refusal ``name`` enforced, read from the kernel's PTX (None: not known)."""
    from helpers.gpu.executor import launchcheck
    from helpers.gpu.executor.program import load_program

    try:
        k = launcher.kernel
        program = load_program(k.ptx, k.lowered_name)
        L = launcher._L
        static = L.get("static_smem", k.report.static_smem or 0)
        launchcheck.check_launch(launchcheck.bounds_of(program), launcher.grid, launcher.block, launcher.cluster,
                                 launcher.shared_mem, static_smem=static,
                                 max_dynamic_smem=L.get("smem_limit", DEFAULT_SMEM_LIMIT - static),
                                 nonportable_cluster=bool(L.get("nonportable")), registers=k.report.registers or 0)
    except launchcheck.LaunchRefused as e:
        return e.reason if e.error == name else None
    except Exception:  # noqa: BLE001 - an explanation is a courtesy: the driver's words stand without it
        return None
    return None


def raise_for(err: Any, launcher: Launcher | None = None, where: str = "") -> None:
    """Raise the plain-words exception for a CUDA error seen at or after a launch."""
    name = diagnostics.error_name(err)
    where = where or (launcher.describe() if launcher else "the kernel")
    stuck = diagnostics.stuck_sentence()
    sticky = name in diagnostics.STICKY
    tail = "" if _in_child() or not sticky else (
        " This process's GPU context is now unusable: restart the notebook's kernel (gpu.run_isolated keeps such "
        "faults out of the notebook).")
    if stuck:
        mark_context_lost(stuck)
        raise KernelDeadlock(f"{stuck} [{where}]{tail}")
    if sticky:
        sentence = f"{where} failed: {diagnostics.describe_error(err)}."
        mark_context_lost(sentence)
        raise KernelFault(sentence + tail)
    reason = _explain_refusal(launcher, name) if launcher is not None else None
    if reason is not None:
        raise LaunchError(refusal_sentence(where, name, reason))
    extra = ""
    if launcher is not None and name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES":
        b = launcher.block
        regs = launcher.kernel.report.registers
        extra = f" ({regs} registers × {b[0] * b[1] * b[2]} threads = {regs * b[0] * b[1] * b[2]}; an SM has 65536)"
    raise LaunchError(f"{where} could not be launched: {diagnostics.describe_error(err)}{extra}")


def wait(launcher: Launcher | None = None, timeout: float | None = None) -> None:
    """Wait for the course stream, at most `timeout` seconds (default $HELPERS_LAUNCH_TIMEOUT or 60); raise
    KernelFault / KernelDeadlock with a sentence when the kernel failed or never finished."""
    if executor_active():
        return  # emulated launches run to completion when called
    from cuda.bindings import driver

    stream = current()["stream_handle"]
    limit = float(os.environ.get("HELPERS_LAUNCH_TIMEOUT", "60")) if timeout is None else timeout
    t0 = time.monotonic()
    pause = 1e-5
    while True:
        (err,) = driver.cuStreamQuery(stream)
        if err == driver.CUresult.CUDA_SUCCESS:
            return
        if err != driver.CUresult.CUDA_ERROR_NOT_READY:
            raise_for(err, launcher)
        if time.monotonic() - t0 > limit:
            where = launcher.describe() if launcher else "the kernel"
            sentence = (f"deadlock: {where} was still running after {limit:g} s and never finished (a wait that "
                        "nothing satisfies, or an endless loop)")
            mark_context_lost(sentence)
            raise KernelDeadlock(sentence + ("" if _in_child() else
                                             ". The GPU is still busy with it: restart the notebook's kernel."))
        time.sleep(pause)
        pause = min(pause * 2, 2e-3)


def prepare(kernel: Kernel, grid: Dim3, block: Dim3, shared_mem: int = 0, *args: Any,
            cluster: Dim3 | None = None, programmatic: bool = False) -> Launcher | EmuLauncher:
    """Pack a launch once; call the result to enqueue it (for timing loops). On the emulator, calling it runs
    the kernel to completion. ``programmatic=True`` sets the launch attribute
    ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``: the kernel may start before the previous kernel in
    the stream has finished, and its ``griddepcontrol.wait`` holds it until that kernel's writes are visible (on
    the emulator, which runs one kernel at a time, the previous kernel has always finished)."""
    if executor_active():
        return EmuLauncher(kernel, grid, block, shared_mem, args, cluster, programmatic)
    return Launcher(kernel, grid, block, shared_mem, args, cluster, programmatic)


def launch(kernel: Kernel, grid: Dim3, block: Dim3, shared_mem: int = 0, *args: Any, cluster: Dim3 | None = None,
           sync: bool = True, timeout: float | None = None) -> None:
    """Launch `kernel` on a grid of blocks (grid counts blocks, also with a cluster) and, with sync=True, wait
    for it and raise a plain-words error if it failed. Arguments: DeviceArray (a pointer), numpy scalars
    (np.int32, np.float32, ...), ctypes scalars, driver CUtensorMap or cuda.core TensorMapDescriptor (by value)."""
    if executor_active():
        EmuLauncher(kernel, grid, block, shared_mem, args, cluster).run(timeout)
        return
    require_hopper("launching a kernel")
    launcher = Launcher(kernel, grid, block, shared_mem, args, cluster)
    diagnostics.buffer()  # allocated before the launch, so a deadlock record can be written
    launcher()
    if sync:
        wait(launcher, timeout)


# ------------------------------------------------------------------------------------------- the emulator
class EmuLauncher:
    """A launch on the PTX executor (helpers.gpu.executor) when there is no Hopper GPU: the same checks and failure
    sentences as :class:`Launcher`; calling it runs the kernel to completion."""

    def __init__(self, kernel: Kernel, grid: Dim3, block: Dim3, shared_mem: int, args: Sequence[Any],
                 cluster: Dim3 | None = None, programmatic: bool = False) -> None:
        _set_shape(self, kernel, grid, block, shared_mem, args, cluster)
        self.programmatic = bool(programmatic)
        optin, static = 232448, kernel.report.static_smem or 0
        if self.shared_mem > optin - static:
            raise LaunchError(
                f"kernel {kernel.name} asks for {self.shared_mem} bytes of dynamic shared memory; a block can have at "
                f"most {optin} bytes, and its static shared memory already takes {static}, leaving {optin - static}")

    describe = Launcher.describe

    def run(self, timeout: float | None = None) -> Any:
        from helpers.gpu.executor import current_options
        from helpers.gpu.executor.runtime import ArgumentError, KernelOutcome, run_kernel

        del timeout  # a GPU wall-clock limit: the executor decides by counted steps (Options.step_limit)
        k = self.kernel
        static = k.report.static_smem
        try:
            return run_kernel(k.ptx, k.lowered_name, self.grid, self.block, self.shared_mem, self.args,
                              cluster=self.cluster, module_cache=k._loaded, regs=k.report.registers or 0,
                              setmaxnreg_ignored=bool(getattr(k.report, "setmaxnreg_ignored", False)), name=k.name,
                              options=current_options(), static_smem=static,
                              max_dynamic_smem=max(self.shared_mem, DEFAULT_SMEM_LIMIT - (static or 0)))
        except ArgumentError as e:
            raise LaunchError(str(e)) from None
        except KernelOutcome as e:
            where = self.describe()
            e.sentence = in_cells(e.sentence, k.source)
            if e.kind == "refused":
                raise LaunchError(refusal_sentence(where, e.error, e.sentence)) from None
            if e.kind == "hazard":
                raise HazardError(f"{where}: {e.sentence}", e.hazards) from None
            if e.kind == "deadlock":
                raise KernelDeadlock(f"{e.sentence} [{where}]") from None
            if e.kind in ("limit", "unsupported"):
                raise ExecutorLimit(f"{where} cannot run on the executor: {e.sentence}") from None
            raise KernelFault(f"{where} failed: {e.sentence}") from None

    def __call__(self) -> None:
        self.run()
