"""Shared fixtures. Every multi-process helper here kills with SIGKILL at a deadline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def synthetic_archive(tmp_path_factory) -> Path:
    from helpers.data import synth_archive

    return synth_archive(tmp_path_factory.mktemp("archive") / "synthetic.tar.gz", train=300, test=100)


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory, synthetic_archive) -> Path:
    from helpers.data import prepare

    target = tmp_path_factory.mktemp("tfds")
    prepare(synthetic_archive, target)
    return target


def run_python(code: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (TensorFlow's device set-up is once per process)."""
    full_env = {**os.environ, **(env or {})}
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=full_env, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child (SIGKILL)
        pytest.fail(f"no answer within {timeout} s: {exc.stdout!r} {exc.stderr!r}")


def run_cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "helpers", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=ROOT)
