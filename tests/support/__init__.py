"""Shared fakes and helpers for pdc's own tests (``from support.<module> import ...``).

Nothing here is public: test authors outside pdc use :mod:`pdc_core.testing`.
"""
