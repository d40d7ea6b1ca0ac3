"""Fetch recursiongfn's real input, the SEH proxy's weights (idempotent).

Gets the same argv as main.py (none of it matters here). Every input of the entry
(`benchshared.catalogue.inputs_for`: ``bengio2021flow-proxy``, the file gflownet's
``load_original_model`` downloads) is fetched by `benchshared.inputs.fetch`, which prints,
for each one it cannot have, the line that says why and what to do (main.py then scores
with the stand-in proxy, random weights, and says so). Exits 0 either way.
"""

from __future__ import annotations

from benchshared import inputs
from benchshared.catalogue import inputs_for
from benchshared.datasets import entry_config

ENTRY = "recursiongfn"


def main() -> None:
    entry = str(entry_config().get("name") or ENTRY)
    names = list(inputs_for(entry)) or list(inputs_for(ENTRY))
    found = inputs.fetch(names, entry=entry)
    for name, folder in found.items():
        if folder is not None:
            print(f"{entry}: input {name} ready in {folder}", flush=True)


if __name__ == "__main__":
    main()
