# difftx: Differential Transformer research harness.
#   make train   fetch the default corpus, prepare it and train the default model end to end
#   make test    build and run every test (prints "N passed, M failed")
#   make check   the unit programs alone, in under a minute: the fast loop while editing
#   make bench   training speed, MFU and peak memory of the two attention variants
#   make data    only the default corpus, tokenizer and token shards
#   make table6 | table2 | fig5 | table3 | table5 | fig8   the paper's tables and figures from models trained here
# MPI=K runs the table and figure targets as K data-parallel ranks (mpirun -np K); NO_MPI=1
# builds a program without MPI, which then always runs as one process.
# CUDA=1 builds build/cuda/difftx with the CUDA backend beside the CPU one (docs/gpu.md), and
# the training and table targets then run on the GPU (DEVICE=cpu keeps them on the CPU);
# make gpu-bundle packs it with its tests and libraries for a GPU machine without them.
# PORTABLE=1 builds without -march=native. make test SANITIZE=1 builds everything with
# AddressSanitizer and UndefinedBehaviorSanitizer into build/san and runs the tests on it.

PACKAGES := gcc g++ make pkg-config libopenblas-openmp-dev libdnnl-dev libhdf5-dev libsqlite3-dev libssl-dev libjansson-dev libgsl-dev zlib1g-dev \
            gnuplot-nox hdf5-tools sqlite3 strace time perl $(if $(NO_MPI),,openmpi-bin libopenmpi-dev)
DATA_PACKAGES := npm
# Deferred (=), not immediate (:=): on a fresh machine pkg-config and the libraries only exist
# once build/deps.stamp has installed them, after make has read this file. Paths come from
# pkg-config and the compiler's multiarch triplet, so the program builds on any Debian
# architecture (x86_64-linux-gnu, aarch64-linux-gnu, ...).
MULTIARCH := $(shell $(CC) -print-multiarch)
MPI_PC := $(if $(NO_MPI),,mpi-c)
# The OpenMP build of OpenBLAS, named by its own pkg-config file and pinned by rpath: Debian's
# alternatives may point libopenblas.so.0 (and openblas.pc) at the pthread build, whose threads
# fight OpenMP's (20x slower attention at long context).
OPENBLAS_PC = PKG_CONFIG_PATH=/usr/lib/$(MULTIARCH)/openblas-openmp/pkgconfig pkg-config
OPENBLAS_DIR = $(shell $(OPENBLAS_PC) --variable=libdir openblas 2>/dev/null)
PKG_CFLAGS = $(shell pkg-config --cflags hdf5-serial sqlite3 libcrypto jansson zlib $(MPI_PC) 2>/dev/null) \
             $(shell $(OPENBLAS_PC) --cflags openblas 2>/dev/null) $(if $(NO_MPI),,-DDIFFTX_MPI)
# libm's linker script brings in libmvec, which the vectorised expf of vecmath.c calls. GSL
# (the t distribution of the verdicts) is linked after OpenBLAS and without its own CBLAS
# (gsl.pc's -lgslcblas): libgsl still loads libgslcblas, but behind OpenBLAS, whose cblas_*
# the program's products then bind to
PKG_LIBS = $(shell pkg-config --libs hdf5-serial sqlite3 libcrypto jansson zlib $(MPI_PC) 2>/dev/null) \
           $(shell $(OPENBLAS_PC) --libs openblas 2>/dev/null) -Wl,-rpath,$(OPENBLAS_DIR) -ldnnl -lgsl -lm
GIT_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)

