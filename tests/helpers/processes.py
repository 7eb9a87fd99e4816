"""Child processes of the tests: two-worker clusters on localhost, benchmark scripts as modules."""

import importlib.util
import os
import socket
import subprocess
import sys

from tests.conftest import REPO


def free_ports(n):
    """`n` TCP ports on localhost that were free a moment ago."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def worker_env():
    """This process's environment with the repository on PYTHONPATH and no GPU."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_two_workers(argv_of):
    """Starts `argv_of(i)` for workers 0 and 1 together; fails with the stderr of one that fails."""
    procs = [subprocess.Popen(argv_of(i), env=worker_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-4000:]


def load_benchmark(name):
    """The script `benchmarks/{name}.py`, imported as a module (its folder on the path meanwhile)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
