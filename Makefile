# Thin wrapper over CMake: `make`, `make test`, `make demo`, `make install`, `make check-asan`, `make fuzz`.
# See README.md.
BUILD ?= build
# `make install PREFIX=/usr DESTDIR=/tmp/stage`: PREFIX is set when the build is configured (difftrans.pc
# and GNUInstallDirs' lib/ or lib/<multiarch>/ follow it); unset, the build keeps the prefix it has
PREFIX ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# The sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer, clang for libFuzzer)
ASAN_BUILD ?= build-asan
SAN_CC ?= clang-14
FUZZ_SECONDS ?= 60
# `make test` also runs the unit tests and a smoke run of every fuzzer under the sanitizers (a few
# minutes); the command-line scripts, the golden comparison, the quantisation kernels (3 minutes
# under ASan), the npm tokenizer references and the portable- and AVX2-path repeats take 10+ minutes there:
# `make check-asan` runs those too
ASAN_QUICK_SKIP ?= ^cli_|^golden_|^baseline_|^tokenizer_reference$$|^test_tokenizer_golden|^test_quant$$|_portable$$|_avx2$$

.PHONY: all build test demo install clean deps asan-build check-asan fuzz

all: build

build:
	@scripts/check-deps.sh
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(if $(PREFIX),-DCMAKE_INSTALL_PREFIX=$(PREFIX)) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# the headers, libdifftrans.so and .a, difftrans.pc and the CLI under PREFIX (/usr/local by default),
# staged under DESTDIR when it is set
install: build
	cmake --install $(BUILD)

test:
	@scripts/check-deps.sh --install test
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory asan-build
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -E '$(ASAN_QUICK_SKIP)'

asan-build:
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_C_COMPILER=$(SAN_CC) -DDT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

check-asan:
	@scripts/check-deps.sh --install test
	@$(MAKE) --no-print-directory asan-build
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS)

# every libFuzzer harness for FUZZ_SECONDS on its seed corpus (fuzz/corpus), one after another
fuzz:
	@scripts/check-deps.sh --install test
	@$(MAKE) --no-print-directory asan-build
	@for f in $(ASAN_BUILD)/fuzz/fuzz_*; do \
	  name=$${f##*/fuzz_}; \
	  fuzz/run.sh $$f fuzz/corpus/$$name $(ASAN_BUILD)/fuzz/work_$$name $(FUZZ_SECONDS) || exit 1; \
	done

demo:
	@scripts/check-deps.sh --install demo
	@$(MAKE) --no-print-directory build
	@scripts/demo.sh $(BUILD)/difftrans

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
