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
import time
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


DIGEST = "sha256:" + "0123456789abcdef" * 4  # a well-formed digest; no registry here to check a real one


def templated(text: str, build_args: dict[str, str]) -> str:
    """The definition as Apptainer (1.2 and later) builds it: each `{{ NAME }}` replaced by
    --build-arg NAME=... or the %arguments section's default, else the build stops. Written after
    Apptainer's internal/pkg/build/args/reader.go (its regexps and error); Apptainer is not here."""
    defaults = {}
    for line in sections(text).get("arguments", "").splitlines():
        if "=" in line and not line.strip().startswith("#"):
            name, _, value = line.partition("=")
            defaults[name.strip()] = value.strip()

    def value(match: re.Match) -> str:
        line = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
        if re.search(r"\s*[#][^!]\s*.*", line):  # a comment line: left as it is
            return match.group(0)
        name = match.group(1)
        if name not in build_args and name not in defaults:
            raise ValueError(f"build var {name} is not defined through either --build-arg (--build-arg-file) "
                             "or 'arguments' section")
        return build_args.get(name, defaults.get(name))

    return re.sub(r"{{\s*(\w+)\s*}}", value, text)


def test_the_base_image_is_named_by_a_digest_the_centre_passes():
    """Fail closed: no digest, no build (no %arguments default); with one, From names
    tensorflow/tensorflow by that digest only, never by a tag its publisher can move."""
    text = DEFINITION.read_text()
    assert "arguments" not in sections(text), "a default digest would build without the centre's"
    with pytest.raises(ValueError, match="build var BASE_DIGEST is not defined"):
        templated(text, {})
    built = templated(text, {"BASE_DIGEST": DIGEST.split(":")[1]})
    header = dict(re.findall(r"^(Bootstrap|From):\s*(\S+)", sections(built)["header"], re.M))
    assert header == {"Bootstrap": "docker", "From": f"tensorflow/tensorflow@{DIGEST}"}, header
    assert re.fullmatch(r"[a-z0-9./-]+@sha256:[0-9a-f]{64}", header["From"]), header
    # a tag passed as the digest does not make a reference a registry client accepts
    tagged = dict(re.findall(r"^(From):\s*(\S+)", sections(templated(text, {"BASE_DIGEST": "2.21.0-gpu"}))["header"], re.M))
    assert not re.fullmatch(r"[a-z0-9./-]+@sha256:[0-9a-f]{64}", tagged["From"]), tagged
    assert "{{" not in built.split("%files")[1], "every other template variable has a value"


def test_the_definition_has_what_a_course_container_needs():
    found = sections(templated(DEFINITION.read_text(), {"BASE_DIGEST": DIGEST.split(":")[1]}))
    header = dict(re.findall(r"^(Bootstrap|From):\s*(\S+)", found["header"], re.M))
    assert header["Bootstrap"] == "docker" and header["From"].startswith("tensorflow/tensorflow@sha256:"), header
    assert {"files", "post", "environment", "test"} <= set(found), sorted(found)
    assert "--no-deps" in found["post"] and "tf-keras" in found["post"], "tf_keras without a second tensorflow"
    assert "tensorflow-cpu" not in found["post"] and "[cpu]" not in found["post"], "never a second TensorFlow"
    assert "--nv" in found["header"] and "--bind" in found["header"], "how to run it: --nv and the bind mounts"


