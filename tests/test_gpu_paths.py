"""Paths that only run on GPUs, held to their decisions here, where no GPU runs TensorFlow.

Never run on a GPU: the bench's GPU section and `--xla` on a GPU. What is checked is which devices
each bench row trains on, and which XLA runs `python -m helpers train` accepts, with the CPU
behaviour behind that rule.
"""

import json
import math

import pytest

from helpers.errors import CourseError
from helpers.commands import bench, bench_scaling
from helpers.commands.bench_rows import Row
from helpers.commands.train import xla_refusal
from tests.conftest import ROOT, run_cli, run_python


def test_each_gpu_row_sees_exactly_the_gpus_it_names():
    runs = bench.gpu_runs(["0", "1", "2", "3"])
    assert [(name, kind, n, devices) for name, kind, n, _, devices in runs] == [
        ("float32", "single", 1, "0"), ("mixed precision", "single", 1, "0"), ("XLA", "single", 1, "0"),
        ("mixed precision + XLA", "single", 1, "0"),
        ("mixed precision", "mirrored", 2, "0,1"), ("mixed precision", "mirrored", 4, "0,1,2,3")]
    assert all(xla_refusal("--xla" in extra, "fit", "default" if kind == "single" else kind) is None
               for _, kind, _, extra, _ in runs), "every run is one that python -m helpers train accepts"
    # a job given GPUs 4-11 of a node (Slurm's CUDA_VISIBLE_DEVICES): the rows take them in that order
    assert [d for *_, d in bench.gpu_runs(["4", "5", "6", "7", "8", "9", "10", "11"])][-3:] == \
        ["4,5", "4,5,6,7", "4,5,6,7,8,9,10,11"]
    assert [d for *_, d in bench.gpu_runs(["GPU-a1"])] == ["GPU-a1"] * 4
    assert bench.gpu_runs([]) == []


def _fake_point(calls):
    def training_point(kind, n, model, data_dir, steps, batch, extra, env=None):
        devices = env["CUDA_VISIBLE_DEVICES"].split(",")
        calls.append((kind, extra, env["CUDA_VISIBLE_DEVICES"]))
        return {"replicas": len(devices), "images_per_s": 100.0 * len(devices), "median_step_s": 1.28,
                "gradient_bytes": 94e6, "xla": "--xla" in extra}
    return training_point


def test_the_gpu_section_passes_each_run_its_devices(monkeypatch):
    """bench_gpu itself, with the training runs replaced by ones that report how many GPUs they saw."""
    calls = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(bench, "training_point", _fake_point(calls))
    monkeypatch.setattr(bench_scaling, "gpu_prediction",
                        lambda step_s, gradient_bytes, gpus, batch: Row(f"model {gpus}", 1.0, None, "images/s", True, "report"))
    rows, skipped = bench.bench_gpu("data", 3)
    assert skipped is None
    assert [(kind, devices) for kind, _, devices in calls] == [("single", "2")] * 4 + [("mirrored", "2,3")]
    one_gpu = [r for r in rows if "on 1 GPU" in r.figure]
    assert len(one_gpu) == 4 and all(r.ours == 100.0 for r in one_gpu), one_gpu  # one GPU's images/s, not two
    scaling = next(r for r in rows if "on 2 GPUs" in r.figure)
    assert scaling.ours == 200.0 and scaling.baseline == 200.0 and "mixed precision" in scaling.figure
    assert "jit_compile=False on both" in scaling.note, scaling.note  # the printed field


def test_a_gpu_scaling_row_whose_runs_differ_in_jit_compile_stops_the_bench(monkeypatch):
    """The 1-GPU run (no strategy) left at Keras's jit_compile="auto" would get XLA, the 2-GPU run under
    MirroredStrategy would not: the bench refuses to divide one by the other."""
    calls = []
    honest = _fake_point(calls)

    def auto_on_one_gpu(kind, n, model, data_dir, steps, batch, extra, env=None):
        return {**honest(kind, n, model, data_dir, steps, batch, extra, env), "xla": kind == "single"}

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(bench, "training_point", auto_on_one_gpu)
    monkeypatch.setattr(bench_scaling, "gpu_prediction", lambda *a: Row("model", 1.0, None, "images/s", True, "report"))
    with pytest.raises(CourseError, match="did not all use the same jit_compile.*'1 GPU': True.*'2 GPUs': False"):
        bench.bench_gpu("data", 3)


