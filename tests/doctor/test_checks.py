"""`milabench doctor`'s checks, one by one: NVML through the fake pynvml (whose names and
constants are nvidia-ml-py's), AMD and Intel through a sysfs tree laid out as the kernel
lays it out, the interpreter's modules, the disk."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from milabench.doctor.findings import FAIL, OK, WARN, Finding, failures, refusal, render_findings
from milabench.doctor.host import check_disk, check_memory, check_shm
from milabench.doctor.interpreter import NODE_INSTALLERS, NODE_MODULES, check_modules
from milabench.doctor.nvidia import (
    _CLOCK_EVENT_CONSTANTS,
    CLOCK_EVENT_BITS,
    clock_event_names,
    nvidia_findings,
)
from milabench.doctor.probe import RESULT_PREFIX, parse_probe_output, probe_argv
from milabench.doctor.record import DOCTOR_FILE, read_doctor_file, write_doctor_file
from milabench.doctor.sysfs import sysfs_gpu_findings

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def by_check(findings, subject=None):
    return {f.check: f for f in findings if subject is None or f.subject == subject}


def test_fake_names_and_constants_are_nvidia_ml_pys(monkeypatch):
    """Every name of the fake exists in the installed nvidia-ml-py, and every constant
    has the real value: the checks and monitors call what a real driver answers."""
    real = pytest.importorskip("pynvml")
    if Path(real.__file__).parent == FAKES:
        pytest.skip("the fake is on sys.path")
    spec = importlib.util.spec_from_file_location("fake_pynvml_health", FAKES / "pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fake_pynvml_health", fake)
    spec.loader.exec_module(fake)
    names = [n for n in vars(fake) if n.startswith(("nvml", "NVML"))]
    for needed in (
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetTemperatureThreshold",
        "nvmlEventSetWait",
        "nvmlClocksEventReasonHwThermalSlowdown",
        "nvmlEventTypeXidCriticalError",
    ):
        assert needed in names
    assert [n for n in names if not hasattr(real, n)] == []
    constants = {n: getattr(fake, n) for n in names if isinstance(getattr(fake, n), int)}
    assert {n: getattr(real, n) for n in constants} == constants
    # the fallback bit table of the checks is NVML's too
    for bit, name in CLOCK_EVENT_BITS.items():
        suffix = _CLOCK_EVENT_CONSTANTS[name]
        assert getattr(real, "nvmlClocksEventReason" + suffix) == bit


def test_the_checks_leave_another_users_nvml_open(fake_nvml):
    """NVML counts its initialisations: the doctor's init and shutdown, made while the
    run's metadata probe holds device handles, must leave those handles usable (a run
    whose doctor closed NVML recorded no GPU)."""
    fake_nvml.nvmlInit()
    handle = fake_nvml.nvmlDeviceGetHandleByIndex(0)
    nvidia_findings(cuda_needed=(12, 4), cuda_source="nvidia-cuda-runtime==12.4")
    assert fake_nvml.nvmlDeviceGetName(handle)
    fake_nvml.nvmlShutdown()
    with pytest.raises(fake_nvml.NVMLError):
        fake_nvml.nvmlDeviceGetName(handle)


def test_a_healthy_node_is_all_ok_in_one_line_per_check(fake_nvml):
    found = nvidia_findings(cuda_needed=(12, 4), cuda_source="nvidia-cuda-runtime==12.4")
    assert all(f.severity == OK for f in found), render_findings(found)
    checks = by_check(found)
    assert checks["persistence_mode"].subject == "gpu0-3"
    assert set(checks) == {
        "persistence_mode", "power_limit", "clock_events", "pcie_link", "ecc_mode",
        "ecc_errors", "remapped_rows", "retired_pages", "mig_mode", "temperature", "driver",
    }  # fmt: skip


def test_each_degraded_state_is_named_on_its_gpu(fake_nvml):
    d = fake_nvml.DEVICES
    d[0].persistence = 0
    d[1].power_limit_mw = 490000
    d[2].pcie_width, d[2].pcie_gen = 8, 4
    d[3].clocks_event_reasons = fake_nvml.nvmlClocksEventReasonHwThermalSlowdown
    found = nvidia_findings()
    assert by_check(found, "gpu0")["persistence_mode"].severity == WARN
    power = by_check(found, "gpu1")["power_limit"]
    assert power.severity == FAIL and "490 W is 70% of the default 700 W" in power.reason
    assert power.value == {"limit_w": 490.0, "default_w": 700.0}
    link = by_check(found, "gpu2")["pcie_link"]
    assert link.severity == WARN and "x8" in link.reason and "x16" in link.reason
    clocks = by_check(found, "gpu3")["clock_events"]
    assert clocks.severity == FAIL and "hw_thermal_slowdown" in clocks.reason


def test_ecc_retirement_remapping_mig_temperature(fake_nvml):
    d = fake_nvml.DEVICES
    d[0].ecc_uncorrected = (2, 5)
    d[1].ecc_uncorrected, d[1].ecc_mode = (0, 3), (0, 0)
    d[2].retired_pending = 1
    d[2].remapped_rows = (1, 0, 1, 0)
    d[3].mig_mode = (1, 1)
    d[3].temperature = 80
    d[3].ecc_supported = False  # a GPU without ECC: no ECC finding, not a failure
    found = nvidia_findings()
    assert by_check(found, "gpu0")["ecc_errors"].severity == FAIL
    assert (
        "2 uncorrected ECC error(s) since the driver loaded"
        in by_check(found, "gpu0")["ecc_errors"].reason
    )
    assert by_check(found, "gpu1")["ecc_errors"].severity == WARN
    assert by_check(found, "gpu1")["ecc_mode"].severity == WARN
    assert by_check(found, "gpu2")["retired_pages"].severity == FAIL
    assert by_check(found, "gpu2")["remapped_rows"].severity == FAIL
    assert by_check(found, "gpu3")["mig_mode"].severity == WARN
    temp = by_check(found, "gpu3")["temperature"]
    assert temp.severity == WARN and "7 °C below the slowdown threshold 87 °C" in temp.reason
    assert "ecc_mode" not in by_check(found, "gpu3")


def test_driver_older_than_the_pinned_cuda_build_fails(fake_nvml):
    found = by_check(nvidia_findings(cuda_needed=(13, 0), cuda_source="pin"))
    assert found["driver"].severity == FAIL
    assert "supports CUDA 12.4, the pinned CUDA build needs 13.0 (pin)" in found["driver"].reason


def test_only_the_devices_this_process_may_use(fake_nvml, monkeypatch):
    fake_nvml.DEVICES[0].power_limit_mw = 100000
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    found = nvidia_findings()
    assert not failures(found)
    assert by_check(found)["power_limit"].subject == "gpu2-3"


def test_fake_gpus_are_not_checked_and_a_bad_setting_fails(fake_nvml, monkeypatch):
    """The fake GPUs (benchkit's parser) stand in for NVML: one ok finding; a value the
    parser refuses is a failure naming the variable and its form, not a crash."""
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:2:1000")
    (found,) = nvidia_findings()
    assert (found.check, found.severity) == ("gpus", OK)
    assert found.reason == "2 fake cuda devices (MILABENCH_FAKE_GPUS): not checked"
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda")
    (found,) = nvidia_findings()
    assert found.severity == FAIL
    assert found.reason.startswith("MILABENCH_FAKE_GPUS='cuda': wrong number of fields; expected")


def test_clock_event_names_follow_the_module_constants(fake_nvml):
    mask = fake_nvml.nvmlClocksEventReasonSwPowerCap | fake_nvml.nvmlClocksEventReasonGpuIdle
    assert clock_event_names(mask, fake_nvml) == ["gpu_idle", "sw_power_cap"]
    assert clock_event_names(0x40) == ["hw_thermal_slowdown"]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_amd_and_intel_through_sysfs(tmp_path):
    """A PCI tree with one AMD GPU (x8 link of x16, cap 400 W of 750 W, RAS errors) and one
    Intel GPU (healthy), laid out as /sys/bus/pci/devices is."""
    amd = tmp_path / "0000:03:00.0"
    for name, value in {
        "vendor": "0x1002", "class": "0x038000", "current_link_width": "8",
        "max_link_width": "16", "current_link_speed": "32.0 GT/s PCIe",
        "max_link_speed": "32.0 GT/s PCIe", "power_dpm_force_performance_level": "manual",
        "ras/umc_err_count": "ue: 3\nce: 12", "hwmon/hwmon4/power1_cap": "400000000",
        "hwmon/hwmon4/power1_cap_default": "750000000", "hwmon/hwmon4/temp1_input": "45000",
        "hwmon/hwmon4/temp1_crit": "100000",
    }.items():  # fmt: skip
        write(amd / name, value)
    intel = tmp_path / "0000:1a:00.0"
    for name, value in {
        "vendor": "0x8086", "class": "0x038000", "current_link_width": "16",
        "max_link_width": "16", "current_link_speed": "16.0 GT/s PCIe",
        "hwmon/hwmon2/power1_max": "600000000", "hwmon/hwmon2/power1_rated_max": "600000000",
    }.items():  # fmt: skip
        write(intel / name, value)
    write(tmp_path / "0000:00:1f.0" / "vendor", "0x8086")  # not a GPU
    write(tmp_path / "0000:00:1f.0" / "class", "0x060100")
    found = sysfs_gpu_findings(str(tmp_path))
    a = by_check(found, "amd0")
    assert a["pcie_link"].severity == WARN and "x8" in a["pcie_link"].reason
    assert a["power_limit"].severity == FAIL and "400 W is 53%" in a["power_limit"].reason
    assert a["perf_level"].severity == WARN
    assert a["ecc_errors"].severity == FAIL and a["ecc_errors"].value == {"ue": 3, "ce": 12}
    assert a["temperature"].severity == OK
    i = by_check(found, "intel0")
    assert i["pcie_link"].severity == OK and i["power_limit"].severity == OK
    assert {f.subject for f in found} == {"amd0", "intel0"}


def test_missing_module_names_it_and_how_to_point_at_another_python():
    def importer(name):
        if name == "omegaconf":
            raise ModuleNotFoundError("No module named 'omegaconf'")
        return object()

    found = check_modules(importer=importer)
    assert found.severity == FAIL and found.value == ["omegaconf"]
    assert "cannot import omegaconf" in found.reason
    assert "pip install omegaconf" in found.reason and "--node-python" in found.reason
    assert check_modules(importer=lambda name: object()).severity == OK


def test_every_dependency_is_checked_on_a_node_or_said_why_not():
    """`NODE_MODULES` follows pyproject's dependencies: each is checked on a node or
    named, in the module's comment, as needed elsewhere only."""
    import tomllib

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {Requirement(d).name.lower() for d in deps}
    checked = {dist.lower() for _, dist in NODE_MODULES + NODE_INSTALLERS}
    elsewhere = {"asyncssh", "voir", "ptera", "nvidia-ml-py"}
    assert names == checked | elsewhere


def test_disk_thresholds(tmp_path, monkeypatch):
    import shutil as sh

    class Usage:
        def __init__(self, free):
            self.free = free

    monkeypatch.setattr(sh, "disk_usage", lambda path: Usage(512 << 20))
    low = check_disk(str(tmp_path / "not" / "yet"))
    assert low.severity == FAIL and str(tmp_path) in low.reason
    monkeypatch.setattr(sh, "disk_usage", lambda path: Usage(100 << 30))
    assert check_disk(str(tmp_path)).severity == OK


def test_the_memory_finding_names_what_can_grow_a_vm():
    """A VM whose memory can grow past MemTotal says so beside the figures (its low
    MemAvailable is then what it holds so far); a machine without says nothing more."""
    meminfo = {"MemTotal": 8 << 30, "MemAvailable": 256 << 20}
    grows, _ = check_memory(meminfo, None, "virtio-mem")
    assert grows.severity == WARN
    assert grows.reason == (
        "0.2 GiB available of 8.0 GiB (virtio-mem can give this VM more): benchmarks may "
        "be killed or swap"
    )
    plain, _ = check_memory({"MemTotal": 8 << 30, "MemAvailable": 6 << 30}, None)
    assert plain.severity == OK and plain.reason == "6.0 GiB available of 8.0 GiB"


def test_shm_thresholds(tmp_path):
    """/dev/shm: a container's 64 MiB warns and says how to get more; most of it held by
    files already there warns; none at all warns; a real tmpfs of the machine is read."""
    small = check_shm((64 << 20, 64 << 20))
    assert small.severity == WARN and small.check == "shm" and small.value == 64 << 20
    assert small.reason.startswith("/dev/shm 0.1 GiB, 0.1 GiB free: loaders with workers")
    assert "--shm-size" in small.reason and "1.5 GiB per process" in small.reason
    held = check_shm((32 << 30, 8 << 30))
    assert held.severity == WARN and "75% held by files there" in held.reason
    assert check_shm(None).severity == WARN and "no /dev/shm" in check_shm(None).reason
    assert check_shm((16 << 30, 15 << 30)).severity == OK
    from benchkit.hostmem import shm_space

    real = check_shm(shm_space(str(tmp_path)), str(tmp_path))
    assert real.reason.startswith(f"{tmp_path} ") and real.severity in (OK, WARN)


def test_findings_round_trip_through_the_probe_line_and_the_run_folder(tmp_path):
    found = [
        Finding("steal", "host", WARN, "steal 7%", 0.07),
        Finding("power_limit", "gpu1", FAIL, "capped", {"limit_w": 490.0}),
    ]
    import json

    line = RESULT_PREFIX + json.dumps({"findings": [f.as_dict() for f in found]})
    assert parse_probe_output("noise\n" + line + "\n") == found
    assert parse_probe_output("nothing") is None
    write_doctor_file(str(tmp_path / "run"), found, ignored=True)
    assert read_doctor_file(str(tmp_path / "run")) == found
    assert read_doctor_file(str(tmp_path)) is None
    data = json.loads((tmp_path / "run" / DOCTOR_FILE).read_text())
    assert data["worst"] == FAIL and data["ignored"] is True


def test_the_inline_probe_runs_with_nothing_but_the_interpreter(tmp_path):
    """What fleet and preflight send to a node: this file's text, `python -I -c`."""
    import subprocess

    argv = probe_argv(sys.executable, paths=[str(tmp_path)], sample=0.1)
    argv.insert(1, "-I")  # isolated: no milabench on sys.path, no site customisation
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
    found = parse_probe_output(done.stdout)
    assert found is not None, done.stderr
    assert {"steal", "memory", "disk", "python_modules"} <= {f.check for f in found}


def test_a_refusal_names_the_first_failure_between_the_commands_words():
    """`refusal`: the one wording of run's, preflight's and the fleet's refusal."""
    ok = Finding("steal", "host", WARN, "steal 7%", 0.07)
    capped = Finding("power_limit", "gpu1", FAIL, "capped", {"limit_w": 490.0})
    hot = Finding("temperature", "gpu2", FAIL, "too hot", 90)
    assert refusal([ok], lead="refused to start: ", tail="; ...") is None
    assert refusal([ok, capped], lead="node n2: milabench doctor: ", tail=" (go on)") == (
        "node n2: milabench doctor: gpu1 power_limit: capped (go on)"
    )
    assert refusal([capped, ok, hot, hot], lead="milabench doctor: ", tail="; not measured") == (
        "milabench doctor: gpu1 power_limit: capped (and 2 more); not measured"
    )
