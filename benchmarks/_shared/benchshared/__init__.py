"""benchshared: model and data code that several benchmarks share.

`benchshared.datasets` (synthetic data generated once by ``prepare.py`` scripts),
`benchshared.vision` (the JPEG folder loader, synthetic batches and the model factory
of the image-classification entries) and `benchshared.vit` (the Vision Transformer of
DINOv2 and V-JEPA). Measuring stays in `benchkit`; this package holds what a benchmark
trains and reads.

Importing it (or any of its modules) needs only the standard library, like benchkit:
torch, Pillow, torchvision and timm are imported inside the functions that use them, so
`milabench install` can check that every environment imports it. milabench copies it
into every benchmark environment beside benchkit (`milabench.envs.helperlib`). It lives
in ``benchmarks/_shared/``: a folder whose name starts with ``_`` is not a benchmark.
"""