def test_same_jit_compile_names_the_runs_that_differ_or_did_not_say():
    from helpers.commands.bench_rows import same_jit_compile

    assert same_jit_compile({"a": {"xla": False}, "b": {"xla": False}}) is False
    with pytest.raises(CourseError, match="'b': True"):
        same_jit_compile({"a": {"xla": False}, "b": {"xla": True}})
    with pytest.raises(CourseError, match="'b': None"):
        same_jit_compile({"a": {"xla": False}, "b": {}})


@pytest.mark.parametrize("single_xla,match", [(False, None), (True, "same jit_compile")])
def test_the_distribution_rows_compare_runs_with_one_jit_compile(monkeypatch, single_xla, match):
    """bench_distribution with its runs replaced: one process, 2 replicas and 2 workers that all ran
    without XLA give rows whose note prints jit_compile=False; a 1-process run with XLA stops it."""
    def point(kind, n, model, data_dir, steps, batch, extra=(), env=None):
        return {"median_step_s": 0.1 * n, "first_step_s": 1.0, "xla": single_xla and kind == "single"}

    monkeypatch.setattr(bench, "training_point", point)
    if match:
        with pytest.raises(CourseError, match=match):
            bench.bench_distribution("cnn", "data", 3, repeats=1)
        return
    rows = bench.bench_distribution("cnn", "data", 3, repeats=1)
    assert len(rows) == 2 and all("jit_compile=False in every run" in r.note for r in rows), rows


