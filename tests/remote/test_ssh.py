"""SSHLauncher and ConnectionPool against two real sshd servers on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import sys
import time
import uuid

import psutil
import pytest

from benchkit.channel import SmuggleDecoder
from milabench.errors import NodeError
from milabench.plan.spec import ProcessSpec
from milabench.remote.launcher import SSHLauncher
from milabench.remote.ssh import ConnectionPool, SSHSettings, remote_command

PYTHON = sys.executable

pytestmark = pytest.mark.ssh


async def _collect(proc):
    """Drain the handle's batches; smuggled records are separated as the runner does."""
    out, err, data = [], [], []

    async def drain(stream, sink):
        async for batch in stream:
            sink.extend(batch)

    streams = [drain(proc.stdout, out), drain(proc.stderr, err)]
    if proc.data is not None:  # "fd" specs: the handle separates the records
        streams.append(drain(proc.data, data))
    await asyncio.gather(*streams)
    code = await proc.wait()
    decoder = SmuggleDecoder()
    plain = []
    for line in out:  # "smuggle" specs: the runner's job
        text, records = decoder.feed(line)
        data += records
        if text or not records:
            plain.append(text)
    return code, plain, err, data


def _procs_with(token: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
        except (psutil.Error, TypeError):
            continue
        if token in cmd or env.get("MILABENCH_TEST_TOKEN") == token:
            found.append(p)
    return found


def test_remote_command_quotes_everything():
    cmd = remote_command(["echo", "a b", "$HOME"], {"X": "it's $x"}, "/tmp/a dir")
    words = shlex.split(cmd)
    assert words[:3] == ["cd", "/tmp/a dir", "&&"]
    assert "X=it's $x" in words
    assert words[-2:] == ["a b", "$HOME"]
    with pytest.raises(ValueError):
        remote_command(["true"], {"BAD NAME": "1"})


def test_remote_run_streams_output_and_quotes_env(ssh_cluster, tmp_path):
    system = ssh_cluster.system()
    node = system["nodes"][1]
    tricky = "sp ace 'single' \"double\" $HOME `echo no` ; rm -rf nothing \\ end"
    script = (
        "import os, sys, json, time\n"
        "print('hello', os.getcwd(), flush=True)\n"
        "print(json.dumps(os.environ['TRICKY']), flush=True)\n"
        "print('oops', file=sys.stderr, flush=True)\n"
        "from benchkit.channel import DataWriter\n"
        "w = DataWriter(); w.write({'rate': 12.5, 'units': 'items/s'}); w.flush()\n"
        "sys.exit(3)\n"
    )
    cwd = tmp_path / "a dir"
    cwd.mkdir()
    spec = ProcessSpec(
        tag=["t", "node1"],
        argv=[PYTHON, "-c", script],
        env={"TRICKY": tricky, "PYTHONPATH": os.getcwd()},
        cwd=str(cwd),
        node=node,
        data_channel="fd",
    )

    async def main():
        launcher = SSHLauncher(system)
        try:
            proc = await launcher.start(spec)
            result = await _collect(proc)
            assert proc.data is not None
            # the same connection serves a second command, here a smuggling one
            proc2 = await launcher.start(spec.evolve(data_channel="smuggle"))
            assert proc2.data is None
            result2 = await _collect(proc2)
            return result, result2, len(launcher.pool)
        finally:
            await launcher.close()

    (code, out, err, data), result2, nconn = asyncio.run(main())
    assert code == 3, (out, err)
    assert out[0] == f"hello {cwd}"
    assert json.loads(out[1]) == tricky
    assert err == ["oops"]
    assert [json.loads(d) for d in data] == [{"rate": 12.5, "units": "items/s"}]
    assert result2 == (code, out, err, data)
    assert nconn == 1


def test_host_key_mismatch_refused_then_relaxed(ssh_cluster, tmp_path):
    bad = tmp_path / "known_hosts"
    node = ssh_cluster.nodes[1]
    # A known_hosts entry for this address with some other key.
    other = tmp_path / "other"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    other_pub = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    bad.write_text(f"[{node['ip']}]:{node['port']} {other_pub}\n")

    async def probe(system):
        pool = ConnectionPool(system)
        try:
            res = await pool.run(system["nodes"][1], ["echo", "ok"])
            return res.stdout.strip()
        finally:
            await pool.close()

    system = ssh_cluster.system()
    system["options"]["ssh"]["known_hosts"] = str(bad)
    with pytest.raises(NodeError) as info:
        asyncio.run(probe(system))
    assert "node1" in str(info.value) and "host key" in str(info.value)

    system["options"]["ssh"]["strict_host_key_checking"] = False
    assert asyncio.run(probe(system)) == "ok"


def test_unreachable_node_fails_fast_naming_it(ssh_cluster):
    system = ssh_cluster.system()
    assert SSHSettings(system).connect_timeout == 10  # the default bound
    system["options"]["ssh"]["connect_timeout"] = 3
    # closed port on another loopback address: refused at once
    closed = {"name": "ghost", "ip": "127.0.0.3", "port": 9, "user": "root"}
    # a "tarpit": the TCP handshake succeeds (kernel backlog) but no SSH banner ever comes,
    # like a hung node; only the connect timeout can end it
    tarpit = socket.socket()
    tarpit.bind(("127.0.0.4", 0))
    tarpit.listen(8)
    hung = {"name": "hung", "ip": "127.0.0.4", "port": tarpit.getsockname()[1], "user": "root"}

    async def probe(node):
        pool = ConnectionPool(system)
        try:
            await pool.connect(node)
        finally:
            await pool.close()

    try:
        for node, least in ((closed, 0.0), (hung, 2.5)):
            t0 = time.monotonic()
            with pytest.raises(NodeError) as info:
                asyncio.run(probe(node))
            elapsed = time.monotonic() - t0
            assert node["name"] in str(info.value)
            assert least <= elapsed < 15, elapsed
        assert "no answer within 3 s" in str(info.value)
    finally:
        tarpit.close()


def test_terminate_kills_remote_process_group(ssh_cluster):
    system = ssh_cluster.system()
    node = system["nodes"][1]
    token = f"mb-term-{uuid.uuid4().hex[:8]}"
    # a parent that starts a child in the same group, both sleeping
    script = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{token}'])\n"
        # this one escapes the group (new session): only the token scan finds it
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{token}'], start_new_session=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    spec = ProcessSpec(tag=["term"], argv=[PYTHON, "-c", script, token], node=node)

    async def main():
        launcher = SSHLauncher(system)
        try:
            proc = await launcher.start(spec)
            it = proc.stdout.__aiter__()
            assert await asyncio.wait_for(it.__anext__(), 20) == ["ready"]
            before = len(_procs_with(token))
            t0 = time.monotonic()
            await proc.stop(grace=5)
            # the escaped child keeps the channel open until the KILL + token scan
            assert time.monotonic() - t0 < 5 + 7
            code = await asyncio.wait_for(proc.wait(), 20)
            return before, code, proc.pgid
        finally:
            await launcher.close()

    before, code, pgid = asyncio.run(main())
    assert before >= 3
    assert pgid is not None
    deadline = time.monotonic() + 5
    while _procs_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _procs_with(token) == []
    assert code != 0


def test_pooled_connection_beats_new_connection(ssh_cluster):
    """One connection per node: a command on the pooled connection costs one channel
    round trip, a new connection a key exchange and authentication on top."""
    system = ssh_cluster.system()
    node = system["nodes"][1]

    async def main():
        fresh = []
        for _ in range(3):
            pool = ConnectionPool(system)
            t0 = time.perf_counter()
            await pool.run(node, ["true"])
            fresh.append(time.perf_counter() - t0)
            await pool.close()
        pool = ConnectionPool(system)
        conn = await pool.connect(node)
        pooled = []
        for _ in range(10):
            t0 = time.perf_counter()
            await pool.run(node, ["true"])
            pooled.append(time.perf_counter() - t0)
            assert await pool.connect(node) is conn  # the same connection every time
        await pool.close()
        return min(fresh), min(pooled)

    fresh, pooled = asyncio.run(main())
    print(
        f"\nssh command latency: new connection {fresh * 1e3:.1f} ms, pooled {pooled * 1e3:.1f} ms"
    )
    # timings only inform (a loaded CI machine can blur them); reuse is asserted above
    assert pooled > 0 and fresh > 0
