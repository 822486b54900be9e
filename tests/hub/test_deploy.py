"""Past one machine: the container image's install steps (run here as a script), the Dockerfile, and the Zero to
JupyterHub values file, checked as far as they can be without a cluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import types
from pathlib import Path

import jsonschema
import pytest
import yaml

from helpers.course.autograde.exchange import class_uid

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMA = json.loads((Path(__file__).parent / "data" / "z2jh-values-subset.schema.json").read_text())


def values() -> dict:
    return yaml.safe_load((DEPLOY / "z2jh-values.yaml").read_text())


# ------------------------------------------------------------------------------------------ the values file
def test_the_values_file_matches_the_charts_options():
    jsonschema.validate(values(), SCHEMA)


@pytest.mark.parametrize("mistake", [
    lambda v: v["singleuser"].update(profilelist=v["singleuser"].pop("profileList")),   # misspelled option
    lambda v: v["singleuser"]["storage"].pop("homeMountPath"),                          # a required option
    lambda v: v["cull"].update(timeout="1h"),                                           # the wrong type
    lambda v: v.update(culling={"enabled": True}),                                      # not an option
    lambda v: v["singleuser"]["profileList"][0].update(name="cpu"),                     # KubeSpawner's key names
])
def test_the_schema_catches_a_misplaced_option(mistake):
    v = values()
    mistake(v)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(v, SCHEMA)


def test_a_gpu_profile_and_a_cpu_profile_that_relies_on_the_emulator():
    profiles = values()["singleuser"]["profileList"]
    cpu = [p for p in profiles if p["kubespawner_override"].get("environment", {}).get("HELPERS_NO_GPU") == "1"]
    gpu = [p for p in profiles if p["kubespawner_override"].get("extra_resource_limits", {}).get("nvidia.com/gpu")]
    assert len(cpu) == 1 and cpu[0].get("default") is True and "nvidia.com/gpu" not in json.dumps(cpu)
    assert len(gpu) == 1 and gpu[0]["kubespawner_override"]["extra_resource_limits"]["nvidia.com/gpu"] == "1"


def test_idle_servers_are_culled_and_each_student_has_storage():
    v = values()
    assert v["cull"]["enabled"] and 0 < v["cull"]["timeout"] <= 4 * 3600
    storage = v["singleuser"]["storage"]
    assert storage["type"] == "dynamic" and storage["capacity"].endswith("Gi")
    mounts = {m["mountPath"] for m in storage["extraVolumeMounts"]}
    assert "/srv/nbgrader/exchange" in mounts  # the exchange the image's nbgrader config names


def test_the_hubs_per_user_uid_is_the_one_collect_checks():
    """The snippet in hub.extraConfig must compute helpers.course.autograde.exchange.class_uid."""
    snippet = values()["hub"]["extraConfig"]["10-class-accounts.py"]
    spawner_config = types.SimpleNamespace(environment={})
    c = types.SimpleNamespace(KubeSpawner=spawner_config)
    exec(snippet, {"c": c})  # noqa: S102 - our own configuration file
    names = [f"student{i}" for i in range(500)] + ["instructor", "a", "é-ü"]
    uids = {name: spawner_config.uid(types.SimpleNamespace(user=types.SimpleNamespace(name=name))) for name in names}
    assert uids == {name: class_uid(name) for name in names}
    assert len(set(uids.values())) == len(names), "two users of a class share a uid"
    assert all(100_000 <= u < 2**31 for u in uids.values())
    assert spawner_config.environment["USER"] == "{username}"  # nbgrader takes the student's id from $USER


# ------------------------------------------------------------------------------------------ the image
def test_the_dockerfile_installs_with_the_tested_script_and_never_copies_solutions():
    text = (DEPLOY / "Dockerfile").read_text()
    copies = re.findall(r"^COPY\s+(.+?)\s+\S+$", text, re.M)
    copied = " ".join(copies).split()
    assert copied and not any("solution" in c or c in (".", "./") for c in copied), copies
    assert "deploy/install-course.sh" in text and re.search(r"^FROM \$\{BASE\}", text, re.M)
    assert re.search(r"ARG BASE=quay\.io/jupyter/minimal-notebook:", text)
    for path in re.findall(r"/tmp/course/(deploy/[\w.-]+)", text):
        assert (ROOT / path).exists(), path


def test_the_install_script_in_a_fresh_venv(course_env, tmp_path):
    py = course_env / "bin" / "python"
    probe = subprocess.run([str(py), "-c", (
        "import helpers, json, sys; from helpers.course.checks import lab1\n"
        "lab1.check_tile_coords(lambda r, c, br, bc: (c * bc, r * br))\n"
        "print(json.dumps({'helpers': helpers.__file__, 'prefix': sys.prefix}))")],
        capture_output=True, text=True, cwd="/")
    assert probe.returncode == 0, probe.stderr
    where = json.loads(probe.stdout.strip().splitlines()[-1])
    assert where["helpers"].startswith(str(course_env)), "the course must be installed, not linked to a clone"
    assert "✓ Lab 1" in probe.stdout
    assert not [p for p in course_env.rglob("*solution*") if "lab" in p.name], "solutions were installed"
    share = course_env / "share" / "hopper-gemm" / "course"
    assert {p.name for p in (share / "labs").glob("*.ipynb")} == {p.name for p in (ROOT / "labs").glob("lab*.ipynb")
                                                                    if ".new." not in p.name}
    assert (course_env / "share" / "jupyter" / "kernels" / "python3" / "kernel.json").exists()
    config = (course_env / "etc" / "jupyter" / "nbgrader_config.py").read_text()
    assert 'course_id = "hopper-gemm"' in config and "Exchange.root" in config
    page = json.loads((course_env / "etc" / "jupyter" / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyter/nbgrader:formgrader"] is True
    assert not page.get("lockedExtensions", {}).get("@jupyter/nbgrader:formgrader"), "instructors re-enable it"
    # each user's own copy of the course, made once; later starts keep their edits
    home = tmp_path / "home"
    home.mkdir()
    run = dict(os.environ, HOME=str(home))
    subprocess.run([str(course_env / "bin" / "hopper-course-home")], env=run, check=True)
    lab = home / "course" / "labs" / "lab1_tma.ipynb"
    lab.write_text("edited")
    subprocess.run([str(course_env / "bin" / "hopper-course-home")], env=run, check=True)
    assert lab.read_text() == "edited" and (home / "course" / "lessons" / "00_big_picture.ipynb").exists()


def test_every_users_server_has_its_own_origin_over_tls():
    """Per-user subdomains (a student's page shares no origin, and so no cookie, with another's server or the hub)
    and TLS with a certificate that covers them: on Kubernetes, and in the hub on one machine when given a domain."""
    config = values()
    assert config["hub"]["config"]["JupyterHub"]["subdomain_host"].startswith("https://")
    https = config["proxy"]["https"]
    assert https["enabled"] and https["type"] == "secret" and https["secret"]["name"]
    hub = (ROOT / "hub" / "jupyterhub_config.py").read_text()
    assert "c.JupyterHub.subdomain_host" in hub and "c.JupyterHub.ssl_cert" in hub and "c.JupyterHub.ssl_key" in hub
