"""`milabench machine` records the CPU's instruction-set extensions that decide CPU
results (AVX-512, AMX, bf16), from /proc/cpuinfo as x86 and Arm write it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from milabench.machine.facts import ISA_FLAGS, cpu_isa

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16 avx512_fp16 \
avx512_vnni avx_vnni amx_bf16 amx_tile amx_int8 lm
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve \
i8mm bf16 rng
"""


def test_the_extensions_that_decide_cpu_results_are_recorded_in_a_fixed_order():
    assert cpu_isa(SAPPHIRE_RAPIDS) == [
        "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
        "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
        "amx_int8",
    ]  # fmt: skip
    assert cpu_isa(GRAVITON3) == ["asimd", "asimdhp", "asimddp", "sve", "bf16", "i8mm"]
    assert cpu_isa("processor : 0\n") == []


def test_milabench_machine_prints_them():
    proc = subprocess.run([sys.executable, "-m", "milabench", "machine"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    isa = json.loads(proc.stdout)["cpu"]["isa"]
    assert isinstance(isa, list) and set(isa) <= set(ISA_FLAGS)
    if Path("/proc/cpuinfo").exists() and " avx2 " in Path("/proc/cpuinfo").read_text():
        assert "avx2" in isa
