"""The plugin layer: hookspecs, entry-point loading with isolation, and the registry
that turns backend names into backend instances. Imports nothing above the backend
contract.

One role per module, each importing only the floors below it (pinned by
``tests/project/test_layout.py``):

1. :mod:`._hookspecs`: the hooks a plugin may implement, and their markers;
2. :mod:`._discovery`: the installed ``pdc`` entry points, found without importing any;
3. :mod:`._selection` (which of them ``PDC_PLUGINS`` loads) and :mod:`._validation`
   (whether a plugin's hooks, and what they register, are valid): pure decisions;
4. :mod:`._loader`: loading each selected plugin in isolation and calling its hooks;
5. :mod:`._registry`: backend names to backend instances, and the default backend.
"""

from ._discovery import PluginInfo
from ._hookspecs import (
    ENTRY_POINT_GROUP,
    BenchmarkPath,
    BenchmarkPaths,
    LazyBackend,
    hookimpl,
    lazy_exports,
)
from ._loader import (
    backend_registrations,
    failed_plugins,
    list_plugins,
    plugin_of_backend,
    plugin_selection,
    registered_backends,
    registered_benchmarks,
    registered_info_sections,
    registered_placements,
)
from ._registry import (
    CPU_INSTALL_HINT,
    BackendInfo,
    available_backends,
    backend_class,
    backend_devices,
    best_available,
    check_environment,
    default_backend_name,
    get_backend,
    no_backend_line,
    parse_backend_name,
    reload_plugins,
    resolve_backend,
)
from ._selection import PluginSelection
from ._validation import Registration

__all__ = [
    "CPU_INSTALL_HINT",
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "BenchmarkPath",
    "BenchmarkPaths",
    "LazyBackend",
    "PluginInfo",
    "PluginSelection",
    "Registration",
    "available_backends",
    "backend_class",
    "backend_devices",
    "backend_registrations",
    "best_available",
    "check_environment",
    "default_backend_name",
    "failed_plugins",
    "get_backend",
    "no_backend_line",
    "hookimpl",
    "lazy_exports",
    "list_plugins",
    "parse_backend_name",
    "plugin_of_backend",
    "plugin_selection",
    "registered_backends",
    "registered_benchmarks",
    "registered_info_sections",
    "registered_placements",
    "reload_plugins",
    "resolve_backend",
]
