# tpusim — build, test, demo.
#   make            release build: build/release/tpusim and libtpusim.a
#   make MODE=debug | MODE=asan   (asan = AddressSanitizer + UndefinedBehaviorSanitizer)
#   make test       installs missing packages, builds, runs every test (unit, CLI, conformance)
#   make demo       installs missing packages, builds, runs the demo
#   make fuzz       builds the libFuzzer targets with clang (build/fuzz/)
MODE ?= release
CC ?= cc
BUILD ?= build/$(MODE)
PKGS := openblas zlib libcjson

CPPFLAGS += -Iinclude -Isrc -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wmissing-prototypes -Werror
ifeq ($(findstring clang,$(shell $(CC) --version 2>/dev/null)),)
  WARN += -Wno-format-truncation   # gcc only (make CC=clang builds too)
else
  WARN += -Wno-pass-failed         # clang: omp simd loops it does not vectorise are not errors
endif
CFLAGS += -std=c11 $(WARN) -fopenmp -g
LDLIBS += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -fopenmp -lm -lpthread

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

LIB_SRC := $(shell find src -name '*.c' | sort)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/*.c))
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
DEPS := $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)

.PHONY: all deps test test-unit test-cli test-asan demo fuzz fuzz-run clean bench
all: $(BUILD)/tpusim $(BUILD)/libtpusim.a

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

$(BUILD)/libtpusim.a: $(LIB_OBJ)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcs $@ $^

$(BUILD)/tpusim: $(TOOL_OBJ) $(BUILD)/libtpusim.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/unit-tests: $(TEST_OBJ) $(BUILD)/libtpusim.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The README's test command. Everything runs from the repository root (tests read ../shared/corpus).
test: deps
	$(MAKE) --no-print-directory test-unit test-cli

test-unit: $(BUILD)/unit-tests $(BUILD)/tpusim
	TPUSIM_BIN=$(BUILD)/tpusim $(BUILD)/unit-tests

test-cli: $(BUILD)/tpusim
	TPUSIM_BIN=$(BUILD)/tpusim ./tests/cli/run.sh

# Sanitizers make the MobileNetV2 step ~5x slower: it runs in the release test only (TPUSIM_QUICK).
test-asan: deps
	TPUSIM_QUICK=1 $(MAKE) --no-print-directory MODE=asan test-unit test-cli

demo: deps $(BUILD)/tpusim
	./examples/demo.sh $(BUILD)/tpusim

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
build/fuzz/%: fuzz/%.c fuzz/oracle.h build/fuzz/libtpusim.a
	@mkdir -p build/fuzz
	@$(if $(Q),echo "  LINK    $@")
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< build/fuzz/libtpusim.a $(LDLIBS)
-include $(FUZZ_OBJ:.o=.d)

# Runs each fuzz target for FUZZ_SECONDS (default 60) over its corpus, then the regression files.
fuzz-run: fuzz
	./fuzz/run.sh $(or $(FUZZ_SECONDS),60)

bench: $(BUILD)/tpusim
	@echo "see bench/README.md"

clean:
	rm -rf build

-include $(DEPS)
