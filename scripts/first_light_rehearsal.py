"""First light rehearsed on this machine, on a copy of the GPU machine's Python, offline.

    python scripts/first_light_rehearsal.py [--work DIR] [--budget 480] [--max-mib 40]
        [--select A,B] [--config config/first-light-smoke.yaml] [--read-only-image]

What the GPU machine will meet, reproduced here (docs/benchmarks.md "First
light on a GPU"):

1. **its Python**: a Python 3.12 virtual environment holding the image's versions of
   torch, torchvision, transformers, timm, lightning, torch-geometric, JAX, numpy and the
   rest (``scripts/firstlight/image-nvidia-h200.txt``; the CUDA build of torch runs on a
   CPU), with no pip and no milabench (`firstlight.imageenv`, kept under ``--work`` and
   reused while the list is unchanged);
2. **what travels**: the wheelhouse for that Python, made with the documented command
   (``scripts/first_light_wheelhouse.py DIR --max-mib N``), here, where the package
   registry is reachable;
3. **the call**: the exact first-light command, with that Python, from a copy of this
   checkout as the lent machine receives it (``tree_copy``: tracked and untracked files
   git does not ignore, no ``.git``),
   in a network namespace with no route out (``unshare --net``: only a loopback), with
   ``MILABENCH_COMMIT`` as the documented command sets it, ``MILABENCH_GPU_ARCH=cpu`` and
   the CPU smoke sizes of ``config/first-light-smoke.yaml``
   (the same entry names, so the same default selection), under the same budget, with
   ``--mirror`` as on the lent machine; with ``--read-only-image``, that Python's whole
   environment is mounted read-only for the call (a private mount namespace), as an
   image's may be, so first light runs milabench from its overlay venv;
4. **the estimates the GPU makes**: each entry that ran, estimated by that Python,
   offline, at ``config/first-light.yaml``'s sizes for one H200, as the entry estimates
   itself when it starts on a GPU and never on a CPU (`firstlight.estimates`): each
   estimate's GiB and seconds, which the entry spends inside its time there;
5. **the data the GPU prepares**: ``milabench prepare`` of those entries at the same
   sizes, offline, timed (the call prepared them at smoke sizes), then removed.

It passes when the tree and the wheelhouse fit what a lent machine receives (64 MiB),
the first-light command exits 0 within its budget, its mirror holds no more than the lent
machine gives back (8 files of 16 MiB), every entry's estimate is made and the
prepare at the GPU's sizes succeeds.
Exit codes: 0 pass, 1 fail (the line says which step), 2 bad arguments. Needs root or
unprivileged user namespaces for ``unshare --net``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]  # this checkout's milabench reads the suite

from firstlight import estimates, imageenv  # noqa: E402

from benchkit.accelerators import FakeGPUSpec, fake_gpus_setting  # noqa: E402

DEFAULT_WORK = Path.home() / ".cache" / "milabench" / "first-light-rehearsal"
#: A connection that must fail inside the namespace (a package index: no DNS, no route).
OFFLINE_PROBE = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('pypi.org', 443), timeout=5)\n"
    "except OSError as err:\n"
    "    print('offline:', err)\n"
    "else:\n"
    "    raise SystemExit('the network is reachable')\n"
)
#: Variables of this development machine that the GPU machine does not have.
DROPPED = ("PIP_", "UV_", "MILABENCH_", "PYTHONPATH", "VIRTUAL_ENV")


class Failed(Exception):
    """A step of the rehearsal failed: one line."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help=f"environment, wheelhouse and output (default {DEFAULT_WORK})")  # fmt: skip
    parser.add_argument("--budget", type=float, default=480.0,
                        help="the first-light call's budget in seconds (default 480)")  # fmt: skip
    parser.add_argument("--max-mib", type=float, default=40.0,
                        help="the wheelhouse's size limit (default 40)")  # fmt: skip
    parser.add_argument("--config", type=Path, default=REPO / "config" / "first-light-smoke.yaml")
    parser.add_argument("--select", default=None, metavar="A,B",
                        help="entries instead of first light's default choice")  # fmt: skip
    parser.add_argument("--read-only-image", action="store_true",
                        help="the copy of the GPU machine's Python is read-only in the call "
                        "(first light then runs from an overlay venv)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.budget <= 0 or args.max_mib <= 0:
        parser.error("--budget and --max-mib must be positive")
    args.work = args.work.absolute()
    return args


def machine_env() -> dict[str, str]:
    """This process's variables less what only this development machine has, plus what
    the documented command sets: ``MILABENCH_COMMIT``, this checkout's HEAD."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED)}
    env["MILABENCH_GPU_ARCH"] = "cpu"  # no GPU here: the CPU stands in for it
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
    except OSError:  # no git here: the record names no commit
        head = ""
    if head:
        env["MILABENCH_COMMIT"] = head
    return env


def offline(argv: list[str], read_only: Path | None = None) -> list[str]:
    """``argv`` in a new network namespace whose only interface is a loopback, up; with
    ``read_only``, also in a private mount namespace where that folder is read-only."""
    up = 'ip link set lo up 2>/dev/null; exec "$@"'  # a constant program, argv passed as is
    if read_only is None:
        return ["unshare", "--net", "--", "/bin/sh", "-c", up, "offline", *argv]
    seal = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && ' + up
    return ["unshare", "--net", "--mount", "--", "/bin/sh", "-c", seal, str(read_only), *argv]


def step(what: str, argv: list[str], *, env: dict[str, str] | None = None,
         log: Path | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:  # fmt: skip
    """Run one step (its output to ``log`` and to this terminal's standard output)."""
    print(f"rehearsal: {what}", flush=True)
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if log is not None:
        log.write_text(text)
    sys.stdout.write("".join(f"  {line}\n" for line in text.splitlines()[-25:]))
    return proc


def rehearse(args: argparse.Namespace) -> dict:
    """The five steps; a record of what ran and how long it took."""
    args.work.mkdir(parents=True, exist_ok=True)
    record: dict = {"budget": args.budget, "max_mib": args.max_mib}
    start = time.monotonic()
    try:
        python = str(imageenv.build_image_env(args.work / "image-env", say=print))
    except imageenv.ImageEnvError as err:
        raise Failed(f"the copy of the GPU machine's Python: {err}") from None
    record["image_env_s"] = round(time.monotonic() - start, 1)
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        raise Failed(f"{python} has pip: the GPU machine's Python may not")

    house = args.work / "wheelhouse"
    start = time.monotonic()
    made = step("the wheelhouse (scripts/first_light_wheelhouse.py)",
                [sys.executable, str(HERE / "first_light_wheelhouse.py"), str(house),
                 "--max-mib", f"{args.max_mib:g}"],
                log=args.work / "wheelhouse.log")  # fmt: skip
    record["wheelhouse_s"] = round(time.monotonic() - start, 1)
    if made.returncode != 0:
        raise Failed(f"the wheelhouse could not be made (see {args.work / 'wheelhouse.log'})")
    record["wheelhouse_mib"] = round(
        sum(p.stat().st_size for p in house.rglob("*") if p.is_file()) / 2**20, 1
    )

    env = machine_env()
    probe = step("the network is off in the namespace", offline([python, "-c", OFFLINE_PROBE]),
                 env=env)  # fmt: skip
    if probe.returncode != 0:
        raise Failed("could not cut the network off (unshare --net needs root or user "
                     f"namespaces): {(probe.stderr or probe.stdout).strip()[-200:]}")  # fmt: skip

    out, back, tree = args.work / "out", args.work / "returned", args.work / "tree"
    for folder in (out, back):
        if folder.exists():
            subprocess.run(["rm", "-rf", str(folder)], check=True)
    record["tree_files"] = tree_copy(tree)
    record["travels_mib"] = round(folder_mib(tree) + folder_mib(house), 1)
    if record["travels_mib"] > TRAVELS_MIB:
        raise Failed(f"the tree and the wheelhouse are {record['travels_mib']} MiB, over the "
                     f"{TRAVELS_MIB} MiB a lent machine receives")  # fmt: skip
    config = args.config.absolute()
    if config.is_relative_to(REPO):  # the copy's own, as the lent machine reads it
        config = tree / config.relative_to(REPO)
    command = [python, str(tree / "scripts" / "first_light.py"), str(out), "--wheelhouse",
               str(house), "--config", str(config), "--budget", f"{args.budget:g}",
               "--mirror", str(back)]  # fmt: skip
    if args.select:
        command += ["--select", args.select]
    record["command"] = " ".join(command)
    record["read_only_image"] = args.read_only_image
    start = time.monotonic()
    sealed = Path(python).parents[1] if args.read_only_image else None
    what = "first light, offline" + (f", {sealed} read-only" if sealed else "")
    call = step(what, offline(command, sealed), env=env, log=args.work / "first-light.log",
                cwd=tree)  # fmt: skip
    record["first_light_s"] = round(time.monotonic() - start, 1)
    record["first_light_rc"] = call.returncode
    record.update(call_record(out, back))
    (args.work / "rehearsal.json").write_text(json.dumps(record, indent=2) + "\n")
    if record["first_light_s"] > args.budget:
        raise Failed(f"first light took {record['first_light_s']} s, over its {args.budget:g} s")
    if call.returncode != 0:
        raise Failed(f"first light exited {call.returncode}; see {out / 'first-light.md'}")
    if record["commit"] != env.get("MILABENCH_COMMIT"):
        raise Failed(f"the record names commit {record['commit']}, not this checkout's "
                     f"{env.get('MILABENCH_COMMIT')} (see {out / 'machine.json'})")  # fmt: skip
    returned = record["returned"]
    if len(returned) > RETURNED_FILES or max(returned.values(), default=0) > RETURNED_MIB:
        raise Failed(f"{back} holds more than a lent machine gives back "
                     f"({RETURNED_FILES} files of {RETURNED_MIB} MiB at most): {returned}")  # fmt: skip
    at_gpu_sizes(python, tree, out / "site", env, record, args.work)
    return record


def at_gpu_sizes(python: str, tree: Path, site: Path, env: dict[str, str], record: dict,
                 work: Path) -> None:  # fmt: skip
    """Steps 4 and 5, for the entries the call ran: what the GPU machine does at
    first-light.yaml's sizes on the CPU (`gpu_estimates`, `gpu_prepare`), by ``python``,
    offline, from ``tree``, with what first light installed in ``site`` on the path as
    an entry has it; into ``record`` (written to ``work``), `Failed` when one fails."""
    names = list(record["entries"])
    paths = [str(tree), str(tree / "benchmarks" / "_shared"), str(site)]
    env = dict(env, PYTHONPATH=os.pathsep.join(paths), HF_HUB_OFFLINE="1")
    record["estimates"] = gpu_estimates(python, tree, names, env)
    record.update(gpu_prepare(python, tree, names, env, work / "gpu-prepare"))
    (work / "rehearsal.json").write_text(json.dumps(record, indent=2) + "\n")
    failed = {name: r["error"] for name, r in record["estimates"].items() if "error" in r}
    if failed:
        raise Failed(f"no start-up estimate at the GPU's sizes for {', '.join(failed)} "
                     f"(the GPU runs them without their memory check): {failed}")  # fmt: skip
    if record["gpu_prepare_rc"] != 0:
        raise Failed(f"prepare at the GPU's sizes exited {record['gpu_prepare_rc']} "
                     f"(see {work / 'gpu-prepare.log'})")  # fmt: skip


def gpu_estimates(python: str, tree: Path, names: list[str],
                  env: dict[str, str]) -> dict[str, dict]:  # fmt: skip
    """Step 4: the start-up estimates of ``names`` at first-light.yaml's sizes for one
    H200 (`firstlight.estimates`); printed."""
    print("rehearsal: the start-up estimates an entry makes on the GPU, offline", flush=True)
    todo = estimates.jobs(tree / "config" / "first-light.yaml", names)
    results = estimates.estimate(python, todo, env, wrap=offline)
    sys.stdout.write("".join(f"  {line}\n" for line in estimates.lines(results)))
    return results


def gpu_prepare(python: str, tree: Path, names: list[str], env: dict[str, str],
                base: Path) -> dict:  # fmt: skip
    """Step 5: ``milabench prepare`` of ``names`` at first-light.yaml's sizes, resolved
    for one H200 (`estimates.LENT_GPU_MIB`, as fake GPUs), into an empty ``base``: the
    data the GPU machine makes inside the call (the JPEG folders, the molecules), timed;
    the data is removed afterwards. Returns ``gpu_prepare_s``, ``_rc`` and ``_gib``."""
    if base.exists():
        shutil.rmtree(base)
    env = {k: v for k, v in env.items() if k != "MILABENCH_GPU_ARCH"}
    env.update(fake_gpus_setting(FakeGPUSpec("cuda", 1, estimates.LENT_GPU_MIB)))
    argv = [python, "-m", "milabench", "prepare", "--use-current-env", "--config",
            str(tree / "config" / "first-light.yaml"), "--base", str(base), "--select",
            ",".join(names)]  # fmt: skip
    start = time.monotonic()
    done = step("prepare at the GPU's sizes, offline", offline(argv), env=env,
                log=base.with_suffix(".log"), cwd=tree)  # fmt: skip
    seconds = round(time.monotonic() - start, 1)
    gib = round(folder_mib(base / "data") / 1024, 2) if (base / "data").is_dir() else 0.0
    shutil.rmtree(base, ignore_errors=True)
    return {"gpu_prepare_s": seconds, "gpu_prepare_rc": done.returncode, "gpu_prepare_gib": gib}


def call_record(out: Path, back: Path) -> dict:
    """What the call left: each entry's status, what it left out, the files of the
    mirror, and the commit its machine record names (the copy has no .git: that is
    MILABENCH_COMMIT's)."""
    record: dict = {"entries": {}, "commit": None}
    try:
        state = json.loads((out / "first-light.json").read_text())
        record["entries"] = {e["name"]: e["status"] for e in state.get("entries") or []}
        record["left_out"] = state.get("left_out") or {}
    except (OSError, ValueError):
        pass
    record["returned"] = returned_files(back)
    try:
        facts = json.loads((out / "machine.json").read_text())
        record["commit"] = (facts.get("milabench") or {}).get("commit")
    except (OSError, ValueError, AttributeError):
        pass
    return record


#: What a lent machine gives back of ``$OUT``: files, MiB each (the device tool's limits).
RETURNED_FILES, RETURNED_MIB = 8, 16
#: What it receives: the working tree with the carried wheelhouse, MiB in all.
TRAVELS_MIB = 64


def folder_mib(folder: Path) -> float:
    """MiB of the files under ``folder`` (a link counts as itself, not what it names)."""
    files = (p for p in folder.rglob("*") if p.is_symlink() or p.is_file())
    return sum(p.lstat().st_size for p in files) / 2**20


def tree_copy(dest: Path) -> int:
    """This checkout as a lent machine receives it, at ``dest`` (replaced): the files git
    tracks and the untracked ones it does not ignore, links as links, and no ``.git``.
    Returns how many files; `Failed` without git."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=REPO, capture_output=True)  # fmt: skip
    except OSError as err:
        raise Failed(f"cannot list the working tree: {err}") from None
    if listed.returncode != 0:
        raise Failed(f"cannot list the working tree: {listed.stderr.decode().strip()}")
    if dest.exists():
        shutil.rmtree(dest)
    count = 0
    for name in sorted(set(filter(None, listed.stdout.decode().split("\0")))):
        source, target = REPO / name, dest / name
        if not source.is_symlink() and not source.is_file():
            continue  # deleted in the working tree, or a submodule
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
        count += 1
    return count


def returned_files(folder: Path) -> dict[str, float]:
    """Each file under ``folder`` (relative name -> MiB): what ``--mirror`` left there."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    return {str(p.relative_to(folder)): round(p.stat().st_size / 2**20, 2) for p in files}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        record = rehearse(args)
    except Failed as err:
        print(f"rehearsal: FAILED: {err}", file=sys.stderr)
        return 1
    print(f"rehearsal: PASSED: {len(record['entries'])} entries in "
          f"{record['first_light_s']} s of a {args.budget:g} s budget, offline, on "
          f"Python 3.12 without pip; wheelhouse {record['wheelhouse_mib']} MiB "
          f"({record['travels_mib']} MiB with the tree, of {TRAVELS_MIB}); "
          f"{len(record['estimates'])} start-up estimates at the GPU's sizes in "
          f"{sum(r['estimate_s'] for r in record['estimates'].values()):.1f} s; "
          f"prepared at the GPU's sizes in {record['gpu_prepare_s']} s "
          f"({record['gpu_prepare_gib']} GiB); "
          f"record in {args.work / 'rehearsal.json'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
