"""What a lesson sets up about its machine (helpers.environment), its Slurm context (helpers.slurm.step.slurm_info) and the modes' sizes (helpers.mode)."""

import pytest

from helpers import environment, gpus, mode
from helpers.errors import CourseError
from helpers.slurm.step import slurm_info
from tests.support.planted_proc import V1, plant_proc
from tests.support.required import unavailable


GRPC_READS = {"grpc_proxy", "https_proxy", "http_proxy"}  # gRPC C core, doc/environment_variables.md


def test_remove_proxies_removes_what_grpc_reads(monkeypatch):
    """With grpc_proxy set, two MWMS workers on localhost hung (80 s, tried): it must go too."""
    for name in (*GRPC_READS, "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "localhost")
    removed = environment.remove_proxies()
    assert GRPC_READS | {"HTTP_PROXY", "HTTPS_PROXY"} <= set(removed)
    import os

    assert not any(n in os.environ for n in removed)
    assert os.environ["no_proxy"] == "localhost"  # only what breaks gRPC goes


def test_one_proxy_list_everywhere(monkeypatch):
    """Local workers and the batch scripts use environment.PROXY_VARIABLES, not lists of their own."""
    from pathlib import Path

    from helpers.local_workers import worker_env

    env = worker_env(["localhost:1", "localhost:2"], 0, {name: "http://p:1" for name in environment.PROXY_VARIABLES})
    assert not set(env) & set(environment.PROXY_VARIABLES)
    root = Path(__file__).resolve().parents[1]
    for script in ("slurm/train.sbatch", "slurm/engines.sbatch"):
        text = (root / script).read_text()
        assert 'PROXIES=$("$PYTHON" -m helpers proxies)' in text and "unset $PROXIES" in text, script
        assert "http_proxy" not in text.lower(), f"{script} keeps a proxy list of its own"
    from tests.conftest import run_cli

    assert run_cli("proxies").stdout.split() == list(environment.PROXY_VARIABLES)


def test_slurm_info_outside_and_inside():
    assert slurm_info({}) is None
    info = slurm_info({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2",
                                   "SLURM_STEP_NODELIST": "n1", "SLURM_STEP_TASKS_PER_NODE": "2"})
    assert info.step and info.procid == 0 and info.ntasks == 2
    alloc_only = slurm_info({"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n1"})
    assert alloc_only.job_id == "5" and not alloc_only.step


def test_slurm_info_malformed():
    with pytest.raises(CourseError, match="SLURM_STEP_NUM_TASKS"):
        slurm_info({"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "x"})


def test_gpu_count_honours_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpus.gpu_count_without_tf() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.gpu_count_without_tf() == 0


def test_mode_switch(monkeypatch):
    monkeypatch.setenv(mode.MODE_ENV, "full")
    assert mode.mode_sizes().mode == "full"
    assert mode.mode_sizes("quick").quick
    monkeypatch.setenv(mode.MODE_ENV, "fast")
    with pytest.raises(CourseError, match="not a mode"):
        mode.mode_sizes()
    monkeypatch.setenv(mode.MODE_ENV, "auto")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert mode.mode_sizes().mode == "quick"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU: a class, not a research run
    assert mode.mode_sizes().mode == "workshop"


def test_the_class_overrides_reach_every_size(monkeypatch):
    monkeypatch.setenv(mode.EPOCHS_ENV, "1")
    monkeypatch.setenv(mode.MAX_STEPS_ENV, "5")
    full = mode.mode_sizes("full")
    assert (full.epochs, full.resnet_epochs, full.schedule_epochs) == (1, 1, 1)
    assert full.fault_epochs == 3  # lesson 06: an epoch every worker keeps, one only the others save, one to fail in
    assert full.tour_steps == 40 and full.train_examples is None  # lesson 12's least; the data stays full size
    assert full.steps_per_epoch(50_000, 256) == 5
    monkeypatch.delenv(mode.MAX_STEPS_ENV)
    assert mode.mode_sizes("full").steps_per_epoch(50_000, 256) == 195
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv(mode.EPOCHS_ENV, bad)
        with pytest.raises(CourseError, match="COURSE_EPOCHS"):
            mode.mode_sizes("quick")


def test_an_epoch_smaller_than_one_batch_is_a_clear_error():
    with pytest.raises(CourseError, match="do not fill one global batch of 256"):
        mode.mode_sizes("quick").steps_per_epoch(100, 256)


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


def test_one_gpu_node_still_has_two_replicas(monkeypatch, capsys):
    """A single GPU is split into logical GPUs for the lessons that compare replicas (the real
    split needs a GPU: here the decision, the memory split and the error without a GPU)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(gpus, "tensorflow_is_cpu_build", lambda: False)  # a GPU build, stood in
    asked = []
    monkeypatch.setattr(environment, "split_gpu", lambda n: asked.append(n) or [f"/GPU:{i}" for i in range(n)])
    assert environment.local_replicas(2) == 2 and asked == [2]
    assert "one GPU: split into 2 logical GPUs" in capsys.readouterr().out
    assert environment.local_replicas(1) == 1 and asked == [2]  # one replica asked for: the GPU as it is
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    assert environment.local_replicas(2) == 3 and asked == [2]
    assert environment.logical_gpu_memory_mib(16000, 2) == 7200
    assert environment.logical_gpu_memory_mib(None, 2) == 3686


def test_the_cpu_build_on_a_gpu_node_splits_the_cpu_and_says_so(monkeypatch, capsys):
    """CUDA_VISIBLE_DEVICES names GPUs (the local Slurm's simulated ones, or a GPU node given the CPU
    install), but tensorflow-cpu can use none: the replicas are logical CPU devices, and a line says why."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(gpus, "tensorflow_is_cpu_build", lambda: True)
    monkeypatch.setattr(gpus, "apply", lambda plan: plan)
    split = []
    monkeypatch.setattr(environment, "split_cpu", lambda n: split.append(n) or [f"/CPU:{i}" for i in range(n)])
    monkeypatch.setattr(environment, "split_gpu", lambda n: pytest.fail("no GPU to split with the CPU build"))
    assert environment.local_replicas(2) == 2 and split == [2]
    assert "the installed TensorFlow is the CPU build" in capsys.readouterr().out


def test_a_gpu_tensorflow_cannot_see_is_a_clear_error(monkeypatch):
    from helpers.environment import split_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # this machine's TensorFlow is the CPU wheel
    with pytest.raises(CourseError, match="names a GPU but TensorFlow sees none"):
        split_gpu(2)


def test_a_shared_checkout_gives_each_user_their_own_output(tmp_path):
    """A group-writable checkout owned by someone else: its build/ is not this user's output directory."""
    import os

    import pytest

    from helpers.environment import checkout_build

    repo = tmp_path / "course"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("")
    assert checkout_build(repo) == repo / "build"
    if os.geteuid() != 0:
        unavailable("giving the checkout to another user needs root", "COURSE_REQUIRE_SLURM")
    repo.chmod(0o775)
    os.chown(repo, 65534, os.getgid())  # a teammate's checkout, writable by our group
    assert checkout_build(repo) is None


@pytest.mark.parametrize("gpu_count", [2, 4, 8])
@pytest.mark.parametrize("engines", [2, 3, 4])
def test_lesson_15_kernel_replicas_differ_from_the_workers_on_gpu_nodes(monkeypatch, gpu_count, engines):
    """Lesson 15 opens the model under MirroredStrategy with another replica count than the workers'.
    With GPUs planted (CUDA_VISIBLE_DEVICES), this kernel gets one replica per GPU and local engines
    share the same GPUs out equally: 4 GPUs and 2 engines give 4 replicas on both sides, so the
    kernel's devices must drop one (`devices_unlike`); the lesson's first cell's CPU_REPLICAS rule
    is used as the lesson sets it."""
    visible = ",".join(str(i) for i in range(gpu_count))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(gpus, "tensorflow_is_cpu_build", lambda: False)  # a GPU build, stood in
    monkeypatch.setattr(gpus, "apply", lambda plan: plan)  # no environment changes, no TensorFlow
    monkeypatch.setattr(environment, "import_tensorflow", lambda: None)
    cpu_replicas = engines - 1 if engines > 2 else engines + 1  # lesson 15's first cell
    kernel = environment.local_replicas(cpu_replicas)
    plans = [gpus.plan_for_local_worker(engines, i, {"CUDA_VISIBLE_DEVICES": visible}) for i in range(engines)]
    workers = sum(len(plan.gpus) or 1 for plan in plans)  # a worker on CPU has one replica
    chosen = environment.devices_unlike([f"/GPU:{i}" for i in range(kernel)], workers)
    assert kernel == gpu_count and chosen and len(chosen) != workers, (kernel, workers, chosen)
    # the kernel's batch (per_replica x kernel) must split evenly over the devices kept: 10th review, finding 1 (one fewer,
    # 4 -> 3, split 128 images 43/43/42 and stopped Keras's evaluate)
    assert kernel % len(chosen) == 0, (kernel, chosen)
    if gpu_count % engines == 0 and gpu_count >= engines:  # an equal share of every GPU: the counts coincide
        assert kernel == workers and len(chosen) == kernel // 2


@pytest.mark.parametrize("count,kept", [(2, 1), (3, 1), (4, 2), (6, 3), (7, 1), (8, 4)])
def test_devices_unlike_keeps_the_largest_proper_divisor_of_a_count_that_coincides(count, kept):
    """10th review of lesson 15, finding 1: one device fewer split the kernel's batch of per_replica x count unevenly
    (4 -> 3: 128 images as 43, 43, 42), and Keras 3.15's evaluate stopped; a divisor splits it evenly."""
    devices = [f"/CPU:{i}" for i in range(count)]
    assert environment.devices_unlike(devices, count) == devices[:kept]


def test_devices_unlike_keeps_a_count_that_differs_already():
    assert environment.devices_unlike(["/CPU:0", "/CPU:1", "/CPU:2"], 2) == ["/CPU:0", "/CPU:1", "/CPU:2"]
    assert environment.devices_unlike(["/GPU:0"], 1) == ["/GPU:0"]  # never none


@pytest.mark.parametrize("cgroup,controllers,enabled,namespace,found,verdict", [
    (V1.format(cpu="2:cpu,cpuacct:/"), None, "1", None, "/", "1 and in the root CPU cgroup: sessions share first"),
    (V1.format(cpu="2:cpu,cpuacct:/slurm/uid_1000/job_5/step_0"), None, "1", None, "/slurm/uid_1000/job_5/step_0",
     "not in the root CPU cgroup"),  # Slurm's task/cgroup on cgroup v1
    ("0::/system.slice/course.service\n", {"/": "cpu io", "/system.slice": "cpu io",
                                           "/system.slice/course.service": "io"}, "1", None, "/system.slice",
     "not in the root CPU cgroup"),  # a slice with the cpu controller, its service without: the slice's
    ("0::/user.slice/session-3.scope\n", {"/": "cpu io", "/user.slice": "io", "/user.slice/session-3.scope": "io"},
     "1", None, "/", "1 and in the root CPU cgroup: sessions share first"),  # the cpu controller on for none of it
    ("0::/\n", {"/": "cpu io"}, "1", "cgroup:[4026532512]", None, "not known"),  # a container's namespace
    (V1.format(cpu="2:cpu,cpuacct:/"), None, "0", None, "/", "off, CPU time shared per thread")])
def test_autogroup_says_sessions_share_first_only_in_the_root_cpu_cgroup(cgroup, controllers, enabled, namespace, found,
                                                                         verdict, tmp_path, monkeypatch):
    """Lesson 07, fourteenth review, finding 1: sched_autogroup_enabled = 1 is not enough; man 7 sched: "The use of
    the cgroups(7) CPU controller to place processes in cgroups other than the root CPU cgroup overrides the effect of
    autogrouping". The CPU cgroup as cgroup v1 and v2 show it, and the verdict on it."""
    plant_proc(tmp_path, monkeypatch, cgroup, enabled, namespace or environment.INITIAL_CGROUP_NAMESPACE, controllers)
    assert environment.cpu_cgroup()[0] == found
    said = environment.autogroup()
    assert said.startswith(f"sched_autogroup_enabled {enabled}, CPU cgroup {found or '?'} (") and verdict in said, said
    assert ("sessions share first" in said) == ("sessions share first" in verdict), said


def test_autogroup_on_this_machine_reads_its_own_files():
    """Here (the course's test machines): the setting and the CPU cgroup as /proc shows them, printed together."""
    import os

    said = environment.autogroup()
    setting = "/proc/sys/kernel/sched_autogroup_enabled"
    if not os.path.exists(setting):
        assert said == "not on this system"
        return
    assert said.startswith(f"sched_autogroup_enabled {open(setting).read().strip()}, CPU cgroup "), said
