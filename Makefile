# Two commands for a newcomer (see README.md):
#   make demo   set up, build the test world on first use (root for apt), then the live demo
#               (DEMO_ARGS=--keep holds the world open at the end)
#   make preview  render the example clusters in clusters/ into out/ (no cluster needed)
#   make test   set up (packages, the test world's Kubernetes build), then lint, type-check, test
#   make test-fast  the fast tier alone (no test world), one worker per core
#   make test-136  the test world's 1.36 tier, where ../shared/k8s-1.36 is (skipped, saying why)
#   make image  build the reconciler's image (podman; see docs/install.md)
#   make push IMAGE=REF  copy that image to REF: your registry (podman push; see docs/install.md)
#   make soak   the chaos soak's long mode: 10 minutes of overlapping faults (SEED=n replays)
#   make fleet  the fleet story's long mode: 200 clusters, a 60-second window at rest
#   make test-random  the fast tier and the short soak with new random draws (SEED=n replays)
#   make mutation  mutation testing of the chosen modules against the fast tests (minutes)
#   make krew   the archive krew installs for `kubectl kaiwu` (dist/), and its manifest's sha256
#   make manifests  deploy/install.yaml and deploy/kustomize/ (base and overlays) from `kaiwu install`
#   make release  dist/: wheel, sdist, the image as an OCI archive, the install bundles, the CRDs,
#               the monitoring bundle, the krew archive, RELEASE and SHA256SUMS (clean tree only)
# The README's two commands are `make demo` and `make test`; the rest is what they need.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo preview test test-136 test-node world-node test-fast test-random lint deps world lock image push soak fleet \
    mutation krew manifests release clean

# uv installs, with overrides.txt: pip cannot install kubernetes 37 beside boto3 (their
# python-dateutil ranges do not meet; overrides.txt says why that is safe).
$(STAMP): pyproject.toml overrides.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --override overrides.txt -e '.[dev]'
	touch $(STAMP)

# The live demo (tests/world/demo.py): the reconciler as the bundle's Deployment on two real
# nodes where `make world-node` has run (as root; the image is built first, seconds once
# cached), else as a local process; it says which and why. DEMO_ARGS: --keep,
# --reconciler=auto|pod|process.
demo: $(STAMP)
	$(BIN)/python -m tests.world.demo $(DEMO_ARGS)

preview: $(STAMP)
	$(BIN)/kaiwu render clusters -o out

# What the tests need from apt (the test world's build tools and etcd, podman for the image,
# promtool for the fast tier's alert-rule tests, ...): tests/world/install_deps.sh, idempotent.
# Needs root for apt: see docs/testworld.md.
deps:
	bash tests/world/install_deps.sh

# The test world: a real kube-apiserver built from Debian's Kubernetes sources (cached outside the
# work tree; a no-op once built), Debian's kubectl beside it, and, beside the compiler, the
# image's base and wheelhouse for the image story (podman, buildah, runc, debootstrap: deps).
world: $(STAMP) deps
	$(BIN)/python -m tests.world.build

# A real node beside the simulated ones (tests/world/real_node.py, issue 30): containerd from
# Debian and a kubelet built from the same source (about 5 minutes more, once). Only the node
# tier needs it: `make test` never does.
world-node: world
	bash tests/world/install_deps.sh --real-node
	$(BIN)/python -m tests.world.real_node build

# The node tier: stories on a real kubelet (tests/world_stories/node/).
test-node: world-node
	KAIWU_TESTWORLD_REAL_NODE=1 $(BIN)/pytest -m world -n 1 tests/world_stories/node

# requirements.lock: the runtime dependencies (with the s3 extra) pinned with hashes, resolved
# with overrides.txt; the image installs exactly these (--no-deps). Refresh it after changing
# pyproject.toml's dependencies.
lock: $(STAMP)
	$(BIN)/uv pip compile --quiet --generate-hashes --extra s3 --override overrides.txt \
	    --custom-compile-command "make lock" --output-file requirements.lock pyproject.toml

