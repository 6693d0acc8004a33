# Two commands do all the set-up on a fresh machine:
#   make course   install, then run every notebook headless in quick mode (build/)
#   make test     install, then the whole test suite (unit, integration, notebooks)
# On a GPU cluster: make install EXTRA=gpu (tensorflow[and-cuda] instead of tensorflow-cpu).

SHELL := /bin/bash
# Debian's /usr/bin/python3 is world-readable, so a venv made from it also works for
# other Unix users (e.g. JupyterHub servers started as the user).
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRA ?= cpu
STAMP := $(VENV)/.installed-$(EXTRA)
KERNEL_NAME ?= tf-hpc-course
PYTEST_ARGS ?=
# JupyterLab refuses to run as root without --allow-root (containers, CI)
LAB_ARGS ?= $(shell test "$$(id -u)" = 0 && echo --allow-root)

.PHONY: install course site test classtest fullcheck lab kernel bench horovod clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRA),test,hub,site]'
	# Keras 2 for lesson 17 (TF_USE_LEGACY_KERAS=1): --no-deps, or it installs the full
	# tensorflow wheel beside tensorflow-cpu (two copies of one module)
	$(PY) -m pip install --quiet --no-deps 'tf-keras>=2.21,<2.22'
	@touch $(STAMP)

course: install
	$(PY) -m helpers.tools.course_run --out build

# The course as a static site in build/site (Sphinx, MyST-NB): the README, every lesson with the
# outputs of the last `make course`, the guides. Open build/site/index.html.
site: install
	$(PY) -m helpers.tools.site --notebooks build/notebooks --out build/site

# the nbval pass keeps the notebooks it executed in build/nbval/notebooks, for the site test
test: install
	rm -rf build/nbval
	COURSE_NBVAL_KEEP=$(CURDIR)/build/nbval/notebooks $(PY) -m pytest tests notebooks --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --durations=0 --durations-min=2 $(PYTEST_ARGS)

# Every notebook in workshop and full mode on full-size SYNTHETIC CIFAR-10 (50,000 images), one
# epoch of at most FULLCHECK_STEPS steps, and again with other replica and worker counts: the
# modes a GPU class runs, checked on a CPU (about an hour here; figures in build/fullcheck/).
FULLCHECK_STEPS ?= 4
fullcheck: install
	$(PY) -m helpers.tools.fullcheck --out build/fullcheck --max-steps $(FULLCHECK_STEPS) $(FULLCHECK_ARGS)

# A class of 30 learners logging in at once on a hub and the local Slurm (root; about 10 min):
# login-to-server and engines-ready p50/p95, failures, peak memory, and nothing left afterwards.
# 4 emulated nodes declaring 16 CPUs each hold 30 servers of 2 tasks.
CLASS_LEARNERS ?= 30
classtest: install
	COURSE_CLASS_LEARNERS=$(CLASS_LEARNERS) COURSE_SLURM_CPUS=16 COURSE_REQUIRE_SLURM=1 \
	  $(PY) -m pytest tests/test_class_load.py -p no:cacheprovider -rA $(PYTEST_ARGS)

# the environment's bin first on PATH: `ipcontroller`, `ipcluster` (%ipcluster of ipcmagic) and
# `tensorboard` are found from the kernel however Jupyter was started
kernel: install
	$(PY) -m ipykernel install --user --name $(KERNEL_NAME) --display-name "TF HPC course" \
	  --env PATH '$(abspath $(VENV))/bin:$${PATH}'

# loopback only, token on (JupyterLab's default): reach it through `ssh -L` from elsewhere.
# Kernels talk over Unix sockets in a directory only you can enter: on TCP loopback any user of
# the machine could subscribe to a kernel's output and read every cell's code and output.
lab: kernel
	@sockets=$$(mktemp -d "$${TMPDIR:-/tmp}/course-kernels-XXXXXX") && trap 'rm -rf "$$sockets"' EXIT && \
	cd notebooks && ../$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 \
	  --KernelManager.transport=ipc --KernelManager.ip="$$sockets/kernel" $(LAB_ARGS) $(LAB_OPTS)

# Horovod 0.28.1 compiled against this TensorFlow (CPU, Gloo) into build/horovod, for lesson 13:
# a few minutes; as root it installs the two header packages it needs with apt-get.
horovod: install
	$(PY) -m helpers horovod build

# Where Slurm is found, its local multi-worker rows need COURSE_LOCAL_WORKERS=allow: only on a
# machine nobody else uses, never on a login node (docs/security.md)
bench: install
	$(PY) -m helpers bench --out build/bench

clean:
	rm -rf build .pytest_cache
