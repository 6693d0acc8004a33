"""Whether XLA's auto-clustering compiles a process's steps, read from TF_XLA_FLAGS and `set_jit` as TensorFlow 2.21 does.

Auto-clustering compiles parts of any graph TensorFlow runs, a `jit_compile=False` step included, so
lessons that compare steps without XLA (07, 14) record what each process had. TensorFlow 2.21 decides
it from two settings (TensorFlow's source tree, not installed: tensorflow/compiler/jit/flags.cc,
`GetXlaGlobalJitLevel` in jit/xla_cluster_util.cc, `GetCompilationDevice` in tf2xla/xla_op_registry.cc):

- a global level: `--tf_xla_auto_jit=N` in `TF_XLA_FLAGS` (the last one given wins) when N is not 0,
  else the session's, which `tf.config.optimizer.set_jit("autoclustering")` sets (read back by
  `tf.config.optimizer.get_jit()`). -1 is off whatever `set_jit` says, 0 defers to `set_jit`, any
  other number and `fusible` are on; `single-gpu(N)` sets N for graphs on exactly one GPU only;
- on a GPU that level applies; on a CPU only with `--tf_xla_cpu_global_jit` (or `=true`/`=1`; `=false`
  or `=0` takes it back) in `TF_XLA_FLAGS`, else nothing is compiled however high the level.

Measured on this course's CPU (tests/test_xla_flags.py runs a `jit_compile=False` step and looks for
TensorFlow's "Compiled cluster using XLA!" line): `--tf_xla_auto_jit=2` alone and `set_jit` alone
compile nothing; either with `--tf_xla_cpu_global_jit` compiles; `=0` with it compiles only with
`set_jit`; `=-1` with it and `set_jit` compiles nothing. The GPU rule is from the sources only.

`TF_XLA_FLAGS` may also name a file of flags: XLA's `parse_flags_from_env.cc` (which TensorFlow's flags.cc
calls) reads the value as flags when, past leading spaces and tabs, it starts with '-', else as the name of a
file whose contents are the flags (TensorFlow stops at start when it cannot open it). `flags_in` does the same,
and `auto_clustering` reads its `xla_flags` through it; measured here, a file holding `--tf_xla_auto_jit=2
--tf_xla_cpu_global_jit` named by `TF_XLA_FLAGS` compiled a `jit_compile=False` step (tests/test_xla_flags.py).
"""

from __future__ import annotations

AUTO_JIT = "--tf_xla_auto_jit="
CPU_GLOBAL_JIT = "--tf_xla_cpu_global_jit"
UNREADABLE = "(TF_XLA_FLAGS names a file that cannot be read"  # flags_in's answer then


def flags_in(value: str) -> str:
    """The flags a `TF_XLA_FLAGS` value gives, as XLA reads it: the value itself when empty or when, past leading
    spaces and tabs, it starts with '-'; else the contents of the file it names. A file that cannot be read (XLA
    stops the process) gives a value that does not start with '-', which `auto_clustering` counts as on."""
    if not value.lstrip(" \t") or value.lstrip(" \t").startswith("-"):
        return value
    try:
        with open(value) as named:
            return named.read()
    except OSError as error:
        return f"{UNREADABLE}: {error})"


def xla_flag_pieces(flags: str) -> tuple[list[str], str]:
    """`flags` cut into flags as XLA cuts XLA_FLAGS (`ParseArgvFromString`, parse_flags_from_env.cc): each flag as
    written (a value in single or double quotes, `\\` escaping in double ones, kept whole), and the rest from the first
    piece that does not start with '-', which XLA does not read (nor any flag after it)."""
    spaces, pieces = " \t\r\n", []
    b = len(flags) - len(flags.lstrip(spaces))
    while b < len(flags) and flags[b] == "-":
        e = b
        while e < len(flags) and flags[e].isascii() and (flags[e] in "-_" or flags[e].isalnum()):
            e += 1
        if flags[e:e + 1] == "=" and flags[e + 1:e + 2] in ("'", '"'):
            quote, e = flags[e + 1], e + 2
            while e < len(flags) and flags[e] != quote:
                e += 2 if quote == '"' and flags[e] == "\\" and e + 1 < len(flags) else 1
            e = min(e + 1, len(flags))
        else:
            while e < len(flags) and flags[e] not in spaces:
                e += 1
        pieces.append(flags[b:e])
        b = e + len(flags[e:]) - len(flags[e:].lstrip(spaces))
    return pieces, flags[b:]


