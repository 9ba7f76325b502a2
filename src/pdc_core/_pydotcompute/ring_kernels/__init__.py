"""Bodies of PyDotCompute\'s :mod:`pdc_core.ring_kernels` (that package re-exports them)."""
