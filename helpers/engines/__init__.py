"""ipyparallel engines for `%%px` cells, however they are started: one package, split the way
ipyparallel splits its own `cluster/`.

- `cluster`: a cluster's whole life: start (local or Slurm), attach to a running one
  (`COURSE_CLUSTER`) or to an engines job, stop, stop by id; the `Engines` a lesson holds.
- `on_engine`: the code that runs on the engines (identity, a worker's rank and TF_CONFIG).
- `slurm`: the Slurm side: what to ask for, the `srun` launcher, the engines job.
- `profile`: writes the course's ipcluster profile, from `cluster`'s settings.
- `ownership`: which processes and jobs are provably this kernel's, so stops touch only those.
- `kernel_watch`: a watcher process that stops what a kernel started when the kernel dies.

Lessons need only `start_engines` (and lesson 06 `failure_summary`).
"""

__all__ = ["Engines", "attach", "failure_summary", "start_engines"]


def __getattr__(name: str):
    """`from helpers.engines import start_engines` imports `cluster` (and ipyparallel) on first use:
    the kernel watcher, a process per kernel, imports `helpers.engines.kernel_watch` without them
    (12 MB instead of 41 MB, 0.02 s instead of 0.26 s)."""
    if name in __all__:
        from . import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