DUMP_OPTION = "xla_dump_"  # XLA's options of what it dumps (--xla_dump_to, --xla_dump_hlo_module_re, ...)


def is_dump_flag(piece: str) -> bool:
    """Whether a flag (a piece of `xla_flag_pieces`) sets one of XLA's dump options."""
    return piece.lstrip("-").split("=", 1)[0].startswith(DUMP_OPTION)


def _level(value: str | None, optimizer_jit: str, on_gpu: bool) -> bool:
    """Whether the global level from `--tf_xla_auto_jit=value` (None: not given) and `set_jit` is on."""
    asked = optimizer_jit == "autoclustering"
    if value is None:
        return asked
    if value == "fusible":
        return True
    if value.startswith("single-gpu(") and value.endswith(")"):  # N for one-GPU graphs, the rest as set_jit
        return asked or (on_gpu and value[len("single-gpu("):-1] not in ("0", "-1"))
    try:
        number = int(value)
    except ValueError:  # TensorFlow refuses to start with it: counted as on, never passed as off
        return True
    return asked if number == 0 else number != -1


def _cpu_global_jit(tokens: list[str]) -> bool:
    """Whether the last `--tf_xla_cpu_global_jit[=...]` among `tokens` turns it on."""
    found = False
    for token in tokens:
        if token == CPU_GLOBAL_JIT:
            found = True
        elif token.startswith(CPU_GLOBAL_JIT + "="):
            found = token.split("=", 1)[1].lower() not in ("false", "0")
    return found


def auto_clustering(xla_flags: str, optimizer_jit: str, on_gpu: bool) -> str:
    """What of auto-clustering applies to the steps of a process, "" when none does.

    `xla_flags`: its `TF_XLA_FLAGS` (flags, or the name of a file of flags: `flags_in`); `optimizer_jit`: its `tf.config.optimizer.get_jit()`
    ("autoclustering" or ""); `on_gpu`: its steps run on a GPU. Not empty, the settings that turn it on,
    for a message. A `single-gpu(N)` level is counted wherever the process has a GPU, though TensorFlow
    applies it to one-GPU graphs only: a report of on where it may not be, never the other way.
    """
    given = flags_in(xla_flags)
    if given.startswith(UNREADABLE):  # TensorFlow stops at start: never passed as off
        return given
    tokens = xla_flag_pieces(given)[0]  # TensorFlow cuts TF_XLA_FLAGS as XLA cuts XLA_FLAGS (parse_flags_from_env.cc)
    levels = [t[len(AUTO_JIT):] for t in tokens if t.startswith(AUTO_JIT)]
    if not _level(levels[-1] if levels else None, optimizer_jit, on_gpu):
        return ""
    if not (on_gpu or _cpu_global_jit(tokens)):
        return ""
    said = [f"TF_XLA_FLAGS={xla_flags.strip()!r}"] if xla_flags.strip() else []
    if given is not xla_flags:  # read from the file it names
        said[-1] += f" (the file's flags: {given.strip()!r})"
    return "; ".join(said + ([f"set_jit: {optimizer_jit}"] if optimizer_jit else [])) + (" on a GPU" if on_gpu else "")


def auto_clustering_here() -> str:
    """`auto_clustering` of this process: its TF_XLA_FLAGS, `get_jit()`, and whether it sees a GPU."""
    import os

    from .host import import_tensorflow

    tf = import_tensorflow()
    return auto_clustering(os.environ.get("TF_XLA_FLAGS", ""), tf.config.optimizer.get_jit(),
                           bool(tf.config.list_logical_devices("GPU")))


