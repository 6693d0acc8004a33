"""The course's Apptainer definition (slurm/apptainer/tf-hpc-course.def), as far as it can be run here.

Apptainer is not in Debian 12's package sources, and images cannot be downloaded on the course's
test machines, so no image is built. What runs: the definition's %files and %post sections, in
a clean virtual environment that holds only what the base image brings (TensorFlow, here the
CPU wheel of the same version), and then its %test section. That is every step of ours.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFINITION = ROOT / "slurm" / "apptainer" / "tf-hpc-course.def"


def sections(text: str) -> dict[str, str]:
    """The definition's header and its %sections, by name."""
    parts = re.split(r"^%(\w+)\s*$", text, flags=re.M)
    found = {"header": parts[0]}
    found.update({name: body for name, body in zip(parts[1::2], parts[2::2])})
    return found


def test_the_definition_has_what_a_course_container_needs():
    found = sections(DEFINITION.read_text())
    header = dict(re.findall(r"^(Bootstrap|From):\s*(\S+)", found["header"], re.M))
    assert header["Bootstrap"] == "docker" and header["From"].startswith("tensorflow/tensorflow:2.21"), header
    assert {"files", "post", "environment", "test"} <= set(found), sorted(found)
    assert "--no-deps" in found["post"] and "tf-keras" in found["post"], "tf_keras without a second tensorflow"
    assert "tensorflow-cpu" not in found["post"] and "[cpu]" not in found["post"], "never a second TensorFlow"
    assert "--nv" in found["header"] and "--bind" in found["header"], "how to run it: --nv and the bind mounts"


def test_the_post_section_installs_the_course_beside_the_base_images_tensorflow(tmp_path, report):
    """%files copied, %post run with bash in a venv that has only tensorflow-cpu (the stand-in for
    the base image's TensorFlow), then %test: the course imports, one TensorFlow, Keras 3.15."""
    found = sections(DEFINITION.read_text())
    root = tmp_path / "container"
    for line in found["files"].strip().splitlines():
        source, target = line.split()
        destination = root / target.lstrip("/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / source).is_dir() else shutil.copy)(ROOT / source, destination)
    venv = tmp_path / "venv"
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    base = subprocess.run([*pip, "install", "--quiet", "tensorflow-cpu>=2.21,<2.22"], capture_output=True, text=True,
                          timeout=900)
    assert base.returncode == 0, base.stderr[-3000:]
    post = found["post"].replace("/opt/tf-hpc-course", str(root / "opt" / "tf-hpc-course"))
    env = {**os.environ, "COURSE_PIP": " ".join(pip), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(["bash", "-c", post], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    check = subprocess.run(["bash", "-c", found["test"].replace("python3", str(venv / "bin" / "python"))],
                           env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-3000:]
    assert re.search(r"TensorFlow 2\.21\.\d+ Keras 3\.15\.\d+", check.stdout), check.stdout
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True, timeout=120).stdout
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert "tensorflow-cpu" in names and "tensorflow" not in names, "a second TensorFlow wheel came in"
    assert {"tf-keras", "tf-hpc-course-helpers", "keras", "ipyparallel", "tensorflow-datasets"} <= names, sorted(names)
    report(f"Apptainer %post in a clean venv beside tensorflow-cpu: {check.stdout.strip()}; "
           f"{len(names)} packages, one TensorFlow wheel (the image was not built: no Apptainer here)")
