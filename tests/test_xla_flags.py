"""helpers.xla_flags: whether XLA's auto-clustering compiles a process's steps, from TF_XLA_FLAGS and set_jit:
the rules on planted settings, and on this CPU against what TensorFlow 2.21 really compiles."""

import os
import subprocess
import sys

import pytest

from helpers.xla_flags import auto_clustering

ON, OFF = True, False


@pytest.mark.parametrize("flags,optimizer_jit,on_gpu,expected", [
    ("", "", OFF, OFF),
    ("", "", ON, OFF),
    ("--tf_xla_auto_jit=2", "", OFF, OFF),  # a CPU compiles nothing without --tf_xla_cpu_global_jit
    ("--tf_xla_auto_jit=2", "", ON, ON),
    ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", "", OFF, ON),
    ("--tf_xla_auto_jit=1 --tf_xla_cpu_global_jit=true", "", OFF, ON),
    ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit=0", "", OFF, OFF),
    ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_cpu_global_jit=false", "", OFF, OFF),  # the last wins
    ("", "autoclustering", OFF, OFF),
    ("", "autoclustering", ON, ON),
    ("--tf_xla_cpu_global_jit", "autoclustering", OFF, ON),
    ("--tf_xla_auto_jit=0", "", ON, OFF),  # 0 defers to set_jit: not on by itself
    ("--tf_xla_auto_jit=0", "autoclustering", ON, ON),
    ("--tf_xla_auto_jit=-1", "autoclustering", ON, OFF),  # -1 is off whatever set_jit says
    ("--tf_xla_auto_jit=2 --tf_xla_auto_jit=-1", "", ON, OFF),  # the last one given wins
    ("--tf_xla_auto_jit=-1 --tf_xla_auto_jit=2", "", ON, ON),
    ("--tf_xla_auto_jit=fusible", "", ON, ON),
    ("--tf_xla_auto_jit=single-gpu(2)", "", ON, ON),  # on where the process has a GPU (one-GPU graphs)
    ("--tf_xla_auto_jit=single-gpu(2) --tf_xla_cpu_global_jit", "", OFF, OFF),  # on a CPU: set_jit's, off
    ("--tf_xla_auto_jit=single-gpu(2) --tf_xla_cpu_global_jit", "autoclustering", OFF, ON),
    ("--tf_xla_auto_jit=abc", "", ON, ON),  # TensorFlow refuses to start: never passed as off
    ("--tf_xla_enable_lazy_compilation=false", "", ON, OFF)])  # other XLA flags: nothing about the level
def test_the_level_and_the_cpu_flag_as_tensorflow_resolves_them(flags, optimizer_jit, on_gpu, expected):
    said = auto_clustering(flags, optimizer_jit, on_gpu)
    assert bool(said) == expected, (flags, optimizer_jit, on_gpu, said)
    if said:  # the settings that turned it on, for a message
        assert (flags.strip() in said if flags.strip() else True) and optimizer_jit in said


PROBE = """
import sys
import tensorflow as tf
from helpers.xla_flags import auto_clustering_here
if sys.argv[1]:
    tf.config.optimizer.set_jit(sys.argv[1])
w = tf.Variable(tf.random.normal([64, 64]))

@tf.function(jit_compile=False)
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.nn.relu(x @ w) ** 2)
    w.assign_sub(0.01 * tape.gradient(loss, w))
    return loss

for _ in range(3):
    step(tf.random.normal([32, 64]))
print("SAID " + repr(auto_clustering_here()))
"""


