# Thin wrapper over CMake. `make` builds, `make test` runs the suite (plus the
# sanitizer build), `make demo` runs the main job, `make bench` the CPU benchmark.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build test test-fast test-asan test-tsan bench demo eval clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# Unit and end-to-end tests (release build), then the same suite under ASan+UBSan, then
# the thread-contract stress test under ThreadSanitizer.
test: test-fast test-asan test-tsan

test-fast: build
	ctest --test-dir $(BUILD) --output-on-failure -LE gpu -j $(JOBS)

test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DLOCKS_SANITIZE=ON -DLOCKS_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -LE 'gpu|model' -j $(JOBS)

# Only the library and tests/test_threads.c: one cache used from several threads at
# once (locks.h "Threads"); a data race fails it (halt_on_error).
test-tsan:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) -DLOCKS_TSAN=ON -DLOCKS_CUDA=OFF -DLOCKS_PYTHON_TESTS=OFF
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_threads
	ctest --test-dir $(TSAN_BUILD) --output-on-failure -R '^test_threads$$'

bench: build
	$(BUILD)/locks bench --shape llama3-8b --context 131072 --budget 2048

demo: build
	scripts/fetch-model.sh >/dev/null
	$(BUILD)/locks demo

# Long-context task sweep (eval/README.md): results are appended to EVAL_JSONL (a rerun
# resumes), then eval/RESULTS.md and the plots are written from EVAL_REPORT (all JSONL
# files to tabulate). The default is the full grid of the issue, hours on 2 cores;
# eval/RESULTS.md names the CPU-sized commands that made the committed results.
EVAL_JSONL ?= eval/results.jsonl
EVAL_REPORT ?= $(EVAL_JSONL)
EVAL_ARGS ?= --tasks all --contexts 2K,4K,8K --samples 10
eval: build
	scripts/fetch-model.sh >/dev/null
	scripts/fetch-haystack.sh --gnuplot >/dev/null
	LOCKS_EVAL_COMMIT=$$(git rev-parse --short HEAD) $(BUILD)/locks eval $(EVAL_ARGS) --out $(EVAL_JSONL)
	python3 scripts/eval-report.py $(EVAL_REPORT) --out eval/RESULTS.md --plots eval \
		--note eval/NOTE.md --command "make eval EVAL_ARGS='$(EVAL_ARGS)'"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
