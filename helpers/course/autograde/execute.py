"""nbgrader's Execute step in a sandbox: :class:`IsolatedExecute`, and :func:`grade_notebook` for one notebook."""

from __future__ import annotations

import ast
import os
import pwd
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader import utils as nbg_utils
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Float, Integer, Unicode

from . import guard
from .sandbox import KERNEL_NAME, Sandbox

__all__ = ["IsolatedExecute", "autograde_preprocessors", "grade_notebook", "GradeReport", "CellGrade"]

#: environment variables the grading kernel inherits from the grader (which GPU, GPU lock settings)
PASSED_ENV = ("CUDA_VISIBLE_DEVICES", "HELPERS_DEVICE", "HELPERS_NO_GPU", "HELPERS_GPU_LOCK_DIR", "HELPERS_GPU_LOCK",
              "HELPERS_GPU_LOCK_WAIT", "HELPERS_LAUNCH_TIMEOUT", "PATH", "LANG")


def _error(ename: str, evalue: str, more: str = "") -> NotebookNode:
    lines = [f"{ename}: {evalue}"] + ([f"the kernel's last words: {more}"] if more else [])
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=lines)


def _has_error(cell: NotebookNode) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def _is_graded_code(cell: NotebookNode) -> bool:
    return cell.cell_type == "code" and nbg_utils.is_grade(cell)


class _SandboxKernelManager(AsyncKernelManager):
    """Writes the connection file where the sandboxed kernel's account can read it."""

    sandbox: Sandbox | None = None

    def write_connection_file(self, **kwargs: Any) -> None:
        super().write_connection_file(**kwargs)
        if self.sandbox is not None:
            self.sandbox.share_file(Path(self.connection_file))


