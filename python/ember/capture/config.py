"""Capture settings (ember.compiler.config / ember._dynamo.config)."""
import os


class _Config:
    def __init__(self):
        # raise instead of falling back to CPython or to a simpler backend
        self.strict = os.environ.get("EMBER_STRICT", "") == "1"
        # entries per code object before it stops recompiling (torch: cache_size_limit)
        self.cache_size_limit = 8
        # print each captured graph (EMBER_LOGS=graph does the same)
        self.verbose = "graph" in os.environ.get("EMBER_LOGS", "").split(",")

    def __repr__(self):
        return f"config(strict={self.strict}, cache_size_limit={self.cache_size_limit})"


config = _Config()
