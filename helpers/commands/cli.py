"""`python -m helpers ...`: the command line of the course (info, data, train, cluster, bench, check-script).

Problems a user can fix end in one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import CourseError
from ..settings import SCOPES, value as setting_value
from ..slurm.commands import WHERE_SLURM_ANSWERS


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    """One option per field of `TrainConfig`, which declares the defaults and help texts."""
    import dataclasses

    from .train import TrainConfig

    for spec in dataclasses.fields(TrainConfig):
        meta, kind = spec.metadata, str(spec.type)
        flag = meta.get("flag") or "--" + spec.name.replace("_", "-")
        options = {"dest": spec.name, "help": meta.get("help")}
        if kind == "bool":
            options["action"] = "store_false" if spec.default else "store_true"
        else:
            options["default"] = spec.default
            options["type"] = (float if kind.startswith("float") else
                               int if spec.name == "seed" else
                               _positive if kind.startswith("int") else str)
            if "choices" in meta:
                options["choices"] = meta["choices"]
        parser.add_argument(flag, **options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m helpers",
                                     description="Plumbing of the data-parallel TensorFlow course.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("info", help="what this process has: CPUs, GPUs, Slurm, versions")
    settings = sub.add_parser("settings", help="every COURSE_* setting: its value here, where it came from "
                              "(environment or default), and the error of a bad one (exit status 1)")
    settings.add_argument("--markdown", action="store_true", help="print docs/settings.md, the table as a guide")
    settings.add_argument("--scope", action="append", choices=list(SCOPES),
                          help="only these scopes (repeatable; default: all)")
    doctor = sub.add_parser("doctor", help="go/no-go pre-flight for a cluster: one block to paste into a ticket")
    doctor.add_argument("--partition", help="partition to check (default: COURSE_SLURM_PARTITION, else Slurm's default)")
    doctor.add_argument("--slurm", action=argparse.BooleanOptionalAction, default=WHERE_SLURM_ANSWERS,
                        help="--slurm: Slurm's checks required (no Slurm: no-go); --no-slurm: only this host's "
                             "(default: Slurm's where its commands are here)")
    doctor.add_argument("--no-bandwidth", action="store_false", dest="bandwidth",
                        help="skip the 2-worker all-reduce (about 15 s)")
    doctor.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # what its srun runs
    sub.add_parser("proxies", help="the proxy variables gRPC must not see, for `unset $(...)` in batch scripts")

    data = sub.add_parser("data", help="prepare CIFAR-10 offline, or make a synthetic archive")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    prep = data_sub.add_parser("prepare", help="build the tfds cifar10 dataset from a local archive")
    prep.add_argument("--archive", required=True, help="cifar-10-binary.tar.gz (downloaded on a login node)")
    prep.add_argument("--data-dir", required=True, help="where tfds keeps the prepared dataset")
    synth = data_sub.add_parser("synth", help="write a SYNTHETIC archive in CIFAR-10 binary format")
    synth.add_argument("--out", required=True, help="archive to write, e.g. synthetic.tar.gz")
    synth.add_argument("--train", type=int, default=2048, help="training images (default 2048)")
    synth.add_argument("--test", type=int, default=512, help="test images (default 512)")
    synth.add_argument("--seed", type=int, default=0)

    _add_train_options(sub.add_parser("train", help="train once (what a Slurm batch script runs with srun)"))

    cluster = sub.add_parser("cluster", help="start or stop ipyparallel engines from a shell")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    start = cluster_sub.add_parser("start", help="start a controller and engines, print the cluster id")
    start.add_argument("-n", type=_positive, default=2, help="number of engines")
    start.add_argument("--slurm", action=argparse.BooleanOptionalAction, default=None,
                       help="--slurm: engines through Slurm; --no-slurm: local engines "
                            "(default: COURSE_ENGINES decides)")
    profile = cluster_sub.add_parser("profile", help="write an ipcluster profile with the course's settings")
    profile.add_argument("--name", default=None, help="profile name (default tf-course)")
    profile.add_argument("--slurm", action=argparse.BooleanOptionalAction, default=WHERE_SLURM_ANSWERS,
                         help="--slurm: the Slurm side written (Slurm must answer); --no-slurm: local engines only "
                              "(default: the Slurm side where Slurm answers)")
    stop = cluster_sub.add_parser("stop", help="stop a cluster, or every course cluster with --all")
    stop.add_argument("--cluster-id")
    stop.add_argument("--all", action="store_true",
                      help="every course cluster no running kernel uses (what a crashed kernel left behind)")
    stop.add_argument("--force", action="store_true", help="with --all: also clusters of running kernels")

    klass = sub.add_parser("class", help="a class on the hub: the link to the course, who is where, and ending it "
                                         "(instructors)")
    klass.add_argument("action", choices=("link", "who", "end", "plan"),
                       help="link: the nbgitpuller link that puts the course in each learner's home and opens "
                            "--lesson (COURSE_HUB_URL); who: learner, server job, node, engines; end: stop the "
                            "class's servers, cancel the jobs found for them and wait until squeue shows none "
                            "(COURSE_HUB_URL, COURSE_HUB_TOKEN); plan: the nodes, settings and reservation a "
                            "class needs, a node per learner and a GPU per learner")
    # the same settings the hub gives the servers, whose course_server pulls nothing else
    klass.add_argument("--repo", default=setting_value("COURSE_PULL_REPO") or "",
                       help="link: the course repository learners pull from (a git URL; COURSE_PULL_REPO)")
    klass.add_argument("--branch", default=setting_value("COURSE_PULL_BRANCH") or "main",
                       help="link: the branch or tag (COURSE_PULL_BRANCH, default main)")
    klass.add_argument("--lesson", default="00", help="link: the lesson to open, by number (default 00)")
    klass.add_argument("--into", default=setting_value("COURSE_PULL_DIR") or "tf-hpc-course",
                       help="link: the directory in each learner's home (COURSE_PULL_DIR)")
    klass.add_argument("--group", default="", help="the hub group of the class's learners (COURSE_HUB_GROUP)")
    klass.add_argument("--reservation", default="",
                       help="the class's Slurm reservation: its users are the learners unless --group is given, "
                            "and only jobs in it are cancelled (COURSE_HUB_RESERVATION)")
    klass.add_argument("--dry-run", action="store_true", help="end: print what would be stopped, do nothing")
    klass.add_argument("--learners", type=_positive, help="plan: learners in the class")
    klass.add_argument("--gpus-per-node", type=_positive, default=4, help="plan: GPUs per node (default 4)")
    klass.add_argument("--cpus-per-node", type=_positive, help="plan: CPUs per node (a learner's server takes 2)")
    klass.add_argument("--nodes-available", type=int, help="plan: nodes the class may use; says what fits")
    klass.add_argument("--jobs-at-once", type=int, help="plan: learners submitting a 2-node lesson job at the "
                       "same moment (default: all)")
    klass.add_argument("--gpu-model", default="a100-40gb", help="plan: the GPU model, for its memory and MIG "
                       "profiles: a100-40gb (default), a100-80gb, h100-80gb, v100-16gb, v100-32gb")
    klass.add_argument("--gpu-mib", type=_positive, help="plan: memory of one GPU in MiB, where nvidia-smi "
                       "reports other than the model's (default: the model's)")
    klass.add_argument("--start", default="2026-12-01T08:00:00", help="plan: the reservation's start")
    klass.add_argument("--duration", default="10:00:00", help="plan: the reservation's length")
    klass.add_argument("--users", default="LEARNER1,LEARNER2,...", help="plan: the reservation's users")
    klass.add_argument("--partition", default="", help="plan: the reservation's partition")

    horovod = sub.add_parser("horovod", help="build Horovod 0.28.1 against this TensorFlow (CPU, Gloo; lesson 13)")
    horovod.add_argument("action", choices=("build",), help="build: compile it into --into (any user with a C++ "
                         "compiler and CMake; root installs those with apt-get if missing)")
    horovod.add_argument("--into", help="directory (default: COURSE_HOROVOD_DIR, else build/horovod)")

    check = sub.add_parser("check-script", help="run your training script small, as 1 and as N workers, and check "
                           "it: python -m helpers check-script train.py --per-replica-batch-flag --batch -- OPTIONS",
                           description="Everything after -- goes to your script (its sizes: few steps, small data). "
                           "Contract and limits: docs/check-your-script.md")
    check.add_argument("script", help="your training script (.py)")
    kind = check.add_mutually_exclusive_group(required=True)
    kind.add_argument("--global-batch-flag", metavar="FLAG", help="your script's option that takes the global batch, e.g. batch-size (or =--batch-size)")
    kind.add_argument("--per-replica-batch-flag", metavar="FLAG",
                      help="your script's option that takes the batch of one replica (= one worker here)")
    check.add_argument("--examples-flag", metavar="FLAG", help="your script's option for the number of training "
                       "examples: set to one global batch, so every step is a whole epoch (recommended)")
    check.add_argument("--global-batch", type=_positive, default=12, help="global batch B of every run (default 12)")
    check.add_argument("--workers", default="2", help="workers of the runs compared with one worker: 2, or 2,3")
    check.add_argument("--deadline", type=_positive, default=300, help="seconds a run may take before its workers "
                       "are ended and named (default 300)")
    check.add_argument("--slurm", action="store_true", help="run the workers as tasks of srun steps (inside an "
                       "allocation), not as local processes")
    check.add_argument("--keep", metavar="DIR", help="keep each worker's report in DIR")

    results = sub.add_parser("results", help="table of batch training results (e.g. a scaling sweep)")
    results.add_argument("--dir", help="results directory (default: results/ in the course's output directory, "
                         "what notebook 07 reads: COURSE_OUTPUT_DIR, else build/ of your own checkout, else "
                         "~/tf-hpc-course-output)")
    results.add_argument("--where", action="store_true", help="print that directory and exit (slurm/sweep's "
                         "jobs write there)")

    bench = sub.add_parser("bench", help="measure engines, training and input pipeline; print a table")
    bench.add_argument("--out", help="directory for bench.json and bench.csv (default: the output "
                       "directory's bench/, build/bench in a checkout)")
    bench.add_argument("--steps", type=_positive, default=12, help="timed steps per configuration")
    bench.add_argument("--repeats", type=_positive, default=2, help="interleaved repeats of each comparison")
    bench.add_argument("--only", help="comma-separated row names to run")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if argv[:1] == ["check-script"] and "--" in argv:  # the script's own options, untouched
        cut = argv.index("--")
        argv, passed = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    args.script_args = passed
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no INFO lines
    try:
        return _dispatch(args)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _settings(markdown: bool, scopes: tuple[str, ...]) -> int:
    """Print every setting (or the guide); 1 when a value set here is bad."""
    from .settings_report import markdown as guide, report

    if markdown:
        print(guide(), end="")
        return 0
    text, bad = report(scopes=scopes or tuple(SCOPES))
    print(text)
    return 1 if bad else 0


def _dispatch(args) -> int:
    if args.command == "info":
        from ..environment import report

        print(json.dumps(report(), indent=2))
    elif args.command == "settings":
        return _settings(args.markdown, tuple(args.scope or ()))
    elif args.command == "doctor":
        from .. import doctor

        if args.probe:
            doctor.probe_task()
            return 0
        return doctor.main(args.slurm, args.partition, args.bandwidth)
    elif args.command == "proxies":
        from ..environment import PROXY_VARIABLES

        print(" ".join(PROXY_VARIABLES))
    elif args.command == "data":
        from .. import data

        if args.data_command == "synth":
            path = data.synth_archive(args.out, args.train, args.test, args.seed)
            print(f"wrote SYNTHETIC archive {path} ({args.train} train, {args.test} test images)")
        else:
            target = data.prepare(args.archive, args.data_dir)
            info = data.dataset_info(args.data_dir)
            print(f"prepared {info.label} in {target}: {info.train_size} train, {info.test_size} test")
    elif args.command == "train":
        from .train import TrainConfig, run

        fields = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__}
        run(TrainConfig(**fields))  # options and fields share their names (_add_train_options)
    elif args.command == "cluster":
        from ..engines import cluster

        if args.cluster_command == "start":
            engines = cluster.start_engines(args.n, slurm=args.slurm, keep=True, activate=False)
            print(f"cluster {engines.cluster_id}: {len(engines)} engines ready: {engines.placement()}\n"
                  f"  lessons use it: COURSE_CLUSTER={engines.cluster_id} (in the environment of jupyter lab or pytest)\n"
                  f"  from Python: ipyparallel.Client(cluster_id={engines.cluster_id!r})\n"
                  f"  stop it: python -m helpers cluster stop --cluster-id {engines.cluster_id}")
        elif args.cluster_command == "profile":
            from ..engines.cluster import PROFILE
            from ..engines.ipcluster_profile import write_profile

            name = args.name or PROFILE
            path, decided = write_profile(name, slurm=args.slurm)
            print(f"wrote {path}: " + "; ".join(decided) + "\n"
                  f"  start: ipcluster start --profile={name} -n 4 [--engines=slurm] --daemonize\n"
                  f"  lessons use it: COURSE_CLUSTER={name}\n"
                  f"  stop: ipcluster stop --profile={name}")
        else:
            stopped, kept = cluster.stop_all(args.force) if args.all else cluster.stop_by_id(args.cluster_id)
            print(f"stopped {stopped} cluster(s)")
            for line in kept:
                print(f"  {line}")
    elif args.command == "class" and args.action == "link":
        from .pull_link import pull_link

        print(pull_link(setting_value("COURSE_HUB_URL") or "", args.repo, args.branch, args.lesson, args.into))
    elif args.command == "class" and args.action == "plan":
        from .class_plan import report as class_plan

        if args.learners is None:
            raise CourseError("class plan needs --learners N (and --gpus-per-node, default 4)")
        print(class_plan(args.learners, args.gpus_per_node, args.cpus_per_node, args.nodes_available,
                         args.jobs_at_once, args.gpu_mib, args.reservation or "course-day", args.start,
                         args.duration, args.users, args.partition, args.gpu_model))
    elif args.command == "class":
        from .class_admin import main as class_main

        return class_main(args.action, args.group, args.reservation, args.dry_run)
    elif args.command == "results":
        from ..environment import output_dir
        from ..results import load_results, results_table

        directory = args.dir or output_dir() / "results"
        if args.where:
            print(directory)
            return 0
        runs = load_results(directory)
        if not runs:
            raise CourseError(f"no results in {directory}: run `slurm/sweep` or `python -m helpers train --results FILE`")
        print(results_table(runs))
    elif args.command == "horovod":
        from .horovod_build import build

        build(args.into)
    elif args.command == "check-script":
        from pathlib import Path

        from .check_script import Options, main as check_main, option_name

        try:
            workers = [int(n) for n in args.workers.split(",")]
        except ValueError:
            raise CourseError(f"--workers {args.workers!r}: give worker counts like 2 or 2,3") from None
        flag = option_name(args.global_batch_flag or args.per_replica_batch_flag)
        return check_main(Options(Path(args.script), args.script_args, workers, args.global_batch, flag,
                                  bool(args.global_batch_flag), option_name(args.examples_flag), float(args.deadline), args.slurm,
                                  Path(args.keep) if args.keep else None))
    elif args.command == "bench":
        from .bench import main as bench_main

        return bench_main(out=args.out, steps=args.steps, only=args.only, repeats=args.repeats)
    return 0
