"""Bodies of PyDotCompute\'s :mod:`pdc_core.backends` (that package re-exports them)."""
