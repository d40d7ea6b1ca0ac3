"""Every threshold of the doctor's checks, in one place (the table of docs/doctor.md
"The checks" gives each with its check, and says why these values).

Host shares are fractions of the CPU capacity or of the sample's time; GPU ratios are of
the device's default. Standard library only: it is sent to nodes inline.
"""

from __future__ import annotations

# Seconds over which steal, pressure and other processes' CPU use are measured.
DEFAULT_SAMPLE = 0.5
# Host thresholds (fractions of the CPU capacity or of the sample's time).
STEAL_WARN = 0.05  # a VM whose vCPUs wait for the hypervisor 5% of the time
PRESSURE_WARN = 0.25  # PSI "some" avg60: a quarter of the last minute with tasks waiting
OTHERS_WARN = 0.25  # other processes busy on a quarter of the CPUs
MEMORY_WARN_BYTES = 1 << 30  # less than 1 GiB available ...
MEMORY_WARN_FRACTION = 0.05  # ... and less than 5% of the RAM
SWAP_WARN_FRACTION = 0.10  # swap in use above 10% of the RAM
DISK_FAIL_BYTES = 1 << 30  # the run folder and datasets cannot fit
DISK_WARN_BYTES = 5 << 30
# /dev/shm under 2 GiB: the standard suite's vision loaders (8 workers, batches of 256
# float images of 224 px) need 1.5 GiB per process with one batch made ahead per worker,
# 5.2 GiB with their 4 (benchkit.shm); a container's default is 64 MiB.
SHM_WARN_BYTES = 2 << 30
SHM_USED_WARN = 0.5  # over half of it held by files already there
# GPU thresholds.
POWER_LIMIT_FAIL = 0.95  # enforced limit below 95% of the default: a capped GPU
POWER_LIMIT_HIGH = 1.05  # above the default: raised by hand, not comparable either
TEMPERATURE_MARGIN = 15.0  # degrees C below the slowdown threshold, at rest
RETIRED_PAGES_WARN = 60  # DBE + multiple-SBE retired pages (the usual RMA threshold)
