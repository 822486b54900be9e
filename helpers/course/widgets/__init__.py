"""Interactive widgets for the lessons (ipywidgets + plotly FigureWidget), each drawn from the emulator.

One module per hardware idea; import the one you need, e.g. ``from helpers.course.widgets import tiles``.
"""