@pytest.mark.parametrize("flags,optimizer_jit", [
    ("--tf_xla_auto_jit=2", ""), ("", "autoclustering"), ("--tf_xla_auto_jit=0 --tf_xla_cpu_global_jit", ""),
    ("--tf_xla_auto_jit=-1 --tf_xla_cpu_global_jit", "autoclustering"), ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit=0", ""),
    ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", ""), ("--tf_xla_cpu_global_jit", "autoclustering")])
def test_what_it_says_is_what_tensorflow_compiles_on_this_cpu(flags, optimizer_jit):
    """A jit_compile=False step in a process of its own (TensorFlow reads TF_XLA_FLAGS once, at start):
    TensorFlow logs "Compiled cluster using XLA!" (at INFO, once a process) exactly when XLA compiled part of
    it, and auto_clustering_here must say on exactly then. The first five compile nothing; the old
    substring reading (`"auto_jit" in TF_XLA_FLAGS`, or set_jit) called all five on."""
    from tests.conftest import ROOT

    env = {**os.environ, "TF_XLA_FLAGS": flags, "TF_CPP_MIN_LOG_LEVEL": "0"}
    done = subprocess.run([sys.executable, "-c", PROBE, optimizer_jit], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    said = next(line[5:] for line in done.stdout.splitlines() if line.startswith("SAID "))
    compiled = "Compiled cluster using XLA!" in done.stderr
    assert (said != "''") == compiled, f"TF_XLA_FLAGS={flags!r}, set_jit {optimizer_jit!r}: compiled {compiled}, said {said}"


@pytest.mark.parametrize("in_file,optimizer_jit,on_gpu,expected", [
    ("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit\n", "", OFF, ON),
    ("--tf_xla_auto_jit=2\n", "", OFF, OFF),  # the file's flags by the same rules: a CPU compiles nothing without the flag
    ("--tf_xla_auto_jit=-1 --tf_xla_cpu_global_jit", "autoclustering", OFF, OFF),
    (None, "", OFF, ON)])  # a file that cannot be read: TensorFlow stops at start, never passed as off
def test_a_value_not_starting_with_a_dash_names_a_file_of_flags(in_file, optimizer_jit, on_gpu, expected, tmp_path):
    """Thirteenth review of lesson 07, finding 4: XLA reads TF_XLA_FLAGS as the name of a file of flags when it does
    not start with '-' (parse_flags_from_env.cc); the old reading took the name for flags, found none, and said off."""
    named = tmp_path / "xla_flags"
    if in_file is not None:
        from helpers.xla_flags import flags_in

        named.write_text(in_file)
        assert flags_in(str(named)) == in_file and flags_in(f"  {in_file}") == f"  {in_file}"
    said = auto_clustering(str(named), optimizer_jit, on_gpu)
    assert bool(said) == expected, (in_file, optimizer_jit, on_gpu, said)
    assert not said or str(named) in said


def test_a_file_of_flags_compiles_on_this_cpu_and_is_said_to(tmp_path):
    """Thirteenth review of lesson 07, finding 4, on TensorFlow itself: TF_XLA_FLAGS naming a file that holds
    '--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit' compiles a jit_compile=False step (TensorFlow's "Compiled cluster
    using XLA!"), and auto_clustering_here says so (the old reading said '' here: DID NOT RAISE in the lesson's proof)."""
    from tests.conftest import ROOT

    named = tmp_path / "xla_flags"
    named.write_text("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit\n")
    env = {**os.environ, "TF_XLA_FLAGS": str(named), "TF_CPP_MIN_LOG_LEVEL": "0"}
    done = subprocess.run([sys.executable, "-c", PROBE, ""], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    said = next(line[5:] for line in done.stdout.splitlines() if line.startswith("SAID "))
    assert "Compiled cluster using XLA!" in done.stderr, done.stderr[-3000:]
    assert said != "''", f"TF_XLA_FLAGS={named} (a file of flags): compiled, said {said}"


@pytest.mark.parametrize("form", ["flags", "file"])
def test_xla_dumps_adds_its_flag_to_the_flags_xla_flags_gives(form, tmp_path):
    """Lesson 07, 19th review, finding 3: XLA_FLAGS may name a file of flags (XLA reads it as TF_XLA_FLAGS, `flags_in`);
    XlaDumps put its dump flag after the file's name, and XLA read the whole value as one file name and stopped at its
    first compile. Now the file's flags are given inline, the dump's after them, as for flags given as such."""
    from helpers.xla_flags import XlaDumps

    flags = "--xla_cpu_enable_fast_math=false"
    named = tmp_path / "xla.flags"
    named.write_text(flags + "\n")
    dumps = XlaDumps(tmp_path / "dumps", environ={"XLA_FLAGS": flags if form == "flags" else str(named)})
    assert dumps.flags("run").split() == [flags, f"--xla_dump_to={tmp_path / 'dumps' / 'run'}"], dumps.flags("run")
    assert dumps.env("run", {})["XLA_FLAGS"].startswith("-")


def test_xla_dumps_refuses_an_xla_flags_file_it_cannot_read(tmp_path):
    """An XLA_FLAGS naming no readable file: a CourseError naming the variable, not a value XLA stops on."""
    from helpers.errors import CourseError
    from helpers.xla_flags import XlaDumps

    with pytest.raises(CourseError, match="XLA_FLAGS='.*missing.flags' names a file of flags that cannot be read"):
        XlaDumps(tmp_path / "dumps", environ={"XLA_FLAGS": str(tmp_path / "missing.flags")})


def test_xla_dumps_with_a_file_of_flags_lets_xla_compile_and_dump(tmp_path):
    """On TensorFlow itself: XLA_FLAGS naming a file, XlaDumps made before TensorFlow (as lesson 07's set-up cell): a
    jit_compile=True function compiles and dumps its modules. On the old XlaDumps XLA stopped the process at that
    compile ("Could not open file \"<file> --xla_dump_to=...\" to read flags for environment variable \"XLA_FLAGS\"")."""
    from tests.conftest import ROOT

    named = tmp_path / "xla.flags"
    named.write_text("--xla_cpu_enable_fast_math=false\n")
    probe = ("import sys\nfrom helpers.xla_flags import XlaDumps\ndumps = XlaDumps(sys.argv[1])\nimport tensorflow as tf\n"
             "tf.function(jit_compile=True)(lambda x: x * 2 + 1)(tf.ones(3))\nprint('FILES', len(dumps.files('kernel')))\n")
    env = {**os.environ, "XLA_FLAGS": str(named), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "dumps")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    files = int(next(line[6:] for line in done.stdout.splitlines() if line.startswith("FILES ")))
    assert files > 0, done.stdout


@pytest.mark.parametrize("given,kept,left_out", [
    ("--xla_dump_hlo_module_re=.*canary.*", "", ["--xla_dump_hlo_module_re=.*canary.*"]),
    ("--xla_cpu_enable_fast_math=false --xla_dump_max_hlo_modules=1", "--xla_cpu_enable_fast_math=false",
     ["--xla_dump_max_hlo_modules=1"]),
    # a quoted value with a space is one flag, as XLA reads it (parse_flags_from_env.cc), and one dash is a flag too
    ('--xla_dump_hlo_module_re=".*canary .*" -xla_dump_to=/elsewhere --xla_cpu_enable_fast_math=false',
     "--xla_cpu_enable_fast_math=false", ['--xla_dump_hlo_module_re=".*canary .*"', "-xla_dump_to=/elsewhere"]),
    ("--xla_cpu_enable_fast_math=false", "--xla_cpu_enable_fast_math=false", [])])
def test_xla_dumps_leaves_out_every_dump_flag_it_was_given(given, kept, left_out, tmp_path):
    """Lesson 07, twentieth review (open until the 21st): a process whose XLA_FLAGS carry a dump filter compiled its
    steps while XLA dumped only its canary, and the proof passed. XlaDumps kept every flag it was given, filters included
    (the old one gave the first row '--xla_dump_hlo_module_re=.*canary.* --xla_dump_to=...'); now it leaves out every
    --xla_dump_* flag, with a warning naming them, and adds its own."""
    from helpers.xla_flags import XlaDumps

    with pytest.warns(UserWarning, match="left out") if left_out else __import__("contextlib").nullcontext():
        dumps = XlaDumps(tmp_path / "dumps", environ={"XLA_FLAGS": given})
    assert dumps.flags("run") == f"{kept} --xla_dump_to={tmp_path / 'dumps' / 'run'}".strip(), dumps.flags("run")
    assert dumps.left_out == left_out


def test_xla_dumps_refuses_flags_xla_would_stop_reading_before_its_own(tmp_path):
    """XLA reads XLA_FLAGS up to the first piece that does not start with '-' (parse_flags_from_env.cc): the dump's
    flag after it would never be read. A CourseError, not a value whose dump flag XLA drops."""
    from helpers.errors import CourseError
    from helpers.xla_flags import XlaDumps

    with pytest.raises(CourseError, match="XLA reads no flag from 'stray --xla_cpu_enable_fast_math=false' on"):
        XlaDumps(tmp_path / "dumps", environ={"XLA_FLAGS": "--xla_cpu_enable_fast_math=true stray --xla_cpu_enable_fast_math=false"})


@pytest.mark.parametrize("text,found", [
    ('xla_dump_to: "/d"\n', {}),
    ('xla_dump_to: "/d"\nxla_dump_hlo_module_re: ".*canary.*"\n', {"xla_dump_canary_0": ['xla_dump_hlo_module_re: ".*canary.*"']}),
    ('xla_cpu_enable_fast_math: false\nxla_dump_to: "/d"\nxla_dump_max_hlo_modules: 20\n', {"xla_dump_canary_0": ["xla_dump_max_hlo_modules: 20"]}),
    (None, {"xla_dump_canary_0": ["(no .debug_options file of its module)"]})])
def test_dump_filters_reads_the_canarys_debug_options(text, found):
    """dump_filters on a canary's `.debug_options` file as XLA writes it (TensorFlow 2.21 CPU: the options not at their
    defaults, one a line): any xla_dump_* option but xla_dump_to is a filter or limit; no file for the canary's module
    (another function's does not count) leaves nothing to show it had none."""
    from helpers.xla_flags import dump_filters

    name = "module_0000.a_inference_xla_dump_canary_0_11__XlaMustCompile_true_.1.debug_options"
    other = {"module_0001.a_inference_xla_dump_canary_01_12__XlaMustCompile_true_.1.debug_options": 'xla_dump_to: "/d"\n'}
    options = {**other, **({name: text} if text is not None else {})}
    assert dump_filters(options, ["xla_dump_canary_0"]) == found
    assert dump_filters(None, ["xla_dump_canary_0"]) == {"xla_dump_canary_0": ["(no .debug_options file of its module)"]}
