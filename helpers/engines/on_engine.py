"""The code that runs on the engines: sent by `helpers.engines.cluster` with `apply_sync`.

Each function imports what it needs inside itself: it is pickled by reference and runs in the
engine's process, whose module globals are not this module's.
"""

from __future__ import annotations


def identity() -> dict:
    import os
    import socket

    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = "127.0.0.1"
    procid = os.environ.get("SLURM_PROCID")
    return {"host": host, "pid": os.getpid(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "procid": int(procid) if procid is not None and procid.isdigit() else None,
            "slurm_step": "SLURM_STEP_NUM_TASKS" in os.environ and procid is not None,
            "host_address": "localhost" if os.environ.get("IPP_COURSE_LOCAL") else address}


def free_port() -> int:
    from helpers.resolver import free_port as course_free_port

    return course_free_port("0.0.0.0")


def slurm_tf_config() -> dict:
    """This engine's TF_CONFIG from its Slurm step: the workers and rank the course's Slurm
    resolver gives (`helpers.resolver.slurm_resolver`), its GPUs bound as that resolver binds
    them and its port checked free; so TensorFlow's documented `MultiWorkerMirroredStrategy()`,
    which reads only TF_CONFIG, joins the same cluster."""
    from helpers.resolver import make_tf_config, resolve_step

    layout, _plan, workers = resolve_step()
    return make_tf_config(workers, layout.rank)


def configure(rank: int, tf_config: dict | None, gpu_share: tuple[int, int] | None = None,
              most_gpus: int | None = None) -> dict[str, str]:
    """Make this engine worker `rank`, with at most `most_gpus` of its share of GPUs (None: all of
    its share); returns the GPUs it uses ("" on CPU) and the plan's note ("" if none): returned, not
    printed, since ipyparallel keeps what `apply_sync` prints in the result, out of the learner's sight."""
    import json
    import logging
    import os
    import sys

    from helpers import gpus
    from helpers.environment import remove_proxies
    from helpers.host import import_tensorflow

    note = ""
    if gpu_share is not None:
        note = gpus.apply(gpus.plan_for_engine(*gpu_share, most_gpus)).note
    remove_proxies()
    import_tensorflow()  # quietly: no C++ start-up lines in %%px cells (creates no TF context)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # no INFO lines in %%px cells
    os.environ["COURSE_RANK"] = str(rank)
    if tf_config is None:
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    if not isinstance(sys.stdout, RankPrefixed):
        sys.stdout = RankPrefixed(sys.stdout, f"[rank {rank}] ")
        flush_after_every_cell()
    return {"gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "") if gpus.visible_gpus() else "", "note": note}


def flush_after_every_cell() -> None:
    """Send a cell's last output before its result: `%%px` streams output only until the result
    arrives, so a line still in the engine's buffer then (ipykernel flushes on a timer) was
    missing from the cell now and then (the chief's line of notebook 03's evaluate cell)."""
    import sys as engine_sys  # this runs on the engine: no module globals there

    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()

    def flush() -> None:
        engine_sys.stdout.flush()
        engine_sys.stderr.flush()

    if shell is not None:
        shell.events.register("post_execute", flush)


class RankPrefixed:
    """A stdout that starts every line with the worker's rank (engine ids are not ranks)."""

    def __init__(self, stream, prefix: str):
        self._stream, self._prefix, self._at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        return self._stream.write("".join(out))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def was_used() -> bool:
    import sys

    from helpers.settings import value

    return value("COURSE_RANK") is not None or "tensorflow" in sys.modules
