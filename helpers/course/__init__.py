"""The course machinery: what turns the Hopper model and the runtime into lessons and graded labs.

- ``checks`` (one grader module per lab), ``grading`` (the ✓/✗ report), ``hints`` (tiered hints from
  ``data/labs.json``), ``quizzes`` (one module per lesson), ``widgets`` (ipywidgets + plotly, one per hardware idea)
- ``labgen`` (``labs/`` from ``solutions/``, ``make validate``), ``author`` (marking exercises), ``workspace``
  (the student's ``my-work/``), ``ladder`` (measured kernels beside cuBLAS), ``ptx_coverage`` (which PTX the
  course's kernels use), ``carry`` (the student's kernel of one lab merged into the next)
- ``progress`` (what a long cell is doing, as it does it), ``cellerrors`` (a cell run too early, a stub called from
  a demo cell: one sentence each), ``labserver`` and ``connection`` (``make lab``: the install's progress, the
  server's settings, the kernel connection kept through a busy laptop)
- ``autograde`` (grading a class's submissions, each in its own sandbox)

May import: ``helpers.hopper``, ``helpers.gpu`` (and its executor), and the packages of the course's environment.
Nothing in the other two rooms imports this one.
"""
