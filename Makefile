# Two commands do all the set-up on a fresh machine:
#   make course   install, then run every notebook headless in quick mode (build/: see BUILD below)
#   make test     install, then the whole test suite (unit, integration, notebooks)
# On a GPU cluster: make install EXTRA=gpu (tensorflow[and-cuda] instead of tensorflow-cpu). The venv
# remembers its extra (.venv/.extra): every later target (lab, course, test, ...) keeps it, and
# asking for the other one stops with a line instead of putting a second TensorFlow beside the first.
# Python 3.10-3.12: on a login node whose python3 is older, give one, e.g. PYTHON=python3.11.

SHELL := /bin/bash
# Debian's /usr/bin/python3 is world-readable, so a venv made from it also works for
# other Unix users (e.g. JupyterHub servers started as the user).
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# the extra this venv was made with, else cpu (what the venv has wins over the default)
# (a venv made before .extra existed: its stamp tells)
VENV_EXTRA := $(shell cat $(VENV)/.extra 2>/dev/null || { test -e $(VENV)/.installed-gpu && echo gpu; } || \
                { test -e $(VENV)/.installed-cpu && echo cpu; })
EXTRA ?= $(or $(VENV_EXTRA),cpu)
STAMP := $(VENV)/.installed-$(EXTRA)
TF_KERAS := tf-keras>=2.21,<2.22
# What pip would install, as a hash kept in the stamp: pyproject.toml's build system, requirements
# and packages, the extra and the pins below; never a file's mtime, so a `git pull` that touches the
# Makefile or pyproject.toml's other tables runs no pip (compute nodes have no internet).
DEPS_HASH := $(shell $(PYTHON) -c 'import hashlib, json, sys, tomllib; d = tomllib.load(open("pyproject.toml", "rb")); \
  p = d["project"]; print(hashlib.sha256(json.dumps([d.get("build-system"), d.get("tool", {}).get("setuptools"), \
  p.get("requires-python"), p.get("dependencies"), p.get("optional-dependencies"), sys.argv[1:]], sort_keys=True) \
  .encode()).hexdigest()[:16])' '$(EXTRA)' '$(TF_KERAS)' 2>/dev/null || cksum < pyproject.toml | cut -d' ' -f1)
# Where make course, site, gpucheck and bench write: COURSE_BUILD_DIR, else build/ when you can
# write it, else your cache (a checkout installed once for a class, e.g. root's, has no build/ of yours)
BUILD := $(or $(COURSE_BUILD_DIR),$(shell if [ -w build ] || { [ ! -e build ] && [ -w . ]; }; then echo build; \
  else echo "$${XDG_CACHE_HOME:-$$HOME/.cache}/tf-hpc-course/build"; fi))
KERNEL_NAME ?= tf-hpc-course
PYTEST_ARGS ?=
# JupyterLab refuses to run as root without --allow-root (containers, CI)
LAB_ARGS ?= $(shell test "$$(id -u)" = 0 && echo --allow-root)

.PHONY: install course course-record site test durations-record classtest fullcheck gpucheck lab kernel bench horovod clean

install: $(STAMP)