def test_the_post_section_installs_the_course_beside_the_base_images_tensorflow(tmp_path, report):
    """%files copied, %post run with bash in a venv that has only tensorflow-cpu (the stand-in for
    the base image's TensorFlow), then %test: the course imports, one TensorFlow, Keras 3.15, and tf.keras the same
    Keras (with TF_USE_LEGACY_KERAS=1, as a base image might set, %test fails naming it)."""
    found = sections(templated(DEFINITION.read_text(), {"BASE_DIGEST": DIGEST.split(":")[1]}))
    root = tmp_path / "container"
    for line in found["files"].strip().splitlines():
        source, target = line.split()
        destination = root / target.lstrip("/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / source).is_dir() else shutil.copy)(ROOT / source, destination)
    venv = tmp_path / "venv"
    # the course's own Python (its base interpreter: a venv of its own, nothing of the course's in it), so
    # that the files linked below were built for it
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    began = time.monotonic()
    brought = base_image_standin(venv)
    print(f"the base image's stand-in: {len(brought)} distributions linked in {time.monotonic() - began:.1f} s")
    post = found["post"].replace("/opt/tf-hpc-course", str(root / "opt" / "tf-hpc-course"))
    env = {**os.environ, "COURSE_PIP": " ".join(pip), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(["bash", "-c", post], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    check = subprocess.run(["bash", "-c", found["test"].replace("python3", str(venv / "bin" / "python"))],
                           env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-3000:]
    assert re.search(r"TensorFlow 2\.21\.\d+ Keras 3\.15\.\d+", check.stdout), check.stdout
    legacy = subprocess.run(["bash", "-c", found["test"].replace("python3", str(venv / "bin" / "python"))],
                            env={**env, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"}, capture_output=True,
                            text=True, timeout=300)  # a base image that sets it: tf.keras is tf_keras, and %test says so
    assert legacy.returncode != 0 and "tf.keras is tf_keras.api._v2.keras (Keras 2): unset TF_USE_LEGACY_KERAS" in legacy.stderr, legacy.stderr[-3000:]
    listed = subprocess.run([*pip, "list", "--format=freeze"], capture_output=True, text=True, timeout=120).stdout
    names = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert "tensorflow-cpu" in names and "tensorflow" not in names, "a second TensorFlow wheel came in"
    assert {"tf-keras", "tf-hpc-course-helpers", "keras", "ipyparallel", "tensorflow-datasets"} <= names, sorted(names)
    frozen = {_name(line.split("==")[0]): line.split("==")[1] for line in listed.splitlines() if "==" in line}
    frozen = {k: v for k, v in frozen.items() if k not in ("pip", "setuptools", "wheel", "tensorflow-cpu", "tf-hpc-course-helpers")}
    assert frozen == constraints(), {k: (v, constraints().get(k)) for k, v in frozen.items() if constraints().get(k) != v}
    report(f"Apptainer %post in a clean venv beside tensorflow-cpu: {check.stdout.strip()}; "
           f"{len(names)} packages, one TensorFlow wheel, {len(frozen)} at constraints.txt's exact versions "
           "(the image was not built: no Apptainer here)")


BASE_IMAGE = "tensorflow-cpu"  # the stand-in for the base image's TensorFlow (it has the GPU wheel)
OWN = {"pip", "setuptools", "wheel"}  # the new venv's own


def base_image_standin(venv: Path) -> list[str]:
    """Into `venv`, what the base image brings: TensorFlow and every distribution it needs, as installed
    in the course's own environment, linked file by file (a copy where the file system refuses a link)
    with their metadata, so that pip in %post sees them installed, as it would in the image. Before,
    the test installed TensorFlow from the registry every run (about a minute of CI, most of it
    unpacking)."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    found: dict[str, metadata.Distribution] = {}
    todo = [BASE_IMAGE]
    while todo:
        name = _name(todo.pop())
        if name in found or name in OWN:
            continue
        found[name] = metadata.distribution(name)
        for line in found[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    for dist in found.values():
        for file in dist.files or []:
            if file.parts[0] == "..":  # console scripts: their first line names the course's Python
                continue
            source, target = Path(dist.locate_file(file)), site / file
            if not source.is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    return sorted(found)


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def constraints() -> dict[str, str]:
    """slurm/apptainer/constraints.txt as {name: version}; every line must be name==version."""
    lines = [line.strip() for line in (DEFINITION.parent / "constraints.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    loose = [line for line in lines if not re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.+!-]*", line)]
    assert not loose, f"constraints.txt lines without an exact version: {loose}"
    return {_name(line.split("==")[0]): line.split("==")[1] for line in lines}


def test_every_pip_install_in_post_pins_its_versions():
    """%post runs pip as root: every requirement it names has an exact version, and the course's
    own directory is installed with the constraints file, which pins every dependency."""
    import shlex
    import tomllib

    found = sections(DEFINITION.read_text())
    files = dict(line.split()[::-1] for line in found["files"].strip().splitlines())  # target -> source
    installs = [line for line in found["post"].splitlines() if re.search(r"\bpip\b.*\binstall\b|\$PIP install", line)
                and not line.strip().startswith("#")]
    assert len(installs) >= 2, installs
    for line in installs:
        words = shlex.split(line.split("install", 1)[1])
        constraint = words[words.index("-c") + 1] if "-c" in words else None
        requirements = [w for i, w in enumerate(words) if not w.startswith("-") and words[i - 1] != "-c"]
        assert requirements, line
        for requirement in requirements:
            if requirement.startswith("/"):  # the course's directory: its dependencies by the constraints
                assert constraint in files, f"{line}: a local install without -c <constraints from %files>"
                continue
            assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.+!-]*", requirement), f"{line}: {requirement} unpinned"
    pinned = constraints()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    missing = [r for r in project if _name(r) not in pinned]
    assert not missing, f"pyproject.toml's dependencies missing from constraints.txt: {missing}"
    assert "tensorflow" not in pinned and "tensorflow-cpu" not in pinned, "TensorFlow is the base image's"
    header = sections(DEFINITION.read_text())["header"]
    assert "--build-arg BASE_DIGEST=" in header and "No digest was verified" in header, \
        "say how the centre passes the digest, and that none was verified here"