class IsolatedExecute(Execute):
    """nbgrader's Execute preprocessor, run in a sandboxed kernel with limits and a tamper guard.

    Limits are traits (``c.IsolatedExecute.memory_mb = 4096`` in nbgrader_config.py); ``timeout`` (seconds per
    cell) comes from nbgrader's Execute.
    """

    memory_mb = Integer(4096, help="memory limit of the grading kernel, MB (0: none)").tag(config=True)
    memory_rlimit = Enum(["auto", "as", "data"], "auto", help=(
        "which limit bounds memory: 'as' (address space) or 'data' (heap and private mappings, what a machine "
        "with an NVIDIA driver needs: the driver reserves address space it never uses); 'auto' picks 'data' "
        "where /dev/nvidiactl exists")).tag(config=True)
    cpu_seconds = Integer(900, help="CPU-time limit of each process of the submission, seconds (0: none)"
                          ).tag(config=True)
    max_processes = Integer(256, help=(
        "processes and threads the whole submission may have at once (the jail's control group; where no cgroup is "
        "writable, RLIMIT_NPROC of the grading account)")).tag(config=True)
    cpus = Float(1.0, help="CPUs the whole submission may use at once (the jail's control group)").tag(config=True)
    tmp_mb = Integer(512, help="size of each of the jail's tmpfs folders (/tmp, HOME, the working folder), MB"
                     ).tag(config=True)
    notebook_seconds = Integer(1800, help="wall-clock limit for the whole notebook, seconds").tag(config=True)
    max_output_mb = Integer(16, help=(
        "the most the grader keeps of what a notebook prints or displays, MB: the grader holds outputs in its own "
        "memory; past it, one sentence says so and the rest is dropped")).tag(config=True)
    file_mb = Integer(256, help="largest file the notebook may write, MB (0: no limit)").tag(config=True)
    run_as = Unicode("", help=(
        "run the grading kernel as this Unix account, through `sudo -n -u <account>` (the grader must be in its "
        "group); empty: as the grader itself")).tag(config=True)
    answer_key = Unicode("", help=(
        "the course's answer key (deploy/install-course.sh --answer-key; hub/setup.sh keeps it in the instructor's "
        "course folder): the solved kernels of earlier labs that a lab's checks build on come from it, and only "
        "those reach a grading jail. Empty: the grader's own course data, when it still holds them (a clone)")
                         ).tag(config=True)
    work_root = Unicode("", help="where the per-notebook sandboxes are made (default: the temp directory)"
                        ).tag(config=True)
    referee = Bool(True, help=(
        "decide each graded cell again in two fresh jails, the check apart from the student's code "
        "(helpers.course.autograde.referee); a cell passes only when both say so")).tag(config=True)
    #: the tests switch the guard off to prove each tampering they try would fool the checks without it
    tamper_guard = Bool(True, help="compare the graders' fingerprint around every graded cell")

    # -- the run ---------------------------------------------------------------------------------------------
    def preprocess(self, nb: NotebookNode, resources: Any = None, km: Any = None) -> tuple[NotebookNode, Any]:
        path = (resources or {}).get("metadata", {}).get("path")
        self._box = Sandbox(Path(path) if path else None, run_as=self.run_as, work_root=self.work_root,
                            carried=self._carried(nb))
        self._deadline = time.monotonic() + self.notebook_seconds
        self._output_bytes, self._output_capped = 0, False
        self._stopped: str | None = None
        self._baseline: guard.Snapshot | None = None
        try:
            nb, resources = super().preprocess(nb, resources, km=km)
            if self.referee:
                self._apply_referee(nb)
            changed = self._box.tampered_files()
            if changed and self.tamper_guard:
                self._fail_graded(nb, "TamperingDetected", f"the submission changed the grader's copy of the "
                                  f"course ({', '.join(changed[:3])}); every check of this notebook is void")
        finally:
            self._box.close()
        return nb, resources

    def _carried(self, nb: NotebookNode) -> dict[str, str]:
        """The stand-in kernels this notebook's grading may hold: the solved kernels of the labs before the one its
        graded cells check (helpers.course.answerkey), from the answer key."""
        from .. import answerkey

        labs = [m for c in nb.cells if _is_graded_code(c) for m in re.findall(r"\b(lab\d+)\s*\.", c.source)]
        lab = answerkey.graded_lab(labs)
        if lab is None:
            return {}
        path = Path(self.answer_key) if self.answer_key else Path(__file__).resolve().parents[2] / answerkey.DATA_FILE
        try:
            key = answerkey.read_key(path)
        except (OSError, ValueError) as exc:
            if self.answer_key:
                raise RuntimeError(f"IsolatedExecute.answer_key {self.answer_key!r} could not be read ({exc})") from exc
            return {}
        return answerkey.carried_kernels(key, lab)

    def _apply_referee(self, nb: NotebookNode) -> None:
        from .referee import judge

        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ and k != "PATH"}
        env = self._box.jail_env(env)
        seconds = max(60.0, self._deadline - time.monotonic() + 120)
        verdicts = judge(self._box, nb, self._limits(), env, seconds, cell_seconds=self.timeout or 0)
        for cell in nb.cells:
            if _is_graded_code(cell) and not _has_error(cell):
                why = verdicts.get(cell.metadata["nbgrader"]["grade_id"])
                if why is not None:
                    cell.outputs.append(_error("RefereeFailed", "graded again apart from the notebook's own "
                                               f"process, this check failed: {why}"))

    def _limits(self) -> dict[str, Any]:
        which = self.memory_rlimit
        if which == "auto":
            which = "data" if os.path.exists("/dev/nvidiactl") else "as"
        return {"memory_mb": self.memory_mb, "memory_rlimit": which, "cpu_seconds": self.cpu_seconds,
                "file_mb": self.file_mb, "wall_seconds": self.notebook_seconds + 60,
                "max_processes": self.max_processes, "cpus": self.cpus, "tmp_mb": self.tmp_mb}

    def create_kernel_manager(self) -> AsyncKernelManager:
        if self.run_as and os.geteuid() != 0:
            self._check_sudo()
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        kernels = self._box.kernel_spec(self._limits(), env)
        self.kernel_name = KERNEL_NAME
        ksm = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
        km = _SandboxKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm, transport="ipc",
                                   ip=str(self._box.sockets / "k"),
                                   connection_file=str(self._box.sockets / "connection.json"))
        km.sandbox = self._box
        self.km = km
        return km

    def _check_sudo(self) -> None:
        """Fail in plain words when this account cannot start Python as ``run_as`` through sudo, no password."""
        probe = ["sudo", "-n", "-u", self.run_as, "--", sys.executable, "-c", "pass"]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
            ok, said = done.returncode == 0, (done.stderr or done.stdout).strip().splitlines()[-1:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, said = False, [str(exc)]
        if not ok:
            me = pwd.getpwuid(os.getuid()).pw_name
            raise RuntimeError(
                f"autograding could not start {sys.executable} as {self.run_as!r} through sudo ({' '.join(said)}): "
                f"it needs a sudo rule for {me}, '{me} ALL=({self.run_as}) NOPASSWD: {sys.executable}', and a "
                "Python that account can run (hub/setup.sh sets up both; see docs/hub.md)")

    async def async_start_new_kernel(self, **kwargs: Any) -> None:
        kwargs["cwd"] = str(self._box.root)
        kwargs["stdout"] = kwargs["stderr"] = self._box.log
        await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    async def async_start_new_kernel_client(self) -> Any:
        kc = await super().async_start_new_kernel_client()
        self._box.lock_sockets()
        self._baseline = await self._snapshot({})
        if self._baseline is None:
            raise RuntimeError("the grading kernel did not answer the grader's first question")
        return kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def output(self, outs: list[NotebookNode], msg: dict, display_id: str | None, cell_index: int
               ) -> NotebookNode | None:
        """nbclient's output step, up to ``max_output_mb`` for the whole notebook; then one sentence, then nothing."""
        content = msg.get("content", {})
        data = content.get("data") if isinstance(content.get("data"), dict) else {}
        size = len(str(content.get("text", ""))) + sum(len(str(v)) for v in data.values()) + \
            sum(len(str(x)) for x in content.get("traceback", []) or [])
        if msg.get("msg_type") == "error":  # always kept (a check's failure is its score), its traceback cut short
            content["traceback"] = [str(x)[:2000] for x in (content.get("traceback") or [])[-40:]]
            content["evalue"] = str(content.get("evalue", ""))[:2000]
            return super().output(outs, msg, display_id, cell_index)
        self._output_bytes += size
        if self._output_bytes > self.max_output_mb << 20:
            if not self._output_capped:
                self._output_capped = True
                outs.append(NotebookNode(output_type="stream", name="stderr", text=(
                    f"[grading] this notebook printed more than {self.max_output_mb} MB; the grader kept none of "
                    "what it printed after that\n")))
            return None
        return super().output(outs, msg, display_id, cell_index)

    def _get_timeout(self, cell: NotebookNode | None) -> int | None:
        own = super()._get_timeout(cell)
        left = max(1, int(self._deadline - time.monotonic()))
        return left if own is None else min(own, left)

    # -- each cell ---------------------------------------------------------------------------------------------
    async def async_execute_cell(self, cell: NotebookNode, cell_index: int, execution_count: int | None = None,
                                 store_history: bool = True) -> NotebookNode:
        graded = _is_graded_code(cell)
        if cell.cell_type != "code" or not cell.source.strip():
            return cell
        if self._stopped is None and time.monotonic() >= self._deadline:
            self._stopped = f"the notebook used up its time limit ({self.notebook_seconds} s) before this cell"
        if self._stopped is not None:
            cell.outputs = [_error("NotRun", self._stopped)] if graded else []
            return cell
        if graded and self.tamper_guard:
            bind = guard.course_names(cell.source, self._box.modules)
            problems = await self._tampering(bind)
            if problems:
                cell.outputs = [_error("TamperingDetected", "; ".join(problems) + ". This check was not run.")]
                return cell
        try:
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except DeadKernelError:
            self._stopped = f"the grading kernel died at cell {cell_index}: {self._death_reason()}"
            cell.outputs.append(_error("KernelDied", self._stopped, self._box.log_tail()))
            return cell
        except CellTimeoutError:  # interrupted, but the kernel never came back to say so
            return await self._stop_stuck(cell, cell_index)
        timed_out = any(o.get("ename") == "CellTimeoutError" for o in cell.outputs if o.get("output_type") == "error")
        if timed_out and not await self._responsive():
            return await self._stop_stuck(cell, cell_index)
        if graded and self.tamper_guard and not self._stopped:
            problems = await self._tampering({})
            if problems:
                cell.outputs.append(_error("TamperingDetected", "; ".join(problems) + " while this check ran."))
        return cell

    execute_cell = run_sync(async_execute_cell)

    async def _stop_stuck(self, cell: NotebookNode, cell_index: int) -> NotebookNode:
        await ensure_async(self.km.shutdown_kernel(now=True))
        self._stopped = (f"cell {cell_index} ran past its time limit ({self._get_timeout(cell)} s) and the kernel "
                         "could not be interrupted, so it was stopped")
        cell.outputs.append(_error("NotRun" if _is_graded_code(cell) else "TimeLimit", self._stopped))
        return cell

    # -- talking to the kernel -----------------------------------------------------------------------------
    async def _reply(self, msg_id: str, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=left))
            except Exception:  # noqa: BLE001 - queue.Empty: no answer in time
                return None
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        return None

    async def _snapshot(self, bind: dict[str, str]) -> guard.Snapshot | None:
        msg_id = await ensure_async(self.kc.execute(guard.fingerprint_code(bind), silent=True, store_history=False,
                                                    user_expressions={"r": guard.RESULT_NAME}, stop_on_error=False))
        reply = await self._reply(msg_id, timeout=60)
        try:
            result = reply["content"]["user_expressions"]["r"]
            return guard.Snapshot.from_json(ast.literal_eval(result["data"]["text/plain"]))
        except Exception:  # noqa: BLE001 - no reply, an error, or a mangled answer: all mean "cannot verify"
            return None

    async def _tampering(self, bind: dict[str, str]) -> list[str]:
        now = await self._snapshot(bind)
        if now is None:
            return ["the grader could not read the kernel's state (the submission broke what the check needs)"]
        return guard.compare(self._baseline, now, str(self._box.grader))

    async def _responsive(self) -> bool:
        """After a timed-out cell was interrupted: does the kernel answer again within 10 s?"""
        msg_id = await ensure_async(self.kc.kernel_info())
        return await self._reply(msg_id, timeout=10) is not None

    def _death_reason(self) -> str:
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        code = proc.poll() if proc is not None else None
        if code is not None and code > 128 and code - 128 in (signal.SIGXCPU, signal.SIGKILL):
            code = 128 - code  # the jail reports a signal's end as 128 + the signal
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return f"it used up its CPU time ({self.cpu_seconds} s), or the machine ran out of memory"
        if code == 124:
            return f"it ran past the notebook's time limit ({self.notebook_seconds} s)"
        if code is not None and code < 0:
            return f"it was ended by signal {signal.Signals(-code).name}"
        return f"it exited (status {code}); the memory limit is {self.memory_mb} MB"

    @staticmethod
    def _fail_graded(nb: NotebookNode, ename: str, evalue: str) -> None:
        for cell in nb.cells:
            if _is_graded_code(cell) and not _has_error(cell):
                cell.outputs.append(_error(ename, evalue))


