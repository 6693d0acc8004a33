"""`make course`'s runner: progress per notebook, a summary table, no kernel transport warnings."""

import subprocess
import sys

import nbformat

from conftest import ROOT


def test_course_runner_shows_progress_and_the_table_without_kernel_warnings(tmp_path):
    good, bad = tmp_path / "01_good.ipynb", tmp_path / "02_bad.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('fine')")]), good)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]), bad)
    done = subprocess.run([sys.executable, "-m", "helpers.commands.course_run", "--out", str(tmp_path / "out"),
                           str(good), str(bad)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    shown = done.stdout + done.stderr
    assert done.returncode == 1, shown  # one notebook failed
    assert "[1/2] 01_good.ipynb ... ok" in shown and "[2/2] 02_bad.ipynb ... FAILED" in shown, shown
    assert "ZeroDivisionError" in shown and "total" in shown, shown
    assert "without encryption" not in shown and "Message signing" not in shown, shown
    executed = nbformat.read(tmp_path / "out" / "notebooks" / "01_good.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "fine\n"


def test_each_notebooks_kernel_ends_before_the_next_notebook_starts(tmp_path):
    """Fifteen kernels, each holding its TensorFlow, would otherwise live until the runner exits."""
    pid_file = tmp_path / "first-kernel.pid"
    first, second = tmp_path / "01_first.ipynb", tmp_path / "02_second.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import os, pathlib\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))")]), first)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import os, time\npid = int(open({str(pid_file)!r}).read())\n"
        "for _ in range(100):\n"
        "    try:\n        os.kill(pid, 0)\n    except ProcessLookupError:\n        break\n"
        "    time.sleep(0.1)\n"
        "else:\n    raise AssertionError(f'the first notebook kernel {pid} is still running')\n"
        "print('first kernel gone')")]), second)
    done = subprocess.run([sys.executable, "-m", "helpers.commands.course_run", "--out", str(tmp_path / "out"),
                           str(first), str(second)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    executed = nbformat.read(tmp_path / "out" / "notebooks" / "02_second.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "first kernel gone\n"


def _run(tmp_path, **env) -> subprocess.CompletedProcess:
    import os

    nb = tmp_path / "01_one.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os; print('kernel mode', os.environ.get('COURSE_MODE'))")]), nb)
    clean = {k: v for k, v in os.environ.items() if k not in ("COURSE_MODE", "COURSE_DATA_DIR", "CUDA_VISIBLE_DEVICES")}
    return subprocess.run([sys.executable, "-m", "helpers.commands.course_run", "--out", str(tmp_path / "out"), str(nb)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env={**clean, **env})


def test_make_course_runs_the_mode_auto_picks_and_says_so(tmp_path):
    """No mode forced: on this CPU machine auto is quick, and the first line says why; the kernel is
    left to pick the same (COURSE_MODE is not set behind the learner's back)."""
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("mode quick (auto: no GPU visible)"), done.stdout
    executed = nbformat.read(tmp_path / "out" / "notebooks" / "01_one.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "kernel mode None\n"


def test_auto_on_a_gpu_node_without_data_stops_before_the_first_lesson(tmp_path):
    """A GPU visible (CUDA_VISIBLE_DEVICES names one): auto is workshop, which needs prepared data."""
    done = _run(tmp_path, CUDA_VISIBLE_DEVICES="0")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "make course: workshop and full mode need real CIFAR-10: set COURSE_DATA_DIR" in done.stderr, done.stderr
    assert "[1/1]" not in done.stdout and "Traceback" not in done.stderr


def test_workshop_with_data_names_the_data(tmp_path, prepared_dir):
    done = _run(tmp_path, COURSE_MODE="workshop", COURSE_DATA_DIR=str(prepared_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("mode workshop (COURSE_MODE=workshop); data: SYNTHETIC"), done.stdout
