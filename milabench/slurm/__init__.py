"""Slurm: the system file of an allocation and the batch script of a suite run.

`nodelist` expands Slurm's compressed node lists (``SLURM_JOB_NODELIST``) and makes the
system file of an allocation's nodes; `batchscript` turns a `BatchJob` into the script
`milabench slurm sbatch` writes. Both are pure text: nothing here talks to Slurm or to
a node (the job's steps run `milabench` itself), so the package imports only
`milabench.errors`. The command is `milabench.cli.slurm`; docs/multinode.md "Slurm".

Kept import-free so that importing the package costs nothing; import the submodule.
"""
