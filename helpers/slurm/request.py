"""What a job asks Slurm for (`COURSE_SLURM_*`), spread over a partition's nodes and GPUs, as #SBATCH lines."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import CourseError
from ..settings import value
from .commands import checked_word
from .nodes import partition_shape


@dataclass
class SlurmRequest:
    """What the engines' job asks Slurm for; None leaves it to the site's defaults."""

    tasks_per_node: int | None = None
    nodes: int | None = None
    time: str | None = "01:00:00"
    partition: str | None = None
    account: str | None = None
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None

    INTEGER_FIELDS = ("tasks_per_node", "nodes", "cpus_per_task", "gpus_per_task")

    @classmethod
    def from_env(cls) -> "SlurmRequest":
        """A request from `COURSE_SLURM_<FIELD>` variables (e.g. COURSE_SLURM_PARTITION=gpu).

        A centre or trainer sets these once (in the JupyterHub environment or a shell profile)
        and every notebook's engines job asks for the same resources, with no edits.
        """
        values = {}
        for name in cls.__dataclass_fields__:
            raw = value(f"COURSE_SLURM_{name.upper()}")
            if raw is None or raw == "":
                continue
            if name in cls.INTEGER_FIELDS:
                if not raw.isdigit() or int(raw) < 1:
                    raise CourseError(f"COURSE_SLURM_{name.upper()}={raw!r} must be a whole number >= 1")
                values[name] = int(raw)
            else:
                values[name] = checked_word(f"COURSE_SLURM_{name.upper()}", raw)
        return cls(**values)

    def spread(self, n: int) -> "SlurmRequest":
        """This request with `n` engines spread the way the partition's nodes say.

        Asked for tasks only, Slurm packs engines onto as few nodes as fit (2 and 3 engines all
        landed on node1 of the 2-node local Slurm). Unless the request (or COURSE_SLURM_*)
        already places them: on GPU nodes one engine per GPU (`--gpus-per-task=1`, as many per
        node as it has GPUs), on CPU nodes one engine per node while there are nodes.
        """
        if self.tasks_per_node is not None or self.nodes is not None:
            return self
        nodes, gpus = partition_shape(self.partition)
        if self.gpus_per_task is not None or gpus:
            per_task = self.gpus_per_task or 1
            per_node = max(1, min(n, gpus // per_task)) if gpus else 1
            return replace(self, gpus_per_task=per_task, tasks_per_node=per_node, nodes=-(-n // per_node))
        use = max(1, min(n, nodes))
        return replace(self, nodes=use, tasks_per_node=-(-n // use))

    def spread_any(self) -> tuple["SlurmRequest", list[str]]:
        """`spread` for a batch script written before `n` is known (the ipcluster profile's): on
        GPU nodes `--gpus-per-task` alone (Slurm then fills a node's GPUs before the next node;
        adding `--ntasks-per-node=G` was refused for fewer than G tasks); on CPU nodes
        `--spread-job` spreads the tasks over as many nodes as there are."""
        if self.tasks_per_node is not None or self.nodes is not None:
            return self, []
        nodes, gpus = partition_shape(self.partition)
        if self.gpus_per_task is not None or gpus:
            per_task = self.gpus_per_task or 1
            return replace(self, gpus_per_task=per_task), []
        return self, ["#SBATCH --spread-job"]

    def sbatch_lines(self) -> list[str]:
        for name in ("time", "partition", "account"):
            if getattr(self, name):
                checked_word(name, str(getattr(self, name)))
        pairs = [("nodes", self.nodes), ("ntasks-per-node", self.tasks_per_node), ("time", self.time),
                 ("partition", self.partition),
                 ("account", self.account), ("cpus-per-task", self.cpus_per_task),
                 ("gpus-per-task", self.gpus_per_task)]
        return [f"#SBATCH --{key}={value}" for key, value in pairs if value not in (None, "")]
