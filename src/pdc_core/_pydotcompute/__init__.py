"""PyDotCompute's API in one room: the bodies behind its import paths.

``_seed/`` is the seed facade (pdc's own top level exports its names:
``RingKernelRuntime``, ``message``, ``ring_kernel``, ...); ``core/``, ``ring_kernels/``,
``decorators/``, ``compilation/``, ``backends/`` and ``exceptions.py`` are the bodies of
PyDotCompute's paths. The public paths (``pdc_core.core.memory_pool``, ...) are modules
that only re-export from here, and give each name its public ``__module__``.

The room is built on pdc's public faces: its modules import ``pdc_core``,
``pdc_core.backend`` and ``pdc_core.lowlevel``, and each other. The seed facade, which
``pdc_core`` itself imports, cannot import ``pdc_core`` by name; it imports the faces
``backend`` and ``lowlevel`` and the few private modules that tests/project/test_layout.py
lists with the reason for each. This package's ``__init__`` imports nothing, so
``pdc_core`` loads the seed facade without the rest.
"""
