"""MultiWorkerMirroredStrategy under Slurm: a job's plumbing in one file, to take home.

Copy this file beside your training script and `import mwms_slurm` (Python puts the script's
directory on `sys.path`). TensorFlow and Keras are imported inside the functions that use them,
so a script can print its plan without starting TensorFlow. In a training script:

    mwms_slurm.fix_keras_fit_for_multiworker()  # Keras 3.15: model.fit under the strategy
    strategy = mwms_slurm.make_strategy()       # TF_CONFIG from Slurm; before any other TensorFlow op

Settings, read from the environment (the job's sbatch file sets the first; leave the second unset
unless your workers share a GPU):
    MWMS_PORT_BASE          the first port of the job's workers on a node (default 20000): a worker
                            listens on it plus its index on its node; a range your firewall opens
                            between compute nodes
    COURSE_GPU_MEMORY_MIB   a share, in MiB, of a GPU other processes use too: each GPU becomes one
                            logical GPU of that size, and the all-reduce RING instead of NCCL (NCCL
                            refuses two ranks on one device); unset, memory grows as needed. The name is
                            the course's, whose `gpu` class layout sets it, so its jobs need no other;
                            rename it in your copy if you like

From the course "Data-parallel TensorFlow on HPC" (lesson 08 explains each function); checked on
CPUs (TensorFlow 2.21, Keras 3.15.1, Slurm 22.05). NOTHING here has run on a GPU: memory growth,
the memory share, NCCL and the start-up all-reduce over NCCL are GPU-only branches.
"""
import itertools
import json
import os
import subprocess
import sys

VERIFIED_KERAS = (3, 15)  # the Keras (major, minor) the fit fix was verified on


def slurm_hosts():
    """The node of every rank of this Slurm step, in Slurm's order (block or cyclic)."""
    nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_STEP_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    counts = []
    for part in os.environ["SLURM_STEP_TASKS_PER_NODE"].split(","):  # e.g. "4(x2),3"
        count, _, times = part.partition("(x")
        counts += [int(count)] * int(times.rstrip(")") or 1)
    if not os.environ.get("SLURM_DISTRIBUTION", "block").startswith("cyclic"):
        return [node for node, count in zip(nodes, counts) for _ in range(count)]
    hosts = []
    while len(hosts) < sum(counts):  # cyclic: one rank per node in turn
        hosts += [node for node, count in zip(nodes, counts) if hosts.count(node) < count]
    return hosts


def tf_config_from_slurm():
    """TF_CONFIG for this task: every rank at its node, port MWMS_PORT_BASE + its index there."""
    rank, hosts = int(os.environ["SLURM_PROCID"]), slurm_hosts()
    if hosts[rank] != os.environ.get("SLURMD_NODENAME", hosts[rank]):
        sys.exit(f"rank {rank} runs on {os.environ['SLURMD_NODENAME']}, not on {hosts[rank]}: "
                 "use the default (block) or the cyclic distribution")
    base = int(os.environ.get("MWMS_PORT_BASE", "20000"))
    workers = [f"{host}:{base + hosts[:r].count(host)}" for r, host in enumerate(hosts)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}, hosts


def set_tf_config_from_slurm():
    """TF_CONFIG from the srun step (several tasks, none given); the node of every rank, or None."""
    if "TF_CONFIG" in os.environ or int(os.environ.get("SLURM_STEP_NUM_TASKS", "1")) < 2:
        return None
    config, hosts = tf_config_from_slurm()
    os.environ["TF_CONFIG"] = json.dumps(config)
    return hosts


def visible_gpus():
    """The GPUs this process's CUDA will see: CUDA_VISIBLE_DEVICES when set, cut at its first "", -1 or NoDevFiles
    entry (CUDA also stops at an index out of range or text naming no GPU: not checked here); else
    GPU_DEVICE_ORDINAL, read the same way: CUDA reads only
    CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL is ROCm's and OpenCL's, which Slurm sets beside it, so it stands in only
    where a launcher set it alone; neither set, every GPU `nvidia-smi -L` lists (as CUDA sees them all: a workstation,
    or a node whose GPUs Slurm does not constrain)."""
    for name in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
        if name in os.environ:
            entries = (entry.strip() for entry in os.environ[name].split(","))
            return list(itertools.takewhile(lambda g: g not in ("", "-1", "NoDevFiles"), entries))
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []  # no nvidia-smi: a CPU node
    return [str(i) for i in range(sum(1 for line in listed.splitlines() if line.startswith("GPU ")))]


