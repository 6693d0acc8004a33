import json

from conftest import run_cli


def test_help_everywhere():
    for args in ([], ["data"], ["train"], ["cluster"], ["bench"]):
        done = run_cli(*args, "--help")
        assert done.returncode == 0 and "usage:" in done.stdout


def test_info_is_json():
    done = run_cli("info")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["cpus"] >= 1 and "versions" in report


def test_bad_arguments_are_one_line_not_a_traceback(tmp_path):
    cases = [
        ("data", "synth", "--out", str(tmp_path / "a.tar.gz"), "--train", "0"),
        ("data", "prepare", "--archive", str(tmp_path / "missing.tar.gz"), "--data-dir", str(tmp_path)),
        ("train", "--data-dir", str(tmp_path / "empty"), "--mode", "quick"),
        ("cluster", "stop"),
    ]
    for args in cases:
        done = run_cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
        lines = [l for l in done.stderr.splitlines() if l.startswith("error:")]
        assert len(lines) == 1, done.stderr
    done = run_cli("train", "--epochs", "-3")
    assert done.returncode == 2 and "must be at least 1" in done.stderr and "Traceback" not in done.stderr


def test_synth_then_prepare_from_the_command_line(tmp_path):
    archive = tmp_path / "s.tar.gz"
    assert run_cli("data", "synth", "--out", str(archive), "--train", "50", "--test", "20").returncode == 0
    done = run_cli("data", "prepare", "--archive", str(archive), "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    assert "SYNTHETIC" in done.stdout and "50 train, 20 test" in done.stdout
