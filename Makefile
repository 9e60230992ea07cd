# The two commands of the README. Both install what is missing, configure and build first.
BUILD ?= build
MATRIX ?= default
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
LCAHOST_ARGS ?=

.PHONY: bench test setup configure build clean

bench: build
	./$(BUILD)/bin/lcahost --plugins $(BUILD)/plugins --matrix $(MATRIX) \
	  --out results/bench.jsonl --force $(LCAHOST_ARGS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600

setup:
	./tools/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

clean:
	rm -rf $(BUILD)