def test_the_plain_keras_baseline_reports_the_jit_compile_it_ran_with(prepared_dir):
    """What bench_overhead compares: the hand-written Keras baseline sets jit_compile=False itself
    (Keras's "auto" would give it XLA on a GPU) and says so in its result, as `helpers train` does."""
    done = run_python("from helpers.commands.bench_baseline import main; import sys; sys.argv = ['b', '--model', 'cnn', "
                      f"'--data-dir', {str(prepared_dir)!r}, '--steps', '2', '--batch', '32', '--examples', '64']; main()",
                      timeout=240, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert result["xla"] is False, result


def test_a_row_that_trains_on_more_gpus_than_it_names_stops_the_bench(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(bench, "training_point", lambda *a, **k: {"replicas": 2, "images_per_s": 1.0,
                                                                  "median_step_s": 1.0, "gradient_bytes": 1})
    with pytest.raises(CourseError, match="1-GPU row ran on 2 replicas"):
        bench.bench_gpu("data", 3)


def test_no_gpu_no_gpu_rows(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert bench.bench_gpu("data", 3) == ([], "no GPU visible to this process (CUDA_VISIBLE_DEVICES / nvidia-smi -L)")


def test_xla_is_offered_for_fit_without_a_strategy_only():
    assert xla_refusal(False, "custom", "mirrored") is None
    assert xla_refusal(True, "fit", "default") is None
    for strategy in ("auto", "mirrored", "multiworker"):
        assert "keras-team/keras#21366" in xla_refusal(True, "fit", strategy)
    assert "custom loop" in xla_refusal(True, "custom", "default")


def test_train_refuses_xla_under_a_strategy_in_one_line(tmp_path):
    done = run_cli("train", "--mode", "quick", "--xla", "--strategy", "mirrored", "--cpu-replicas", "2",
                   "--skip-eval", timeout=240, env={"COURSE_OUTPUT_DIR": str(tmp_path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "--xla needs --strategy default" in done.stderr


def test_train_with_xla_and_mixed_bfloat16_without_a_strategy(tmp_path):
    """What the bench's 1-GPU "mixed precision + XLA"-like row runs, here on the CPU (bfloat16: float16's loss
    scaling has no CPU fast path, but bfloat16 compiles on both)."""
    done = run_cli("train", "--mode", "quick", "--xla", "--precision", "mixed_bfloat16", "--strategy", "default",
                   "--skip-eval", "--epochs", "1", "--steps-per-epoch", "3", timeout=300,
                   env={"COURSE_OUTPUT_DIR": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert result["xla"] is True and result["precision"] == "mixed_bfloat16" and result["replicas"] == 1
    assert all(math.isfinite(v) for v in result["train_loss"]), result["train_loss"]


XLA_ON_CPU = """
import sys
import tensorflow as tf
tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np
outcome = {}
for replicas in (0, 1, 2):  # 0: no strategy
    for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        strategy = tf.distribute.get_strategy() if replicas == 0 else tf.distribute.MirroredStrategy(
            [d.name for d in tf.config.list_logical_devices("CPU")][:replicas],
            cross_device_ops=tf.distribute.ReductionToOneDevice())
        with strategy.scope():
            model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
                                      keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, dtype="float32")])
            model.compile(optimizer=keras.optimizers.SGD(0.01), jit_compile=True,
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        ds = tf.data.Dataset.from_tensor_slices((np.ones((16, 8, 8, 3), "float32"), np.zeros(16, "int32"))).batch(8)
        try:
            model.fit(ds, epochs=1, verbose=0)
            outcome[(replicas, policy)] = "ok"
        except Exception as error:
            outcome[(replicas, policy)] = type(error).__name__ + (": other device" if "located in device" in str(error) else "")
print("OUTCOME", outcome)
"""


def test_what_xla_does_under_mirrored_strategy_on_cpu(report):
    """The CPU half of XLA_REFUSED, checked against the installed TensorFlow and Keras: jit_compile=True
    fits without a strategy and under MirroredStrategy on one device with every policy, and fails on two
    logical CPUs (a change upstream shows here)."""
    done = run_python(XLA_ON_CPU, timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = eval(done.stdout.split("OUTCOME ", 1)[1])  # noqa: S307 - our own child's dict of strings
    for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
        assert outcome[(0, policy)] == outcome[(1, policy)] == "ok", outcome
        assert outcome[(2, policy)] == "InvalidArgumentError: other device", outcome
    report(f"jit_compile=True under MirroredStrategy on CPU: {outcome}")


def _trace_reader(logs):
    """Lesson 09's trace-reading cell itself, run on `logs`."""
    import nbformat

    from tests.conftest import ROOT

    nb = nbformat.read(ROOT / "notebooks" / "09_monitoring.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and "def read_trace" in c.source)
    namespace = {"logs": logs}
    exec(compile(source, "09_monitoring", "exec"), namespace)
    return namespace["read_trace"]


def _plant_trace(path, gpu: bool) -> None:
    """An XSpace as the profiler writes it: a host plane with the step, the input wait and a compute
    thread's op; with `gpu`, a /device:GPU:0 plane whose stream holds the kernels, each naming its op in
    a tf_op stat, and a derived line over the same time that must not be counted twice."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    ms = 10**9  # picoseconds
    space = xplane_pb2.XSpace()
    host = space.planes.add(id=1, name="/host:CPU")
    for i, name in enumerate(["multi_step_on_iterator", "IteratorGetNextOp::DoCompute",
                              "sequential/dense/MatMul:_MklMatMul", "PyFunc:PyFunc"]):
        host.event_metadata[i + 1].id, host.event_metadata[i + 1].name = i + 1, name
    python = host.lines.add(id=1, name="python3", timestamp_ns=1_000)
    python.events.add(metadata_id=1, offset_ps=0, duration_ps=10 * ms)
    python.events.add(metadata_id=2, offset_ps=0, duration_ps=2 * ms)
    compute = host.lines.add(id=2, name="tf_Compute", timestamp_ns=1_000)
    compute.events.add(metadata_id=3, offset_ps=3 * ms, duration_ps=1 * ms)  # on a GPU node: a launch
    reading = host.lines.add(id=3, name="tf_data_private_threadpool", timestamp_ns=1_000)
    for start in (0, 1):  # two tf.numpy_function calls: two images read, not ops of the step's compute
        reading.events.add(metadata_id=4, offset_ps=start * ms, duration_ps=1 * ms)
    if gpu:
        device = space.planes.add(id=2, name="/device:GPU:0")
        for i, name in enumerate(["ampere_sgemm_128x64_nn", "void convolve_kernel<float>",
                                  "sequential/dense/MatMul:MatMul"]):
            device.event_metadata[i + 1].id, device.event_metadata[i + 1].name = i + 1, name
        device.stat_metadata[1].id, device.stat_metadata[1].name = 1, "tf_op"
        device.stat_metadata[2].id, device.stat_metadata[2].name = 2, "sequential/conv2d/Conv2D:Conv2D"
        stream = device.lines.add(id=7, name="Stream #7(Compute)", timestamp_ns=1_000)
        matmul = stream.events.add(metadata_id=1, offset_ps=4 * ms, duration_ps=3 * ms)
        matmul.stats.add(metadata_id=1, str_value="sequential/dense/MatMul:MatMul")
        conv = stream.events.add(metadata_id=2, offset_ps=7 * ms, duration_ps=2 * ms)
        conv.stats.add(metadata_id=1, ref_value=2)  # the profiler interns repeated strings
        stream.events.add(metadata_id=2, offset_ps=9 * ms, duration_ps=1 * ms)  # no tf_op stat
        device.stat_metadata[3].id, device.stat_metadata[3].name = 3, "level 0"  # the stat's older name
        old_name = stream.events.add(metadata_id=1, offset_ps=10 * ms, duration_ps=1 * ms)
        old_name.stats.add(metadata_id=3, str_value="sequential/dense_1/MatMul:MatMul")
        derived = device.lines.add(id=8, name="TensorFlow Ops", timestamp_ns=1_000)
        derived.events.add(metadata_id=3, offset_ps=4 * ms, duration_ps=3 * ms)
    environment = space.planes.add(id=3, name="Task Environment")  # when the profiler started and stopped
    for i, (stat, ns) in enumerate([("profile_start_time", 1_795_744_088_107_886_129),
                                    ("profile_stop_time", 1_795_744_088_996_782_918)]):
        environment.stat_metadata[i + 1].id, environment.stat_metadata[i + 1].name = i + 1, stat
        environment.stats.add(metadata_id=i + 1, uint64_value=ns)
    path.parent.mkdir(parents=True)
    path.write_bytes(space.SerializeToString())


@pytest.mark.parametrize("gpu", [True, False])
def test_lesson_09_finds_the_gpu_kernels_time(tmp_path, gpu):
    _plant_trace(tmp_path / "healthy" / "train" / "plugins" / "profile" / "2026_11_26" / "node.xplane.pb", gpu)
    trace = _trace_reader(tmp_path)("healthy")
    assert trace["steps"] == 1 and trace["input_share"] == pytest.approx(0.2) and trace["reads"] == 2
    assert trace["window"] == pytest.approx((1_795_744_088.107886, 1_795_744_088.996783))
    ops = {op: round(s * 1000, 6) for op, s in trace["ops"].items()}
    if gpu:  # the kernels' time, by the op that launched them; the host's launch and the derived line left out
        assert trace["ops_from"] == "GPU streams (kernels, copies)"
        assert ops == {"MatMul": 4.0, "Conv2D": 2.0, "void convolve_kernel<float>": 1.0}, ops
    else:
        assert trace["ops_from"] == "host compute threads" and ops == {"MatMul": 1.0}, ops


LESSON_07_GPU_CELL = """
import os
import nbformat
from helpers import environment
environment.local_replicas(4)
import tensorflow as tf
from helpers.data import ensure_data, load_split

nb = nbformat.read("notebooks/07_scaling_performance.ipynb", as_version=4)
program = next(c.source for c in nb.cells if c.source.startswith("%%writefile")).split("\\n", 1)[1]
if os.environ.get("POLICY_AFTER_BUILD"):  # the claim false: the model built (and compiled) in float32
    policy, built = "    keras.mixed_precision.set_global_policy(precision)\\n", "    start = weights_digest(model)"
    assert program.count(policy) == 1 and program.count(built) == 1
    program = program.replace(policy, "").replace(built, policy + built)
ns = {}
exec(compile(program.replace('if __name__ == "__main__":', "if False:"), "07_measure", "exec"), ns)
# NCCL has no CPU kernel: it stands in as a reduction through one device. The notebook's own `mirrored`
# runs, so a GPU branch left to MirroredStrategy's default collective ops would fail below, as on GPUs.
tf.distribute.NcclAllReduce = lambda *args, **kwargs: tf.distribute.ReductionToOneDevice()
cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
ns.update(train_examples=load_split("train", ensure_data(True).data_dir, limit=256), MODEL="cnn", per_replica=32,
          STEPS=2, tf=tf, gpus=["stand-in %d" % i for i in range(4)], devices=cpus,
          collective_for_this_process=lambda replicas=None: "NCCL")  # four GPUs of the kernel's own
setup = next(c.source for c in nb.cells if "def mirrored" in c.source)
exec(setup[setup.index("def mirrored"):], ns)
ns["measure"](ns["mirrored"](2), ns["train_examples"], "cnn", 32, 2)  # as the MirroredStrategy cell does first
# the node's physical GPUs: 4 of their own, or 1 split in 4 parts (the cell must then not time MirroredStrategy)
physical = tf.config.list_physical_devices
tf.config.list_physical_devices = lambda kind=None: (["stand-in GPU %d" % i for i in range(int(os.environ["PHYSICAL"]))]
                                                    if kind == "GPU" else physical(kind))
cell = next(c.source for c in nb.cells if c.source.startswith("if gpus:"))
exec(cell, ns)
"""


@pytest.mark.parametrize("physical", [4, 1], ids=["4 GPUs", "1 GPU split in 4"])
def test_lesson_07_gpu_cell_runs_with_cpus_standing_in_for_gpus(report, physical):
    """The cell's code (no strategy with XLA and mixed precision, then MirroredStrategy over the 'GPUs'),
    with four logical CPUs named as GPUs, after the notebook's `mirrored(2)`: no GPU kernel runs, the
    figures mean nothing, the code paths run, and the second strategy's all-reduce does not collide. On one
    physical GPU split in parts the cell times no MirroredStrategy (its parts are not GPUs of their own: the fourth
    review of lesson 07, F8)."""
    done = run_python(LESSON_07_GPU_CELL, timeout=400,
                      env={"COURSE_MODE": "quick", "TF_CPP_MIN_LOG_LEVEL": "2", "PHYSICAL": str(physical)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [l for l in done.stdout.splitlines() if "images/s" in l]
    if physical == 1:
        assert len(lines) == 4 and all("no strategy" in line for line in lines), done.stdout
        return
    # the cell names the kind of device the replicas ran on: the CPUs standing in for the GPUs here
    assert len(lines) == 5 and "on 4 CPUs (policy mixed_float16, jit_compile False)" in lines[-1], done.stdout
    assert "mixed precision + XLA" in lines[3] and "no strategy (policy mixed_float16, jit_compile True)" in lines[3], lines


def test_lesson_07_gpu_cell_fails_when_the_model_is_built_before_the_policy():
    """Eighth review of lesson 07, finding 1: the cell checked `p["policy"]`, the global policy `measure` had set
    itself, not the model's. The REAL measure with `set_global_policy` moved after the build (the model and its
    optimizer in float32, plain SGD) passed the old cell; recording model.dtype_policy and whether the optimizer is
    a LossScaleOptimizer, the cell must fail at its first mixed_float16 run."""
    done = run_python(LESSON_07_GPU_CELL, timeout=400, env={"COURSE_MODE": "quick", "TF_CPP_MIN_LOG_LEVEL": "2",
                                                            "PHYSICAL": "4", "POLICY_AFTER_BUILD": "1"})
    assert done.returncode != 0, done.stdout[-3000:]
    failed = done.stderr.strip().splitlines()[-1]
    print(failed)
    assert failed == "AssertionError: mixed precision: jit_compile False on 1 replicas, policy float32", done.stderr[-3000:]


def test_lesson_07_mirrored_names_its_all_reduce_on_gpus_and_on_cpus():
    """MirroredStrategy's default all-reduce (collective ops) numbers its groups from 1 in every instance,
    so lesson 07's strategy over all GPUs after one over 2 would fail ("joining a group with size 4, but
    that group has size 2"): `mirrored` must name NCCL on GPUs of the kernel's own and a reduction through one
    device elsewhere (CPUs, one GPU split or shared with the learner's workers)."""
    import nbformat
    from types import SimpleNamespace

    cell = next(c.source for c in nbformat.read(ROOT / "notebooks" / "07_scaling_performance.ipynb", as_version=4).cells
                if "def mirrored" in c.source)
    made = []
    distribute = SimpleNamespace(NcclAllReduce=lambda: "nccl", ReductionToOneDevice=lambda: "one device",
                                 MirroredStrategy=lambda devices, cross_device_ops=None: made.append(
                                     (devices, cross_device_ops)))
    # the course's rule (helpers.strategy): NCCL on GPUs of the kernel's own; RING on a split or shared GPU
    for gpus, rule, expected in ((["gpu 0", "gpu 1", "gpu 2", "gpu 3"], "NCCL", "nccl"),
                                 (["gpu 0", "gpu 1", "gpu 2", "gpu 3"], "RING", "one device"), ([], "NCCL", "one device")):
        ns = {"tf": SimpleNamespace(distribute=distribute), "gpus": gpus, "devices": ["d0", "d1", "d2", "d3"],
              "collective_for_this_process": lambda replicas=None, rule=rule: rule}
        exec(cell[cell.index("def mirrored"):], ns)
        ns["mirrored"](2), ns["mirrored"](4)
        assert made[-2:] == [(["d0", "d1"], expected), (["d0", "d1", "d2", "d3"], expected)], made
