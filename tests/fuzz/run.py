"""The fuzz campaign: batches of programs in worker subprocesses, crashes caught, failures
grouped, shrunk and reported.

    PYTHONPATH=python:tests python -m fuzz.run fuzz --seed 0 --minutes 30 --results DIR
    PYTHONPATH=python:tests python -m fuzz.run fuzz --seed 0 --programs 200
    PYTHONPATH=python:tests python -m fuzz.run repro DIR/minimal/<name>.py

A worker (`worker` command) generates program i of the seed's stream, writes it to
DIR/work/w<k>.current.py (while it is generated too: generation runs each statement
eagerly) and the stage it is in to w<k>.phase, runs it (execute.run_program) and prints
one JSON line per program. A worker that dies (segfault, abort, a hang past
PROGRAM_TIMEOUT) leaves that file behind: the program is saved as a crash and a new
worker continues after it. Failures are grouped by class ("kind", e.g. value, raised:
SystemError, crash:SIGSEGV, with the backends that showed it); a few programs per class
are shrunk (shrink.py, candidates run in a `serve` subprocess so a crash of one is
caught too) and the minimal reproducers are written to DIR/minimal/ and printed.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
PROGRAM_TIMEOUT = 90.0      # seconds one program may take before it counts as a hang
WORKER_LIMIT = 150          # programs per worker process (bounds memory growth)


def _env():
    import ember
    ember_path = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ember_path, TESTS])
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return env


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def crash_kind(returncode):
    if returncode is None:
        return "crash:hang"
    if returncode < 0:
        try:
            return f"crash:{signal.Signals(-returncode).name}"
        except ValueError:
            return f"crash:signal{-returncode}"
    return f"crash:exit{returncode}"


# ---------------------------------------------------------------- worker side


def _results_channel():
    """The stream results go to: the process's stdout, which from now on is stderr at
    the fd level, so nothing a program or a library prints can corrupt the results."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    return out


def worker_main(args):
    from .execute import run_program
    from .gen import Generator
    base = os.path.join(args.dir, f"w{args.wid}")
    cur, ph, idx = base + ".current.py", base + ".phase", base + ".index"
    out = _results_channel()
    i, done = args.start, 0
    while (args.stop < 0 or i < args.stop) and done < WORKER_LIMIT:
        _write(idx, str(i))
        _write(ph, "generate")
        t0 = time.perf_counter()
        g = Generator(args.seed, i, progress=lambda s: _write(cur, s))
        src = g.generate()
        _write(cur, src)
        t1 = time.perf_counter()
        failures, stats = run_program(src, filename=cur, phase=lambda p: _write(ph, p))
        stats["mode"] = g.mode
        stats["tags"] = [t.split(":")[0] for t in g.tags]
        stats["gen_s"] = round(t1 - t0, 3)
        stats["run_s"] = round(time.perf_counter() - t1, 3)
        print(json.dumps({"index": i, "failures": failures, "stats": stats,
                          "source": src if failures else None}), file=out, flush=True)
        i += args.step
        done += 1
    print(json.dumps({"next": i if (args.stop < 0 or i < args.stop) else None}), file=out,
          flush=True)


