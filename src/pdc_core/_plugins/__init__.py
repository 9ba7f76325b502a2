"""The plugin layer: hookspecs, entry-point loading with isolation, and the registry
that turns backend names into backend instances. Imports nothing above the backend
contract."""

from ._hookspecs import ENTRY_POINT_GROUP, LazyBackend, hookimpl, lazy_exports
from ._loader import (
    PluginInfo,
    PluginSelection,
    Registration,
    backend_registrations,
    failed_plugins,
    list_plugins,
    plugin_of_backend,
    plugin_selection,
    registered_backends,
    registered_info_sections,
    registered_placements,
)
from ._registry import (
    CPU_INSTALL_HINT,
    BackendInfo,
    available_backends,
    backend_class,
    backend_devices,
    check_environment,
    default_backend_name,
    get_backend,
    no_backend_line,
    parse_backend_name,
    reload_plugins,
    resolve_backend,
)

__all__ = [
    "CPU_INSTALL_HINT",
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "LazyBackend",
    "PluginInfo",
    "PluginSelection",
    "Registration",
    "available_backends",
    "backend_class",
    "backend_devices",
    "backend_registrations",
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
    "registered_info_sections",
    "registered_placements",
    "reload_plugins",
    "resolve_backend",
]
