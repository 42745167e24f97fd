# tritonbuild: the two commands of the README.
#   make all    build the stack (quick profile: the distribution's LLVM 15 and
#               libtorch 1.13.1 as externals), install it and assemble the image
#   make test   run every test, unit and integration, and short fuzz runs of
#               every fuzz target (make reliability: issue 17's suite alone)
# Both install what a fresh Debian/Ubuntu machine lacks (as root) first.

SHELL := /bin/bash
GO ?= go
PROFILE ?= system
OUT := $(CURDIR)/out
TBTORCH := $(OUT)/tbtorch
# libtbtorch.so (runtime/csrc) is linked by the libtorch-tagged cgo package.
export CGO_LDFLAGS := -L$(TBTORCH) -Wl,-rpath,$(TBTORCH)
GOTESTFLAGS ?= -timeout 75m

# What pytorch 1.13.1+dfsg (the archive profile's libtorch) builds against:
# the host_packages of recipes/pytorch.yaml (a test keeps the two in step).
PYTORCH_DFSG_PACKAGES := python3-yaml python3-typing-extensions libprotobuf-dev \
	libpthreadpool-dev libcpuinfo-dev libxnnpack-dev libfp16-dev libpsimd-dev libfxdiv-dev \
	libsleef-dev libonnx-dev libfmt-dev libeigen3-dev libnuma-dev libdnnl-dev libideep-dev \
	libblas-dev liblapack-dev pybind11-dev libflatbuffers-dev flatbuffers-compiler

# Everything the builds and tests use, from the distribution's packages:
# compilers and build tools, the report's host packages, LLVM 15 and libtorch
# 1.13.1 for the quick profile, python with torch and numpy for the python
# backend, the real registry, image and cache tools the tests drive, and the
# outside load generators bench/serving runs (wrk; nghttp2-client's h2load,
# one client for both gRPC and HTTP). libopenblas0-openmp: the distribution's
# libtorch calls libblas.so.3, which is netlib's reference BLAS until an
# optimized one takes over the alternative; OpenBLAS's OpenMP build follows
# libtorch's per-thread intra-op setting (docs/performance.md: a Linear layer
# about ten times faster).
DEB_PACKAGES := build-essential cmake ninja-build git curl wget xz-utils bzip2 zip unzip patch \
	pkg-config ca-certificates libssl-dev libbz2-dev libreadline-dev libsqlite3-dev \
	libncurses5-dev libncursesw5-dev tk-dev libffi-dev liblzma-dev libxml2-dev libxmlsec1-dev \
	llvm-15-dev clang-15 libmlir-15-dev mlir-15-tools \
	libtorch-dev libopenblas0-openmp python3 python3-torch python3-numpy python3-venv \
	skopeo umoci docker-registry ccache distcc protobuf-compiler bubblewrap hyperfine wrk nghttp2-client \
	python3-fastapi python3-uvicorn python3-torchvision \
	meson patchelf $(PYTORCH_DFSG_PACKAGES)


.PHONY: all deps tools test unit race reliability fuzz proto bench tbtorch ghz clean

all: deps tools
	$(OUT)/bin/tritonbuild all --profile $(PROFILE)

# deps installs missing distribution packages (root) or says what to run.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: $$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else \
	    echo "missing packages; run: sudo apt-get install -y $$missing" >&2; exit 1; \
	  fi; \
	fi

tools:
	$(GO) build -o $(OUT)/bin/tritonbuild ./cmd/tritonbuild

tbtorch:
	runtime/csrc/build.sh $(TBTORCH) >/dev/null

test: deps tbtorch
	$(GO) vet -tags libtorch ./...
	$(GO) test -tags libtorch $(GOTESTFLAGS) ./...
	$(MAKE) --no-print-directory race
	$(MAKE) --no-print-directory fuzz

