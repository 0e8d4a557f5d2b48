# Thin wrapper over CMake: `make`, `make test`, `make demo`. See README.md.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build test demo clean deps

all: build

build:
	@scripts/check-deps.sh
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test:
	@scripts/check-deps.sh --install test
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo:
	@scripts/check-deps.sh --install demo
	@$(MAKE) --no-print-directory build
	@scripts/demo.sh $(BUILD)/difftrans

clean:
	rm -rf $(BUILD)
