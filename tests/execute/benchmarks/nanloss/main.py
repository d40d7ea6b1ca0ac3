"""Fault fixture: reports rates and a NaN loss."""

from benchkit.channel import DataWriter

writer = DataWriter()
for i in range(5):
    writer.write({"task": "train", "rate": 100.0 + i, "units": "items/s"})
    writer.write({"task": "train", "loss": 2.0 - i * 0.1})
writer.write({"task": "train", "loss": float("nan")})
writer.close()
