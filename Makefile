# xent - the two commands:
#   make bench   the benchmark (GPU when there is one, else CPU)
#   make test    the whole test suite (C tests through CTest, the C suite again
#                under ASan and UBSan with gcc and clang, then Python, then the
#                wheel built, checked and installed, and the Python suite on it)
# Both install what they need first (scripts/deps.sh) and skip what is there.

BUILD ?= build
CMAKE_FLAGS ?=
PYTHON ?= python3
# CTest tests run side by side (on a GPU the CUDA tests share it; 1 runs them
# one at a time, for a GPU with little memory).
CTEST_JOBS ?= 8

.PHONY: all deps pyenv build test test-c test-sanitize test-python test-wheel wheel bench bench-quick clean

all: build

deps:
	@scripts/deps.sh

# the test environment first, so that the build finds its jax (libxent_jax)
pyenv:
	@scripts/pyenv.sh >/dev/null

$(BUILD)/CMakeCache.txt:
	@. scripts/env.sh && cmake -S . -B $(BUILD) $$XENT_CMAKE_PREFIX $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j

test: deps pyenv build
	@. scripts/env.sh && cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)
	@scripts/sanitize.sh
	@. scripts/env.sh && scripts/pytest.sh
	@. scripts/env.sh && scripts/wheel.sh

test-c: build
	@. scripts/env.sh && cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)

test-sanitize: deps
	@scripts/sanitize.sh

test-python: deps pyenv build
	@. scripts/env.sh && scripts/pytest.sh

# the wheel (wheelhouse/), built, checked, installed and tested (scripts/wheel.sh)
test-wheel wheel: deps
	@. scripts/env.sh && scripts/wheel.sh

bench: build
	@$(BUILD)/bench/xent-bench

bench-quick: build
	@$(BUILD)/bench/xent-bench --quick

clean:
	rm -rf $(BUILD) build-sanitize-* build-wheel build-wheel.log dist wheelhouse
