# Ember: `make demo` and `make test` work on a fresh machine (see README.md).
# Each creates or reuses .venv with python3, installs ember with its extras, then runs.
# CI=true: -Werror, and torch==2.13.0 is installed so the PyTorch parity tests run.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTEST_ARGS ?=
comma := ,
# CI=true also installs the distributed extra (mpi4py and the Open MPI wheel), so the
# tests in tests/distributed run real multi-process jobs instead of skipping.
SETUP_EXTRAS := test$(if $(filter true,$(CI)),$(comma)distributed)

.PHONY: setup llvm demo test verify bench fuzz sanitize build clean accuracy

$(PY):
	$(PYTHON) -m venv $(VENV)

# LLVM 14..19 development files: installed with apt-get where none is found.
llvm:
	@if [ -z "$$LLVM_CONFIG" ] && ! ls /usr/bin/llvm-config* >/dev/null 2>&1 && \
	    ! command -v llvm-config >/dev/null 2>&1; then \
	  echo "ember: no llvm-config found; installing llvm-dev with apt-get"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq llvm-dev; \
	fi

setup: $(PY) llvm
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[$(SETUP_EXTRAS)]"
	@if [ "$$CI" = "true" ]; then $(PIP) install -q "torch==2.13.0"; fi

demo: setup
	$(PY) -m ember.demo

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

verify: setup
	$(PY) -m ember.verify

# The comparison needs PyTorch: torch==2.13.0 is installed (a fresh machine's report
# would otherwise have empty torch columns). kernels.py and models.py run at 1 and 2
# threads with OpenBLAS left to pick its own kernel for this CPU (each prints the one
# that ran) and print every target met or MISSED.
BENCH_ENV := env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
bench: setup
	$(PIP) install -q -e ".[bench]"
	$(PIP) install -q "torch==2.13.0"
	$(PY) benchmarks/eager_ops.py
	$(PY) benchmarks/overhead.py
	for t in 1 2; do \
	  $(BENCH_ENV) $(PY) benchmarks/kernels.py --threads $$t || exit 1; \
	  $(BENCH_ENV) $(PY) benchmarks/models.py --threads $$t || exit 1; \
	done

# Differential fuzzing of ember.compile (llvm, aot_eager) against eager: random programs
# for FUZZ_MINUTES from seed FUZZ_SEED, failures shrunk to minimal reproducers; the
# summary and the reproducers go to fuzz-results/seed$(FUZZ_SEED) (tests/fuzz/README.md).
FUZZ_MINUTES ?= 30
FUZZ_SEED ?= 0
FUZZ_JOBS ?= 2
fuzz: setup
	PYTHONPATH=python:tests $(PY) -m fuzz.run fuzz --seed $(FUZZ_SEED) \
	  --minutes $(FUZZ_MINUTES) --jobs $(FUZZ_JOBS) --results fuzz-results/seed$(FUZZ_SEED)

# The JIT's float32 elementary functions against float64 on every one of the 2^32
# float32 inputs (pow: 3 * 10^7 pairs), at the host's vector width and at SSE width
# (docs/vecmath.md; hours, not minutes).
accuracy: setup
	$(PY) -m ember.compiler.vecmath_accuracy --stride 1
	EMBER_LLVM_FEATURES=+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt \
	  $(PY) -m ember.compiler.vecmath_accuracy --stride 1

# Rebuild the extension in place (after editing csrc/).
build: $(PY)
	$(PY) setup.py -q build_ext --inplace -j 2

# The op, tensor, autograd, AOT, LLVM and dimension-limit tests under AddressSanitizer
# and UndefinedBehaviorSanitizer (test_max_dims.py's worker processes inherit the
# preload); rebuilds the normal extension afterwards.
sanitize: setup
	EMBER_SANITIZE=1 $(PY) setup.py -q build_ext --inplace --force -j 2
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(PY) -m pytest -q -p no:cacheprovider tests/test_ops.py tests/test_tensor.py \
	  tests/test_autograd.py tests/test_aot.py tests/test_llvm.py tests/test_max_dims.py; \
	  status=$$?; \
	$(PY) setup.py -q build_ext --inplace --force -j 2; exit $$status

clean:
	rm -rf build python/ember/*.so python/*.egg-info
