"""Widgets registered in ``widgets.json`` (``python -m helpers.course.author new-widget`` adds them): the widget
tests (test_widgets.py) and the browser gallery (widget_gallery.py) take them in beside the ones they list."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

REGISTRY = Path(__file__).with_name("widgets.json")


def registered() -> dict[str, dict[str, str]]:
    """name -> {"module": a module of helpers.course.widgets, "function": the function returning its WidgetBox}."""
    return json.loads(REGISTRY.read_text()) if REGISTRY.exists() else {}


def setup_imports() -> str:
    """The import line of the gallery's setup cell for the registered widgets ("" when there are none)."""
    modules = sorted({entry["module"] for entry in registered().values()})
    return f"\nfrom helpers.course.widgets import {', '.join(modules)}" if modules else ""


def gallery_cells() -> dict[str, str]:
    """name -> the gallery cell that shows it."""
    return {name: f"{e['module']}.{e['function']}()" for name, e in registered().items()}


def builders() -> dict[str, Callable[[], Any]]:
    """name -> a function building the widget, for the widget tests."""
    def build(entry: dict[str, str]) -> Callable[[], Any]:
        module = f"helpers.course.widgets.{entry['module']}"
        return lambda: getattr(importlib.import_module(module), entry["function"])()

    return {name: build(entry) for name, entry in registered().items()}
