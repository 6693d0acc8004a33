import pytest

from helpers import environment, mode
from helpers.errors import CourseError


def test_remove_proxies_removes_both_cases(monkeypatch):
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "localhost")
    removed = environment.remove_proxies()
    assert {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} <= set(removed)
    import os

    assert not any(n in os.environ for n in removed)
    assert os.environ["no_proxy"] == "localhost"  # only what breaks gRPC goes


def test_slurm_info_outside_and_inside():
    assert environment.slurm_info({}) is None
    info = environment.slurm_info({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2",
                                   "SLURM_STEP_NODELIST": "n1", "SLURM_STEP_TASKS_PER_NODE": "2"})
    assert info.step and info.procid == 0 and info.ntasks == 2
    alloc_only = environment.slurm_info({"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n1"})
    assert alloc_only.job_id == "5" and not alloc_only.step


def test_slurm_info_malformed():
    with pytest.raises(CourseError, match="SLURM_STEP_NUM_TASKS"):
        environment.slurm_info({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "x"})


def test_gpu_count_honours_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert environment.gpu_count_without_tf() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert environment.gpu_count_without_tf() == 0


def test_mode_switch(monkeypatch):
    monkeypatch.setenv(mode.MODE_ENV, "full")
    assert mode.settings().mode == "full"
    assert mode.settings("quick").quick
    monkeypatch.setenv(mode.MODE_ENV, "fast")
    with pytest.raises(CourseError, match="not a mode"):
        mode.settings()
    monkeypatch.setenv(mode.MODE_ENV, "auto")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert mode.settings().mode == "quick"


def test_report_lists_versions():
    report = environment.report()
    assert report["cpus"] >= 1
    assert "keras" in report["versions"] and "python" in report["versions"]


def test_output_dir_falls_back_to_home_when_the_course_is_read_only(monkeypatch, tmp_path):
    from helpers import environment

    monkeypatch.delenv("COURSE_OUTPUT_DIR", raising=False)
    assert environment.output_dir().name == "build"  # this checkout is writable
    monkeypatch.setattr(environment.os, "access", lambda path, mode: False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert environment.output_dir() == tmp_path / "tf-hpc-course-output"
    monkeypatch.setenv("COURSE_OUTPUT_DIR", str(tmp_path / "elsewhere"))
    assert environment.output_dir() == tmp_path / "elsewhere"
