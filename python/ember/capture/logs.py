"""Compiler logs by artifact (torch's TORCH_LOGS / torch._logging.set_logs), through
Python's logging: each artifact is the logger `ember.<name>`, at INFO.

Turned on by EMBER_LOGS (a comma list: EMBER_LOGS=graph_code,guards; read when a log
is about to be written, so a change of the variable takes effect at the next compile)
or by ember.set_logs(graph_code=True, ...), which wins over the variable for the
artifacts it names. Records go to the `ember` logger's own handler (standard error,
resolved at each record so a redirected sys.stderr is honoured); that logger does not
propagate to the root logger, as torch's do not. Users may add handlers or change
levels with logging as for any library.
"""
from __future__ import annotations

import logging
import os
import sys

ARTIFACTS = {
    "graph_code": "each captured graph, printed as Python",
    "guards": "the guards of each compiled entry",
    "recompiles": "why a function compiled again (the guard that failed)",
    "graph_breaks": "what sent code back to CPython, with the user's line",
    "aot_graphs": "AOT forward and backward graphs, what is saved with bytes, writes "
                  "into inputs",
    "output_code": "the LLVM backend's loop IR and optimised LLVM IR",
}
_ALIASES = {"graph": "graph_code"}       # the name older ember releases read

_explicit = {}                            # set_logs: name -> bool
_handler = None


class _StderrHandler(logging.Handler):
    def emit(self, record):
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:    # noqa: BLE001 - as logging.Handler.handleError
            self.handleError(record)


def _root():
    global _handler
    logger = logging.getLogger("ember")
    if _handler is None:
        _handler = _StderrHandler()
        _handler.setFormatter(logging.Formatter("[ember.%(artifact)s] %(message)s"))
        logger.addHandler(_handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    return logger


def _from_env():
    names = set()
    for word in os.environ.get("EMBER_LOGS", "").split(","):
        word = word.strip().lstrip("+")
        names.add(_ALIASES.get(word, word))
    return names


def enabled(name) -> bool:
    if name in _explicit:
        return _explicit[name]
    return name in _from_env()


def log(name, text, force=False):
    """Writes text to artifact `name`'s logger if that artifact is on (or force)."""
    if force or enabled(name):
        _root()
        logging.getLogger(f"ember.{name}").info(text, extra={"artifact": name})


def set_logs(**artifacts):
    """ember.set_logs(graph_code=True, guards=True, recompiles=True, graph_breaks=True,
    aot_graphs=True, output_code=True): turns artifacts on (True) or off (False);
    no arguments turns off every artifact set_logs turned on and returns to EMBER_LOGS."""
    for name, on in artifacts.items():
        if name not in ARTIFACTS:
            raise ValueError(f"ember.set_logs: unknown log artifact {name!r}; known: "
                             f"{', '.join(sorted(ARTIFACTS))}")
        if not isinstance(on, bool):
            raise TypeError(f"ember.set_logs: {name} must be True or False, got "
                            f"{type(on).__name__}")
    if not artifacts:
        _explicit.clear()
    _explicit.update(artifacts)
