"""benchkit's NVML back-end records what explains a slow GPU during the window: the
clock-event reasons, the clocks and XID errors (fake pynvml, nvidia-ml-py's names)."""

from __future__ import annotations


def test_samples_carry_clock_events_clocks_and_xids(fake_nvml):
    from benchkit.accelerators import NVMLAccelerators

    d = fake_nvml.DEVICES
    d[1].clocks_event_reasons = (
        fake_nvml.nvmlClocksEventReasonSwThermalSlowdown | fake_nvml.nvmlClocksEventReasonSwPowerCap
    )
    d[1].sm_clock_mhz = 1410
    d[2].xid_events = [79, 48]
    sampler = NVMLAccelerators.probe()
    first = sampler.sample()
    assert first["0"]["clock_events"] == [] and first["0"]["clocks"] == {"sm": 1980, "mem": 2619}
    assert first["1"]["clock_events"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert first["1"]["clocks"]["sm"] == 1410
    assert first["2"]["xid"] == [79, 48] and "xid" not in first["0"]
    assert "xid" not in sampler.sample()["2"]  # delivered once
    d[3].xid_events = [31]
    assert sampler.sample()["3"]["xid"] == [31]
    sampler.close()


def test_an_older_driver_without_events_still_samples(fake_nvml, monkeypatch):
    from benchkit.accelerators import NVMLAccelerators

    def refuse(*args):
        raise fake_nvml.NVMLError(fake_nvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(fake_nvml, "nvmlDeviceRegisterEvents", refuse)
    sampler = NVMLAccelerators.probe()
    sample = sampler.sample()
    assert set(sample) == {"0", "1", "2", "3"} and "clock_events" in sample["0"]
    sampler.close()
