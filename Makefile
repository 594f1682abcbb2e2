# make demo       install into .venv and run the demo job on the local scheduler
# make test       install into .venv (plus shellcheck, tmux, chromium, Charliecloud, sshd) and run the whole test suite; as
#                 root the tests also start throwaway SLURM and Grid Engine clusters
#                 (tests/cluster/*-up.sh); what CI runs
# make test-fast  the fast tier (under 5 minutes): unit tests, in-process integration tests and one
#                 test of each mechanism; no clusters (tests/tiers.toml)
# make bench      run the benchmarks (each prints ratios against a peer measured in the same run)
# make data       generate the built-in synthetic dataset into data/shapes
# make docs       build the documentation site into build/docs (warnings are errors)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test test-fast bench data docs system-deps bytecode clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[train,mpich,notebook,report,tensorboard,lightning,dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Debian packages the tests use (command:package), installed when missing and we are root (CI),
# else explained: shellcheck for the scripts, tmux for the watch view, chromium for the report,
# ch-run and busybox for a real container run, an sshd (and rsync) for the laptop's SSH path
SYSTEM_TOOLS := shellcheck:shellcheck tmux:tmux chromium:chromium ch-run:charliecloud-runtime \
                busybox:busybox-static ssh:openssh-client sshd:openssh-server rsync:rsync
system-deps:
	@for pair in $(SYSTEM_TOOLS); do \
	  tool=$${pair%%:*}; package=$${pair#*:}; \
	  command -v "$$tool" >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$$package") >/dev/null \
	      || echo "could not install $$package"; \
	  else echo "$$tool is missing: install it (apt-get install $$package); its tests will skip"; fi; \
	done

# hpcbench's own modules compiled once (an editable install leaves them uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set every process compiled them again: 70 ms of each CLI call's
# 230, 125 ms of each trainer rank's start-up)
bytecode: $(STAMP)
	$(PY) -m compileall -q hpcbench

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/hpcbench submit jobs/demo.toml --scheduler local --wait
	@echo ""
	@echo "Next: . $(VENV)/bin/activate   (puts hpcbench on this shell's PATH; again in each new shell)"
	@echo "  then docs/quickstart.md: a short job, a benchmark matrix and its report"
	@echo "  and docs/measure.md: your own training script measured (from hpcbench import measure)"

# One pytest, four processes (pytest-xdist, --dist loadgroup: tests/conftest.py groups the tests):
# the SLURM cluster's tests in two of them, a module whole in one, one test after the other in each
# (they share the cluster, and mostly wait for it), the Grid Engine's in another; each integration
# module whole in one process; unit tests wherever a process is free. The 30 slowest tests are
# printed so that the budget (docs/contributing.md: under 15 minutes, the fast tier under 5) is
# watched at every run.
PYTEST := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest --durations=30
test: $(STAMP) system-deps bytecode
	$(PYTEST) -n 4 --dist loadgroup tests

test-fast: $(STAMP) system-deps bytecode
	HPCBENCH_TEST_TIER=fast $(PYTEST) -n 2 --dist loadgroup -m fast tests

bench: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/cli_startup.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/sweep_submit.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/local_job.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/local_array.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/trainer_startup.py
	$(PY) benchmarks/history_store.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/loader.py --data runs/bench-loader
	$(PY) benchmarks/energy_sampler.py

# The built-in dataset (9 classes, 9000 samples, 197x148 grayscale) as HDF5 shards in data/shapes
data: $(STAMP)
	@test -f data/shapes/manifest.json || $(VENV)/bin/hpcbench prep synthetic data/shapes

# The site: docs/*.md through Sphinx and MyST-Parser, the API reference from the docstrings
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs build/docs
	@echo "open build/docs/index.html"

clean:
	rm -rf $(VENV) runs build *.egg-info
