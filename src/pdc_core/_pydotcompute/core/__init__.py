"""Bodies of PyDotCompute\'s :mod:`pdc_core.core` (that package re-exports them)."""