# remade when the hash it holds is not the one above; an empty stamp (made before the hash) stands
# while it is newer than pyproject.toml, as it did then
STAMPED := $(shell cat $(STAMP) 2>/dev/null)
ifeq ($(STAMPED),)
ifneq ($(shell test $(STAMP) -nt pyproject.toml && echo current),current)
.PHONY: $(STAMP)
endif
else ifneq ($(STAMPED),$(DEPS_HASH))
.PHONY: $(STAMP)
endif
$(STAMP):
	@case "$(EXTRA)" in cpu|gpu) ;; *) echo "make: EXTRA=$(EXTRA): use EXTRA=cpu or EXTRA=gpu" >&2; exit 2 ;; esac
	@if [ -n "$(VENV_EXTRA)" ] && [ "$(VENV_EXTRA)" != "$(EXTRA)" ]; then \
	  echo "make: $(VENV) holds TensorFlow for EXTRA=$(VENV_EXTRA); EXTRA=$(EXTRA) would put a second TensorFlow" \
	       "beside it. Use another venv (VENV=.venv-$(EXTRA)) or remove $(VENV) first." >&2; exit 2; fi
	@test -x $(PY) || { $(PYTHON) -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null || { \
	  echo "make: PYTHON=$(PYTHON) is $$($(PYTHON) --version 2>&1 || echo missing): the course needs Python 3.10-3.12;" \
	       "give one, e.g. make install PYTHON=python3.11 (a module: module load python/3.11)" >&2; exit 2; }; \
	  $(PYTHON) -m venv $(VENV); }
	@echo $(EXTRA) > $(VENV)/.extra
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRA),test,hub,site]' || { echo "make: pip failed (no package index from" \
	  "here? compute nodes have no internet): make install where it can reach it, e.g. on a login node" >&2; exit 1; }
	# Keras 2 for lesson 17 (TF_USE_LEGACY_KERAS=1): --no-deps, or it installs the full
	# tensorflow wheel beside tensorflow-cpu (two copies of one module)
	$(PY) -m pip install --quiet --no-deps '$(TF_KERAS)'
	@$(PY) -c 'import sys; from importlib.metadata import distributions; names = {d.metadata["Name"].lower() for d in distributions()}; \
	  sys.exit("make: both tensorflow and tensorflow-cpu are in $(VENV) (two copies of one module): remove $(VENV), make install again" \
	           if {"tensorflow", "tensorflow-cpu"} <= names else 0)'
	@echo $(DEPS_HASH) > $(STAMP)

# LESSONS=notebooks/08_batch_job.ipynb ... runs those lessons only (the tests run the Slurm lessons this way)
course: install
	$(PY) -m helpers.commands.course_run --out $(BUILD) $(LESSONS)

# after a whole `make course` in quick mode on an idle machine, every lesson ok: keep its seconds per
# lesson in docs/bench/course-times.json and write them into the README's, the modes' and the
# instructor kit's tables (helpers/commands/course_times.py); commit the four files
course-record:
	$(PY) -m helpers.commands.course_times record $(BUILD)/course-times.json docs/bench/course-times.json

# The course as a static site in $(BUILD)/site (Sphinx, MyST-NB): the README, every lesson with the
# outputs of the last `make course`, the guides. Open $(BUILD)/site/index.html.
site: install
	$(PY) -m helpers.commands.site --notebooks $(BUILD)/notebooks --out $(BUILD)/site

# the nbval pass keeps the notebooks it executed in build/nbval/notebooks, for the site test;
# three pytest streams side by side: the tests on the local Slurm (or with a second Unix user), and the rest
# in two streams, each taking the next whole file, longest first, as it frees up (tests/shares.py)
test: install
	rm -rf build/nbval
	COURSE_DURATIONS=$(CURDIR)/build/test-durations.json COURSE_NBVAL_KEEP=$(CURDIR)/build/nbval/notebooks $(PY) -m tests.streams tests notebooks --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --durations=0 --durations-min=2 -m "not fullcheck" $(PYTEST_ARGS)

# after a full `make test` on the reference machine: keep its durations as the run the next one is compared with
durations-record:
	test -f build/test-durations.json || { echo "no build/test-durations.json: run make test first" >&2; exit 1; }
	cp build/test-durations.json docs/bench/test-durations.json

