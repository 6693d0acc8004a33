"""The course's JupyterHub plugin, loaded by the hub (slurm/jupyterhub/jupyterhub_config.py), never by a learner.

- `spawner`: batchspawner's `SlurmSpawner` for a class, its failures said in words a learner can
  act on and its hub API closed to what a learner sends.

A package of its own, outside `helpers` (the learners' import path) and beside `course_server`
(the extension of the servers the hub starts).
"""
