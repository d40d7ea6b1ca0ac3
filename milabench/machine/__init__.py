"""The machine milabench runs on, as facts: what it is, what it can run, what /proc says.

`facts` (the one record of a machine: CPU, memory, OS, Python, accelerators),
`accelerators` (detection, a bad setting as a `ConfigError`), `cudabuild` (which pinned
CUDA build an NVIDIA driver runs), `procfs` (the /proc readers and CPU-use samples the
doctor and the interference sampler share) and `inline` (how these probes travel to a
node inside one ``python -c``). Judging the facts is `milabench.doctor`'s work.

Kept import-free so that importing the package costs nothing; import the submodule.
"""
