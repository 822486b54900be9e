"""A barrier stepper: drive one mbarrier by hand and watch its phase, arrivals and transaction bytes.

Pure computation first (tests call these without a browser), built on :class:`helpers.hopper.mbarrier.MBarrier`:

- :class:`BarrierStepper` — a barrier plus the TMA bytes in flight, with one :class:`Step` logged per action
  (init, arrive, expect_tx, arrive.expect_tx, issue a TMA copy, bytes land, wait on a parity). A wait that can
  never return is reported as a deadlock; a wait that returns while bytes are still in flight as a race;
- :func:`run_script` — replay a list of ``(action, argument)`` pairs on a fresh stepper;
- :func:`wait_bits` — after each action of a script, what ``test_wait.parity`` 0 and 1 answer: the quantity the
  GPU replay kernel :data:`REPLAY_KERNEL` records, so emulator and hardware can be compared op for op;
- :func:`replay_on_gpu` — run a script on the GPU with that kernel (one thread, one barrier).

Then :func:`barrier_stepper_widget`, the ipywidgets + plotly view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from helpers.hopper.mbarrier import BarrierState, Deadlock, MBarrier, MBarrierError

__all__ = [
    "Step",
    "BarrierStepper",
    "run_script",
    "wait_bits",
    "OPCODES",
    "REPLAY_KERNEL",
    "replay_on_gpu",
    "NOW_BARS",
    "now_bars",
    "barrier_stepper_widget",
]


@dataclass(frozen=True)
class Step:
    """One action on the stepper and what it did."""

    action: str  # e.g. "arrive.expect_tx(16384)"
    state: BarrierState  # the barrier after the action
    in_flight: int  # TMA bytes issued but not landed yet, after the action
    outcome: str  # a sentence: what happened
    kind: str = "ok"  # ok | complete | passes | race | deadlock | error
    completed: tuple[int, ...] = ()  # phases that completed during this action


@dataclass
class BarrierStepper:
    """One mbarrier in shared memory, the TMA copies in flight towards it, and a log of every step.

    The stepper plays every thread of the block: once it waits, nobody else is left to arrive, so a wait on a
    phase that still needs arrivals — or more bytes than are in flight — is a deadlock, as in straight-line
    code on the emulator. A wait whose phase needs only bytes already in flight blocks until they land.
    Negative transaction counts are allowed (bytes may land before their ``expect_tx``, as on the GPU).
    """

    count: int | None = 1  # init count; None leaves the barrier uninitialised (shared memory is not constructed)
    name: str = "full"
    bar: MBarrier = field(init=False)
    in_flight: list[int] = field(init=False, default_factory=list)
    steps: list[Step] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.bar = MBarrier(self.name, allow_negative_tx=True)
        self._done: list[int] = []
        self.bar.on_complete.append(lambda _bar, phase: self._done.append(phase))
        if self.count is not None:
            self.init(self.count)

    # -------------------------------------------------------------------- bookkeeping
    @property
    def bytes_in_flight(self) -> int:
        return sum(self.in_flight)

    def _log(self, action: str, outcome: str, kind: str = "ok") -> Step:
        done = tuple(self._done)
        self._done.clear()
        if done and kind == "ok":
            kind = "complete"
            outcome += "; " + ", ".join(f"phase {p} (parity {p % 2}) completed" for p in done)
            outcome += f" → phase {self.bar.phase} (parity {self.bar.parity}) begins"
        step = Step(action, self._state(), self.bytes_in_flight, outcome, kind, done)
        self.steps.append(step)
        return step

    def _state(self) -> BarrierState:
        if self.bar.initialized:
            return self.bar.state()
        return BarrierState(self.name, False, 0, 0, 0, 0, 0)

    def _guard(self, action: str, fn) -> Step:
        try:
            outcome = fn()
        except Deadlock as exc:
            return self._log(action, f"DEADLOCK: {exc}", "deadlock")
        except MBarrierError as exc:
            self._done.clear()
            return self._log(action, f"ERROR: {exc}", "error")
        return self._log(action, outcome)

    # -------------------------------------------------------------------- actions
    def init(self, count: int) -> Step:
        """``mbarrier.init`` by one thread (then fence + __syncthreads): phase 0, ``count`` arrivals expected."""
        def go():
            self.bar.init(count)
            self.in_flight.clear()
            return f"initialised: phase 0, {count} arrival(s) expected, 0 bytes"
        return self._guard(f"init({count})", go)

    def arrive(self, count: int = 1) -> Step:
        """``mbarrier.arrive`` with ``count`` arrivals."""
        def go():
            self.bar.arrive(count)
            return f"{count} arrival(s) counted, {self.bar.pending_arrivals} still pending"
        return self._guard("arrive" if count == 1 else f"arrive({count})", go)

    def expect_tx(self, nbytes: int) -> Step:
        """``mbarrier.expect_tx``: the phase in progress also waits for ``nbytes`` bytes."""
        def go():
            phase = self.bar.phase
            self.bar.expect_tx(nbytes)
            return f"{nbytes} bytes now expected by phase {phase}"
        return self._guard(f"expect_tx({nbytes})", go)

    def arrive_expect_tx(self, nbytes: int) -> Step:
        """``mbarrier.arrive.expect_tx``: announce ``nbytes`` and arrive, in one step."""
        def go():
            phase = self.bar.phase
            self.bar.arrive_expect_tx(nbytes)
            return f"{nbytes} bytes expected by phase {phase}, and 1 arrival counted"
        return self._guard(f"arrive.expect_tx({nbytes})", go)

    def issue_tma(self, nbytes: int) -> Step:
        """A TMA copy of ``nbytes`` is issued with this barrier: its bytes are now in flight."""
        def go():
            if not self.bar.initialized:
                raise MBarrierError(f"a TMA copy names barrier {self.name!r}, which was never initialized")
            self.in_flight.append(int(nbytes))
            return f"TMA copy of {nbytes} bytes issued; {self.bytes_in_flight} bytes in flight"
        return self._guard(f"TMA issue({nbytes})", go)

    def land(self) -> Step:
        """The oldest TMA copy in flight lands: its bytes count down the transaction count (complete_tx)."""
        def go():
            if not self.in_flight:
                return "nothing in flight: issue a TMA copy first"
            nbytes = self.in_flight.pop(0)
            phase = self.bar.phase
            self.bar.complete_tx(nbytes)
            return f"{nbytes} bytes landed in shared memory and were counted against phase {phase}"
        return self._guard("TMA bytes land", go)

    def wait(self, parity: int) -> Step:
        """``try_wait.parity`` in a loop, by every thread: returns, blocks until in-flight bytes land, or deadlocks."""
        action = f"wait(parity {parity})"
        if not self.bar.initialized:
            return self._guard(action, lambda: self.bar.test_wait(parity))
        try:
            if self.bar.test_wait(parity):
                if self.in_flight:
                    return self._log(action, f"returns at once (the phase of parity {parity} has completed), but "
                                     f"{self.bytes_in_flight} bytes are still in flight: the threads would read "
                                     "shared memory before the tile has landed — a race", "race")
                return self._log(action, f"returns at once: the phase of parity {parity} has completed", "passes")
            needs_only_bytes = self.bar.pending_arrivals == 0 and 0 < self.bar.tx_count <= self.bytes_in_flight
            if needs_only_bytes:
                landed = 0
                while not self.bar.test_wait(parity) and self.in_flight:
                    nbytes = self.in_flight.pop(0)
                    self.bar.complete_tx(nbytes)
                    landed += nbytes
                if self.bar.test_wait(parity):
                    done = ", ".join(f"phase {p}" for p in self._done)
                    self._done.clear()
                    return self._log(action, f"blocks until {landed} bytes land, then returns ({done} completed)",
                                     "passes")
            self.bar.wait(parity, waiter="every thread of the block")
        except Deadlock as exc:
            self._done.clear()
            return self._log(action, f"DEADLOCK: {exc}", "deadlock")
        except MBarrierError as exc:
            self._done.clear()
            return self._log(action, f"ERROR: {exc}", "error")
        return self._log(action, "returns", "passes")  # pragma: no cover - wait() either returns above or raises

    def do(self, action: str, arg: int = 0) -> Step:
        """Apply one named action: init, arrive, expect_tx, arrive_expect_tx, issue_tma, land, wait."""
        table = {"init": self.init, "arrive": self.arrive, "expect_tx": self.expect_tx,
                 "arrive_expect_tx": self.arrive_expect_tx, "issue_tma": self.issue_tma, "wait": self.wait}
        if action == "land":
            return self.land()
        if action not in table:
            raise ValueError(f"unknown action {action!r}: one of {sorted(table) + ['land']}")
        if action == "arrive":
            return self.arrive(arg or 1)
        return table[action](arg)


def run_script(script: list[tuple[str, int]], count: int | None = 1) -> list[Step]:
    """Replay ``[(action, argument), …]`` on a fresh stepper (initialised with ``count`` unless None)."""
    s = BarrierStepper(count)
    for action, arg in script:
        s.do(action, arg)
    return s.steps[1:] if count is not None else s.steps


# -----------------------------------------------------------------------------------------------------------
# the same script on the GPU
# -----------------------------------------------------------------------------------------------------------
#: opcodes of the replay kernel (complete_tx stands for a TMA copy's bytes landing)
OPCODES = {"init": 0, "arrive": 1, "expect_tx": 2, "arrive_expect_tx": 3, "complete_tx": 4}

#: One thread replays (opcode, argument) pairs on one mbarrier and records test_wait.parity 0 and 1 after each.
REPLAY_KERNEL = r"""
#include "hopper.cuh"
extern "C" __global__ void replay(const int* ops, int n_ops, int* bits) {
  __shared__ alignas(8) unsigned long long bar;      // never constructed: mbarrier.init below makes it a barrier
  if (threadIdx.x != 0) return;
  for (int i = 0; i < n_ops; ++i) {
    int op = ops[2 * i], arg = ops[2 * i + 1];
    unsigned a = hopper::smem_u32(&bar);
    if (op == 0) {
      hopper::mbar_init(&bar, arg);
      hopper::mbar_fence_init();
    } else if (op == 1) {
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(arg) : "memory");
    } else if (op == 2) {
      hopper::mbar_expect_tx(&bar, arg);
    } else if (op == 3) {
      hopper::mbar_arrive_expect_tx(&bar, arg);
    } else if (op == 4) {
      asm volatile("mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(arg) : "memory");
    }
    bits[2 * i] = hopper::mbar_test_wait(&bar, 0);
    bits[2 * i + 1] = hopper::mbar_test_wait(&bar, 1);
  }
}
"""


def _script_ops(script: list[tuple[str, int]]) -> list[tuple[str, int]]:
    ops = []
    for action, arg in script:
        if action == "land":
            raise ValueError("in a GPU replay, write ('complete_tx', bytes) for bytes landing")
        if action not in OPCODES:
            raise ValueError(f"{action!r} cannot be replayed; use one of {sorted(OPCODES)}")
        ops.append((action, int(arg)))
    return ops


def wait_bits(script: list[tuple[str, int]]) -> np.ndarray:
    """(len(script), 2) int array: ``test_wait.parity`` 0 and 1 after each action, on the emulator.

    The script must start with ``("init", count)``; bytes landing are ``("complete_tx", n)``. A barrier error
    (e.g. too many arrivals) raises, because the GPU's behaviour is then undefined.
    """
    ops = _script_ops(script)
    if not ops or ops[0][0] != "init":
        raise ValueError("a replay script starts with ('init', count)")
    bar = MBarrier("bar", allow_negative_tx=True)
    out = np.zeros((len(ops), 2), np.int32)
    for i, (action, arg) in enumerate(ops):
        if action == "arrive":
            bar.arrive(arg)
        else:
            getattr(bar, action)(arg)
        out[i] = bar.test_wait(0), bar.test_wait(1)
    return out


def replay_on_gpu(script: list[tuple[str, int]]):
    """Compile :data:`REPLAY_KERNEL` and, on a Hopper GPU, run ``script``; returns the (n, 2) bits or None.

    Without a GPU it prints the compile report and why the run was skipped, and returns None.
    """
    from helpers import gpu

    ops = _script_ops(script)
    kernel = gpu.compile(REPLAY_KERNEL, "replay")
    if gpu.skip_without_hopper(kernel, checked="the same script on the emulator (wait_bits)"):
        return None
    flat = np.array([[OPCODES[a], v] for a, v in ops], np.int32).reshape(-1)
    bits = gpu.poison(2 * len(ops), np.int32)
    gpu.launch(kernel, 1, 32, 0, gpu.to_device(flat), np.int32(len(ops)), bits)
    return gpu.to_host(bits).reshape(len(ops), 2)


# -----------------------------------------------------------------------------------------------------------
# the widget
# -----------------------------------------------------------------------------------------------------------
_KIND_COLOR = {"ok": "#4c78a8", "complete": "#2ca02c", "passes": "#2ca02c", "race": "#f28e2b",
               "deadlock": "#d62728", "error": "#d62728"}


def state_html(step: Step) -> str:
    """The barrier's state after a step, as one line of HTML."""
    s = step.state
    if not s.initialized:
        return "<b>not initialised</b> (shared memory holds whatever was there)"
    return (f"phase <b>{s.phase}</b> in progress (parity <b>{s.parity}</b>) · arrivals pending "
            f"<b>{s.pending_arrivals}</b>/{s.expected} · tx-count <b>{s.tx_count}</b> bytes · "
            f"in flight {step.in_flight} bytes · test_wait(0) = {s.parity != 0}, test_wait(1) = {s.parity != 1}")


