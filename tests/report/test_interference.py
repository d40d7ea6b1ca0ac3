"""`milabench.report.interference`: the samples inside the measured window, summed into
shares and sentences; the column, the warnings, the target-unreachable sentence."""

from __future__ import annotations

from pathlib import Path

from milabench.report.aggregate import BenchResult
from milabench.report.interference import apply_interference, file_interference
from milabench.report.runs import FileResult


def host(t, *, others=0.0, steal=0.0, pressure=0.0, top=None, seconds=1.0, cpus=2):
    rec = {"seconds": seconds, "cpus": cpus, "busy": others + 1.0, "bench": 1.0, "self": 0.0,
           "others": others, "steal": steal, "pressure": pressure}  # fmt: skip
    if top:
        rec["top"] = top
    return (t, rec)


def gpu(t, dev="3", reasons=(), xid=None, temp=70, power=650.0, sm=1980):
    d = {"temperature": temp, "power": power, "clock_events": list(reasons), "clocks": {"sm": sm}}
    if xid:
        d["xid"] = [xid]
    return (t, {dev: d})


def file(**kw) -> FileResult:
    fr = FileResult(tag="bench.0", path=Path("bench.0.data"), name="bench")
    fr.rates = [100.0] * 20
    fr.rate_times = [1000.0 + i for i in range(20)]
    fr.measure_start, fr.window_end = 1000.0, 1020.0
    for k, v in kw.items():
        setattr(fr, k, v)
    return fr


def test_only_the_measured_window_counts():
    fr = file(
        interference=[host(995.0, others=2.0)]  # before the window: the warm-up
        + [host(1001.0 + i, others=0.0) for i in range(10)]
        + [
            host(1011.0 + i, others=1.0, top=[["yes", 1, 1.0], ["python", 3, 0.5]])
            for i in range(10)
        ]
        + [host(1030.0, others=2.0)]  # after it
    )
    found = file_interference(fr)
    assert found.seconds == 20.0 and found.cpus == 2
    assert found.others == 10.0 / 40.0  # 10 CPU-seconds of 20 s x 2 CPUs
    assert found.top == [("yes", 1, 0.5), ("python", 3, 0.25)]
    sentences = [s for _, s in found.causes()]
    assert sentences == [
        "other processes used 25% of the 2 CPUs during the measured window "
        "(busiest: yes 0.50 CPU, python (3 processes) 0.25 CPU)"
    ]
    assert found.short() == "others 25%"


def test_steal_pressure_and_gpu_reasons_with_numbers():
    samples = [
        gpu(1000.0 + i, reasons=["sw_thermal_slowdown"] if i < 8 else [], temp=88 if i < 8 else 80)
        for i in range(19)
    ]
    samples.append(gpu(1019.0, xid=79))
    fr = file(
        interference=[host(1001.0 + i, steal=0.14, pressure=0.5) for i in range(20)],
        gpudata=samples,
    )
    found = file_interference(fr)
    sentences = [s for _, s in found.causes()]
    assert sentences[0].startswith("XID error 79 on GPU 3")
    assert "steal 7.0% of the window: the hypervisor gave these CPUs to other guests; " \
           "CPU pressure 50% of the window" in sentences  # fmt: skip
    assert (
        "thermal slowdown on GPU 3 in 40% of samples (up to 88 °C, SM clock 1980 MHz on average)"
        in sentences
    )
    detail = found.as_dict()
    assert detail["gpus"]["3"]["reasons"] == {"sw_thermal_slowdown": 0.4}
    assert detail["gpus"]["3"]["xid"] == [79] and detail["steal"] == 0.07


def test_a_per_gpu_file_names_its_device_and_a_quiet_one_says_none():
    fr = file(gpudata=[gpu(1000.0 + i, dev="0", reasons=["hw_slowdown"]) for i in range(5)])
    fr.device = "5"
    assert file_interference(fr).short() == "hardware slowdown GPU 5 100%"
    quiet = file(interference=[host(1001.0 + i) for i in range(5)])
    assert file_interference(quiet).short() == "none" and file_interference(quiet).causes() == []
    assert file_interference(file()) is None  # an older run: nothing recorded


def test_the_benchmark_gets_the_worst_file_the_column_and_the_unreachable_sentence():
    window = {"reason": "unreachable", "target": 0.02,
              "unreachable": {"at_s": 12.0, "halfwidth": 0.041, "earlier_s": 6.0,
                              "earlier_halfwidth": 0.039}}  # fmt: skip
    busy = file(interference=[host(1001.0 + i, others=1.0) for i in range(20)], window=window)
    quiet = file(tag="bench.1", interference=[host(1001.0 + i) for i in range(20)])
    br = BenchResult(name="bench")
    apply_interference(br, [busy, quiet])
    assert br.interference_text == "others 50%" and br.target_unreachable
    assert br.warnings[0].startswith("bench.0: other processes used 50% of the 2 CPUs")
    assert br.warnings[1] == (
        "bench.0: target unreachable: the window ended early at 12 s, its interval had "
        "stopped shrinking (±3.9% at 6 s, ±4.1% at 12 s; ±2.0% wanted); cause seen: other "
        "processes used 50% of the 2 CPUs during the measured window"
    )
    alone = BenchResult(name="bench")
    apply_interference(alone, [file(window=window)])
    assert alone.warnings[-1].endswith("no interference seen: the benchmark's own step times vary")


def test_a_window_that_missed_at_max_says_more_time_may_meet_it():
    """A window measured to ``max`` that missed its target without being given up on
    carries its own sentence; one that met its target, none."""
    missed = {"reason": "max_time", "met": False, "measured_s": 30.2, "halfwidth": 0.028,
              "target": 0.02}  # fmt: skip
    br = BenchResult(name="bench")
    apply_interference(
        br, [file(window=missed, interference=[host(1001.0 + i) for i in range(20)])]
    )
    assert not br.target_unreachable
    assert br.warnings == [
        "target missed at max: the window measured to its end (30 s) and ended at ±2.8% "
        "(±2.0% wanted), close enough or still narrowing, so more time may meet it "
        "(measure.max)"
    ]
    met = BenchResult(name="bench")
    apply_interference(met, [file(window=dict(missed, met=True, halfwidth=0.019))])
    assert met.warnings == []
