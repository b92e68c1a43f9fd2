"""The numerical kernels the rules share, kept apart from their math (docs/specs/design.md).

- :mod:`.blas`: BLAS thread pinning for small products, and which OpenBLAS kernels run;
- :mod:`.gram`: FedMGDA+'s cache-blocked Gram, squared norms and step;
- :mod:`.gram_kernel`: the compiled AVX2 Gram, built on first use into the cache folder;
- :mod:`.passes`: the one-pass sums of the re-weighted rules and of q-FFL.

A rule module keeps its paper's equations and calls these; nothing here knows a rule.
Private: names and signatures may change between releases.
"""
