"""The wheelhouse first light carries to the GPU machine, made where the registry is
reachable; scripts/firstlight/wheelhouse.py has the details::

    python scripts/first_light_wheelhouse.py DIR [--max-mib 40] [--config config/standard.yaml]
        [--select A,B,...] [--image scripts/firstlight/image-nvidia-h200.txt]
        [--python-version 3.12] [--platform manylinux_2_28_x86_64] [--variant cuda]

Exit codes: 0 = milabench's needs and pip are in DIR (entries left out are printed and in
DIR/manifest.json); 1 = a resolution, download or build failed, or milabench's needs alone
exceed the limit (one line says which package); 2 = bad arguments.

It reads the suite with this checkout's milabench (the repository root goes first on
``sys.path``, so an installed milabench of another checkout is not used); milabench's own
dependencies (omegaconf, PyYAML) and ``packaging`` must be importable.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]


def run() -> int:
    """`firstlight.wheelhouse.main`, or exit 1 with one line when this Python cannot
    import what it needs (``packaging`` is imported with the module)."""
    try:
        from firstlight.wheelhouse import main
    except ModuleNotFoundError as err:
        from firstlight import missing_module

        print(f"first_light_wheelhouse: error: {missing_module(err)}", file=sys.stderr)
        return 1
    return main()


if __name__ == "__main__":
    sys.exit(run())
