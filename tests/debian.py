"""Install Debian packages that integration tests need (sshd, rsync, chromium, tmux, postgres).

CI runs on a fresh machine where these are absent and apt's package lists may be empty:
try the install, and on failure refresh the lists once and try again. Returns None on
success, else the reason (the test then skips with it).
"""

from __future__ import annotations

import os
import shutil
import subprocess

_updated = False


def ensure_packages(*packages: str, timeout: float = 900) -> str | None:
    global _updated
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{', '.join(packages)} missing and apt-get is not usable here"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0 and not _updated:
        _updated = True
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=timeout)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {proc.stderr.strip()[-300:]}"
    return None
