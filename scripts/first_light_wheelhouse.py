"""The wheelhouse first light carries to the GPU machine, made where the registry is
reachable; scripts/firstlight/wheelhouse.py has the details::

    python scripts/first_light_wheelhouse.py DIR [--max-mib 40] [--config config/standard.yaml]
        [--select A,B,...] [--image scripts/firstlight/image-nvidia-h200.txt]
        [--python-version 3.12] [--platform manylinux_2_28_x86_64] [--variant cuda]

Exit codes: 0 = milabench's needs and pip are in DIR (entries left out are printed and in
DIR/manifest.json); 1 = a resolution, download or build failed, or milabench's needs alone
exceed the limit (one line says which package); 2 = bad arguments.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from firstlight.wheelhouse import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
