"""A notebook's Jupyter kernel that dies before its first cell ("Kernel died before replying to kernel_info", under
load) is started again; when it never starts, the run says so as the machine's trouble (KernelStartError), never as a
cell's error; a kernel that started and then failed is the notebook's."""

from __future__ import annotations

import nbclient
import nbformat
import pytest

from helpers.course import labgen


class _FakeClient:
    """A NotebookClient whose kernel dies at start-up the first ``fail`` times, then runs every code cell."""

    runs = 0
    fail = 0
    die_after_start = False

    def __init__(self, nb, *, on_cell_start=None, **_):
        self.nb, self.on_cell_start = nb, on_cell_start

    def create_kernel_manager(self):
        return type("Km", (), {})()

    def execute(self, **_):
        type(self).runs += 1
        if type(self).runs <= type(self).fail:
            raise RuntimeError("Kernel died before replying to kernel_info")
        for cell in self.nb.cells:
            self.on_cell_start(cell=cell, cell_index=0)
            if type(self).die_after_start:
                raise RuntimeError("Kernel died")
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
        return self.nb


@pytest.fixture()
def fake(monkeypatch):
    monkeypatch.setattr(nbclient, "NotebookClient", _FakeClient)
    monkeypatch.setattr(labgen, "KERNEL_START_PAUSE", 0.0)
    _FakeClient.runs, _FakeClient.fail, _FakeClient.die_after_start = 0, 0, False
    return _FakeClient


def _nb():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('ran')")]
    return nb


def test_a_kernel_that_dies_at_start_up_is_started_again(fake, tmp_path):
    fake.fail = labgen.KERNEL_START_ATTEMPTS - 1
    nb = labgen.run_notebook(_nb(), tmp_path)
    assert fake.runs == labgen.KERNEL_START_ATTEMPTS and nb.cells[0].outputs[0].text == "ran\n"


def test_a_kernel_that_never_starts_is_the_machines_trouble(fake, tmp_path):
    fake.fail = labgen.KERNEL_START_ATTEMPTS
    with pytest.raises(labgen.KernelStartError) as exc:
        labgen.run_notebook(_nb(), tmp_path)
    text = str(exc.value)
    assert "kernel_info" in text and "not a mistake in the notebook" in text and "no cell ran" in text


def test_a_kernel_that_dies_after_a_cell_started_is_not_retried(fake, tmp_path):
    fake.die_after_start = True
    with pytest.raises(RuntimeError) as exc:
        labgen.run_notebook(_nb(), tmp_path)
    assert not isinstance(exc.value, labgen.KernelStartError) and fake.runs == 1