def serve_main(args):
    """Runs programs sent on stdin (one JSON line each); the shrinker's evaluator."""
    from .execute import run_program
    cur, ph = os.path.join(args.dir, "serve.current.py"), os.path.join(args.dir, "serve.phase")
    results = _results_channel()
    for line in sys.stdin:
        req = json.loads(line)
        _write(cur, req["source"])
        try:
            failures, stats = run_program(req["source"], backends=req["backends"],
                                          filename=cur, phase=lambda p: _write(ph, p))
            out = {"failures": failures}
        except Exception as e:   # noqa: BLE001 - a candidate the harness cannot run
            out = {"failures": [], "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), file=results, flush=True)


def _pump(stream, q):
    for line in stream:
        q.put(line)
    q.put(None)


class Evaluator:
    """Runs candidate programs in a subprocess; a crash is reported as a failure."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.proc = None
        self.runs = 0

    def _start(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fuzz.run", "serve", "--dir", self.workdir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(os.path.join(self.workdir, "serve.stderr"), "w"),
            env=_env(), text=True, bufsize=1)
        self.lines = queue.Queue()
        threading.Thread(target=_pump, args=(self.proc.stdout, self.lines),
                         daemon=True).start()

    def run(self, source, backends):
        """The failures of one run of source; a crash is one failure of kind crash:*."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.runs += 1
        self.proc.stdin.write(json.dumps({"source": source, "backends": list(backends)})
                              + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=PROGRAM_TIMEOUT)
        except queue.Empty:
            line = None
            self.proc.kill()
            self.hung = True
        if line is None:
            self.proc.wait()
            phase = _read(os.path.join(self.workdir, "serve.phase"), "eager").strip()
            rc = None if getattr(self, "hung", False) else self.proc.returncode
            self.proc, self.hung = None, False
            return [{"backend": _crash_phase(phase), "call": 1, "where": phase,
                     "kind": crash_kind(rc),
                     "detail": _last_lines(_read(os.path.join(self.workdir,
                                                              "serve.stderr")))}]
        return json.loads(line)["failures"]

    def signatures(self, source, backends):
        from .execute import signature
        return {signature(f) for f in self.run(source, backends)}

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _crash_phase(phase):
    # generation runs each statement eagerly: a crash there is an eager crash
    return "eager" if phase in ("generate", "") else phase


# ---------------------------------------------------------------- the campaign


class Campaign:
    def __init__(self, seed, results, programs=None, minutes=None, jobs=2,
                 shrink_seconds=60.0, per_class=2, log=print):
        self.seed, self.results = seed, results
        self.programs, self.minutes, self.jobs = programs, minutes, jobs
        self.shrink_seconds, self.per_class, self.log = shrink_seconds, per_class, log
        self.work = os.path.join(results, "work")
        os.makedirs(self.work, exist_ok=True)
        os.makedirs(os.path.join(results, "failing"), exist_ok=True)
        os.makedirs(os.path.join(results, "minimal"), exist_ok=True)
        if os.path.exists(os.path.join(results, "records.jsonl")):
            os.remove(os.path.join(results, "records.jsonl"))
        self.records = []         # one per program: index, failures, stats
        self.sources = {}         # index -> source of failing programs
        self.crashes = 0

    # workers

    def _spawn(self, wid, start):
        stop = self.programs if self.programs is not None else -1
        err = open(os.path.join(self.work, f"w{wid}.stderr"), "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "fuzz.run", "worker", "--seed", str(self.seed),
             "--start", str(start), "--stop", str(stop), "--step", str(self.jobs),
             "--dir", self.work, "--wid", str(wid)],
            stdout=subprocess.PIPE, stderr=err, env=_env(), text=True, bufsize=1)
        return proc

    def run(self):
        t0 = time.monotonic()
        deadline = t0 + self.minutes * 60 if self.minutes else None
        hard = t0 + (self.programs * 4.0 + 60 if self.programs else 1e18)
        q = queue.Queue()
        workers = {}

        def reader(wid, proc):
            for line in proc.stdout:
                q.put((wid, proc, line))
            q.put((wid, proc, None))

        def start(wid, index):
            proc = self._spawn(wid, index)
            workers[wid] = {"proc": proc, "last": time.monotonic()}
            threading.Thread(target=reader, args=(wid, proc), daemon=True).start()

        for w in range(self.jobs):
            if self.programs is None or w < self.programs:
                start(w, w)
        while workers:
            now = time.monotonic()
            if (deadline and now > deadline) or now > hard:
                for w in list(workers.values()):
                    w["proc"].kill()
                    w["proc"].wait()
                break
            for wid, w in list(workers.items()):
                if now - w["last"] > PROGRAM_TIMEOUT:
                    w["proc"].kill()       # a hang: the reader then reports its end
                    w["hung"] = True
            try:
                wid, proc, line = q.get(timeout=1.0)
            except queue.Empty:
                continue
            w = workers.get(wid)
            if w is None or w["proc"] is not proc:
                continue
            w["last"] = time.monotonic()
            if line is not None:
                msg = json.loads(line)
                if "next" in msg:
                    proc.wait()
                    del workers[wid]
                    if msg["next"] is not None:
                        start(wid, msg["next"])
                    continue
                self._record(msg)
                continue
            proc.wait()
            del workers[wid]
            index = int(_read(os.path.join(self.work, f"w{wid}.index"), "-1") or -1)
            self._crash(wid, index, None if w.get("hung") else proc.returncode)
            nxt = index + self.jobs
            if index >= 0 and (self.programs is None or nxt < self.programs):
                start(wid, nxt)
        self.elapsed = time.monotonic() - t0

    def _record(self, msg):
        self.records.append(msg)
        with open(os.path.join(self.results, "records.jsonl"), "a") as f:
            f.write(json.dumps({k: v for k, v in msg.items() if k != "source"}) + "\n")
        if msg["failures"]:
            self.sources[msg["index"]] = msg["source"]
            _write(os.path.join(self.results, "failing", f"p{msg['index']:06d}.py"),
                   _annotate(msg["source"], msg["failures"]))

    def _crash(self, wid, index, returncode):
        base = os.path.join(self.work, f"w{wid}")
        src = _read(base + ".current.py")
        phase = _read(base + ".phase", "generate").strip()
        stderr = _read(base + ".stderr")[-3000:]
        kind = crash_kind(returncode)
        if kind == "crash:exit1" and "Traceback" in stderr and "Fatal Python" not in stderr:
            kind = "harness_error"
        failure = {"backend": _crash_phase(phase), "call": 1, "where": phase, "kind": kind,
                   "detail": _last_lines(stderr)}
        self.crashes += 1
        self.log(f"fuzz: program #{index} {kind} during {phase}")
        msg = {"index": index, "failures": [failure], "stats": {"crash": True},
               "source": src}
        self._record(msg)

    # grouping, shrinking, reporting

    def classes(self):
        """class -> {"kind", "backends", "programs": [index]}. A class is a kind of
        failure and the backends one program shows it under: "value [llvm]" (a lowering
        or code generation problem) is another class than "value [aot_eager, llvm]"
        (capture or AOT autograd, before the backends part)."""
        out = {}
        for r in self.records:
            by_kind = {}
            for f in r["failures"]:
                by_kind.setdefault(f["kind"], set()).add(f["backend"])
            for kind, backends in by_kind.items():
                name = f"{kind} [{', '.join(sorted(backends))}]"
                c = out.setdefault(name, {"kind": kind, "backends": backends, "programs": []})
                c["programs"].append(r["index"])
        return out

    def shrink_all(self):
        """Shrinks up to per_class programs per class, in rounds (every class gets its
        first reproducer before any gets a second; rarest classes first). A class that
        an earlier minimal reproducer also shows counts as covered in the first round,
        and a program holding all the features of a reproducer of its class is not
        shrunk again."""
        from .shrink import features, shrink
        classes = self.classes()
        ev = Evaluator(self.work)
        self.minimal = []
        done = {name: [] for name in classes}
        covered = set()
        deadline = time.monotonic() + self.shrink_seconds
        order = sorted(classes, key=lambda k: (classes[k]["kind"] == "harness_error",
                                               len(classes[k]["programs"])))
        try:
            for round_ in range(self.per_class):
                todo = [n for n in order if not (round_ == 0 and n in covered)]
                for k, name in enumerate(todo):
                    now = time.monotonic()
                    if now > deadline:
                        break
                    if round_ == 0 and name in covered:
                        continue
                    c = classes[name]
                    pick = next((i for i in sorted(c["programs"],
                                                   key=lambda i: len(self.sources[i]))
                                 if all(d["index"] != i for d in done[name]) and
                                 not any(d["features"] <= features(self.sources[i])
                                         for d in done[name])), None)
                    if pick is None:
                        continue
                    budget = min(deadline, now + max(5.0, (deadline - now) /
                                                     max(1, len(todo) - k)))
                    m = self._shrink_one(ev, shrink, features, name, c, pick, budget)
                    done[name].append(m)
                    self.minimal.append(m)
                    covered |= m["shows"]
        finally:
            ev.close()
        return self.minimal

    def _shrink_one(self, ev, shrink, features, name, c, i, deadline):
        from .execute import BACKENDS
        kind = c["kind"]
        rec = next(r for r in self.records if r["index"] == i)
        fails = [f for f in rec["failures"] if f["kind"] == kind]
        # aot_eager compiles fastest: shrink against it when it shows the failure
        backend = "aot_eager" if "aot_eager" in c["backends"] else sorted(c["backends"])[0]
        small, alone = shrink(self.sources[i], f"{backend}:{kind}", ev, deadline)
        final = ev.run(small, [] if backend == "eager" else BACKENDS) if alone else []
        shows = set()
        by_kind = {}
        for f in final:
            by_kind.setdefault(f["kind"], set()).add(f["backend"])
        for k, backends in by_kind.items():
            shows.add(f"{k} [{', '.join(sorted(backends))}]")
        what = "minimal reproducer" if alone else \
            "NOT REPRODUCED when run alone (flaky?), unshrunk program"
        fname = f"{_slug(name)}_p{i}.py"
        text = _annotate(small, final or fails, header=f"{what} of {name} (from program #{i})")
        _write(os.path.join(self.results, "minimal", fname), text)
        return {"class": name, "index": i, "features": features(small), "source": text,
                "file": fname, "shows": shows | {name}}

    def internal_llvm_fallbacks(self):
        """{reason: [program indices]} of graphs the llvm backend gave up on for an
        internal error (anything but a LoweringError, which names something it does not
        compile: the verifier rejecting a kernel, an AttributeError, ...)."""
        out = {}
        for r in self.records:
            for reason in r["stats"].get("llvm", {}).get("fallback", {}):
                if internal_llvm_fallback(reason):
                    out.setdefault(reason, []).append(r["index"])
        return out

    def summary(self):
        classes = self.classes()
        n = len(self.records)
        compiled = {be: sum(1 for r in self.records
                            if r["stats"].get(be, {}).get("graphs", 0) > 0)
                    for be in ("llvm", "aot_eager")}
        fallback = {}
        for r in self.records:
            for be in ("llvm", "aot_eager"):
                for reason in r["stats"].get(be, {}).get("fallback", {}):
                    fallback[reason] = fallback.get(reason, 0) + 1
        lines = [f"ember fuzz: seed {self.seed}, {n} programs in {self.elapsed:.0f} s "
                 f"({self.jobs} workers), {sum(1 for r in self.records if r['failures'])} "
                 f"failing, {self.crashes} crashes",
                 f"captured and compiled: llvm {compiled['llvm']}/{n}, aot_eager "
                 f"{compiled['aot_eager']}/{n}", "", "failures by class:"]
        for name in sorted(classes, key=lambda k: -len(classes[k]["programs"])):
            c = classes[name]
            lines.append(f"  {name:54s} {len(c['programs']):5d} programs, first "
                         f"#{', #'.join(map(str, sorted(c['programs'])[:4]))}")
        tags, modes = {}, {}
        for r in self.records:
            m = r["stats"].get("mode")
            if m:
                modes[m] = modes.get(m, 0) + 1
            for t in r["stats"].get("tags", ()):
                tags[t] = tags.get(t, 0) + 1
        if modes:
            lines += ["", "programs by mode: " + ", ".join(
                f"{k} {v}" for k, v in sorted(modes.items(), key=lambda kv: -kv[1]))]
            lines += ["statements by template: " + ", ".join(
                f"{k} {v}" for k, v in sorted(tags.items(), key=lambda kv: -kv[1]))]
        internal = self.internal_llvm_fallbacks()
        lines += ["", f"llvm fallbacks for an internal error: "
                      f"{sum(len(v) for v in internal.values())} programs"]
        lines += [f"  {len(v):5d}  {k[:150]} (#{', #'.join(map(str, v[:4]))})"
                  for k, v in sorted(internal.items(), key=lambda kv: -len(kv[1]))]
        top = sorted(fallback.items(), key=lambda kv: -kv[1])[:12]
        if top:
            lines += ["", "most common fallbacks (programs; not failures):"]
            lines += [f"  {v:5d}  {k[:150]}" for k, v in top]
        minimal = getattr(self, "minimal", [])
        shown = set()
        for m in minimal:
            shown |= m["shows"]
        missing = [n for n in classes if n not in shown]
        if minimal and missing:
            lines += ["", "classes with no minimal reproducer (shrink time ran out): " +
                      ", ".join(missing)]
        for m in minimal:
            also = sorted(m["shows"] - {m["class"]})
            lines += ["", "=" * 78, f"{m['class']}  (minimal/{m['file']})"]
            if also:
                lines.append(f"also shows: {', '.join(also)}")
            lines += ["-" * 78, m["source"].rstrip()]
        text = "\n".join(lines) + "\n"
        _write(os.path.join(self.results, "summary.txt"), text)
        data = {"seed": self.seed, "programs": n, "seconds": round(self.elapsed, 1),
                "crashes": self.crashes,
                "classes": {k: {"kind": c["kind"], "backends": sorted(c["backends"]),
                                "programs": c["programs"]} for k, c in classes.items()},
                "minimal": [{k: (sorted(v) if k == "shows" else v) for k, v in m.items()
                             if k != "features"} for m in getattr(self, "minimal", [])]}
        _write(os.path.join(self.results, "summary.json"), json.dumps(data, indent=1))
        return text


