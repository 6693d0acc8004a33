"""`make course`'s runner: progress per notebook, a summary table, no kernel transport warnings."""

import subprocess
import sys

import nbformat

from conftest import ROOT


def test_course_runner_shows_progress_and_the_table_without_kernel_warnings(tmp_path):
    good, bad = tmp_path / "01_good.ipynb", tmp_path / "02_bad.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('fine')")]), good)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]), bad)
    done = subprocess.run([sys.executable, "-m", "helpers.tools.course_run", "--out", str(tmp_path / "out"),
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
    done = subprocess.run([sys.executable, "-m", "helpers.tools.course_run", "--out", str(tmp_path / "out"),
                           str(first), str(second)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    executed = nbformat.read(tmp_path / "out" / "notebooks" / "02_second.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "first kernel gone\n"
