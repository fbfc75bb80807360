# tpusim — build, test, demo.
#   make            release build: build/release/tpusim and libtpusim.a
#   make MODE=debug | MODE=asan   (asan = AddressSanitizer + UndefinedBehaviorSanitizer)
#   make test       installs missing packages, builds, runs every test (unit, CLI, conformance)
#   make demo       installs missing packages, builds, runs the demo
#   make fuzz       builds the libFuzzer targets with clang (build/fuzz/)
#   make plugin     the PJRT plugin: build/release/libtpusim_pjrt.so (jax: JAX_PLATFORMS=tpusim)
#   make install PREFIX=/usr/local   tpusim, libtpusim.so and .a, include/tpusim.h, lib/pkgconfig/tpusim.pc
#   make test-plugin  its pytest suite through jax (installs the pinned jax into build/venv)
#   make test-net   the network TPU (tpusim serve, the plugin's remote mode, names, jobs) through jax
MODE ?= release
CC ?= cc
BUILD ?= build/$(MODE)
PKGS := openblas zlib libcjson ompi-c

# src/net (tpusim serve, the plugin's remote mode): gRPC's C core, protobuf-c (C generated from src/net/*.proto
# at build time into build/gen/), SQLite
NET_PKGS := grpc libprotobuf-c sqlite3
GEN := build/gen
CPPFLAGS += -Iinclude -Isrc -I$(GEN) -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wmissing-prototypes -Werror
ifeq ($(findstring clang,$(shell $(CC) --version 2>/dev/null)),)
  WARN += -Wno-format-truncation   # gcc only (make CC=clang builds too)
else
  WARN += -Wno-pass-failed         # clang: omp simd loops it does not vectorise are not errors
endif
# -fPIC: the same objects go into the PJRT plugin (a shared library)
CFLAGS += -std=c11 $(WARN) -fopenmp -g -fPIC
LDLIBS += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -fopenmp -lm -lpthread
# recursive (=), not :=: evaluated at link time, after `deps` has installed the packages on a fresh machine
NET_LIBS = $(shell pkg-config --libs $(NET_PKGS) 2>/dev/null)

ifeq ($(MODE),release)
  CFLAGS += -O2
else ifeq ($(MODE),debug)
  CFLAGS += -O0
else ifeq ($(MODE),asan)
  CFLAGS += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
else
  $(error MODE must be release, debug or asan)
endif

