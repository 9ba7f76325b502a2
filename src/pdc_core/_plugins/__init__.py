"""The plugin layer: hookspecs, entry-point loading with isolation, and the registry
that turns backend names into backend instances. Imports nothing above the backend
contract."""

from ._hookspecs import ENTRY_POINT_GROUP, hookimpl
from ._loader import (
    PluginInfo,
    failed_plugins,
    list_plugins,
    plugin_of_backend,
    registered_backends,
)
from ._registry import (
    BackendInfo,
    available_backends,
    default_backend_name,
    get_backend,
    reload_plugins,
    resolve_backend,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "PluginInfo",
    "available_backends",
    "default_backend_name",
    "failed_plugins",
    "get_backend",
    "hookimpl",
    "list_plugins",
    "plugin_of_backend",
    "registered_backends",
    "reload_plugins",
    "resolve_backend",
]
