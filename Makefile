# make demo   install into .venv and run the demo job on the local scheduler
# make test   install into .venv (plus shellcheck and chromium) and run the whole test suite; as root the tests
#             also start throwaway SLURM and Grid Engine clusters (tests/cluster/*-up.sh)
# make bench  run the benchmarks (each prints ratios against a peer measured in the same run)
# make data   generate the built-in synthetic dataset into data/shapes
# make docs   build the documentation site into build/docs (warnings are errors)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test bench data docs system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[train,mpich,notebook,report,tensorboard,dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Debian packages the tests use; installed when missing and we are root (CI), else explained.
system-deps:
	@command -v shellcheck >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck) >/dev/null; \
	  else echo "shellcheck is missing: install it (apt-get install shellcheck); its tests will skip"; fi; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null; \
	  else echo "chromium is missing: install it (apt-get install chromium); the report's browser test will skip"; fi; }

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/hpcbench submit jobs/demo.toml --scheduler local --wait

# Unit tests in two processes (pytest-xdist: they are independent and light); the tests that
# start clusters, MPI ranks and trainers one after the other. Running those two groups side by
# side (pytest -n 2 --dist loadgroup tests: tests/conftest.py marks the groups) was 15 % faster
# but not reliable: srun's MPI jobs on the test cluster and mpiexec's on the same host at the same
# time garbled PMI-2 start-ups and UCX shared-memory connections now and then.
test: $(STAMP) system-deps
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -n 2 tests/unit
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest tests/cluster tests/integration

bench: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/cli_startup.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/sweep_submit.py
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