# race runs the serving runtime's tests again under the race detector:
# its packages share state between request goroutines, instance workers
# and the python backend's readers, and a race there (a test's clients
# sharing one request the scheduler writes) went unseen by the plain run.
# cmd/tritonserver's too: they run whole servers in the test's process
# (both frontends, the scheduler, stubs, shutdown and reload under load),
# about three minutes more. About five and a half minutes on two cores in
# all. The builder's tests and cmd/tritonbuild's (LLVM builds) stay out:
# under the detector cmd/tritonbuild's alone ran past eight minutes.
race:
	$(GO) test -race -tags libtorch $(GOTESTFLAGS) ./runtime/... ./cmd/tritonserver/

# reliability runs issue 17's reliability suite on its own: the server
# binary soaked at concurrency 64, slow and idle clients, faults injected
# into instances, the confined load API (cmd/tritonserver's
# TestReliability*, which make test runs with the other tests), then the
# short fuzz runs.
reliability:
	TRITONBUILD_RELIABILITY=1 $(GO) test -count=1 -run '^TestReliability' -v ./cmd/tritonserver/
	$(MAKE) --no-print-directory fuzz

# fuzz runs every fuzz target of the module's packages (func Fuzz* in a
# _test.go file, found anew each time) for FUZZTIME; an input that fails
# is saved under the package's testdata/fuzz and fails the run. Go 1.26's
# fuzz coordinator can end a run that found nothing with a bare "context
# deadline exceeded" when FUZZTIME runs out while a worker is mid-call on
# a loaded machine (golang/go#75804, fixed in Go 1.27): such a run, with no
# failing input written, is run once more; anything else fails at once.
FUZZTIME ?= 3s
fuzz:
	@set -e; for dir in $$($(GO) list -f '{{.Dir}}' ./...); do \
	  for target in $$(cat $$dir/*_test.go 2>/dev/null | grep -o '^func Fuzz[A-Za-z0-9_]*' | cut -d' ' -f2); do \
	    for try in 1 2; do \
	      echo "fuzz $$dir $$target ($(FUZZTIME))"; \
	      if out=$$($(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) $$dir 2>&1); then echo "$$out"; break; fi; \
	      echo "$$out"; \
	      if [ $$try = 1 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
	        echo "fuzz $$target: the fuzz coordinator's deadline race (golang/go#75804), no input written: once more"; continue; \
	      fi; \
	      exit 1; \
	    done; \
	  done; \
	done

# unit runs only the hermetic tests (no network, no root, no heavy builds).
unit:
	$(GO) test -short ./...

proto:
	runtime/modelconfig/gen.sh

# lint runs golangci-lint (.golangci.yml; pinned, installed into .bin from the
# Go module proxy; parallel runs allowed, as worktrees of one machine share
# its cache) and checks that regenerating the protobuf code changes
# nothing. .ci/run calls it before the tests.
GOLANGCI_LINT_VERSION := 2.15.0
lint:
	@if ! $(CURDIR)/.bin/golangci-lint version 2>/dev/null | grep -q 'version $(GOLANGCI_LINT_VERSION) '; then \
	  echo "installing golangci-lint v$(GOLANGCI_LINT_VERSION) into .bin"; \
	  GOBIN=$(CURDIR)/.bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(GOLANGCI_LINT_VERSION); \
	fi
	$(CURDIR)/.bin/golangci-lint run --allow-parallel-runners ./...
	runtime/modelconfig/gen.sh
	@git diff --exit-code --stat -- runtime/modelconfig || { echo "make lint: the generated protobuf code is stale; run make proto and commit it" >&2; exit 1; }

bench: deps tbtorch tools ghz
	@echo "see docs/performance.md for each benchmark's command"

# ghz, the gRPC load generator bench/serving runs as an outside client, from
# bench/tools (a module of its own, so its dependencies stay out of ours).
ghz:
	$(GO) build -C bench/tools -o $(OUT)/bin/ghz github.com/bojand/ghz/cmd/ghz

clean:
	rm -rf $(OUT)

print-deb-packages:
	@echo $(DEB_PACKAGES)