# The reconciler's image, DEFAULT_IMAGE: reconciler/install/options.py's IMAGE_REPOSITORY (the one place
# the name is set) and the version; `kaiwu install` runs it unless --image names another. Built
# with podman FROM a Debian base debootstrapped once into the test world's cache
# (tests/world/image.py; needs root and the packages `make world` installs).
# BASE=python:3.11-slim builds FROM the public base instead.
image: $(STAMP)
	$(BIN)/python -m tests.world.image $(if $(BASE),--base $(BASE))

# Asked of Python once, and only by a target that uses it (a fresh checkout has no venv yet).
DEFAULT_IMAGE = $(eval DEFAULT_IMAGE := $(shell $(BIN)/python -m tests.world.image --print-tag))$(DEFAULT_IMAGE)
# Where `make push` copies the image `make image` built: a registry reference
# (registry.example.com/team/kaiwu-reconciler:0.1.0; podman logs in with `podman login`), or any
# destination podman push takes (oci-archive:FILE, dir:DIR, docker-archive:FILE). Default: the
# name itself, which only the project's maintainers can push to (nothing is published yet).
IMAGE ?= $(DEFAULT_IMAGE)

# Then install with `kaiwu install --image REF` (the same REF, for a registry).
push: $(STAMP)
	podman push $(DEFAULT_IMAGE) $(IMAGE)

# The krew plugin's archive (a launcher for the pip-installed package: deploy/krew/kaiwu.yaml's
# caveats say why) in dist/, and the manifest's version, uri and sha256 made true to it.
krew: $(STAMP)
	$(BIN)/python deploy/krew/build.py

# The generated deploy files: deploy/install.yaml (`kaiwu install`) and the kustomize base and
# overlays in deploy/kustomize/ (reconciler/kustomize.py). Run after changing reconciler/install/
# or the version; unit tests fail while they are stale. `make world` fetches the kubectl 1.20
# whose kustomize (v2.0.3) the world tier builds every overlay with (tests/packaging/test_kustomize.py).
manifests: $(STAMP)
	$(BIN)/python -m reconciler.kustomize deploy

# A release in dist/ (replaced whole), from the commit checked out: refused on a dirty tree
# (ALLOW_DIRTY=1 makes one anyway, RELEASE saying so). KUBE_VERSION=1.20 targets the manifests
# as `kaiwu install --kube-version` does. The image is built as `make image` builds it (root,
# podman; BASE as there). tests/world/release.py lists the files;
# docs/install.md, "Making a release", says how to use them.
release: $(STAMP)
	$(BIN)/python -m tests.world.release $(if $(BASE),--base $(BASE)) \
	    $(if $(KUBE_VERSION),--kube-version $(KUBE_VERSION)) $(if $(ALLOW_DIRTY),--allow-dirty)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Staged, so a broken change fails fast (docs/testworld.md, "Fail fast"): lint and types, the
# packages the tests need (deps: the fast tier's promtool among them), then the fast tier on
# every core, then the test world's build and its tier, whose first story is the
# gate (a reference cluster must become Ready, or every world story stops with the reason).
# WORLD_WORKERS: world-tier workers, each with its own control plane and simulated world (about
# 0.6 GB each); a story's module stays on one worker. The stories mostly wait on KaiwuDB's timers,
# so three workers on two cores take the tier from 24 min to about 18 (docs/testworld.md, "Where
# the world tier's time goes": the runs, and the two races the load exposed, fixed); that is
# what brings a fresh machine's `make test` within 30 minutes (24 min 9 s measured, "A fresh
# machine, measured"). WORLD_WORKERS=2 on a machine that must stay responsive meanwhile;
# test-136 takes the same WORLD_DIST. Modules start slowest first (tests/support/ordering.py;
# --no-loadscope-reorder keeps that order: xdist's own puts the modules with most tests first,
# the one-test soak near last).
WORLD_WORKERS ?= 3
WORLD_DIST := -n $(WORLD_WORKERS) --dist loadfile --no-loadscope-reorder
test: lint deps test-fast world
	$(BIN)/pytest -m world $(WORLD_DIST)
	@$(BIN)/python -m tests.world.kube_versions