def internal_llvm_fallback(reason):
    """Whether a fallback reason (execute's counter key) is the llvm backend failing
    inside itself rather than declining an op (LoweringError)."""
    return reason.startswith("llvm_fallback: ") and \
        not reason.startswith("llvm_fallback: LoweringError: ")


def _annotate(source, failures, header=None):
    lines = []
    if header:
        lines.append(f"# {header}")
    for f in failures[:8]:
        detail = " ".join(str(f.get("detail", "")).split())[:300]
        lines.append(f"# FAIL {f['backend']} call {f['call']}: {f['kind']} at {f['where']}: "
                     f"{detail}")
    lines.append("# run: PYTHONPATH=python:tests python -m fuzz.run repro <this file>")
    return "\n".join(lines) + "\n" + source


def _last_lines(text, n=12):
    return "\n".join(text.strip().splitlines()[-n:])


def _slug(kind):
    return "".join(c if c.isalnum() else "_" for c in kind).strip("_")


# ---------------------------------------------------------------- CLI


def repro_main(args):
    from .execute import run_program
    with open(args.file) as f:
        source = f.read()
    backends = args.backends.split(",") if args.backends else ("llvm", "aot_eager")
    failures, stats = run_program(source, backends=backends, filename=args.file)
    for fl in failures:
        print(f"FAIL {fl['backend']} call {fl['call']}: {fl['kind']} at {fl['where']}: "
              f"{fl['detail']}")
    print(json.dumps(stats))
    if not failures:
        print("no difference")
    return 1 if failures else 0