def autograde_preprocessors() -> list[type]:
    """nbgrader's autograde preprocessors with its Execute replaced by :class:`IsolatedExecute`."""
    from nbgrader.converters import Autograde

    default = Autograde.class_traits()["autograde_preprocessors"].default()
    return [IsolatedExecute if pp is Execute else pp for pp in default]


# ---------------------------------------------------------------------------------------------------------
# one notebook, without nbgrader's database
# ---------------------------------------------------------------------------------------------------------
@dataclass
class CellGrade:
    grade_id: str
    points: float
    max_points: float
    error: str | None  # "ename: evalue" of the first error, None when the check passed


@dataclass
class GradeReport:
    notebook: NotebookNode
    cells: list[CellGrade] = field(default_factory=list)

    @property
    def points(self) -> float:
        return sum(c.points for c in self.cells)

    def by_id(self) -> dict[str, CellGrade]:
        return {c.grade_id: c for c in self.cells}

    def summary(self) -> str:
        lines = [f"{c.grade_id}: {c.points:g} / {c.max_points:g}" + (f"  ({c.error})" if c.error else "")
                 for c in self.cells]
        total = sum(c.max_points for c in self.cells)
        return "\n".join(lines + [f"total: {self.points:g} / {total:g}"])


def grade_notebook(path: Path | str, **traits: Any) -> GradeReport:
    """Run one notebook in the sandbox and score its graded code cells as nbgrader would.

    ``traits`` are IsolatedExecute's (``timeout``, ``memory_mb``, ``cpu_seconds``, ``notebook_seconds``,
    ``run_as`` …). The notebook's check cells are taken as they are: nbgrader restores them from its database
    before this step, this function does not.
    """
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    pp = IsolatedExecute(**traits)
    nb, _ = pp.preprocess(nb, {"metadata": {"path": str(path.parent)}})
    report = GradeReport(nb)
    for cell in nb.cells:
        if _is_graded_code(cell):
            score, max_score = nbg_utils.determine_grade(cell)
            err = next((f"{o.ename}: {o.evalue}" for o in cell.outputs if o.get("output_type") == "error"), None)
            report.cells.append(CellGrade(cell.metadata["nbgrader"]["grade_id"], score or 0.0, max_score, err))
    return report

