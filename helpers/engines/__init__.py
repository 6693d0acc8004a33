"""ipyparallel engines for `%%px` cells, however they are started: one package, split the way
ipyparallel splits its own `cluster/`, holding only what starts, attaches to and stops engines.

- `cluster`: a cluster's whole life: start (local or Slurm), take over an engines job, or attach
  to a running cluster (`COURSE_CLUSTER`); stop, stop by id; the `Engines` a lesson holds.
- `on_engine`: the code that runs on the engines (identity, a worker's rank and TF_CONFIG).
- `on_slurm`: engines on Slurm: where they start (`COURSE_ENGINES`), the batch template, the `srun` launcher, the engines job.
- `ipcluster_profile`: writes the course's ipcluster profile, from `cluster`'s settings.
- `ownership`: which processes and jobs are provably this kernel's, so stops touch only those.

What the course knows of Slurm itself is `helpers.slurm`; the kernel-death watcher is
`helpers.kernel_watch`. Lessons need only `start_engines` (lesson 06 also `failure_summary`, lesson 04 the `cluster`
module, lesson 00 `on_slurm.want_slurm`: where engines start); outside this package nothing else is
imported from it (tests/test_package_layout.py).
"""

__all__ = ["Engines", "adopt_job", "failure_summary", "start_engines"]


def __getattr__(name: str):
    """`from helpers.engines import start_engines` imports `cluster` (and ipyparallel) on first use:
    a process that loads only the launcher (`helpers.engines.on_slurm`, which ipyparallel imports back
    by name) or `ownership` does not pay for the rest."""
    if name in __all__:
        from . import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