ARCH := $(if $(PORTABLE),-mtune=generic,-march=native)
# The CUDA toolkit: CUDA_HOME, else the folder of the nvcc on PATH. CUDA_ARCH: the GPU
# generation the kernels are built for (90: Hopper), with PTX for newer ones.
NVCC := $(or $(wildcard $(CUDA_HOME)/bin/nvcc),$(shell command -v nvcc 2>/dev/null))
CUDA_DIR := $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= 90
ifdef CUDA
ifeq ($(NVCC),)
$(error CUDA=1: no nvcc found (set CUDA_HOME to the CUDA toolkit))
endif
B := build/cuda$(if $(PORTABLE),-portable)
CFLAGS ?= -O3 $(ARCH)
CUDA_SRC := $(wildcard model/cuda/*.cu)
NVCCFLAGS := -O3 -std=c++17 --generate-code arch=compute_$(CUDA_ARCH),code=[sm_$(CUDA_ARCH),compute_$(CUDA_ARCH)] \
             -DDIFFTX_CUDA_ARCH=$(CUDA_ARCH) $(if $(NO_MPI),,-DDIFFTX_MPI) -Xcompiler -Wall,-Wextra
CUDA_LIBS := -L$(CUDA_DIR)/lib64 -Wl,-rpath,$(CUDA_DIR)/lib64 -lcublas -lcudart $(if $(NO_MPI),,-lnccl) -lstdc++
else ifdef SANITIZE
B := build/san
SANITIZERS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
CFLAGS := -O1 -g $(ARCH) $(SANITIZERS)
else
B := build
CFLAGS ?= -O3 $(ARCH)
endif
# Each object's header dependencies are the compiler's own list (-MMD, a .d file beside the
# object), so a header change rebuilds what includes it and nothing else; -MP keeps a removed
# header from stopping the build (the lists are included at the end of this file). Part of
# the build's switches, so objects built before the lists were are rebuilt once.
DEPFLAGS = -MMD -MP
# The build's switches are part of its identity: $(B)/flags.txt is rewritten when they change
# (PORTABLE=1, NO_MPI=1, CFLAGS, CUDA_ARCH after a build with others), and every object depends
# on it, so the build is redone rather than reported up to date
BUILD_SWITCHES := $(CC) $(CFLAGS) $(DEPFLAGS) $(if $(NO_MPI),NO_MPI=1) $(if $(CUDA),CUDA_ARCH=$(CUDA_ARCH))
$(shell mkdir -p $(B) && (echo '$(BUILD_SWITCHES)' | cmp -s - $(B)/flags.txt || echo '$(BUILD_SWITCHES)' > $(B)/flags.txt))
CFLAGS += -Werror=incompatible-pointer-types $(DEPFLAGS) -std=c11 -Wall -Wextra -fopenmp $(PKG_CFLAGS) -DGIT_COMMIT='"$(GIT_COMMIT)"' $(if $(CUDA),-DDIFFTX_CUDA)
LDLIBS = $(SANITIZERS) $(PKG_LIBS) -fopenmp $(CUDA_LIBS)

# Layers, bottom to top (includes only run downward): base/, model/ with its backends, data/,
# eval/, run/ (one training run), studies/ (rows x seeds, the registry, the tables), viz/, and
# the command line difftx.c; the recipes (.ini) live in experiments/.
BACKENDS := model/cpu/backend_cpu.c model/cpu/blas_kernel.c model/cpu/blas_memory.c model/cpu/peak.c model/cpu/layers.c model/cpu/matmul_bf16.c \
            model/cpu/attention.c model/cpu/optim.c model/cpu/vecmath.c
BASE := base/util.c base/h5.c base/recipe_format.c base/dist.c
MODEL := $(BASE) model/model_config.c model/attention.c model/backend.c model/weight_copies.c model/profile.c model/model.c model/optim.c \
         model/safetensors.c $(BACKENDS)
DATA := data/tokenizer.c data/dataset.c data/prepare.c data/needle.c
EVAL := eval/arhit.c eval/retrieval.c eval/attnmap.c eval/outliers.c eval/nexttoken.c eval/sample.c
RUN := run/config.c run/device.c run/checkpoint.c run/train.c run/spikes.c
STUDIES := studies/registry.c studies/recipe.c studies/tracked.c studies/study.c studies/report.c studies/verdict.c studies/table6.c studies/table5.c \
           studies/needle/runner.c studies/needle/common.c studies/needle/table2.c studies/needle/fig5.c studies/needle/table3.c \
           studies/needle/fig8.c studies/runs.c studies/bench.c
VIZ := viz/attn_plot.c viz/attn_view.c
CORE := $(MODEL) $(DATA) $(EVAL) $(RUN) $(STUDIES) $(VIZ)
OBJS := $(patsubst %.c,$(B)/obj/%.o,$(CORE)) $(patsubst %.cu,$(B)/obj/%.o,$(CUDA_SRC))
TESTS := test_blas_kernel test_bf16 test_backend_ops test_devices test_grad test_reference test_tokenizer test_train test_eval test_registry test_decoding test_needle test_hook test_recipes test_safety test_checkpoint test_outliers test_corpora

.PHONY: browser-deps all help deps data train check test test-build bench table6 lr-stability scaling table2 fig5 table3 fig8 table5 clean cuda-portable-build gpu-bundle
.SECONDARY:
all: $(B)/difftx

# $(call ensure,PACKAGES): a package counts as present when dpkg knows it or a command of
# that name exists; missing ones are installed when run as root, otherwise the exact
# apt-get line is printed.
ensure = missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || command -v $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing missing packages:" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	  else \
	    echo "missing Debian packages; run: sudo apt-get install -y" $$missing; exit 1; \
	  fi; \
	fi

# redone when this file changes, so a checkout that built before a package was added gets it
# (objects wait for the stamp without depending on its time: nothing is rebuilt for it)
build/deps.stamp: Makefile
	@mkdir -p build
	@$(call ensure,$(PACKAGES))
	@touch $@
deps: build/deps.stamp

$(B)/obj/%.o: %.c $(B)/flags.txt | build/deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<
$(B)/obj/model/cpu/vecmath.o: CFLAGS += -ffast-math
# sqrtf without the errno check that keeps AdamW's loop scalar (sqrt is exact either way)
$(B)/obj/model/cpu/optim.o $(B)/obj/model/cpu/layers.o $(B)/obj/model/cpu/attention.o: CFLAGS += -fno-math-errno
$(B)/obj/%.o: %.cu $(B)/flags.txt | build/deps.stamp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(DEPFLAGS) -MF $(@:.o=.d) -c -o $@ $<

# these files record the commit: build/commit.txt is rewritten, while make reads this file, only
# when `git describe` changes, so they are rebuilt then and a build that is up to date plans
# nothing (`make -n table6` included)
COMMIT_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(shell grep -l GIT_COMMIT $(CORE)))
$(shell mkdir -p build && (echo '$(GIT_COMMIT)' | cmp -s - build/commit.txt || echo '$(GIT_COMMIT)' > build/commit.txt))
$(COMMIT_OBJS): build/commit.txt

$(B)/difftx: $(B)/obj/difftx.o $(OBJS)
	$(CC) -o $@ $^ $(LDLIBS)

$(B)/test_%: $(B)/obj/tests/test_%.o $(OBJS)
	$(CC) -o $@ $^ $(LDLIBS)
# The model's own tests link the model layer alone (model/, its backends, the base helpers): they
# cannot reach a layer above it, and a change above it does not relink them
MODEL_TESTS := test_backend_ops test_blas_kernel test_bf16 test_grad test_hook test_decoding
MODEL_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(MODEL)) $(patsubst %.cu,$(B)/obj/%.o,$(CUDA_SRC))
$(addprefix $(B)/,$(MODEL_TESTS)): $(B)/%: $(B)/obj/tests/%.o $(MODEL_OBJS)
	$(CC) -o $@ $^ $(LDLIBS)

# writes one file for the write-failure tests (tests/test_write_errors.sh)
$(B)/write_fixture: $(B)/obj/tests/write_fixture.o $(OBJS)
	$(CC) -o $@ $^ $(LDLIBS)

# OpenBLAS as a CPU model it does not know shows it (LD_PRELOAD), for the kernel choice's test
$(B)/fake_openblas.so: tests/fake_openblas.c | build/deps.stamp
	$(CC) -shared -fPIC -O2 -Wall -Wextra $(PKG_CFLAGS) -o $@ $< -ldl

# The corpus depends on its sources, not on the program: a rebuild, or a prepared folder copied
# in, does not prepare it again (the program need only exist: an order-only prerequisite)
data/default/train.bin: data/fetch_corpus.sh | $(B)/difftx
	@$(call ensure,$(DATA_PACKAGES))
	data/fetch_corpus.sh
	$(B)/difftx prepare --vocab 4096 data/default data/corpus
data: data/default/train.bin

# where the targets below compute: the GPU in the CUDA build, else the CPU
DEVICE ?= $(if $(CUDA),cuda,cpu)
train: $(B)/difftx data/default/train.bin
	$(B)/difftx train experiments/default.ini device=$(DEVICE)
	$(B)/difftx sample results/runs/default/checkpoint.h5 --prompt "The ship" --tokens 60 --device $(DEVICE)

# MPI=K: K data-parallel ranks on this machine; several machines: see docs/distributed.md
MPIRUN = $(if $(MPI),mpirun -np $(MPI) $(if $(filter 0,$(shell id -u)),--allow-run-as-root) )

# The paper's Table 6 from models trained here; PRESET=smoke|small|paper, SEEDS=n
PRESET ?= small
SEEDS ?= 1
table6: $(B)/difftx data/default/train.bin
	$(MPIRUN)$(B)/difftx table6 experiments/table6.ini --preset $(PRESET) --seeds $(SEEDS) device=$(DEVICE)

# The paper's stability claim: Table 6's Transformer and DIFF rows at 1x, 2x and 4x the preset's
# learning rate, with each row's spikes and final loss; PRESET and SEEDS as for table6
lr-stability: $(B)/difftx data/default/train.bin
	$(MPIRUN)$(B)/difftx table6 experiments/lr_stability.ini --preset $(PRESET) --seeds $(SEEDS) device=$(DEVICE)

# The paper's Figure 3b at this scale: the DIFF-minus-Transformer gap in validation loss against
# training tokens, with its t-interval over the seeds; PRESET=smoke|small|gpu124m, SEEDS=n;
# VARIANTS=1 adds DIFF V2 and GDA (experiments/scaling_variants.ini)
scaling: $(B)/difftx data/default/train.bin
	$(MPIRUN)$(B)/difftx table6 experiments/$(if $(VARIANTS),scaling_variants,scaling).ini --preset $(PRESET) --seeds $(SEEDS) device=$(DEVICE)

# Multi-needle retrieval (Table 2, Figure 5) and attention allocation (Table 3, Figure 1);
# attention-logit quantization (Figure 8); NEEDLE_PRESET=smoke|short|medium|default, SEEDS=n models
# per row. The first of them trains the models (per seed, both rows: default about 90 minutes
# and medium 25 under OpenBLAS's Haswell kernel; short 9 under Cooperlake, 16-17 under Haswell).
# NEEDLE_ROWS=diff,gda: those rows alone (--rows), in outputs named <task>_<preset>+diff+gda.
NEEDLE_PRESET ?= default
table2 fig5 table3 fig8: $(B)/difftx data/default/train.bin
	$(MPIRUN)$(B)/difftx needle experiments/needle.ini --preset $(NEEDLE_PRESET) --seeds $(SEEDS)$(if $(NEEDLE_ROWS), --rows $(NEEDLE_ROWS)) --task $@ device=$(DEVICE)

# Activation outliers (Table 5) of Table 6's transformer and diff rows (PRESET) and the needle
# models (NEEDLE_PRESET; NEEDLE_ROWS=standard,diff those rows alone, --needle-rows), each
# trained first if it is not yet
table5: $(B)/difftx data/default/train.bin
	$(MPIRUN)$(B)/difftx table5 experiments/table6.ini --preset $(PRESET) --needle experiments/needle.ini --needle-preset $(NEEDLE_PRESET)$(if $(NEEDLE_ROWS), --needle-rows $(NEEDLE_ROWS)) --seeds $(SEEDS) device=$(DEVICE)

# The CUDA build, whenever a toolkit is found, so that a CUDA compile or link error fails the
# tests: in the portable form the GPU bundle packs (build/cuda-portable, no -march=native),
# compiled beside the others (in parallel) rather than inside a test; tests/test_cuda_build.sh
# runs its programs. `make CUDA=1` differs from it in -march=native alone, and no source of the
# project depends on the instructions the compiler targets, so the tests compile CUDA once
CUDA_PROGRAMS := difftx test_backend_ops test_devices test_cudnn_graphs
# and test_cudnn_graphs with each of the differences from NVIDIA's frontend that the cuDNN graphs
# once had put back (tests/cuda_emulation/plant.sh), which its golden-lowering check must report
GOLDEN_DEFECTS := golden_d_virtual golden_p_bf16 golden_pt_fp32 golden_dst_fp32 golden_mask_before_stats golden_cmp_float golden_dp_times_one
GOLDEN_PROGRAMS := $(foreach d,$(GOLDEN_DEFECTS),golden-defect/$(d)/test_cudnn_graphs)
cuda-portable-build:
	$(if $(NVCC),$(MAKE) --no-print-directory CUDA=1 PORTABLE=1 $(addprefix build/cuda-portable/,$(CUDA_PROGRAMS) $(GOLDEN_PROGRAMS)),@echo "no nvcc: the portable CUDA build is not compiled")
ifdef CUDA
$(B)/golden-defect/%/cudnn_attention.cu: model/cuda/cudnn_attention.cu tests/cuda_emulation/plant.sh
	@mkdir -p $(dir $@)
	tests/cuda_emulation/plant.sh $* $< $@
$(B)/golden-defect/%/cudnn_attention.o: $(B)/golden-defect/%/cudnn_attention.cu $(B)/flags.txt
	$(NVCC) $(NVCCFLAGS) -I model/cuda -c -o $@ $<
$(B)/golden-defect/%/test_cudnn_graphs: $(B)/obj/tests/test_cudnn_graphs.o $(B)/golden-defect/%/cudnn_attention.o \
                                        $(filter-out $(B)/obj/model/cuda/cudnn_attention.o,$(OBJS))
	$(CC) -o $@ $^ $(LDLIBS)
endif

# The CUDA kernels under a CPU emulation of the GPU (tests/cuda_emulation), in every test run:
# the .cu sources, translated (launch syntax, __shared__) and compiled as C++ unchanged, with
# the emulator in place of the CUDA runtime and cuBLAS, make a third backend, cuda-emulated,
# of the backend and device tests. Not under SANITIZE: the sanitizers cannot follow a
# program that switches between its own thread stacks.
EMU := $(B)/emu
EMU_CXXFLAGS = $(DEPFLAGS) -std=c++17 -O2 $(ARCH) -ffp-contract=off -Wall -Wextra -Wno-unknown-pragmas $(PKG_CFLAGS) -UDIFFTX_MPI \
               -DDIFFTX_CUDA_ARCH=90 -DCUDA_BACKEND_NAME='"cuda-emulated"' -DCUDA_RATE_N=512 -I tests/cuda_emulation -iquote model/cuda
EMU_OBJS := $(EMU)/obj/emulator.o $(EMU)/obj/cudnn.o $(EMU)/obj/backend.o $(patsubst model/cuda/%.cu,$(EMU)/obj/%.o,$(wildcard model/cuda/*.cu))
EMU_PROGRAMS := $(EMU)/test_backend_ops $(EMU)/test_devices
$(EMU)/src/%.cc: model/cuda/%.cu tests/cuda_emulation/translate.sh
	@mkdir -p $(dir $@)
	tests/cuda_emulation/translate.sh $< $@
$(EMU)/obj/%.o: $(EMU)/src/%.cc $(B)/flags.txt
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<
$(EMU)/obj/emulator.o: tests/cuda_emulation/emulator.cc $(B)/flags.txt
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<
$(EMU)/obj/cudnn.o: tests/cuda_emulation/cudnn.cc $(B)/flags.txt
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<
$(EMU)/obj/backend.o: model/backend.c $(B)/flags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DDIFFTX_CUDA -c -o $@ $<
EMU_LINKED := $(filter-out $(B)/obj/model/backend.o,$(OBJS))
EMU_MODEL_LINKED := $(filter-out $(B)/obj/model/backend.o,$(MODEL_OBJS))
# -rdynamic: the backend opens cuDNN with dlopen, here the program itself (tests/cuda_emulation/cudnn.h)
$(EMU)/test_%: $(B)/obj/tests/test_%.o $(EMU_OBJS) $(EMU_LINKED)
	$(CXX) -rdynamic -o $@ $^ $(LDLIBS)
$(EMU)/test_backend_ops: $(B)/obj/tests/test_backend_ops.o $(EMU_OBJS) $(EMU_MODEL_LINKED)
	$(CXX) -rdynamic -o $@ $^ $(LDLIBS)
# the emulator's own test, and the backend test with a defect planted in the attention kernels
# (tests/cuda_emulation/plant.sh), which the emulation must report
$(EMU)/src/selftest.cc: tests/cuda_emulation/selftest.cu tests/cuda_emulation/translate.sh
	@mkdir -p $(dir $@)
	tests/cuda_emulation/translate.sh $< $@
$(EMU)/selftest: $(EMU)/obj/selftest.o $(EMU)/obj/emulator.o
	$(CXX) -o $@ $^ $(LDLIBS)
$(EMU)/obj/selftest.o: EMU_CXXFLAGS += -iquote tests
# planted_rules DIR SOURCE: $(EMU)/DIR/DEFECT/test_backend_ops, the backend test with model/cuda/SOURCE.cu
# replaced by its copy with DEFECT planted (tests/cuda_emulation/plant.sh), translated and compiled
define planted_rules
$(EMU)/$(1)/%/$(2).cc: model/cuda/$(2).cu tests/cuda_emulation/plant.sh tests/cuda_emulation/translate.sh
	@mkdir -p $$(dir $$@)
	tests/cuda_emulation/plant.sh $$* $$< $$(dir $$@)$(2).cu
	tests/cuda_emulation/translate.sh $$(dir $$@)$(2).cu $$@
$(EMU)/$(1)/%/$(2).o: $(EMU)/$(1)/%/$(2).cc $(B)/flags.txt
	$$(CXX) $$(EMU_CXXFLAGS) -c -o $$@ $$<
$(EMU)/$(1)/%/test_backend_ops: $(B)/obj/tests/test_backend_ops.o $(EMU)/$(1)/%/$(2).o \
                                $$(filter-out $(EMU)/obj/$(2).o,$$(EMU_OBJS)) $$(EMU_MODEL_LINKED)
	$$(CXX) -rdynamic -o $$@ $$^ $$(LDLIBS)
endef
# defects in the attention kernels, in the host code around cuDNN's graphs, in the path that
# writes the maps out
EMU_DEFECTS := missing_barrier short_shared_memory unclamped_index
EMU_CUDNN_DEFECTS := cudnn_wrong_stride cudnn_strict_causal cudnn_missing_minus_lambda cudnn_untransposed_ds cudnn_fp32_output
EMU_WRITTEN_DEFECTS := written_wrong_stride written_strict_causal written_missing_minus_lambda
$(eval $(call planted_rules,defect,attention))
$(eval $(call planted_rules,cudnn-defect,cudnn_attention))
$(eval $(call planted_rules,written-defect,attention_written))
EMU_ALL := $(EMU_PROGRAMS) $(EMU)/selftest $(foreach d,$(EMU_DEFECTS),$(EMU)/defect/$(d)/test_backend_ops) \
           $(foreach d,$(EMU_CUDNN_DEFECTS),$(EMU)/cudnn-defect/$(d)/test_backend_ops) \
           $(foreach d,$(EMU_WRITTEN_DEFECTS),$(EMU)/written-defect/$(d)/test_backend_ops)

# The viewer's browser test (tests/test_view.sh) needs Chromium and jq: installed when run as
# root; otherwise that part of the test is skipped and says how to install them
BROWSER_PACKAGES := chromium jq
browser-deps:
	@if [ "$$(id -u)" = 0 ]; then $(call ensure,$(BROWSER_PACKAGES)); fi

# The fast loop beside `make test`: the unit programs alone, test_backend_ops at its small
# shapes; no CUDA build, emulation, end-to-end runs or test_checkpoint (25 s of corrupt files):
# under a minute on 2 cores
CHECK_TESTS := $(filter-out test_checkpoint,$(TESTS))
check: $(addprefix $(B)/,$(CHECK_TESTS))
	BUILD=$(B) tests/run.sh --check $(CHECK_TESTS)

# SANITIZE=1 leaves out test_memory: the sanitizers' shadow memory makes its bounds meaningless
# The packages first, one installation at a time; then every build in parallel, a job per core
# (the tests themselves run one after another)
test: build/deps.stamp browser-deps
	$(MAKE) --no-print-directory -j$$(nproc 2>/dev/null || echo 1) test-build
	BUILD=$(B) tests/run.sh $(TESTS)
test-build: $(B)/difftx $(addprefix $(B)/,$(TESTS)) $(B)/write_fixture $(B)/fake_openblas.so \
            $(if $(SANITIZE),,cuda-portable-build) $(if $(SANITIZE)$(CUDA),,$(EMU_ALL))

# A folder for a GPU machine that has the driver and CUDA but none of this project's
# libraries: the CUDA build, its tests, the libraries they load (from ldd; glibc, the
# driver and CUDA's own left out) and gpu-check.sh, which runs the whole GPU check. Built
# portable (build/cuda-portable, no -march=native): the GPU host's CPU may lack what this
# one has (AVX-512, say)
gpu-bundle:
	$(if $(NVCC),,$(error make gpu-bundle: no nvcc found (set CUDA_HOME to the CUDA toolkit)))
	$(MAKE) --no-print-directory CUDA=1 PORTABLE=1 $(addprefix build/cuda-portable/,$(CUDA_PROGRAMS))
	tests/make_gpu_bundle.sh build/gpu-bundle $(addprefix build/cuda-portable/,$(CUDA_PROGRAMS))

bench: $(B)/difftx
	BUILD=$(B) tests/bench.sh

# the targets and their variables; the presets read from the recipes themselves
help:
	@echo "make                 build build/difftx (CUDA=1: build/cuda/difftx; SANITIZE=1: build/san/difftx)"
	@echo "make train           fetch and prepare the default corpus, train the default DIFF model, sample from it"
	@echo "make check           the unit programs alone, in under a minute: the fast loop"
	@echo "make test            every test (SANITIZE=1: under AddressSanitizer and UBSan, in build/san)"
	@echo "make data            the default corpus, tokenizer and token shards only"
	@echo "make bench           training speed, MFU and peak memory"
	@echo "make table6          the paper's Table 6    PRESET=$$(sed -n 's/^\[preset \(.*\)\]$$/\1/p' experiments/table6.ini | paste -sd'|') (default $(PRESET)), SEEDS=n (default $(SEEDS))"
	@echo "make lr-stability    Table 6's Transformer and DIFF at 1x, 2x, 4x the learning rate: spikes and loss; PRESET, SEEDS as above"
	@echo "make scaling         the DIFF - Transformer gap against training tokens (Figure 3b)  PRESET=smoke|small|gpu124m, SEEDS as above, VARIANTS=1 adds DIFF V2 and GDA"
	@echo "make table2 | fig5 | table3 | fig8      NEEDLE_PRESET=$$(sed -n 's/^\[preset \(.*\)\]$$/\1/p' experiments/needle.ini | paste -sd'|') (default $(NEEDLE_PRESET)), SEEDS=n (default $(SEEDS)), NEEDLE_ROWS=row,row (default every row)"
	@echo "make table5          PRESET, NEEDLE_PRESET, NEEDLE_ROWS and SEEDS as above"
	@echo "make CUDA=1          build/cuda/difftx with the CUDA backend (CUDA_ARCH=90); make gpu-bundle: the GPU check's folder"
	@echo "MPI=K                run the table and figure targets as K data-parallel ranks; NO_MPI=1 builds without MPI"
	@echo "PORTABLE=1           build without -march=native;  make clean: remove build/"

clean:
	rm -rf build

# the header dependencies the compiler wrote (DEPFLAGS), one list per object; last, so that no
# rule of theirs becomes the default goal
DEP_FILES := $(patsubst %.o,%.d,$(OBJS) $(B)/obj/difftx.o $(patsubst %,$(B)/obj/tests/%.o,$(TESTS) write_fixture) \
               $(EMU_OBJS) $(EMU)/obj/selftest.o $(foreach d,$(EMU_DEFECTS),$(EMU)/defect/$(d)/attention.o) \
               $(foreach d,$(EMU_CUDNN_DEFECTS),$(EMU)/cudnn-defect/$(d)/cudnn_attention.o) \
               $(foreach d,$(EMU_WRITTEN_DEFECTS),$(EMU)/written-defect/$(d)/attention_written.o))
-include $(wildcard $(DEP_FILES))
