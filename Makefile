# ferry — the two commands that matter are `make demo` and `make test` (see README.md).
PRESET ?= default
CTEST_ARGS ?=
JOBS ?= $(shell nproc)
# ccache hits across checkouts (CI builds a fresh clone in another folder each time).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true

.PHONY: all bootstrap configure build release-build image dist test test-asan test-tsan fuzz demo kernel-lab k8s-lab bench bench-quick bench-bounds soak clean ci

all: build

bootstrap:
	@scripts/bootstrap.sh

configure: bootstrap
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The release's static ferryctl (preset release: OpenSSL and Boost.JSON from their archives).
release-build: configure
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

# ferry's container image from image/Containerfile (buildah, Debian packages only) as an OCI
# archive in build/image/, its digest printed (docs/install.md, "The release").
image: build release-build
	@scripts/image.sh build/$(PRESET) build/release build/image

# The release artefacts in dist/ferry-<version>/: image archive, chart pinned to its digest,
# static ferryctl, CRDs, SHA256SUMS (scripts/dist.sh). FERRY_VERSION overrides the version.
dist: build release-build
	@scripts/dist.sh build/$(PRESET) build/release dist

# Every test tier: unit, integration (loopback), interop (Node.js http2, nghttpx), the chart
# offline (tests/k8s/chart_offline.sh, label chart).
test: build
	@cd build/$(PRESET) && ctest --output-on-failure --timeout 300 -j $(JOBS) $(CTEST_ARGS)

# Unit and integration tiers, and the fuzz corpora's replay, under ASan + UBSan.
test-asan:
	@$(MAKE) --no-print-directory test PRESET=asan CTEST_ARGS="-L 'unit|integration|k8s-replay|fuzz' $(CTEST_ARGS)"

# libFuzzer over every target in tests/fuzz/ (preset fuzz: clang, ASan + UBSan), one after
# the other for FUZZ_SECONDS each; FUZZ_TARGETS picks some (e.g. "svid spiffe_id"). New
# inputs go to build/fuzz/fuzz-work/, crashes to build/fuzz/fuzz-crashes/ (docs/testing.md).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: bootstrap
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)
	@scripts/fuzz.sh build/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The same tiers under ThreadSanitizer (preset tsan): each ferryd in them runs a control
# thread and several workers. Any report fails the test (TSan exits 66).
test-tsan:
	@$(MAKE) --no-print-directory test PRESET=tsan CTEST_ARGS="-L 'unit|integration|k8s-replay' $(CTEST_ARGS)"

# The packages and the build write to DEMO_LOG, not to the screen: the screen shows the
# story. A failure prints the log's end.
DEMO_LOG ?= build/demo-setup.log
demo:
	@mkdir -p build
	@echo "make demo: installing what is needed and building ferry (output in $(DEMO_LOG))"
	@if ! $(MAKE) --no-print-directory build >$(DEMO_LOG) 2>&1; then \
	  echo "make demo: the setup failed; the end of $(DEMO_LOG):" >&2; tail -n 40 $(DEMO_LOG) >&2; exit 1; fi
	@scripts/demo.sh

# netkit pods and peer-egress on a kernel the project builds and boots under qemu
# (docs/kernel-lab.md). Cold: ~25 min (two kernel builds); cached kernels: a few minutes.
kernel-lab: build
	@FY_KERNEL_LAB_NO_BUILD=1 scripts/kernel-lab/kernel-lab.sh

# A real single-node Kubernetes 1.20 built from Debian's source package (docs/k8s-lab.md),
# ferryd's image imported, then every test in K8S_LAB_TESTS (install_e2e.sh: the documented
# install of a `make dist` release, word for word) (lab_k8s_e2e.sh: the netns lab
# on this cluster's API server; it takes /tmp/ferry-lab.lock unless a caller holds it); the
# cluster goes down whatever happens. Cold: ~5 min more for the Go build (258 s here);
# cached binaries: about three and a half minutes (docs/k8s-lab.md, Times).
K8S_LAB_TESTS ?= tests/k8s/cluster_smoke.sh tests/k8s/install_e2e.sh tests/k8s/ferry_e2e.sh tests/k8s/cluster_ca_e2e.sh \
  tests/k8s/probes_e2e.sh tests/k8s/lab_k8s_e2e.sh
k8s-lab: build release-build
	@scripts/bootstrap.sh k8s-lab
	@scripts/k8s-lab/build-kubernetes.sh >/dev/null
	@if scripts/k8s-lab/cluster.sh status >/dev/null 2>&1; then \
	  echo "k8s-lab: a lab cluster is already up; not touching it (cluster.sh down first)" >&2; exit 1; fi; \
	trap 'rc=$$?; scripts/k8s-lab/cluster.sh down || rc=1; exit $$rc' EXIT; \
	  scripts/k8s-lab/cluster.sh up >/dev/null && \
	  scripts/k8s-lab/ferryd-image.sh build/$(PRESET) >/dev/null && \
	  for t in $(K8S_LAB_TESTS); do echo "== $$t"; FERRY_BUILD_DIR=$(CURDIR)/build/$(PRESET) $$t || exit 1; done

# ferry against stunnel4, HAProxy and plain routing in the lab (root; tests/bench/run_bench.py):
# the report, charts and raw JSON in docs/benchmarks/. Run it on a quiet machine.
bench: build
	@tests/bench/run_bench.py --build build/$(PRESET) $(BENCH_ARGS)

# The same suite in under 2 minutes into build/$(PRESET)/bench-quick/; fails only when a
# configuration carries no traffic or ferry loses an idle connection (CI runs it so that the
# suite cannot rot).
bench-quick: build
	@tests/bench/run_bench.py --quick --build build/$(PRESET) $(BENCH_ARGS)

# What bounds the latency and CPU-per-GB figures: ferry against a plaintext relay pair and
# direct routing, every process on one CPU and spread over all (root; about 6 minutes;
# tests/bench/bounds_bench.py): docs/benchmarks/bounds.md. Run it on a quiet machine.
bench-bounds: build
	@tests/bench/bounds_bench.py --build build/$(PRESET) $(BENCH_ARGS)

# 10,000 connections (idle, request/response, bulk) through two lab nodes for 10 minutes;
# zero errors, byte-exact, ferryd's descriptors and RSS back to baseline (root;
# tests/soak/run_soak.py, docs/testing.md). CI runs SOAK_CONNS=1000 SOAK_SECONDS=60.
SOAK_CONNS ?= 10000
SOAK_SECONDS ?= 600
soak: build
	@tests/soak/run_soak.py --build build/$(PRESET) --conns $(SOAK_CONNS) --seconds $(SOAK_SECONDS) \
		--out build/$(PRESET)/soak/result.json $(SOAK_ARGS)

ci:
	@bash .ci/run

clean:
	rm -rf build