# src/pjrt is the PJRT plugin: a client of the library (like tools/), linked into its own shared object
LIB_SRC := $(shell find src -name '*.c' -not -path 'src/pjrt/*' -not -path 'src/net/*' | sort)
# src/net: a client of the library too (the server, the client, the registry), linked by tools/ and the plugin
NET_SRC := $(sort $(wildcard src/net/*.c))
PROTOS := $(sort $(wildcard src/net/*.proto))
GEN_C := $(PROTOS:src/net/%.proto=$(GEN)/%.pb-c.c)
GEN_H := $(GEN_C:.c=.h)
NET_OBJ := $(NET_SRC:%.c=$(BUILD)/%.o) $(GEN_C:$(GEN)/%.c=$(BUILD)/gen/%.o)
PJRT_SRC := $(sort $(wildcard src/pjrt/*.c))
PJRT_OBJ := $(PJRT_SRC:%.c=$(BUILD)/%.o)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/*.c))
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
DEPS := $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/tests/dist/t_dist.d $(TOOL_OBJ:.o=.d) $(PJRT_OBJ:.o=.d) $(NET_OBJ:.o=.d)

.PHONY: all deps test test-unit test-cli test-asan demo fuzz fuzz-run clean bench plugin test-plugin test-plugin-remote test-net bench-net venv jax-tests tensorboard-venv lib install uninstall test-python
all: $(BUILD)/tpusim $(BUILD)/libtpusim.a $(BUILD)/libtpusim.so $(BUILD)/libtpusim_pjrt.so

build/.deps-ok: scripts/deps.sh
	@./scripts/deps.sh
	@mkdir -p build && touch $@
deps: build/.deps-ok

# V=1 shows the full commands
Q := $(if $(V),,@)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# the protocol's C code, generated (never committed)
$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: src/net/%.proto
	@mkdir -p $(GEN)
	@$(if $(Q),echo "  PROTOC  $<")
	$(Q)protoc-c --proto_path=src/net --c_out=$(GEN) $<
$(BUILD)/gen/%.o: $(GEN)/%.c $(GEN_H)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) -std=c11 -g -fPIC $(filter -O% -fsanitize% -fno-omit%,$(CFLAGS)) -MMD -MP -c $< -o $@
$(TOOL_OBJ) $(TEST_OBJ) $(PJRT_OBJ) $(NET_OBJ): | $(GEN_H)

$(BUILD)/libtpusim_net.a: $(NET_OBJ)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcs $@ $^

$(BUILD)/src/pjrt/%.o: src/pjrt/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) -Ithird_party/pjrt $(CFLAGS) -MMD -MP -c $< -o $@

# Only GetPjrtApi is exported (src/pjrt/exports.map): the library inside stays private to the plugin.
$(BUILD)/libtpusim_pjrt.so: $(PJRT_OBJ) $(BUILD)/libtpusim_net.a $(BUILD)/libtpusim.a src/pjrt/exports.map
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,--version-script=src/pjrt/exports.map -Wl,-z,defs -o $@ $(PJRT_OBJ) $(BUILD)/libtpusim_net.a $(BUILD)/libtpusim.a $(LDLIBS) $(NET_LIBS) -ldl
plugin: $(BUILD)/libtpusim_pjrt.so

$(BUILD)/libtpusim.a: $(LIB_OBJ)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcs $@ $^

# The library to link against (and the one the Python API loads): only the public API is exported.
VERSION := $(shell sed -n 's/^\#define TPUSIM_VERSION "\(.*\)"/\1/p' include/tpusim.h)
SOMAJOR := 0
$(BUILD)/libtpusim.so: $(LIB_OBJ) src/exports.map
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,--version-script=src/exports.map -Wl,-soname,libtpusim.so.$(SOMAJOR) -Wl,-z,defs \
	    -o $@ $(LIB_OBJ) $(LDLIBS)
lib: $(BUILD)/libtpusim.so $(BUILD)/libtpusim.a

# make install PREFIX=DIR [DESTDIR=STAGE]: the CLI, the libraries, the header and a pkg-config file.
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
install: $(BUILD)/tpusim $(BUILD)/libtpusim.a $(BUILD)/libtpusim.so scripts/tpusim.pc.in
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/tpusim $(DESTDIR)$(PREFIX)/bin/tpusim
	install -m 644 $(BUILD)/libtpusim.a $(DESTDIR)$(LIBDIR)/libtpusim.a
	install -m 755 $(BUILD)/libtpusim.so $(DESTDIR)$(LIBDIR)/libtpusim.so.$(VERSION)
	ln -sf libtpusim.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libtpusim.so.$(SOMAJOR)
	ln -sf libtpusim.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libtpusim.so
	install -m 644 include/tpusim.h $(DESTDIR)$(PREFIX)/include/tpusim.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' scripts/tpusim.pc.in \
	    > $(DESTDIR)$(LIBDIR)/pkgconfig/tpusim.pc
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/tpusim $(DESTDIR)$(LIBDIR)/libtpusim.a $(DESTDIR)$(LIBDIR)/libtpusim.so* \
	    $(DESTDIR)$(PREFIX)/include/tpusim.h $(DESTDIR)$(LIBDIR)/pkgconfig/tpusim.pc

$(BUILD)/tpusim: $(TOOL_OBJ) $(BUILD)/libtpusim_net.a $(BUILD)/libtpusim.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(NET_LIBS)

# the multi-process runtime under mpirun (tests/cli/t_dist.sh)
$(BUILD)/dist-tests: $(BUILD)/tests/dist/t_dist.o $(BUILD)/libtpusim.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# tests/t_pjrt.c drives the plugin through its ABI header
$(BUILD)/tests/t_pjrt.o: CPPFLAGS += -Ithird_party/pjrt
# the executor's kernels: sqrt and friends as vector instructions (the same values; no code there reads errno,
# and GCC ignores no-math-errno in an optimize attribute)
$(BUILD)/src/exec/%.o: CFLAGS += -fno-math-errno

$(BUILD)/unit-tests: $(TEST_OBJ) $(BUILD)/libtpusim_net.a $(BUILD)/libtpusim.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(NET_LIBS) -ldl

# The Python environment of the plugin's tests and demo: the pinned jax from PyPI (scripts/requirements-plugin.txt).
VENV := build/venv
$(VENV)/.ok: scripts/requirements-plugin.txt
	@echo "tpusim: setting up $(VENV) (jax 0.10.2 from PyPI)"
	@python3 -m venv $(VENV)
	@$(VENV)/bin/pip install -q --disable-pip-version-check -r scripts/requirements-plugin.txt
	@touch $@
venv: deps $(VENV)/.ok

# TensorBoard and its profile plugin from PyPI (scripts/requirements-tensorboard.txt), for the browser test of
# `tpusim profile --tensorboard` (tests/t_tensorboard.c); `tensorboard --logdir LOGDIR` from here shows profiles.
TBVENV := build/tb-venv
$(TBVENV)/.ok: scripts/requirements-tensorboard.txt
	@echo "tpusim: setting up $(TBVENV) (tensorboard and its profile plugin from PyPI)"
	@python3 -m venv $(TBVENV)
	@$(TBVENV)/bin/pip install -q --disable-pip-version-check -r scripts/requirements-tensorboard.txt
	@touch $@
tensorboard-venv: deps $(TBVENV)/.ok

# The README's test command. Everything runs from the repository root (tests read ../shared/corpus).
# scripts/run_tests.sh runs each suite and closes with the totals ("N passed, N failed, N skipped").
test: deps $(VENV)/.ok $(TBVENV)/.ok
	./scripts/run_tests.sh "$(MAKE) --no-print-directory test-unit" "$(MAKE) --no-print-directory test-cli" \
	    "$(MAKE) --no-print-directory test-plugin" "$(MAKE) --no-print-directory test-plugin-remote" \
	    "$(MAKE) --no-print-directory test-net" "$(MAKE) --no-print-directory test-python"

test-unit: $(BUILD)/unit-tests $(BUILD)/tpusim $(BUILD)/libtpusim_pjrt.so
	TPUSIM_BIN=$(BUILD)/tpusim TPUSIM_PJRT_LIBRARY=$(BUILD)/libtpusim_pjrt.so TPUSIM_QUIET=1 $(BUILD)/unit-tests

test-cli: $(BUILD)/tpusim $(BUILD)/dist-tests
	TPUSIM_BIN=$(BUILD)/tpusim TPUSIM_DIST_TESTS=$(BUILD)/dist-tests ./tests/cli/run.sh

# jax's own test files (tests/jax/upstream) through the plugin: docs/jax-tests.md. Tens of minutes; not in `test`.
jax-tests: $(VENV)/.ok $(BUILD)/libtpusim_pjrt.so
	@$(VENV)/bin/pip install -q --disable-pip-version-check -r scripts/requirements-jax-tests.txt
	TPUSIM_PJRT_LIBRARY=$(BUILD)/libtpusim_pjrt.so $(VENV)/bin/python tests/jax/run.py

# The PJRT plugin under jax (python/tests/plugin), beside jax's CPU backend as the reference.
test-plugin: $(VENV)/.ok $(BUILD)/libtpusim_pjrt.so
	JAX_PLATFORMS=tpusim,cpu PYTHONPATH=python TPUSIM_PJRT_LIBRARY=$(BUILD)/libtpusim_pjrt.so TPUSIM_QUIET=1 \
	    $(VENV)/bin/python -m pytest -q -p no:cacheprovider python/tests/plugin

# The same suite with the plugin in remote mode: a `tpusim serve` on loopback, reached through TPU_NAME.
test-plugin-remote: $(VENV)/.ok $(BUILD)/libtpusim_pjrt.so $(BUILD)/tpusim
	JAX_PLATFORMS=tpusim,cpu PYTHONPATH=python TPUSIM_PJRT_LIBRARY=$(BUILD)/libtpusim_pjrt.so TPUSIM_QUIET=1 \
	    ./scripts/with_tpu_server.sh $(BUILD)/tpusim $(VENV)/bin/python -m pytest -q -p no:cacheprovider python/tests/plugin

# The network TPU end to end (python/tests/net): servers, names, jobs, tokens, TLS, faults (clients and servers
# killed). Every server a test starts, the test stops.
test-net: $(VENV)/.ok $(BUILD)/libtpusim_pjrt.so $(BUILD)/tpusim
	TPUSIM_BIN=$(BUILD)/tpusim JAX_PLATFORMS=tpusim PYTHONPATH=python TPUSIM_PJRT_LIBRARY=$(BUILD)/libtpusim_pjrt.so \
	    $(VENV)/bin/python -m pytest -q -p no:cacheprovider python/tests/net

# The in-process Python API (python/tests/api): tpusim.run/check/memory/profile over libtpusim.so.
test-python: $(VENV)/.ok $(BUILD)/libtpusim.so
	JAX_PLATFORMS=cpu PYTHONPATH=python TPUSIM_LIBRARY=$(BUILD)/libtpusim.so \
	    $(VENV)/bin/python -m pytest -q -p no:cacheprovider python/tests/api

# Sanitizers make the MobileNetV2 step ~5x slower: it runs in the release test only (TPUSIM_QUICK). The plugin
# is checked under the sanitizers through its ABI (tests/t_pjrt.c); inside Python it runs in the release build.
test-asan: deps
	./scripts/run_tests.sh "TPUSIM_QUICK=1 $(MAKE) --no-print-directory MODE=asan test-unit" \
	    "TPUSIM_QUICK=1 $(MAKE) --no-print-directory MODE=asan test-cli"

demo: deps $(BUILD)/tpusim $(VENV)/.ok
	./examples/demo.sh $(BUILD)/tpusim build/demo/digits_mlp_v3-8 $(VENV)

# The library is compiled once for all targets (instrumented for coverage, ASan and UBSan), then each target links it.
FUZZ_TARGETS := $(patsubst fuzz/%.c,build/fuzz/%,$(wildcard fuzz/fuzz_*.c))
FUZZ_CFLAGS := $(CPPFLAGS) -std=c11 -g -O1 -Wno-pass-failed -fopenmp=libomp
FUZZ_OBJ := $(LIB_SRC:%.c=build/fuzz/obj/%.o)
fuzz: deps $(FUZZ_TARGETS)
build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (fuzz)")
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@
build/fuzz/libtpusim.a: $(FUZZ_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^
# the plugin's target links the plugin's sources and reads its ABI header
build/fuzz/fuzz_pjrt: fuzz/fuzz_pjrt.c $(PJRT_SRC) $(NET_SRC) $(GEN_C) build/fuzz/libtpusim.a
	@mkdir -p build/fuzz
	@$(if $(Q),echo "  LINK    $@")
	$(Q)clang $(FUZZ_CFLAGS) -Ithird_party/pjrt -fsanitize=fuzzer,address,undefined -o $@ $< $(PJRT_SRC) $(NET_SRC) $(GEN_C) build/fuzz/libtpusim.a $(LDLIBS) $(NET_LIBS) -ldl
# the request decoder of tpusim serve, with the generated protocol code
build/fuzz/fuzz_net: fuzz/fuzz_net.c src/net/decode.c src/net/err.c $(GEN_C) build/fuzz/libtpusim.a
	@mkdir -p build/fuzz
	@$(if $(Q),echo "  LINK    $@")
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< src/net/decode.c src/net/err.c $(GEN_C) build/fuzz/libtpusim.a $(LDLIBS) -lprotobuf-c
build/fuzz/%: fuzz/%.c fuzz/oracle.h build/fuzz/libtpusim.a
	@mkdir -p build/fuzz
	@$(if $(Q),echo "  LINK    $@")
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< build/fuzz/libtpusim.a $(LDLIBS)
-include $(FUZZ_OBJ:.o=.d)

# Runs each fuzz target for FUZZ_SECONDS (default 60) over its corpus, then the regression files.
fuzz-run: fuzz
	./fuzz/run.sh $(or $(FUZZ_SECONDS),60)

# bench/*.c that drive the library directly (bench/README.md); bench/run_bench.py builds them through these rules
BENCH_TOOLS := $(BUILD)/bench_run $(BUILD)/gemm_bench $(BUILD)/conv_bench
$(BENCH_TOOLS): $(BUILD)/%: bench/%.c $(BUILD)/libtpusim.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtpusim.a $(LDFLAGS) $(LDLIBS)

bench: $(BUILD)/tpusim $(BENCH_TOOLS)
	@echo "see bench/README.md"

# The load test of tpusim serve (bench/README.md): N clients x M executions beside in-process execution.
$(BUILD)/net_bench: bench/net_bench.c $(BUILD)/libtpusim_net.a $(BUILD)/libtpusim.a | $(GEN_H)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtpusim_net.a $(BUILD)/libtpusim.a $(LDFLAGS) $(LDLIBS) $(NET_LIBS)
bench-net: $(BUILD)/net_bench $(BUILD)/tpusim
	$(BUILD)/net_bench --clients $(or $(CLIENTS),8) --execs $(or $(EXECS),200) --server $(BUILD)/tpusim

clean:
	rm -rf build

-include $(DEPS)
