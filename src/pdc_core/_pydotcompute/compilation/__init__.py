"""Bodies of PyDotCompute\'s :mod:`pdc_core.compilation` (that package re-exports them)."""
