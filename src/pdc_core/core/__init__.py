"""PyDotCompute-compatible import paths (``pydotcompute.core.*``).

New code should import from ``pdc_core`` directly; these modules exist so that code
written for PyDotCompute works with ``pdc_core`` in place of ``pydotcompute``.
"""
