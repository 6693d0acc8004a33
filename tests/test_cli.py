"""`python -m helpers ...`: help everywhere, JSON info, one-line errors, a cluster that outlives the command, the class commands' refusals."""

import json

from conftest import run_cli


def test_help_everywhere():
    for args in ([], ["data"], ["train"], ["cluster"], ["class"], ["bench"]):
        done = run_cli(*args, "--help")
        assert done.returncode == 0 and "usage:" in done.stdout


def test_the_readme_lists_every_command():
    """README's "Command line:" names exactly the commands `python -m helpers` has."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    listed = re.search(r"python -m helpers \{([a-z,-]+)\} --help", readme).group(1).split(",")
    refused = run_cli("no-such-command").stderr  # argparse names the commands it has
    commands = re.findall(r"'([a-z-]+)'", refused.split("choose from", 1)[1])
    assert listed == commands, f"README.md lists {listed}, the command line has {commands}"


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
    # a bad option's value: argparse's one line, naming the option and the value (a bare "-3 must be at
    # least 1", or the same words on a second line, leaves the user to guess which option was meant)
    for option, bad in (("--epochs", "-3"), ("--steps-per-epoch", "0")):
        done = run_cli("train", option, bad)
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert errors == [f"python -m helpers train: error: argument {option}: {bad} must be at least 1"], done.stderr


def test_synth_then_prepare_from_the_command_line(tmp_path):
    archive = tmp_path / "s.tar.gz"
    assert run_cli("data", "synth", "--out", str(archive), "--train", "50", "--test", "20").returncode == 0
    done = run_cli("data", "prepare", "--archive", str(archive), "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    assert "SYNTHETIC" in done.stdout and "50 train, 20 test" in done.stdout


def test_cluster_start_keeps_its_cluster_until_stop_from_another_process():
    """`cluster start` returns, its controller and engines go on running and its cluster file
    stays; `cluster stop --cluster-id` from another process stops them and removes the files."""
    import re
    import time
    from pathlib import Path

    import psutil
    from IPython.paths import get_ipython_dir

    from tests.conftest import run_cli

    started = run_cli("cluster", "start", "-n", "2")
    assert started.returncode == 0, started.stderr
    cluster_id = re.search(r"cluster (course-[0-9a-f]+): 2 engines ready: rank 0 on .*rank 1 on", started.stdout).group(1)

    def ours():
        found = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if cluster_id in " ".join(p.info["cmdline"] or []) or cluster_id in " ".join(
                        f"{k}={v}" for k, v in p.environ().items() if k.startswith("IPP")):
                    found.append(p.pid)
            except psutil.Error:
                continue
        return found

    security = Path(get_ipython_dir()) / "profile_default" / "security"
    try:
        time.sleep(3)  # the CLI process is gone; what it started must not follow it
        assert (security / f"cluster-{cluster_id}.json").exists()
        assert len(ours()) >= 3, "controller and 2 engines should still run"
    finally:
        stopped = run_cli("cluster", "stop", "--cluster-id", cluster_id)
    assert stopped.returncode == 0 and "stopped 1 cluster(s)" in stopped.stdout, stopped.stderr
    deadline = time.monotonic() + 10
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ours(), "processes of the stopped cluster are still running"
    assert not list(security.glob(f"*{cluster_id}*")), "files of the stopped cluster are left"


def test_class_commands_without_slurm_say_what_is_missing(tmp_path):
    """`class who|end` where no Slurm answers: one line naming the problem, never a traceback."""
    env = {"PATH": str(tmp_path), "COURSE_HUB_TOKEN": ""}  # no squeue on PATH
    for action in ("who", "end"):
        done = run_cli("class", action, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "error: say which class: --group NAME" in done.stderr, done.stderr
        done = run_cli("class", action, "--reservation", "day1", env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "error: scontrol is not on PATH" in done.stderr, done.stderr


def test_class_commands_refuse_to_send_the_token_over_plain_http(tmp_path):
    env = {"COURSE_HUB_TOKEN": "secret", "COURSE_HUB_URL": "http://hub.example.org:8000"}
    done = run_cli("class", "who", "--group", "course", env=env)
    assert done.returncode == 2 and "unencrypted" in done.stderr and "Traceback" not in done.stderr, done.stderr