class XlaDumps:
    """Directories XLA dumps every module it compiles into (`--xla_dump_to` in `XLA_FLAGS`), one a process or a
    multi-worker run, under a private directory: one that holds its processes' canaries (below) and nothing else
    shows that XLA compiled nothing else there, whatever the processes' settings said (lesson 07's proof). XLA reads
    `XLA_FLAGS` once, at its first compile (measured on TensorFlow 2.21 CPU: set after TensorFlow had set up its
    devices, still honoured); each directory is made here,
    and XLA writes into it only what it compiles (measured: 11 files for a small `jit_compile=True` function, 422 to
    439 for a run of lesson 07's 2 workers auto-clustered; nothing compiled, none).

    An empty directory shows nothing unless XLA read the dump's flag: a process that drops `XLA_FLAGS` before its
    first compile compiles without a trace there. So each process the lesson compares compiles a canary first, a tiny
    `jit_compile=True` function of a name of its own, whose module in the directory (`canary_dump`) shows the flag
    reached XLA in that process; anything else there is a module XLA compiled besides.

    Made before TensorFlow is imported, it points this process's own `XLA_FLAGS` at `kernel`; made after, it leaves
    them alone (XLA may have read them already) and `files("kernel")` is None, as for a missing directory. An
    `XLA_FLAGS` naming a file of flags (XLA's other form, `flags_in`) is replaced by the file's flags, to which the
    dump's flag is added; a file that cannot be read is a CourseError naming XLA_FLAGS.

    Every `--xla_dump_*` flag of those is left out (with a warning): XLA's dump options filter or limit what it dumps
    (`--xla_dump_hlo_module_re`, `--xla_dump_max_hlo_modules`), and a process with one compiled its steps while only the
    canary was dumped (measured: a worker adding `--xla_dump_hlo_module_re=.*canary.*`); a process can still set its
    own, which the canary's `.debug_options` file shows (`dump_filters`). Flags after a piece that does not start with
    '-' are never read by XLA, the dump's included: a CourseError too."""

    def __init__(self, root=None, environ=None):
        import os
        import sys
        import tempfile
        from pathlib import Path

        self.environ = os.environ if environ is None else environ
        # the flags this process was started with, kept for its workers: XLA reads XLA_FLAGS as TF_XLA_FLAGS (`flags_in`),
        # so a file's name is replaced by the flags in it (the name with a flag after it would be read as one file name)
        self.given = flags_in(self.environ.get("XLA_FLAGS", ""))
        if self.given.startswith(UNREADABLE):
            from .errors import CourseError

            raise CourseError(f"XLA_FLAGS={self.environ['XLA_FLAGS']!r} names a file of flags that cannot be read "
                              f"({self.given[len(UNREADABLE) + 2:-1]}; XLA would stop at its first compile): give "
                              "XLA_FLAGS as flags (starting with '-') or the path of a readable file, or unset it")
        pieces, unread = xla_flag_pieces(self.given)
        if unread:
            from .errors import CourseError

            raise CourseError(f"XLA_FLAGS: XLA reads no flag from {unread!r} on (not starting with '-'), so none added "
                              "after it either: give XLA_FLAGS as flags, each starting with '-', or unset it")
        self.left_out = [piece for piece in pieces if is_dump_flag(piece)]
        if self.left_out:
            import warnings

            warnings.warn(f"XLA_FLAGS: left out {self.left_out}: the lesson's dumps take every --xla_dump_* flag "
                          "(a filter or limit would hide modules XLA compiles)", stacklevel=2)
        self.given = " ".join(piece for piece in pieces if not is_dump_flag(piece))
        self.root = Path(root or tempfile.mkdtemp(prefix="xla_dumps_"))
        self.kernel = "tensorflow" not in sys.modules
        if self.kernel:
            self.environ["XLA_FLAGS"] = self.flags("kernel")

    def flags(self, name: str) -> str:
        """`XLA_FLAGS` that dump into the directory `name` (made now), after the flags this process was given."""
        (self.root / name).mkdir(parents=True, exist_ok=True)
        return f"{self.given} --xla_dump_to={self.root / name}".strip()

    def env(self, name: str, base: dict | None = None) -> dict:
        """An environment for processes that dump into `name`: `base` (else this process's) with their XLA_FLAGS."""
        return {**(self.environ if base is None else base), "XLA_FLAGS": self.flags(name)}

    def files(self, name: str) -> list[str] | None:
        """The files XLA wrote into `name`, sorted; None if it is missing (or is this process's, made too late)."""
        directory = self.root / name
        if (name == "kernel" and not self.kernel) or not directory.is_dir():
            return None
        return sorted(p.name for p in directory.iterdir())

    def options(self, name: str) -> dict[str, str] | None:
        """Each `.debug_options` file XLA wrote into `name` (one a module: the DebugOptions it compiled it with, those
        not at their defaults; measured, unfiltered: `xla_dump_to: "<the directory>"` alone), by name; None as `files`."""
        names = self.files(name)
        return None if names is None else {n: (self.root / name / n).read_text() for n in names if n.endswith(".debug_options")}

    def remove(self) -> None:
        """Remove every dump directory (the root with them), once what they hold has been read (`files`)."""
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


