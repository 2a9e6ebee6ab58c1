"""One set of pins: requirements/constraints.txt. environment.yml and pyproject.toml must agree with it."""

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from jupyter_server.extension.config import ExtensionConfigManager
from packaging.requirements import Requirement

from notebooks import ROOT


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def direct_dependencies() -> set[str]:
    """The names of the project's direct dependencies (and its book and test extras) that install here: one with an
    environment marker that excludes this Python (tomli, before 3.11) is not in a lock made with it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    requirements = map(Requirement, project["dependencies"] + extras["book"] + extras["test"])
    return {_name(r.name) for r in requirements if r.marker is None or r.marker.evaluate()}


def constraints() -> dict[str, str]:
    lines = (ROOT / "requirements" / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    return {_name(name): version for name, version in pins.items()}


def test_every_constraint_is_an_exact_pin():
    for line in (ROOT / "requirements" / "constraints.txt").read_text().splitlines():
        assert not line or line.startswith("#") or re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.+!-]+", line), line


def test_every_direct_dependency_is_pinned():
    missing = direct_dependencies() - set(constraints())
    assert not missing, f"not pinned in requirements/constraints.txt: {missing}"


def test_environment_yml_uses_the_same_pins():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    pinned = dict(line.split("==") for line in pip if "==" in line)
    pins = constraints()
    assert pinned, "environment.yml pins nothing"
    for name, version in pinned.items():
        said = pins.get(_name(name))
        assert said == version, f"environment.yml pins {name}=={version}, constraints say {said}"
    missing = direct_dependencies() - {_name(n) for n in pinned}
    assert not missing, f"missing from environment.yml: {missing}"


def test_students_jupyterlab_hides_nbgrader_instructor_tools():
    """The environment README's commands make (Makefile, $(BIN)/.student-lab) disables every plugin of nbgrader's
    lab extension but Validate, and the instructor's server extensions; a new nbgrader plugin must be decided on."""
    lab = Path(sys.prefix, "share/jupyter/labextensions/@jupyter/nbgrader/static")
    if not lab.is_dir():
        pytest.skip("nbgrader's lab extension is not installed here")
    plugins = set().union(*(re.findall(r'id:"(@jupyter/nbgrader:[a-z-]+)"', p.read_text()) for p in lab.glob("*.js")))
    assert "@jupyter/nbgrader:create-assignment" in plugins, plugins
    page_config = Path(sys.prefix, "etc/jupyter/labconfig/page_config.json")
    written = json.loads(page_config.read_text()) if page_config.exists() else {}
    disabled = {name for name, off in written.get("disabledExtensions", {}).items() if off}
    assert plugins - disabled == {"@jupyter/nbgrader:validate-assignment"}
    server = ExtensionConfigManager(read_config_path=[str(Path(sys.prefix, "etc/jupyter"))]).get_jpserver_extensions()
    assert {name for name, on in server.items() if on and name.startswith("nbgrader.")} == \
        {"nbgrader.server_extensions.validate_assignment"}
