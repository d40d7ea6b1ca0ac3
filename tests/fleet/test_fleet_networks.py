"""`milabench fleet` through a network people have, on three loopback sshd nodes.

The nodes' sessions have no certificate, proxy or index variable: each node's pip is
configured only by a configuration file (``PIP_CONFIG_FILE``, set by the node's sshd,
as a node's ``/etc/pip.conf`` would be) naming a package index served over HTTPS on
loopback with a certificate from a certificate authority made by the test
(tests/netindex.py), and that authority as ``cert``. One fleet gives each node another
network (the authority alone, a CONNECT proxy, an index that needs credentials): every
node installs its own environment through uv, runs a small benchmark, and the fleet
exits 0. Then the nodes' files are rewritten for each failure: a wrong authority, wrong
credentials, a closed proxy, a closed port; each fleet stops the nodes before anything
is copied, exits non-zero and prints one line per node with the cause.

Nothing is left behind: the index, the proxy and the sshd nodes stop with the module,
and the certificates are files of the test's temporary folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from fleetcluster import by_name, fleet_folders, read_fleet, run_fleet, snapshot_tool
from netindex import Authority, ConnectProxy, PackageIndex, build_wheel, closed_port
from sshnodes import SSHNodes, ensure_sshd
from systemtools import require_root, unavailable

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(1200)]

BENCH = '''\
"""A few timed steps of pure Python, reported through benchkit, importing mbtiny."""
import time

import mbtiny
from benchkit.channel import DataWriter

writer = DataWriter()
for step in range(8):
    t0 = time.perf_counter()
    sum(i * i for i in range(20000))
    writer.write({"task": "train", "rate": 20000 / (time.perf_counter() - t0),
                  "units": "items/s", "time": time.time()})
    writer.write({"task": "train", "loss": 1.0 / (step + 1)})
writer.close()
print("mbtiny", mbtiny.__version__)
'''

SUITE = """\
_defaults:
  weight: 1
  plan:
    method: per_gpu
netbench:
  definition: netbench
  install_group: netgroup
"""


class NetFleet:
    def __init__(self, root: Path, ssh: SSHNodes, nodes, tool: Path, pki: dict, wheels: Path):
        self.root, self.ssh, self.nodes, self.tool = root, ssh, nodes, tool
        self.pki, self.wheels = pki, wheels
        self.runs = 0

    def configure(self, **settings: str) -> None:
        """Every node's pip configuration the same."""
        for node in self.nodes:
            self.configure_node(node.name, **settings)

    def configure_node(self, name: str, **settings: str) -> None:
        """Node ``name``'s pip configuration (`node_conf`): every source key set, so that
        this machine's own files (``/etc/pip.conf``, the user's) add nothing."""
        keys = {"index-url": "", "extra-index-url": "", "find-links": "", "proxy": ""}
        keys.update({"retries": "0", "timeout": "10", **settings})
        text = "[global]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
        node_conf(self.root, name).write_text(text)

    def fleet(self):
        self.runs += 1
        base = self.root / f"main{self.runs}"
        nodes = [
            n.system_node(base=str(self.root / f"bases{self.runs}" / n.name)) for n in self.nodes
        ]
        system = self.root / f"system{self.runs}.yaml"
        system.write_text(yaml.safe_dump({"system": self.ssh.system(nodes)}))
        argv = [
            "fleet",
            "--config",
            str(self.root / "suite" / "suite.yaml"),
            "--system",
            str(system),
        ]
        argv += ["--base", str(base), "--node-python", sys.executable]
        # these tests compare no rates: three "nodes" sharing two cores differ by chance
        argv += ["--min-gap", "0.9"]
        proc = run_fleet(self, argv)
        print(proc.stdout)
        print(proc.stderr, file=sys.stderr)
        return proc, base

    # what `run_fleet` needs of a cluster
    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.tool)}

    @property
    def main(self) -> Path:
        return self.root


def node_conf(root: Path, name: str) -> Path:
    """Node ``name``'s pip configuration file (its sshd sets ``PIP_CONFIG_FILE``)."""
    return root / f"{name}-pip.conf"


@pytest.fixture(scope="module")
def netfleet(tmp_path_factory):
    sshd = ensure_sshd()
    require_root("the sshd nodes (they log in as the current user, root)")
    root = tmp_path_factory.mktemp("netfleet")
    tool = snapshot_tool(root / "tool")
    pki_dir = root / "pki"
    ca = Authority.create(pki_dir, "fleet test CA")
    pki = {
        "ca": ca.cert,
        "wrong": Authority.create(pki_dir, "another CA").cert,
        "server": ca.issue(pki_dir, "index"),
    }
    wheels = root / "wheels"
    build_wheel(wheels, "mbtiny", "1.0")
    bench = root / "suite" / "netbench"
    bench.mkdir(parents=True)
    (bench / "main.py").write_text(BENCH)
    (bench / "requirements.in").write_text("mbtiny\n")
    (root / "suite" / "suite.yaml").write_text(SUITE)
    keys = root / "ssh"
    keys.mkdir()
    ssh = SSHNodes(keys, sshd)
    try:
        nodes = [
            ssh.start(
                f"node{i}",
                f"127.0.0.{i + 1}",
                network=False,  # no certificate, proxy or index variable in the sessions
                setenv={
                    "PIP_CONFIG_FILE": str(node_conf(root, f"node{i}")),
                    "PIP_NO_CACHE_DIR": "1",
                    "UV_NO_CONFIG": "1",
                    "UV_CACHE_DIR": str(root / f"uv-cache-{i}"),
                },
            )
            for i in range(3)
        ]
    except RuntimeError as err:
        ssh.close()
        unavailable(f"sshd could not start: {err}")
    try:
        yield NetFleet(root, ssh, nodes, tool, pki, wheels)
    finally:
        ssh.close()


