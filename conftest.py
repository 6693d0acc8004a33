"""The nbval pass (`pytest notebooks --nbval-lax`) runs the lessons the way `make course` does on a
laptop: with Slurm hidden, so lessons 08 and 11 take their local-process path, while
`tests/test_slurm.py` runs them on the suite's local Slurm. Without this, the Slurm the suite
started (or any Slurm on the machine) would be found again and the laptop path never tested.

Hidden means: no `SLURM_*` variable in the notebook's kernel, and Slurm's commands answering
"hidden" at once from a directory put first on the kernel's `PATH` (with `SLURM_CONF` merely
unset, a machine's own `/etc/slurm` would still answer; set to a missing file, `sinfo` retries
for 60 s). The kernel inherits this environment when nbval starts it, at a notebook's first cell. A Slurm
test that runs a lesson on Slurm through nbval says so: `COURSE_NBVAL_SLURM=visible`.

Lessons 08 and 11 print a path line (`no Slurm here: ...` locally; `submitting to Slurm ...`,
`Slurm, with ...` on Slurm). The pass fails when one printed the other path's line, or ran to its
last cell without printing one (tests/test_nbval_path_lines.py).

With `COURSE_NBVAL_KEEP=DIR` (`make test` sets it), the pass also writes each notebook it ran into
DIR with the outputs it produced, after every cell: the site test (marked `after_notebooks`, and
run after the notebooks) builds the course's site from them instead of executing the lessons again.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

SLURM_COMMANDS = ("sinfo", "squeue", "sbatch", "srun", "salloc", "scontrol", "scancel", "sacct", "sstat")
LOCAL_PATH_LESSONS = ("08_batch_job.ipynb", "11_checkpoints_requeue.ipynb")
LOCAL_PATH_LINE = "no Slurm here:"  # what 08 and 11 print when they run as local processes
SLURM_PATH_LINES = {"08_batch_job.ipynb": "submitting to Slurm", "11_checkpoints_requeue.ipynb": "Slurm, with"}  # on Slurm
VISIBLE_ENV = "COURSE_NBVAL_SLURM"
KEEP_ENV = "COURSE_NBVAL_KEEP"
_kept: list[str] = []  # the pass's COURSE_NBVAL_KEEP, taken out of the environment at start (pytest_configure)
_seen: dict[str, str] = {}
_finished: set[str] = set()  # lessons whose last code cell ran: their path line must have been printed
pytest_plugins = ["tests.durations"]  # every run's per-test durations, kept and compared (make test)


_stubs: list[Path] = []


def _hidden_slurm_bin() -> Path:
    if _stubs:
        return _stubs[0]
    directory = Path(tempfile.mkdtemp(prefix="course-nbval-no-slurm-"))
    _stubs.append(directory)
    for command in SLURM_COMMANDS:
        stub = directory / command
        # what a laptop's Slurm commands say with no cluster configured, so the lessons' login-node check
        # (helpers.slurm.login_node) sees a laptop, as it would without Slurm at all
        stub.write_text(f"#!/bin/sh\necho '{command}: error: Could not establish a configuration source "
                        "(Slurm is hidden from the nbval pass, conftest.py)' >&2\nexit 1\n")
        stub.chmod(0o755)
    return directory


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if item.path.suffix != ".ipynb" or os.environ.get(VISIBLE_ENV) == "visible":
        yield
        return
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        del os.environ[name]
    os.environ["PATH"] = f"{_hidden_slurm_bin()}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# what the machine has only one of: its local Slurm (the bridge, the namespaces), a second Unix user
MACHINE_WIDE_FIXTURES = {"slurm", "other_user"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Tests that read what the nbval pass executed run after it. Tests that use what the machine has only
    one of are marked `machine_wide`: `make test` runs them in a stream of their own (tests/streams.py)."""
    for item in items:
        if MACHINE_WIDE_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.machine_wide)
    last = [item for item in items if item.get_closest_marker("after_notebooks")]
    items[:] = [item for item in items if item not in last] + last


def pytest_configure(config):
    """COURSE_NBVAL_KEEP is this pass's alone: taken out of the environment, so that a lesson a test
    runs again in a pytest of its own (on Slurm, on a slower machine) does not write over the pass's
    copy, half-run, while another stream's site test reads it."""
    if os.environ.get(KEEP_ENV):
        _kept[:] = [os.environ.pop(KEEP_ENV)]


@pytest.fixture(scope="session")
def nbval_kept() -> Path | None:
    """Where this pass keeps the notebooks it executed (COURSE_NBVAL_KEEP), or None."""
    return Path(_kept[0]) if _kept else None


def _keep_outputs(item) -> None:
    """Write the notebook `item` belongs to, with the outputs its cells produced so far."""
    import nbformat

    directory = Path(_kept[0])
    count = sum(1 for cell in item.parent.nb.cells if cell.cell_type == "code" and cell.get("execution_count"))
    item.cell.outputs = list(getattr(item, "test_outputs", None) or [])
    item.cell.execution_count = count + 1
    directory.mkdir(parents=True, exist_ok=True)
    nbformat.write(item.parent.nb, directory / item.path.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    if call.when == "call" and _kept and item.path.suffix == ".ipynb" and hasattr(item, "cell"):
        _keep_outputs(item)
    if call.when != "call" or item.path.name not in LOCAL_PATH_LESSONS or not hasattr(item, "cell"):
        return
    for output in getattr(item, "test_outputs", None) or []:
        text = output.get("text", "") if isinstance(output, dict) else ""
        for line in text.splitlines():
            if line.startswith((LOCAL_PATH_LINE, SLURM_PATH_LINES[item.path.name])):
                _seen[item.path.name] = line
    if item.cell is [c for c in item.parent.nb.cells if c.cell_type == "code"][-1]:
        _finished.add(item.path.name)


def _ran(stats: dict) -> list[str]:
    names = {getattr(report, "nodeid", "").split("::")[0].rsplit("/", 1)[-1]
             for outcome, reports in stats.items() if outcome != "deselected" for report in reports}
    return [name for name in LOCAL_PATH_LESSONS if name in names]


def _expected_line(name: str) -> str:
    """The start of the path line `name` must print: its Slurm line when Slurm is visible, else the local one."""
    return SLURM_PATH_LINES[name] if os.environ.get(VISIBLE_ENV) == "visible" else LOCAL_PATH_LINE


def _off_the_expected_path() -> list[str]:
    """Lessons that took the other path than the pass asked for, or ran to their end printing no path line
    (a lesson that says nothing of where it ran proves neither path)."""
    wrong = [f"{name}: {line}" for name, line in _seen.items() if not line.startswith(_expected_line(name))]
    silent = [f"{name}: its path line was not seen" for name in sorted(_finished) if name not in _seen]
    return wrong + silent


def pytest_sessionfinish(session):
    for directory in _stubs:
        shutil.rmtree(directory, ignore_errors=True)
    if _off_the_expected_path():  # Slurm found although hidden (or missing although visible), or no path line
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    ran = _ran(terminalreporter.stats)
    if not ran:
        return
    visible = os.environ.get(VISIBLE_ENV) == "visible"
    terminalreporter.section("the nbval pass, with Slurm " + ("visible" if visible else "hidden"))
    for name in ran:
        terminalreporter.write_line(f"{name}: {_seen.get(name, 'its path line was not seen')}")
    for line in _off_the_expected_path():
        terminalreporter.write_line(f"FAILED: not on the path this pass asked for ({_expected_line(line.split(':')[0])}...): {line}")
