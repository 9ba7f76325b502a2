"""Discovery: the installed ``pdc`` entry points, as candidates to load.

Guarantees:

- Discovering imports no plugin: a candidate is an entry point not yet loaded, with
  the name and version of the distribution that provides it (``None`` for both when
  the entry point comes from no distribution).
- Each (distribution, entry-point name) is one candidate, even when the distribution
  is twice on ``sys.path``; :attr:`_Candidate.key` is unique among candidates, even
  when two distributions share an entry-point name. Names compare case-insensitively
  and distributions by their PEP 503 form.
- :data:`KNOWN_DISTRIBUTIONS` is the one table of first-party names: the selection
  (:mod:`._selection`) and the validation of what plugins register
  (:mod:`._validation`) both read it.

Floor: above :mod:`._hookspecs` only; which candidates load is decided in
:mod:`._selection`, and loading happens in :mod:`._loader`.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass, field

from ._hookspecs import ENTRY_POINT_GROUP

__all__ = ["KNOWN_DISTRIBUTIONS", "PluginInfo"]

#: The first-party plugins: entry-point name -> the distribution that owns it. In
#: ``PDC_PLUGINS`` a plain ``cpu`` means pdc-cpu's ``cpu`` entry point, and another
#: distribution's ``cpu`` entry point never replaces it. The same names are reserved
#: for what plugins register: only pdc-cpu may register a backend (or a placement, or
#: an info section) called ``cpu``, whatever order the entry points load in; another
#: distribution's claim is refused and reported on its plugin. Also the "pip install"
#: hints.
KNOWN_DISTRIBUTIONS = {
    "cpu": "pdc-cpu",
    "cuda": "pdc-cuda",
    "metal": "pdc-metal",
    "ray": "pdc-ray",
}


@dataclass
class PluginInfo:
    """What ``pdc plugins`` shows about one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    placements: list[str] = field(default_factory=list)
    info_sections: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def loaded(self) -> bool:
        """Whether the plugin loaded and registered without error (:attr:`error` is ``None``)."""
        return self.error is None

    @property
    def qualified_name(self) -> str:
        """``"<distribution>:<name>"``, which selects exactly this plugin in ``PDC_PLUGINS``."""
        return f"{self.distribution}:{self.name}" if self.distribution else self.name


def _normalize(distribution: str) -> str:
    """The PEP 503 form of a distribution name: ``PDC_Thirdparty`` -> ``pdc-thirdparty``."""
    return re.sub(r"[-_.]+", "-", distribution).strip().lower()


@dataclass(frozen=True, eq=False)
class _Candidate:
    """One installed ``pdc`` entry point, before it is loaded."""

    entry_point: importlib.metadata.EntryPoint
    distribution: str | None
    version: str | None

    @property
    def name(self) -> str:
        return self.entry_point.name

    @property
    def lower_name(self) -> str:
        return self.entry_point.name.lower()

    @property
    def normalized_distribution(self) -> str | None:
        return _normalize(self.distribution) if self.distribution is not None else None

    @property
    def key(self) -> str:
        dist = self.normalized_distribution
        return f"{dist}:{self.lower_name}" if dist is not None else self.lower_name

    @property
    def qualified_name(self) -> str:
        return f"{self.distribution}:{self.name}" if self.distribution else self.name

    @property
    def first_party(self) -> bool:
        owner = KNOWN_DISTRIBUTIONS.get(self.lower_name)
        return owner is not None and owner == self.normalized_distribution

    def info(self, error: str | None = None) -> PluginInfo:
        return PluginInfo(
            name=self.name, distribution=self.distribution, version=self.version, error=error
        )


def _discover() -> list[_Candidate]:
    """The installed entry points, once per (distribution, name)."""
    found: dict[str, _Candidate] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = entry_point.dist
        candidate = _Candidate(
            entry_point=entry_point,
            distribution=dist.name if dist is not None else None,
            version=dist.version if dist is not None else None,
        )
        found.setdefault(candidate.key, candidate)  # the same distribution twice on sys.path
    return list(found.values())
