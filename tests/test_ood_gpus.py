"""The Open OnDemand app's node layout asks for the node's GPUs: the centre's GPUs per node as GRES, or a GPU per worker.

Issue 56, finding 4: the form's default (GPUs per worker 0) in the node layout asked for no GPU;
`--exclusive` alone gives the job's batch step the node's GPUs and its steps (the engines) none.
Ruby renders the app's submit.yml.erb with the form's values, as tests/test_ood.py does
(tests/ood/render.rb); what Slurm makes of the options is tests/test_hub_class_install.py's.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

APP = ROOT / "slurm" / "ood" / "tf-hpc-course"


def _native(tmp_path, **changes: str) -> subprocess.CompletedProcess:
    ruby = shutil.which("ruby")
    if ruby is None:
        pytest.skip("ruby is missing (tests/test_ood.py installs it)")
    form = yaml.safe_load((APP / "form.yml").read_text())
    values = {name: str(spec.get("value", "")) for name, spec in form["attributes"].items()}
    values.update({"cluster": form["cluster"], "course_lesson": "03_multiworker_ipyparallel.ipynb", **changes})
    (tmp_path / "values.json").write_text(json.dumps(values))
    return subprocess.run([ruby, str(ROOT / "tests" / "ood" / "render.rb"), "submit", str(APP), str(tmp_path / "staged"),
                           str(tmp_path / "values.json")], capture_output=True, text=True, timeout=60)


def _args(tmp_path, **changes: str) -> list[str]:
    done = _native(tmp_path, **changes)
    assert done.returncode == 0, done.stderr[-1000:]
    return json.loads(done.stdout)["native"]


def test_the_node_layout_asks_for_the_centres_gpus_per_node(tmp_path, report):
    form = yaml.safe_load((APP / "form.yml").read_text())["attributes"]
    assert form["gpus_per_node"]["widget"] == "hidden_field", "the centre's value, not the learner's"
    on_gpus = _args(tmp_path, gpus_per_node="4")  # the learner's defaults: 1 node, 2 workers, 0 GPUs per worker
    assert on_gpus == ["--nodes", "1", "--ntasks-per-node", "2", "--exclusive", "--gres", "gpu:4"], on_gpus
    bound = _args(tmp_path, gpus_per_node="4", gpus_per_task="1", tasks_per_node="4")  # a GPU bound to each worker
    assert bound == ["--nodes", "1", "--ntasks-per-node", "4", "--exclusive", "--gpus-per-task", "1"], bound
    cpu = _args(tmp_path)  # the template's default: a CPU partition
    assert form["gpus_per_node"]["value"] == "0" and cpu == ["--nodes", "1", "--ntasks-per-node", "2", "--exclusive"]
    gpu = _args(tmp_path, gpus_per_node="4", course_class_layout="gpu")
    assert gpu == ["--nodes", "1", "--ntasks", "2", "--gpus", "1"], gpu  # one GPU of a shared node
    for bad in ("65", "-1", "4; id", ""):
        done = _native(tmp_path, gpus_per_node=bad)
        assert done.returncode != 0 and "GPUs per node must be a whole number from 0 to 64" in done.stderr, bad
    report(f"test_ood_gpus: node layout with the centre's gpus_per_node=4 and the learner's defaults: {' '.join(on_gpus)}")
