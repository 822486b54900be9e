"""The course's importable toolbox, in three rooms. Each room says in its docstring what it may import; arrows only
point down the list, and a test (``tests/platform/test_architecture.py``) keeps it so.

- ``helpers.hopper`` — **the Hopper model**, pure numpy: tensor maps, TMA, mbarriers, WGMMA, pipelines, clusters,
  the epilogue, sequence barriers, block-striped reduction, Stream-K, the tile scheduler, and the words the GPU
  uses for a failed kernel. Imports nothing of the course.
- ``helpers.gpu`` — **the runtime**: compile (NVRTC), device arrays, tensor maps, launches, timing, cuBLAS. It runs a
  kernel on one of two backends behind one launch call: the H100 through cuda-python, or the PTX executor
  (``helpers.gpu.executor``), which runs the same PTX on the CPU with the Hopper model as its hardware. Imports the
  Hopper model; the executor imports only the Hopper model.
- ``helpers.course`` — **the course machinery**: the labs' graders and hints, quizzes, widgets, lab generation,
  authoring, the student's workspace, the ladder of measured kernels and classroom autograding. Imports the other
  two rooms.

``helpers/include/`` holds the CUDA header the labs build on (``hopper.cuh``). Nothing heavy is imported here:
``from helpers.hopper import tma``, ``from helpers import gpu``, ``from helpers.course.checks import lab1``.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