def timeline(steps: list[Step]) -> dict[str, list]:
    """What the widget plots: per step, the phase in progress, pending arrivals, tx-count and a colour."""
    return {
        "x": list(range(len(steps))),
        "phase": [s.state.phase for s in steps],
        "pending": [s.state.pending_arrivals for s in steps],
        "tx": [s.state.tx_count for s in steps],
        "color": [_KIND_COLOR[s.kind] for s in steps],
        "label": [s.action for s in steps],
        "outcome": [s.outcome for s in steps],
    }


#: the "now" chart: what the barrier is still waiting for, one bar (and one colour) each
NOW_BARS = ("arrivals pending", "tx-count", "bytes in flight")
_NOW_COLORS = ("#4c78a8", "#f28e2b", "#8fb8de")


def now_bars(step: Step) -> tuple[list[float], list[str]]:
    """The heights of :data:`NOW_BARS` after a step (arrivals, then bytes in KiB, so both show on one axis)
    and the labels printed on them, with their units."""
    s = step.state
    return ([s.pending_arrivals, s.tx_count / 1024, step.in_flight / 1024],
            [str(s.pending_arrivals), f"{s.tx_count / 1024:g} KiB", f"{step.in_flight / 1024:g} KiB"])


def barrier_stepper_widget(count: int = 1, nbytes: int = 8192):
    """Buttons for init, arrive, expect_tx, arrive.expect_tx, TMA issue/land and wait(parity); the barrier's
    state and a timeline of its phases after each step."""
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.course.widgets.figure import WidgetBox, controls, integer_axis, new_figure

    stepper = {"s": BarrierStepper(count)}
    count_pick = w.BoundedIntText(value=count, min=1, max=1024, description="count", layout=w.Layout(width="9em"),
                                  style={"description_width": "3.5em"})
    bytes_pick = w.Dropdown(options=[4096, 8192, 16384, 32768], value=nbytes, description="bytes",
                            layout=w.Layout(width="11em"), style={"description_width": "3em"})
    auto = w.Layout(width="auto")
    buttons = {
        "init": w.Button(description="init(count)", layout=auto),
        "arrive": w.Button(description="arrive", layout=auto),
        "expect_tx": w.Button(description="expect_tx(bytes)", layout=auto),
        "arrive_expect_tx": w.Button(description="arrive.expect_tx(bytes)", layout=auto),
        "issue_tma": w.Button(description="TMA issue(bytes)", button_style="info", layout=auto),
        "land": w.Button(description="TMA bytes land", button_style="info", layout=auto),
        "wait0": w.Button(description="wait(parity 0)", button_style="warning", layout=auto),
        "wait1": w.Button(description="wait(parity 1)", button_style="warning", layout=auto),
        "reset": w.Button(description="reset", button_style="danger", layout=auto),
    }
    status = w.HTML()
    log = w.HTML()
    fig = new_figure(height=300, rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                     subplot_titles=("phase in progress after each step", "what the barrier waits for now"))
    fig.add_trace(go.Scatter(x=[], y=[], mode="lines+markers", line={"shape": "hv", "color": "#999"},
                             marker={"size": 11}, hovertemplate="%{customdata}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=list(NOW_BARS), y=[0, 0, 0], marker_color=list(_NOW_COLORS), text=["", "", ""],
                         textposition="outside", cliponaxis=False, hovertemplate="%{x}: %{text}<extra></extra>"),
                  row=1, col=2)
    integer_axis(fig, "y", title_text="phase", rangemode="tozero", row=1, col=1)
    integer_axis(fig, "x", title_text="step", row=1, col=1)
    fig.update_yaxes(showticklabels=False, row=1, col=2)  # the bars carry their values, in their own units

    def redraw():
        steps = stepper["s"].steps
        t = timeline(steps)
        last = steps[-1]
        heights, labels = now_bars(last)
        with fig.batch_update():
            fig.data[0].x, fig.data[0].y = t["x"], t["phase"]
            fig.data[0].marker.color = t["color"]
            fig.data[0].customdata = [f"{a}: {o}" for a, o in zip(t["label"], t["outcome"], strict=True)]
            fig.layout.xaxis.range = [-0.5, max(len(steps), 6) - 0.5]
            fig.layout.yaxis.range = [-0.3, max(t["phase"]) + 0.7]
            fig.data[1].y = heights
            fig.data[1].text = labels
            fig.layout.yaxis2.range = [0, max(max(heights), 1) * 1.25]
        color = _KIND_COLOR[last.kind]
        status.value = (f"<div style='border-left:4px solid {color};padding-left:6px'><b>{last.action}</b>: "
                        f"{last.outcome}<br>{state_html(last)}</div>")
        rows = "".join(f"<tr><td>{i}</td><td><code>{s.action}</code></td><td>{s.state.phase}</td>"
                       f"<td>{s.state.pending_arrivals}</td><td>{s.state.tx_count}</td>"
                       f"<td style='color:{_KIND_COLOR[s.kind]}'>{s.outcome}</td></tr>"
                       for i, s in enumerate(steps[-8:], start=max(0, len(steps) - 8)))
        log.value = ("<table style='font-size:85%'><tr><th>#</th><th>action</th><th>phase</th><th>pending</th>"
                     f"<th>tx</th><th>what happened</th></tr>{rows}</table>")

    def handler(name):
        def click(_):
            s = stepper["s"]
            if name == "reset":
                stepper["s"] = BarrierStepper(count_pick.value)
            elif name == "init":
                s.init(count_pick.value)
            elif name == "arrive":
                s.arrive()
            elif name in ("expect_tx", "arrive_expect_tx", "issue_tma"):
                s.do(name, bytes_pick.value)
            elif name == "land":
                s.land()
            else:
                s.wait(int(name[-1]))
            redraw()
        return click

    for name, b in buttons.items():
        b.on_click(handler(name))
    redraw()
    row1 = controls(count_pick, buttons["init"], buttons["arrive"], bytes_pick, buttons["expect_tx"],
                    buttons["arrive_expect_tx"])
    row2 = controls(buttons["issue_tma"], buttons["land"], buttons["wait0"], buttons["wait1"], buttons["reset"])
    return WidgetBox([row1, row2, status, fig, log])
