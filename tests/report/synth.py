"""Run folders written event by event (for unit tests that need exact, known inputs).

The integration tests use real `milabench run` folders; these synthetic ones pin down
edge cases (NaN loss, timeouts, skips, power samples) with values we choose.
"""

from __future__ import annotations

from pathlib import Path

from milabench.events import write_events

META = {
    "cpu": {"count": 2, "brand": "Test CPU"},
    "os": {"sysname": "Linux", "nodename": "testhost"},
    "accelerators": {"arch": "cpu", "gpus": {}},
}


def entry(name: str, **kw) -> dict:
    e = {
        "name": name,
        "group": name,
        "weight": 1.0,
        "enabled": True,
        "tags": [],
        "plan": {"method": "per_gpu"},
    }
    e.update(kw)
    return e


def write_file(
    run_dir: Path,
    tag: str,
    config: dict,
    *,
    rates: list[float] = (),
    losses: list[float] = (),
    rc: int | str | None = 0,
    t0: float = 1_000_000.0,
    meta: dict | None = META,
    gpudata: list[dict] = (),
    stop: bool = False,
    stderr: str = "",
    extra: list[dict] = (),
) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    evs: list[dict] = [{"event": "config", "data": config, "pipe": None}]
    if meta is not None:
        evs.append({"event": "meta", "data": meta, "pipe": None})
    evs.append({"event": "start", "data": {"command": ["python", "main.py"], "time": t0}})
    t = t0
    for i, r in enumerate(rates):
        t += 1.0
        evs.append(
            {
                "event": "data",
                "pipe": "data",
                "data": {"task": "train", "rate": r, "units": "items/s", "time": t},
            }
        )
        if i < len(losses):
            evs.append(
                {
                    "event": "data",
                    "pipe": "data",
                    "data": {"task": "train", "loss": losses[i], "time": t},
                }
            )
    for i, g in enumerate(gpudata):
        evs.append(
            {
                "event": "data",
                "pipe": "data",
                "data": {"task": "main", "time": t0 + i, "gpudata": g},
            }
        )
    evs.extend(extra)
    if stop:
        evs.append({"event": "stop", "data": None, "pipe": None})
    if rc is not None:
        evs.append(
            {"event": "end", "data": {"command": ["python"], "time": t + 1, "return_code": rc}}
        )
    path = run_dir / f"{tag}.data"
    write_events(path, evs)
    (run_dir / f"{tag}.stdout").write_text("")
    (run_dir / f"{tag}.stderr").write_text(stderr)
    return path
