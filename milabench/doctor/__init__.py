"""Why a node would measure below its peers, asked before a run: `milabench doctor`.

One module per family of checks: `host` (CPU governor, steal, CPU pressure, other
processes, memory, swap, disk), `nvidia` (NVML), `sysfs` (AMD and Intel GPUs),
`interpreter` (can a node's Python run milabench) and `sources` (can a node reach its
package sources). Each check is a small function giving `findings.Finding`s (ok, warn,
fail and a one-line reason); `checks.run_checks` runs them all, `record` writes and reads
``doctor.json``, `probe` sends the checks to a node inline, `thresholds` holds every
limit. docs/doctor.md.

Kept import-free so that importing the package costs nothing; import the submodule.
"""
