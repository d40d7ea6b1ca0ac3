"""Accelerator and host monitoring: detection and samplers (see `accelerators.detect`).

Kept import-free so that importing the package costs nothing; import the submodule.
"""