# Every notebook in workshop and full mode on full-size SYNTHETIC CIFAR-10 (50,000 images), one
# epoch of at most FULLCHECK_STEPS steps, and again with other replica and worker counts: the
# modes a GPU class runs, checked on a CPU (about an hour here; figures in build/fullcheck/);
# then the tests marked fullcheck (lesson 10 in full mode, uncut, at one and two epochs; lessons 15-17 in
# their GPU modes with the lines each must print: about 17 minutes more). A pass is recorded, with its date
# and commit, in docs/bench/fullcheck-last.json (helpers/commands/fullcheck_record.py): commit it.
FULLCHECK_STEPS ?= 4
fullcheck: install
	$(PY) -m helpers.commands.fullcheck --out build/fullcheck --max-steps $(FULLCHECK_STEPS) $(FULLCHECK_ARGS)
	$(PY) -m pytest -p no:cacheprovider -m fullcheck tests --junitxml=build/fullcheck/tests.xml
	$(PY) -m helpers.commands.fullcheck_record build/fullcheck docs/bench/fullcheck-last.json

# A class of 30 learners logging in at once on a hub and the local Slurm (root; about 10 min):
# login-to-server and engines-ready p50/p95, failures, peak memory, and nothing left afterwards.
# 4 emulated nodes declaring 16 CPUs each hold 30 servers of 2 tasks.
CLASS_LEARNERS ?= 30
classtest: install
	COURSE_CLASS_LEARNERS=$(CLASS_LEARNERS) COURSE_SLURM_CPUS=16 COURSE_REQUIRE_SLURM=1 \
	  $(PY) -m pytest tests/test_classroom_load.py -p no:cacheprovider -rA $(PYTEST_ARGS)

# the environment's bin first on PATH: `ipcontroller`, `ipcluster` (%ipcluster of ipcmagic) and
# `tensorboard` are found from the kernel however Jupyter was started
kernel: install
	$(PY) -m ipykernel install --user --name $(KERNEL_NAME) --display-name "TF HPC course" \
	  --env PATH '$(abspath $(VENV))/bin:$${PATH}'

# loopback only, token on (JupyterLab's default): reach it through `ssh -L` from elsewhere.
# Kernels talk over Unix sockets in a directory only you can enter: on TCP loopback any user of
# the machine could subscribe to a kernel's output and read every cell's code and output.
# IPP_ENABLE_CURVE=1: a controller ipyparallel's cluster panel or %ipcluster starts uses CurveZMQ.
# nbgitpuller's /git-pull is off here (its extension is on in the venv for the hub's servers, which
# guard it): a link someone sends could otherwise clone into any directory, the kernel specs too
lab: kernel
	@sockets=$$(mktemp -d "$${TMPDIR:-/tmp}/course-kernels-XXXXXX") && trap 'rm -rf "$$sockets"' EXIT && trap 'exit 143' TERM HUP INT && \
	cd notebooks && IPP_ENABLE_CURVE=1 ../$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 \
	  --ServerApp.jpserver_extensions nbgitpuller=False \
	  --KernelManager.transport=ipc --KernelManager.ip="$$sockets/kernel" $(LAB_ARGS) $(LAB_OPTS)

# Horovod 0.28.1 compiled against this TensorFlow (CPU, Gloo) into build/horovod, for lesson 13:
# a few minutes, as any user with a C++ compiler and CMake (as root it installs those with apt-get if missing).
horovod: install
	$(PY) -m helpers horovod build

# The smoke run for the first real GPU node (about 10 min on 4 GPUs): TensorFlow's build against the
# GPUs given, NCCL, mixed precision, a nested job, lessons 01/04/05/07/13 in workshop mode; JSON in
# $(BUILD)/gpucheck/ to send back. From a login node: sbatch slurm/gpucheck.sbatch. Without GPUs it
# runs what it can and says what it skipped.
gpucheck: install
	$(PY) -m helpers.commands.gpucheck --out $(BUILD)/gpucheck $(GPUCHECK_ARGS)

# Where Slurm is found, its local multi-worker rows need COURSE_LOCAL_WORKERS=allow: only on a
# machine nobody else uses, never on a login node (docs/security.md)
bench: install
	$(PY) -m helpers bench --out $(BUILD)/bench

clean:
	rm -rf build .pytest_cache