# The test world on Kubernetes 1.36.2 (tests/world/kube_versions.py), from the prebuilt binaries
# in ../shared/k8s-1.36 (KAIWU_K8S_136_DIR): the control plane's and the kubelet's self-tests,
# the CEL stories, and the install bundle, uninstall, operator upgrade, release (the default
# bundles as shipped, applied where they are meant to run), bring-up, drift repair,
# failover, scaling and backup stories (docs/testworld.md, "Kubernetes 1.36"). Says in one line that it is skipped, and
# why, where the binaries are not. `make test-136` runs every story of those folders;
# `make test-136 K136=ci` (what .ci/run runs, to keep CI near 30 minutes) one story of each.
K136_ALL := tests/world/selftest/test_controlplane.py tests/world/selftest/test_kubelet.py \
    tests/world/selftest/test_exec_spdy.py tests/world_stories/admission/test_cel_on_current_kubernetes.py \
    tests/world_stories/runtime/test_install.py tests/world_stories/runtime/test_uninstall.py \
    tests/world_stories/runtime/test_operator_upgrade.py tests/world_stories/runtime/test_release.py \
    tests/world_stories/lifecycle \
    tests/world_stories/drift tests/world_stories/failover tests/world_stories/backup
K136_CI := tests/world/selftest/test_controlplane.py tests/world/selftest/test_kubelet.py \
    tests/world/selftest/test_exec_spdy.py tests/world_stories/admission/test_cel_on_current_kubernetes.py \
    tests/world_stories/runtime/test_install.py tests/world_stories/drift/test_repair.py \
    tests/world_stories/lifecycle/test_scale.py::test_scale_out_then_in_decommissions_exactly_the_removed_node \
    tests/world_stories/failover/test_failover.py::test_a_pod_on_a_lost_node_is_replaced_on_another_node \
    tests/world_stories/backup/test_backup.py::test_scheduled_backups_reach_s3_and_a_volume_and_retention_prunes
K136 ?= all
K136_TESTS = $(if $(filter ci,$(K136)),$(K136_CI),$(K136_ALL))
test-136: $(STAMP)
	@if $(BIN)/python -c 'import sys; from tests.world.kube_versions import unavailable_136; \
	    sys.exit(1 if unavailable_136() else 0)'; then \
	    KAIWU_TESTWORLD_KUBE=1.36 $(BIN)/pytest -m world $(WORLD_DIST) $(K136_TESTS); \
	else $(BIN)/python -m tests.world.kube_versions; fi

# The fast tier alone (no test world needed), one worker per core.
test-fast: $(STAMP)
	$(BIN)/pytest -m "not world" -n auto

# The gate draws the same examples and the same soak seed on every run; this draws new ones
# from one seed, printed first: Hypothesis's random profile seeded with it (--hypothesis-seed)
# and the short soak played with it. `make test-random SEED=n` replays a run.
test-random: world
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "test-random: seed $$seed (replay: make test-random SEED=$$seed)"; \
	KAIWU_HYPOTHESIS_PROFILE=random KAIWU_SOAK_SEED=$$seed $(BIN)/pytest \
	    --hypothesis-seed=$$seed tests/unit tests/world_stories/chaos/test_soak.py

# The chaos soak's long mode (tests/world_stories/chaos/test_soak.py; `pytest` runs its short
# mode): 10 minutes of random overlapping faults, invariants checked throughout. 11 to 12 minutes.
soak: world
	KAIWU_SOAK=long $(if $(SEED),KAIWU_SOAK_SEED=$(SEED)) $(BIN)/pytest -s -p no:cacheprovider \
	    tests/world_stories/chaos/test_soak.py

# The fleet story's long mode (tests/world_stories/runtime/test_fleet.py; `pytest` runs its
# short mode, a 15 s window): 200 clusters on one reconciler, 60 s at rest without a write
# (issue 14's window): the short mode's minute and 45 s more.
fleet: world
	KAIWU_FLEET_STEADY_S=60 $(BIN)/pytest -s -p no:cacheprovider \
	    tests/world_stories/runtime/test_fleet.py

# Mutation testing of the modules listed in pyproject.toml's [tool.kaiwu-mutation] against the
# fast tests mapped to each (mutmut; see docs/mutation.md). Takes minutes, so it is not part of
# `make test`. MUTATION_ARGS="reconciler/kaiwudb/ --sample 0" narrows it or tries every mutant.
mutation: $(STAMP)
	$(BIN)/python -m bench.mutation $(MUTATION_ARGS)

clean:
	rm -rf $(VENV) out .testworld