def _canary_modules(canaries: list[str]) -> dict:
    import re

    return {c: re.compile(rf"module_\d+\.a_inference_{re.escape(c)}_\d+__") for c in canaries}


def dump_filters(options: dict[str, str] | None, canaries: list[str]) -> dict[str, list[str]]:
    """An XLA dump directory's `.debug_options` files (`XlaDumps.options`; None: no directory) read against the
    `canaries` of the processes that dump there: each canary whose process dumped under options that can leave modules
    out, with them: every `xla_dump_*` option but `xla_dump_to` in its module's file (XLA_FLAGS are read once a
    process, so its canary's options are those of all it compiled), or a line saying its module has no such file
    (`--xla_dump_max_hlo_modules=1` left the canary's first file only, measured). Empty: every canary's process dumped
    unfiltered. Measured on TensorFlow 2.21 CPU: `--xla_dump_hlo_module_re=.*canary.*` dumped the canary with
    `xla_dump_hlo_module_re: ".*canary.*"` in its file, and nothing of the steps it compiled."""
    found = {}
    for canary, module in _canary_modules(canaries).items():
        texts = [text for name, text in (options or {}).items() if module.match(name)]
        said = [line.strip() for text in texts for line in text.splitlines()
                if line.strip().startswith(DUMP_OPTION) and not line.strip().startswith(DUMP_OPTION + "to:")]
        if said or not texts:
            found[canary] = said or ["(no .debug_options file of its module)"]
    return found


def canary_dump(files: list[str] | None, canaries: list[str]) -> tuple[list[str], list[str]]:
    """An XLA dump directory's `files` (None: no directory) read against the `canaries` of the processes that dump
    there, each the name of a `jit_compile=True` Python function the process compiled first: the canaries with no
    module among the files (the dump's flag did not reach XLA there; all of them for a missing directory), and the
    files of no canary's module (anything else XLA compiled). TensorFlow 2.21 names each file of a `tf.function`'s
    module `module_NNNN.a_inference_<function name>_<number>__...` (measured: 11 files, `.txt`, `.mlir`, `.ll`, `.o`,
    `.debug_options`, for one CPU function), so a canary named `xla_dump_canary_1` is not taken for `..._10`."""
    mine = _canary_modules(canaries)
    if files is None:
        return list(canaries), []
    return ([c for c, pattern in mine.items() if not any(pattern.match(f) for f in files)],
            [f for f in files if not any(pattern.match(f) for pattern in mine.values())])
