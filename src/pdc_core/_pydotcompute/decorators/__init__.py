"""Bodies of PyDotCompute\'s :mod:`pdc_core.decorators` (that package re-exports them)."""
