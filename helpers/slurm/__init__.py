"""Slurm, in a room of its own: what the course knows of Slurm, whoever asks (engines, doctor, workers, hub, lessons).

- `commands`: Slurm's commands run checked (a deadline, one-line errors); `slurm_reachable`.
- `nodes`: partitions (shape, node sharing), reservations, a node's and the controller's address.
- `request`: `SlurmRequest`, what a job asks for (`COURSE_SLURM_*`), spread over the nodes.
- `queue`: a job's state and steps, the CPUs running steps hold, whose a job is.
- `step`: the job and step this process runs in, every task's place, its port block.
- `submit`: the environment and options of a job a lesson submits (`COURSE_CLASS_LAYOUT`).
- `directives`: the options of a batch script's `#SBATCH` block, as `sbatch` reads them.
- `login_node`: whether local multi-worker TensorFlow may run here (never on a login node).

The engines' own Slurm side (batch template, `srun` launcher, engines job) stays in
`helpers.engines.on_slurm`. Importing this package runs no Slurm command and imports no TensorFlow.
"""

from .commands import slurm_reachable

__all__ = ["slurm_reachable"]