def test_nodes_configured_by_a_pip_file_install_and_run(netfleet):
    """Pip's configuration file is all each node has, a different network on each:
    node0 reaches the index with the file's ``cert`` only; node1 the same index through
    the CONNECT proxy its file names; node2 an index that needs the credentials of its
    file's URL. One fleet: every node installs through uv (no fallback) and runs."""
    pki = netfleet.pki
    with (
        PackageIndex(netfleet.wheels, tls=pki["server"]) as open_index,
        PackageIndex(netfleet.wheels, tls=pki["server"], auth=("reader", "s3cret")) as closed,
        ConnectProxy() as proxy,
    ):
        cert = str(pki["ca"])
        netfleet.configure_node("node0", **{"index-url": open_index.url, "cert": cert})
        netfleet.configure_node(
            "node1", **{"index-url": open_index.url, "cert": cert, "proxy": proxy.url}
        )
        with_password = closed.url.replace("https://", "https://reader:s3cret@")
        netfleet.configure_node("node2", **{"index-url": with_password, "cert": cert})
        proc, base = netfleet.fleet()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "s3cret" not in proc.stdout + proc.stderr
    (folder,) = fleet_folders(base)
    found = by_name(read_fleet(folder))
    shown = {
        "node0": open_index.url,
        "node1": open_index.url,
        "node2": closed.url.replace("https://", "https://<redacted>@"),
    }
    for node in netfleet.nodes:
        assert found[node.name]["status"] == "ok", found[node.name]
        assert f"fleet: {node.name}: package sources: ok: {shown[node.name]}" in proc.stderr
        venv = netfleet.root / f"bases{netfleet.runs}" / node.name / "nodes" / node.name
        marker = json.loads((venv / "venv" / "netgroup" / "milabench-install.json").read_text())
        assert marker["backend"] == "uv"  # uv itself got through: no fallback
    # each node fetched the wheel itself (uv may ask for a part of it first, then all)
    wheel = "GET /files/mbtiny-1.0"
    assert sum(r.startswith(wheel) for r in open_index.requests) >= 2  # node0, node1
    assert sum(r.startswith(wheel) for r in closed.requests) >= 1  # node2
    # node1's sources check and its uv went through the proxy, and only node1's
    assert len(proxy.tunnels) >= 2 and set(proxy.tunnels) == {f"127.0.0.1:{open_index.port}"}


def _failed_fleet(netfleet, **settings) -> dict:
    proc, base = netfleet.fleet()
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    (folder,) = fleet_folders(base)
    found = by_name(read_fleet(folder))
    for node in netfleet.nodes:
        record = found[node.name]
        assert record["status"] == "install-failed", record
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"fleet: {node.name}: ")]
        assert len(lines) == 1 and record["reason"] in lines[0], (record, lines)  # one line
        # stopped before anything was copied to the node
        assert record.get("code") is None and "code" not in (record.get("timeline") or {})
    return found


@pytest.mark.parametrize(
    "case", ["wrong authority", "wrong credentials", "closed proxy", "closed port"]
)
def test_each_failure_is_one_line_per_node_on_the_controller(netfleet, case):
    pki = netfleet.pki
    with (
        PackageIndex(netfleet.wheels, tls=pki["server"], auth=("reader", "pw")) as index,
        ConnectProxy() as proxy,
    ):
        good = index.url.replace("https://", "https://reader:pw@")
        settings = {
            "wrong authority": {"index-url": good, "cert": str(pki["wrong"])},
            "wrong credentials": {
                "index-url": index.url.replace("https://", "https://reader:nope@"),
                "cert": str(pki["ca"]),
            },
            "closed proxy": {
                "index-url": good,
                "cert": str(pki["ca"]),
                "proxy": f"http://127.0.0.1:{closed_port()}",
            },
            "closed port": {
                "index-url": f"https://127.0.0.1:{closed_port()}/simple",
                "cert": str(pki["ca"]),
            },
        }[case]
        netfleet.configure(**settings)
        found = _failed_fleet(netfleet)
    cause = {
        "wrong authority": "package sources: TLS: unknown issuer at https://<redacted>@127.0.0.1",
        "wrong credentials": "package sources: HTTP 401 Unauthorized at https://<redacted>@",
        "closed proxy": "package sources: proxy refused the connection at",
        "closed port": "package sources: connection refused at https://127.0.0.1:",
    }[case]
    for record in found.values():
        assert record["reason"].startswith(cause), record
        assert "nope" not in record["reason"] and ":pw@" not in record["reason"]
    assert proxy.tunnels == []