def choose_gpus(hosts, rank):
    """This worker's GPUs: bound by Slurm, keep them; shared by the node's tasks, an equal share."""
    visible = visible_gpus()
    on_node = int(os.environ.get("SLURM_GPUS_ON_NODE") or len(visible))
    per_task = os.environ.get("SLURM_GPUS_PER_TASK", "")  # set by --gpus-per-task
    if not visible or len(visible) < on_node or per_task == str(len(visible)):  # no GPU, or bound to this task
        return visible
    most = max(hosts.count(host) for host in hosts)
    each = len(visible) // most  # the same number of replicas on every worker
    if each == 0:
        sys.exit(f"{most} tasks per node share {len(visible)} GPU(s): ask for one GPU per task (--gpus-per-task=1)")
    local = hosts[:rank].count(hosts[rank])
    mine = visible[local * each:(local + 1) * each]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
    return mine


def all_reduce_for(gpus):
    """NCCL on GPUs of this worker's own; RING on CPUs and on a shared GPU (COURSE_GPU_MEMORY_MIB)."""
    return "NCCL" if gpus and not os.environ.get("COURSE_GPU_MEMORY_MIB") else "RING"


def fix_keras_fit_for_multiworker():
    """model.fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585); verified on Keras 3.15.1."""
    import keras

    if tuple(int(p) for p in keras.__version__.split(".")[:2]) != VERIFIED_KERAS:
        sys.exit(f"Keras {keras.__version__}: this script's fit fix was verified on Keras 3.15 only; check "
                 "keras-team/keras#20585, then delete or adapt fix_keras_fit_for_multiworker")
    from keras.src import tree
    from keras.src.backend.tensorflow import trainer

    def symbolic_build(self, iterator=None, data_batch=None):  # from the data's shapes; never read a batch
        spec = getattr(getattr(iterator, "_distributed_dataset", None), "element_spec", None)
        if self._distribute_strategy is None or spec is None:
            return original_build(self, iterator, data_batch)
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=tree.map_structure(lambda s: getattr(s, "_value_specs", [s])[0], spec))

    def reduce_per_replica(values, strategy, reduction):  # scalar logs: reduce over no axis
        def one(value):
            if reduction in ("auto", "mean") and strategy.experimental_local_results(value)[0].shape.rank == 0:
                return strategy.reduce("MEAN", value, axis=None)
            return original_reduce(value, strategy, reduction)
        return tree.map_structure(one, values)

    original_build, original_reduce = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
    trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica = symbolic_build, reduce_per_replica


def make_strategy(timeout_seconds=None, start_timeout_seconds=120):
    """MultiWorkerMirroredStrategy from TF_CONFIG (set from Slurm when none is given): GPU memory
    first, then NCCL or RING (`all_reduce_for`). `timeout_seconds` bounds every collective (a
    thread each: a debugging aid); across nodes over NCCL, one all-reduce bounded by
    `start_timeout_seconds` checks the network before training (GPU only: never run on one)."""
    set_tf_config_from_slurm()
    import tensorflow as tf

    gpus, share = tf.config.list_physical_devices("GPU"), os.environ.get("COURSE_GPU_MEMORY_MIB")
    for gpu in gpus:  # a share (MiB) of a GPU other processes use: one logical GPU; else memory as needed
        if share:
            one_share = tf.config.LogicalDeviceConfiguration(memory_limit=int(share))
            tf.config.set_logical_device_configuration(gpu, [one_share])
        else:
            tf.config.experimental.set_memory_growth(gpu, True)
    implementation = all_reduce_for(len(gpus))
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=getattr(tf.distribute.experimental.CommunicationImplementation, implementation),
        timeout_seconds=timeout_seconds)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    workers = strategy.cluster_resolver.cluster_spec().as_dict().get("worker", [])
    if implementation == "NCCL" and len({w.rsplit(":", 1)[0] for w in workers}) > 1:
        all_reduce_with_deadline(strategy, start_timeout_seconds)
    return strategy


def all_reduce_with_deadline(strategy, timeout_seconds=120):
    """One all-reduce of 1 per replica that must sum to the replica count within `timeout_seconds`,
    else DeadlineExceededError: NCCL makes its communicators at the first collective, so a broken
    network between nodes fails here, at start, not at the job's --time limit."""
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)  # this call only

    def one():
        return tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.0), options=options)

    ones = strategy.run(one)
    sums = [float(s) for s in strategy.experimental_local_results(ones)]
    if sums != [float(strategy.num_replicas_in_sync)] * len(sums):
        raise RuntimeError(f"the start-up all-reduce gave {sums}, not {strategy.num_replicas_in_sync} replicas")
    return sums
