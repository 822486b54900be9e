"""A notebook that shows every widget of the course, one per cell, for the browser test (and for a look by eye:
``python tests/platform/widget_gallery.py gallery.ipynb`` writes it)."""

from __future__ import annotations

import sys

import nbformat
from widget_registry import gallery_cells, setup_imports

SETUP = """\
from helpers.course import grading
from helpers.course.quizzes import lesson00
from helpers.course.widgets import barrier, fragments, swizzle, tensormap_builder, tiles
from helpers.course.widgets import pipeline as timeline
from helpers.course.widgets import cluster, epilogue, registers, roofline, scheduler, seqbar, streamk, striped, trace"""
SETUP += setup_imports()  # the widgets registered in widgets.json

#: name -> the cell that shows it (the screenshot is saved as test-artifacts/browser/<name>.png)
GALLERY: dict[str, str] = {
    "tile_grid": "tiles.tile_grid_widget(M=8192, N=8192, K=8192, BM=64, BN=64, BK=64)",
    "swizzle_128B": 'swizzle.swizzle_widget(mode="128B", rows=32, pattern="down a column")',
    "swizzle_32B": 'swizzle.swizzle_widget(mode="32B", rows=32, pattern="row by row (a copy loop)")',
    "swizzle_none": 'swizzle.swizzle_widget(mode="none", rows=32, pattern="down a column")',
    "tensormap_builder": "tensormap_builder.tensormap_builder_widget()",
    "barrier_stepper": "barrier.barrier_stepper_widget(count=1, nbytes=8192)",
    "fragment_explorer_n16": "fragments.fragment_explorer_widget(n=16, thread=5)",
    "fragment_explorer_n64": "fragments.fragment_explorer_widget(n=64, thread=0)",
    "descriptor": "fragments.descriptor_widget()",
    "pipeline_timeline": "timeline.pipeline_widget()",
    "pipeline_bug": 'timeline.pipeline_widget(scenario="bug: EMPTY count 1 with 2 consumers", stages=3)',
    "register_budget": "registers.register_budget_widget()",
    "trace_h100": "trace.trace_widget(trace.load_measured())",
    "roofline": "roofline.roofline_widget()",
    "scheduler": "scheduler.scheduler_widget()",
    "cluster": "cluster.cluster_widget()",
    "epilogue_race": "epilogue.epilogue_race_widget()",
    "seqbar_stepper": "seqbar.seqbar_stepper_widget()",
    "striped": "striped.striped_widget(threads=64, elements=1024, columns=64)",
    "streamk": "streamk.streamk_widget()",
    "bank_figure": "epilogue.bank_figure()",
    "pingpong": "seqbar.pingpong_figure(tiles_per_group=3)",
    "quiz": "lesson00.blocks",
    "check_report": "with grading.check('Lab 0 · a failing check', seed=7) as c:\n    c.ok('a first comparison')\n"
                    "    c.equal('bytes of a 64×64 bf16 box', 4096, 8192, hint='rows × columns × 2 bytes')",
}
GALLERY.update(gallery_cells())  # the widgets registered in widgets.json (author new-widget)


def gallery_notebook(names: list[str] | None = None) -> nbformat.NotebookNode:
    """The gallery: a setup cell, then for each widget (of ``names``, default all) a heading and the cell that shows
    it (tagged with its name)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [nbformat.v4.new_markdown_cell("# Every widget of the course"), nbformat.v4.new_code_cell(SETUP)]
    for name, source in GALLERY.items():
        if names is not None and name not in names:
            continue
        cells.append(nbformat.v4.new_markdown_cell(f"## {name}"))
        code = nbformat.v4.new_code_cell(source)
        code.metadata["tags"] = [f"gallery-{name}"]
        cells.append(code)
    nb.cells = cells
    return nb


if __name__ == "__main__":
    nbformat.write(gallery_notebook(), sys.argv[1] if len(sys.argv) > 1 else "gallery.ipynb")
