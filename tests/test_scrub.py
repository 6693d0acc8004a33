"""What `make site` scrubs from executed lessons (helpers/commands/scrub.py), line by line: identities
go, what the lesson teaches stays. The whole site is checked in test_site."""

from __future__ import annotations

import pytest

from helpers.commands.scrub import Identities, scrub_text

PRINTED = """TF HPC course doctor: zq7learner@login3q.hpc.example, 2026-11-26 04:00 UTC, course /home/zq7learner/c
rank 0 on nid004711 (GPU 0), rank 1 on nid004712
TF_CONFIG={"cluster": {"worker": ["nid004711:45678", "nid004712:45679"]}, "task": {"type": "worker", "index": 0}}
controller tcp://10.77.0.191:56789 and 127.0.0.1:40123, localhost:5555, port 8888
Submitted batch job 987654; SLURM_JOB_ID=987654 JobId=987654 UserId=zq7learner(1001) NodeList=nid[004711-004712]
step 987654.0 on nid004711; 987654.batch StepId=987654.1; slurm-987654.out course-job987654
results in /home/zq7learner/out, /root/x; host: nid004711.hpc.example"""


def test_identities_are_replaced_by_placeholders():
    names = Identities()
    names.learn(PRINTED)
    scrubbed = scrub_text(PRINTED, names)
    for secret in ("zq7learner", "login3q", "nid0047", "10.77.0.191", "45678", "56789", "40123", "5555", "8888",
                   "987654", "/home/", "/root"):
        assert secret not in scrubbed, (secret, scrubbed)
    assert scrubbed.splitlines()[:3] == [
        "TF HPC course doctor: <user>@<host>, 2026-11-26 04:00 UTC, course ~/c",
        "rank 0 on <host> (GPU 0), rank 1 on <host>",
        'TF_CONFIG={"cluster": {"worker": ["<address>", "<address>"]}, "task": {"type": "worker", "index": 0}}']
    assert "tcp://<address> and 127.0.0.1:<port>, localhost:<port>, port <port>" in scrubbed
    assert "step <job>.0 on <host>; <job>.batch StepId=<job>.1; slurm-<job>.out course-job<job>" in scrubbed
    assert "&lt;user&gt;@&lt;host&gt;" in scrub_text(PRINTED, names, markup=True)


@pytest.mark.parametrize("line", [
    "Epoch 1/3: loss 2.2031, accuracy 0.1562; first step 1.5 s, median step 0.021 s, 3047 images/s",
    "/job:worker/replica:0/task:1/device:CPU:0 MultiWorkerMirroredStrategy with 2 workers",
    "TensorFlow 2.21.0, Keras 3.15.1, ipyparallel 9.2.0; COURSE_PORT_RANGE=12000-12999",
    "controller on 127.0.0.1, never 0.0.0.0; the step 12: loss 0.123",
    "2 nodes, Nodes: 2, nodes=2, node: 0, rank 0 on GPU 1, host: localhost, user: 3",
    "From: tensorflow/tensorflow@sha256:<digest>; import tensorflow as tf; pip install tensorflow-cpu",
])
def test_what_the_lessons_teach_stays(line):
    names = Identities()
    names.learn(PRINTED + "\n" + line)
    assert scrub_text(line, names) == line