def fuzz_main(args):
    results = args.results or os.path.join(os.getcwd(), "fuzz-results", f"seed{args.seed}")
    c = Campaign(args.seed, results, programs=args.programs, minutes=args.minutes,
                 jobs=args.jobs, shrink_seconds=args.shrink_seconds,
                 per_class=args.per_class)
    c.run()
    c.shrink_all()
    text = c.summary()
    print(text)
    print(f"results in {results}")
    return 1 if c.classes() else 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m fuzz.run")
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--start", type=int, required=True)
    w.add_argument("--stop", type=int, default=-1)
    w.add_argument("--step", type=int, default=1)
    w.add_argument("--dir", required=True)
    w.add_argument("--wid", type=int, default=0)
    s = sub.add_parser("serve")
    s.add_argument("--dir", required=True)
    r = sub.add_parser("repro")
    r.add_argument("file")
    r.add_argument("--backends", default="")
    fz = sub.add_parser("fuzz")
    fz.add_argument("--seed", type=int, default=0)
    fz.add_argument("--minutes", type=float, default=None)
    fz.add_argument("--programs", type=int, default=None)
    fz.add_argument("--jobs", type=int, default=2)
    fz.add_argument("--results", default=None)
    fz.add_argument("--shrink-seconds", type=float, default=300.0)
    fz.add_argument("--per-class", type=int, default=4)
    args = p.parse_args(argv)
    if args.cmd == "worker":
        return worker_main(args)
    if args.cmd == "serve":
        return serve_main(args)
    if args.cmd == "repro":
        return repro_main(args)
    if args.minutes is None and args.programs is None:
        args.minutes = 30.0
    return fuzz_main(args)


if __name__ == "__main__":
    sys.exit(main() or 0)


