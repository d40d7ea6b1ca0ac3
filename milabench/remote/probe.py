"""Code run *on each node* by `milabench preflight` (stdlib only; torch if importable).

Both programs are sent inline (``python -c``), so a worker needs no copy of milabench:
only the benchmark environment's interpreter.

* `NODE_PROBE`: prints one JSON line: the node's `milabench.machine.facts` facts
  (Python, CPU, memory, OS, accelerators), its torch version (or why torch does not
  import), whether each environment folder given as argument has its interpreter (and
  the node's record of its last failed install, ``<env>.install-failed.json``, written by
  `milabench.envs.install`: host, step, cause), and whether the rendezvous port can be
  bound. `node_probe_argv` sends it with the modules
  it imports.
* `ALLREDUCE`: run by torchrun on every node; rank 0 prints one JSON line with the
  measured all-reduce latency (small tensor) and bandwidth (large tensor).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from milabench.machine.facts import SHIPPED_MODULES
from milabench.machine.inline import inline_program

RESULT_PREFIX = "@milabench-preflight "
# `milabench.envs.FAILURE_SUFFIX` (remote may not import envs; a test checks they agree)
FAILURE_SUFFIX = ".install-failed.json"


def prefixed_json(stdout: str, prefix: str) -> dict | None:
    """The JSON object a probe printed on the line starting with `prefix` (None if none)."""
    for line in stdout.splitlines():
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    return None


NODE_PROBE = r"""
import json, os, socket, sys
from milabench.machine.facts import machine_facts
port = int(sys.argv[1])
envs = sys.argv[2:]
out = machine_facts()
out["torch"] = None
try:
    import torch
    out["torch"] = torch.__version__
except Exception as err:
    out["torch_error"] = f"{type(err).__name__}: {err}"
out["envs"] = {e: os.access(os.path.join(e, "bin", "python"), os.X_OK) for e in envs}
out["env_failures"] = {}
for e in envs:
    try:
        with open(e.rstrip("/") + FAILURE_SUFFIX) as f:
            out["env_failures"][e] = json.load(f)
    except (OSError, ValueError):
        pass
s = socket.socket()
try:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", port))
    out["port_free"] = True
except OSError:
    out["port_free"] = False
finally:
    s.close()
print("@milabench-preflight " + json.dumps(out), flush=True)
"""


def node_probe_argv(python: str, port: int, envs: Sequence[str]) -> list[str]:
    """The command that prints the node's ``@milabench-preflight {json}`` line: `NODE_PROBE`
    with the machine-facts modules it imports (`milabench.machine.facts.SHIPPED_MODULES`),
    run by ``python``."""
    main = f"FAILURE_SUFFIX = {FAILURE_SUFFIX!r}\n" + NODE_PROBE
    program = inline_program(main, SHIPPED_MODULES, filename="<milabench-preflight>")
    return [python, "-c", program, str(port), *envs]


ALLREDUCE = r"""
import json, os, sys, time
import torch
import torch.distributed as dist
size_mib, iters = float(sys.argv[1]), int(sys.argv[2])
use_cuda = torch.cuda.is_available()
backend = "nccl" if use_cuda else "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else "cpu"
if use_cuda:
    torch.cuda.set_device(device)
def sync():
    if use_cuda:
        torch.cuda.synchronize()
small = torch.ones(1, device=device)
for _ in range(3):
    dist.all_reduce(small)
sync()
t0 = time.perf_counter()
for _ in range(20):
    dist.all_reduce(small)
sync()
latency = (time.perf_counter() - t0) / 20
n = max(int(size_mib * 1024 * 1024 / 4), 1)
big = torch.ones(n, dtype=torch.float32, device=device)
dist.all_reduce(big)
sync()
times = []
for _ in range(iters):
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    dist.all_reduce(big)
    sync()
    times.append(time.perf_counter() - t0)
best = min(times)
nbytes = n * 4
algbw = nbytes / best / 1e9
busbw = algbw * 2 * (world - 1) / world
expected = float(world) ** (1 + iters)
ok = abs(float(big[0]) - expected) <= 1e-3 * expected
if rank == 0:
    print("@milabench-preflight " + json.dumps({
        "backend": backend, "world_size": world, "bytes": nbytes,
        "latency_us": latency * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw,
        "seconds": best, "correct": ok}), flush=True)
dist.barrier()
dist.destroy_process_group()
"""
