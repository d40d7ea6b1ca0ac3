"""The system file (docs/config.md section 2): nodes, arch, detected facts and options.

Detected facts (arch, GPU count and capacity, CPU count) only fill what the user did not
write: a system file describes the machine the user *wants* to benchmark, and a detection
that disagrees must not silently win over it.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any

from milabench.config.options import check_numeric_options
from milabench.errors import ConfigError

NODE_REQUIRED = ("name", "ip", "user")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def local_node() -> dict[str, Any]:
    """The node used when no system file lists any."""
    return {
        "name": socket.gethostname(),
        "ip": "127.0.0.1",
        "user": _user(),
        "port": 22,
        "main": True,
        "local": True,
    }


@lru_cache(maxsize=1)
def _local_addresses() -> frozenset[str]:
    addrs = {"127.0.0.1", "::1"}
    try:
        import psutil

        for entries in psutil.net_if_addrs().values():
            for entry in entries:
                if entry.family in (socket.AF_INET, socket.AF_INET6):
                    addrs.add(entry.address.split("%")[0])
    except (ImportError, OSError):
        pass
    return frozenset(addrs)


@lru_cache(maxsize=64)
def _resolve(host: str) -> frozenset[str]:
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(str(info[4][0]).split("%")[0] for info in infos)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def is_local(node: dict[str, Any]) -> bool:
    """True when `node` is this machine: loopback, one of our addresses, or our name."""
    hostname = socket.gethostname()
    ip = str(node.get("ip", ""))
    name = str(node.get("name", ""))
    if name == hostname or ip in (hostname, "localhost"):
        return True
    if _is_loopback(ip) or ip in _local_addresses():
        return True
    try:
        ipaddress.ip_address(ip)
        return False  # a literal address that is not ours
    except ValueError:
        pass
    resolved = _resolve(ip) if ip else frozenset()
    return any(_is_loopback(a) or a in _local_addresses() for a in resolved)


def main_node(system: dict[str, Any]) -> dict[str, Any]:
    """The rank-0 node."""
    nodes = system.get("nodes") or []
    for node in nodes:
        if node.get("main"):
            return node
    if nodes:
        return nodes[0]
    return local_node()


def _validate_nodes(nodes: Any, file: object) -> list[dict[str, Any]]:
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError.at(file, "system", "nodes", "expected a non-empty list of nodes")
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, node in enumerate(nodes):
        where = f"system.nodes[{i}]"
        if not isinstance(node, dict):
            raise ConfigError.at(file, where, None, "a node must be a mapping")
        if isinstance(node.get("name"), str):
            where = f"system.nodes[{i}] ({node['name']})"
        for key in NODE_REQUIRED:
            value = node.get(key)
            if value is None or value == "":
                raise ConfigError.at(file, where, key, "required")
            if not isinstance(value, str | int):
                raise ConfigError.at(file, where, key, "expected a string")
        node = {**node, "name": str(node["name"]), "ip": str(node["ip"]), "user": str(node["user"])}
        if node["name"] in names:
            raise ConfigError.at(file, where, "name", f"two nodes are named '{node['name']}'")
        names.add(node["name"])
        port = node.get("port", node.get("sshport", 22))
        if isinstance(port, bool) or not isinstance(port, int | str):
            raise ConfigError.at(file, where, "port", "expected a port number")
        try:
            port = int(port)
        except ValueError:
            raise ConfigError.at(file, where, "port", f"not a port number: {port!r}") from None
        if not 0 < port < 65536:
            raise ConfigError.at(file, where, "port", f"out of range: {port}")
        node["port"] = port
        node.pop("sshport", None)
        main = node.get("main", False)
        if not isinstance(main, bool):
            raise ConfigError.at(file, where, "main", "expected true or false")
        node["main"] = main
        base = node.get("base")
        if base is not None and (not isinstance(base, str) or not base.startswith("/")):
            # the node's own base folder (no shared filesystem): an absolute path on that
            # node; '~' or a relative path would be read on the main node, not there
            raise ConfigError.at(
                file, where, "base", f"expected an absolute path on that node, not {base!r}"
            )
        out.append(node)
    mains = [n["name"] for n in out if n["main"]]
    if len(mains) > 1:
        raise ConfigError.at(
            file, "system", "nodes", f"only one node may be main, found {', '.join(mains)}"
        )
    if not mains:
        out[0]["main"] = True
    for node in out:
        node["local"] = node["local"] if isinstance(node.get("local"), bool) else is_local(node)
    return out


def _read(path: Path) -> dict[str, Any]:
    from milabench.config.merge import strip_markers
    from milabench.config.yamlio import read_yaml

    data = strip_markers(read_yaml(path))
    if data is None:
        data = {}
    if isinstance(data, dict) and "system" in data:
        data = data["system"]
    if not isinstance(data, dict):
        raise ConfigError.at(path, "system", None, "expected a mapping")
    return data


def _interpolate(system: dict[str, Any], file: object) -> dict[str, Any]:
    from milabench.config.interpolate import has_interpolation, resolve_interpolations

    if not has_interpolation(system):
        return system

    def describe(full_key: str) -> tuple[object, str, str | None]:
        parts = full_key.split(".", 1)
        return file, "system", parts[1] if len(parts) > 1 else None

    return resolve_interpolations({"system": system}, describe)["system"]


def capacity_mib(capacity: Any) -> int | None:
    """``"81920 MiB"``, ``"80 GiB"``, ``81920`` (MiB) -> MiB; None when unreadable."""
    if capacity is None or isinstance(capacity, bool):
        return None
    if isinstance(capacity, int | float):
        return int(capacity)
    text = str(capacity).strip().replace(" ", "")
    units = {"mib": 1, "mb": 1, "gib": 1024, "gb": 1024, "tib": 1024**2, "kib": 1 / 1024}
    lowered = text.lower()
    for unit, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if lowered.endswith(unit):
            try:
                return int(float(lowered[: -len(unit)]) * factor)
            except ValueError:
                return None
    try:
        return int(float(lowered))
    except ValueError:
        return None


def load_system(path: str | Path | None = None, base: str | Path | None = None) -> dict[str, Any]:
    """The resolved system: user values first, detected facts for whatever is missing."""
    from milabench.machine.accelerators import detect

    if path is not None:
        path = Path(path).expanduser()
        system = _read(path)
        file: object = path
    else:
        system, file = {}, None
    system = _interpolate(dict(system), file)

    if "nodes" in system and system["nodes"] is not None:
        system["nodes"] = _validate_nodes(system["nodes"], file)
    else:
        system["nodes"] = [local_node()]

    accel = detect()
    forced = os.environ.get("MILABENCH_GPU_ARCH") or None
    arch = forced or system.get("arch") or accel.arch
    if not isinstance(arch, str):
        raise ConfigError.at(file, "system", "arch", "expected a string")
    system["arch"] = arch

    gpu = _section(system, "gpu", file)
    devices = accel.devices()
    if gpu.get("count") is None:
        gpu["count"] = len(devices)
    if gpu.get("capacity") is None:
        totals = [d["memory"]["total"] for d in devices if d.get("memory")]
        gpu["capacity"] = f"{min(totals)} MiB" if totals else None
    if isinstance(gpu["count"], bool) or not isinstance(gpu["count"], int) or gpu["count"] < 0:
        raise ConfigError.at(file, "system", "gpu.count", "expected a whole number >= 0")
    if gpu["capacity"] is not None and capacity_mib(gpu["capacity"]) is None:
        raise ConfigError.at(file, "system", "gpu.capacity", f"unreadable size {gpu['capacity']!r}")
    system["gpu"] = gpu

    cpu = _section(system, "cpu", file)
    if cpu.get("count") is None:
        cpu["count"] = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
    system["cpu"] = cpu

    options = system.get("options")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ConfigError.at(file, "system", "options", "expected a mapping")
    system["options"] = options
    if arch == "cuda":
        system["cuda_build"] = _cuda_build(system, accel)
    system.setdefault("sshkey", None)
    system.setdefault("docker_image", None)
    if base is not None:
        system.setdefault("base", str(Path(base).expanduser().absolute()))
    if file is not None:
        system["config_file"] = str(file)
    check_numeric_options(system)
    return system


def _cuda_build(system: dict[str, Any], accel: Any) -> dict[str, Any]:
    """The CUDA build this node installs (`milabench.machine.cudabuild`), as data: chosen
    from the driver, or named by option ``install.cuda_build``. The entries' default
    ``install_variant`` is its variant; a driver too old for every build leaves the reason
    in ``error``, which `milabench install` stops with (other commands go on)."""
    from milabench.config.options import get_option
    from milabench.machine.cudabuild import OPTION, choose

    return choose(accel.system_info(), get_option(system, OPTION, None)).record()


def _section(system: dict, key: str, file: object) -> dict:
    """A copy of the optional mapping ``system[key]`` (empty when absent), checked."""
    value = system.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError.at(file, "system", key, "expected a mapping")
    return dict(value)
