"""Capture and compiler settings (ember.compiler.config / ember._dynamo.config)."""
import os


def default_cache_dir():
    """EMBER_CACHE_DIR, else ember/ in the user's cache folder ($XDG_CACHE_HOME, else
    ~/.cache)."""
    path = os.environ.get("EMBER_CACHE_DIR")
    if path:
        return os.path.abspath(os.path.expanduser(path))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "ember")


class _Config:
    def __init__(self):
        # raise instead of falling back to CPython or to a simpler backend (a property:
        # the compiled calls in C read it as a flag)
        self.strict = os.environ.get("EMBER_STRICT", "") == "1"
        # entries per code object before it stops recompiling (torch: cache_size_limit)
        self.cache_size_limit = 8
        # print each captured graph (EMBER_LOGS=graph does the same)
        self.verbose = "graph" in os.environ.get("EMBER_LOGS", "").split(",")
        # the LLVM backend keeps compiled kernels' object code in cache_dir (kernels/),
        # so that another process loads it instead of compiling (EMBER_KERNEL_CACHE=0:
        # off; identical kernels are compiled once per process either way)
        self.kernel_cache = os.environ.get("EMBER_KERNEL_CACHE", "1") != "0"
        self.cache_dir = default_cache_dir()
        # the LLVM backend keeps compiled graphs (plans, kernel specs, AOT facts) in
        # cache_dir (graphs/), so that another process skips AOT autograd and lowering
        # (compiler/graph_cache.py; EMBER_GRAPH_CACHE=0: off; off with the kernel cache)
        self.graph_cache = os.environ.get("EMBER_GRAPH_CACHE", "1") != "0"
        # threads compiling a graph's kernels at once (None: the cores this process has)
        self.compile_threads = None
        # what AOT autograd's forward saves for the backward: "min_cut" (the fewest
        # bytes; cheap values are computed again in the backward) or "save_all" (every
        # forward value the backward reads); aot/partition.py
        self.partitioner = "min_cut"
        # random draws in graphs the LLVM backend compiles (rand, randn, randint, and the
        # dropout, bernoulli, ... made of them): False draws Philox4x32-10 in the
        # kernels (compiler/random_draws.py; reproducible under manual_seed, not eager's
        # numbers); True runs eager's kernels on eager's generator, so compiled results
        # equal eager's. Read when a graph is compiled (torch: fallback_random)
        self.fallback_random = False

    @property
    def strict(self):
        return self._strict

    @strict.setter
    def strict(self, value):
        self._strict = bool(value)
        from .._C import _capture
        set_strict = getattr(_capture, "set_strict", None)     # the hook's build only
        if set_strict is not None:
            set_strict(self._strict)

    def __repr__(self):
        return (f"config(strict={self.strict}, cache_size_limit={self.cache_size_limit}, "
                f"kernel_cache={self.kernel_cache}, graph_cache={self.graph_cache}, "
                f"cache_dir={self.cache_dir!r})")


config = _Config()
