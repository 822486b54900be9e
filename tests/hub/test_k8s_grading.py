"""Autograding on Kubernetes (docs/hub.md, "Autograding on Kubernetes"): the image has the jail's bubblewrap, and
only the instructor's pod may escalate privileges for the grading account's sudo."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_image_installs_bubblewrap_for_the_grading_jail():
    install = next(line for line in (DEPLOY / "Dockerfile").read_text().splitlines() if "apt-get install" in line)
    assert "bubblewrap" in install.split() and "sudo" in install.split()


def test_only_the_graders_pods_may_escalate_for_sudo():
    values = yaml.safe_load((DEPLOY / "z2jh-values.yaml").read_text())
    c = SimpleNamespace(KubeSpawner=SimpleNamespace())
    exec(values["hub"]["extraConfig"]["20-grading.py"], {"c": c})  # noqa: S102 - the values file's own code
    for name, allowed in (("instructor", True), ("student1", False)):
        spawner = SimpleNamespace(user=SimpleNamespace(name=name), allow_privilege_escalation=False)
        c.KubeSpawner.pre_spawn_hook(spawner)
        assert spawner.allow_privilege_escalation is allowed, name
