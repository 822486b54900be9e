"""The course's importable toolbox.

Modules are named after the hardware ideas they model:

- emulator (pure numpy, no GPU): ``tensormap``, ``tma``, ``mbarrier``, ``wgmma``, ``pipeline``
- GPU runtime (cuda-python, NVRTC): ``gpu``
- course platform: ``grading`` (check cells), ``widgets`` (ipywidgets + plotly), ``labgen`` (labs from solutions)

Import what you need, e.g. ``from helpers import tma, grading``; nothing heavy is imported here.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
