"""Fault fixture: reports one rate, then raises."""

from benchkit.channel import DataWriter

writer = DataWriter()
writer.write({"task": "train", "rate": 10.0, "units": "items/s"})
writer.flush()
print("about to fail")
raise RuntimeError("boom: this benchmark always fails")
