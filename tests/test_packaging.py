"""environment.yml (conda users) must install what pyproject.toml declares."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(spec: str) -> str:
    return re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0].lower().replace("_", "-")


def _bounds(spec: str) -> str:
    return spec[len(re.split(r"[<>=!~ ]", spec, maxsplit=1)[0]):].replace(" ", "")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["cpu"] + \
        project["optional-dependencies"]["test"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    have = {_name(s): _bounds(s) for s in conda + pip if not s.startswith("-e") and _name(s) not in ("python", "pip")}
    for spec in wanted:
        name = _name(spec.split(";")[0])
        assert name in have, f"{name} is in pyproject.toml but not in environment.yml"
        assert have[name] == _bounds(spec.split(";")[0]).split("#")[0].strip(), name
    assert "tensorflow" not in have, "only one TensorFlow distribution (tensorflow-cpu)"
