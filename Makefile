# clockd — `make help` lists every target.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create .venv/ with clockd and clockctl installed from this checkout
	@mkdir -p $(VENV)/share/man/man1 $(VENV)/share/man/man5 $(VENV)/share/man/man8
	@for f in man/*.[158]; do [ -e "$$f" ] || continue; s=$${f##*.}; cp "$$f" $(VENV)/share/man/man$$s/; done
	@# The checkout is installed editable: with PYTHONDONTWRITEBYTECODE set (as on the CI
	@# machines) every clockd and clockctl process would compile its modules from source
	@# (+0.08 s CPU per clockctl call); compile them once here (only what changed).
	@$(BIN)/python -m compileall -q clockd cli >/dev/null

.PHONY: servers
servers: ## Install PostgreSQL and etcd server binaries (apt) when missing
	@scripts/install-servers.sh

.PHONY: run
run: install ## Run clockd with every mode on the embedded SQLite store
	$(BIN)/clockd run

.PHONY: cluster
cluster: install servers ## Start PostgreSQL, etcd and two clockd processes of each mode on 127.0.0.1 (scripts/cluster.sh)
	scripts/cluster.sh start

.PHONY: cluster-stop
cluster-stop: ## Stop everything `make cluster` started
	scripts/cluster.sh stop

.PHONY: lint
lint: install ## ruff (lint and format), mypy --strict, import-linter, groff on the man pages
	$(BIN)/ruff check clockd cli tests bench
	$(BIN)/ruff format --check --quiet . || { echo 'make lint: run `$(BIN)/ruff format .` to format'; exit 1; }
	$(BIN)/mypy
	$(BIN)/lint-imports
	@for f in man/*.[158]; do [ -e "$$f" ] || continue; \
	  out=$$(groff -man -ww -z "$$f" 2>&1); if [ -n "$$out" ]; then echo "$$f: $$out"; exit 1; fi; done

# The suite runs on TEST_WORKERS pytest-xdist workers, one test file per worker at a time
# (module fixtures stay shared; tests/conftest.py hands out the long drills first). Tests
# marked `serial` assert wall time (a rejection, a start-up) and run alone, first.
TEST_WORKERS ?= 3

.PHONY: test
test: install servers ## Lint and build the .deb side by side, then run the whole suite against real PostgreSQL and etcd
	$(MAKE) --no-print-directory -j2 -Otarget lint deb
	@rc=0; \
	$(BIN)/pytest -q -m 'serial and not soak' || rc=$$?; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  -m 'not serial and not soak' --durations=25 || rc=$$?; \
	exit $$rc

SOAK_MINUTES ?= 30
SOAK_SEED ?= 1
SOAK_SCHEDULES ?= 2000

.PHONY: soak
soak: install servers ## Long drills, then the randomized soak (SOAK_MINUTES=30 SOAK_SEED=1 SOAK_SCHEDULES=2000)
	CLOCKD_DRILL_SLOW_SECONDS=60 CLOCKD_DRILL_PG_OUTAGE_SECONDS=30 $(BIN)/pytest -q -m soak -s
	$(BIN)/python -m tests.soak.soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --schedules $(SOAK_SCHEDULES)

.PHONY: bench
bench: install servers ## Run the benchmarks and compare them with the issues' goals
	$(BIN)/python -m bench

.PHONY: bench-quick
bench-quick: install servers ## The benchmarks at reduced scale (a few minutes)
	$(BIN)/python -m bench --quick

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
UNITDIR ?= $(PREFIX)/lib/systemd/system

.PHONY: install-systemd
install-systemd: ## Install systemd units, sysusers and tmpfiles snippets (PREFIX=/usr/local, BINDIR, UNITDIR, DESTDIR)
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/lib/sysusers.d $(DESTDIR)$(PREFIX)/lib/tmpfiles.d
	for u in clockd.service clockd-system.service clockd@.service clockd.target; do \
	  sed 's#/usr/local/bin/clockd#$(BINDIR)/clockd#' systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u; \
	  chmod 644 $(DESTDIR)$(UNITDIR)/$$u; done
	install -m 644 systemd/clockd.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/clockd.conf
	install -m 644 systemd/clockd.tmpfiles $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/clockd.conf

.PHONY: schema
schema: install ## Regenerate config/schedules.schema.json from the schedule-file model
	$(BIN)/python -m clockd.formats.schedfile --schema > config/schedules.schema.json

.PHONY: openapi
openapi: install ## Regenerate docs/openapi.json from the API's route table
	$(BIN)/python -m clockd.api.openapi > docs/openapi.json

.PHONY: build-tools
build-tools: ## Install dpkg-dev, lintian, patchelf, binutils, man-db (apt) when missing
	@scripts/install-build-tools.sh

.PHONY: dist
dist: build-tools ## Build dist/clockd-<version>-linux-x86_64, one self-contained executable (packaging/build.sh)
	packaging/build.sh

.PHONY: deb
deb: build-tools ## Build dist/clockd_<version>_amd64.deb around it; lintian must pass (packaging/deb.sh)
	packaging/deb.sh

.PHONY: dist-check
dist-check: install deb ## Build both artefacts (cached by input hash) and run tests/packaging/test_dist*.py on them
	$(BIN)/pytest -q tests/packaging/test_dist.py tests/packaging/test_dist_deb.py tests/packaging/test_version.py

.PHONY: clean
clean: ## Remove the venv, caches and build outputs
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info build dist
