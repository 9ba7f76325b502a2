"""Selection: which discovered plugins load, decided from ``PDC_PLUGINS``.

``PDC_PLUGINS=cpu,cuda`` loads only the selected plugins: a plain name selects the
first-party plugin of that name (``cpu`` is pdc-cpu's ``cpu``) or the only
distribution's entry point of that name, and ``dist:name``
(``pdc-thirdparty:thirdparty``) selects exactly one distribution's. Names are
case-insensitive; entries that select nothing are reported.

Guarantees:

- :func:`_plan` is a pure function of the candidates and the setting's text: it
  imports no plugin, reads no environment and warns nothing itself (the warning it
  decides on travels in :attr:`_Plan.warning`, for the loader to issue).
- Two distributions that provide the same entry-point name are never chosen between
  silently: the first-party distribution of a name (:data:`KNOWN_DISTRIBUTIONS`)
  keeps it, and otherwise neither is loaded; each refused claimant gets a reason that
  names the ``PDC_PLUGINS`` entry which would load it.
- Every candidate ends up in exactly one place: loaded, refused (listed with its
  reason) or filtered out (in :attr:`PluginSelection.filtered_out`, not listed).

Floor: above :mod:`._discovery`; below :mod:`._loader`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._discovery import KNOWN_DISTRIBUTIONS, PluginInfo, _Candidate, _normalize

__all__ = ["PluginSelection"]


@dataclass(frozen=True)
class PluginSelection:
    """What ``PDC_PLUGINS`` did: ``raw`` is its value (``None`` when unset or blank),
    ``filtered_out`` the installed plugins it left out (not loaded, not listed),
    ``unmatched`` its entries that select no installed plugin, ``problem`` what is
    wrong with it (``None`` when nothing is) and ``choices`` the entries that select
    each installed plugin."""

    raw: str | None = None
    filtered_out: tuple[PluginInfo, ...] = ()
    unmatched: tuple[str, ...] = ()
    problem: str | None = None
    choices: tuple[str, ...] = ()


@dataclass
class _Plan:
    """Which candidates to load, which to report as refused, and what PDC_PLUGINS did."""

    load: list[_Candidate]
    refused: dict[str, str]
    selection: PluginSelection
    warning: str | None = None


def _join(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _distributions(group: Iterable[_Candidate]) -> list[str]:
    return sorted({c.distribution or "an unknown distribution" for c in group})


def _refusal(
    candidate: _Candidate, group: list[_Candidate], loaded: list[_Candidate], *, asked: bool
) -> str:
    """Why ``candidate`` is not loaded: another distribution claims its name, or (``asked``)
    a plain first-party name in ``PDC_PLUGINS`` means the first-party plugin only."""
    name = candidate.lower_name
    dists = _distributions(group)
    owner = KNOWN_DISTRIBUTIONS.get(name)
    if len(dists) == 1:
        claim = f"{dists[0]} provides a pdc entry point named {name!r}"
    else:
        claim = f"{_join(dists)} {'both' if len(dists) == 2 else 'all'} provide"
        claim += f" a pdc entry point named {name!r}"
    this = candidate.qualified_name
    if owner is not None and any(c.first_party for c in loaded):
        return (
            f"refused: {claim}; {owner} is its first-party owner, so only {owner}:{name} "
            f"is loaded. Name this one {this} in PDC_PLUGINS to load it instead"
        )
    if owner is not None and asked:
        return (
            f"refused: {claim}, but {name!r} in PDC_PLUGINS selects only the first-party "
            f"{owner}:{name}, which is not installed. Name this one {this} in PDC_PLUGINS "
            "to load it"
        )
    choices = " or ".join(sorted(c.qualified_name for c in group))
    return (
        f"refused: {claim}, so none is loaded rather than one chosen at random. "
        f"Name one in PDC_PLUGINS to load it: {choices}"
    )


def _selector(candidate: _Candidate, groups: dict[str, list[_Candidate]]) -> str:
    """The shortest PDC_PLUGINS entry that selects ``candidate``."""
    group = groups[candidate.lower_name]
    if candidate.first_party:
        return candidate.lower_name
    if candidate.lower_name not in KNOWN_DISTRIBUTIONS and len(_distributions(group)) == 1:
        return candidate.lower_name
    return candidate.qualified_name


def _parse_selection(raw: str) -> list[str]:
    entries: list[str] = []
    for entry in raw.split(","):
        entry = entry.strip().lower()
        if entry and entry not in entries:
            entries.append(entry)
    return entries


def _plan(candidates: list[_Candidate], raw_selection: str | None) -> _Plan:
    """Decide what to load from the candidates and ``PDC_PLUGINS`` (``raw_selection``)."""
    groups: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.lower_name, []).append(candidate)
    raw = (raw_selection or "").strip()
    selectors = tuple(sorted({_selector(c, groups) for c in candidates}))
    if not raw:
        # Everything, except names claimed by several distributions: there the
        # first-party owner keeps the name, and otherwise no claimant is loaded.
        load: list[_Candidate] = []
        refused: dict[str, str] = {}
        for group in groups.values():
            if len(_distributions(group)) == 1:
                load += group
                continue
            kept = [c for c in group if c.first_party]
            load += kept
            for candidate in group:
                if candidate not in kept:
                    refused[candidate.key] = _refusal(candidate, group, kept, asked=False)
        blank = None if not raw_selection else "it is blank, so it names no plugin"
        return _Plan(
            load=load,
            refused=refused,
            selection=PluginSelection(problem=blank, choices=selectors),
        )

    if not _parse_selection(raw):
        return _Plan(
            load=[],
            refused={},
            selection=PluginSelection(
                raw=raw,
                filtered_out=tuple(c.info() for c in candidates),
                problem="it names no plugin (only commas and blanks)",
                choices=selectors,
            ),
        )
    chosen: list[_Candidate] = []
    asked: list[str] = []  # plain names, whose other claimants are reported as refused
    unknown: list[str] = []
    ambiguous: list[str] = []
    for entry in _parse_selection(raw):
        dist, sep, name = entry.partition(":")
        if sep:
            matches = [
                c
                for c in candidates
                if c.normalized_distribution == _normalize(dist) and c.lower_name == name.strip()
            ]
            if not matches:
                unknown.append(entry)
        else:
            group = groups.get(entry, [])
            asked.append(entry)
            if entry in KNOWN_DISTRIBUTIONS:  # known even where its distribution is missing
                matches = [c for c in group if c.first_party]
            elif len(_distributions(group)) > 1:
                matches = []
                ambiguous.append(entry)
            else:
                matches = group
                if not matches:
                    unknown.append(entry)
        chosen += [c for c in matches if c not in chosen]
    refused = {}
    for name in asked:
        group = groups.get(name, [])
        loaded = [c for c in group if c in chosen]
        for candidate in group:
            if candidate not in chosen:
                refused[candidate.key] = _refusal(candidate, group, loaded, asked=True)
    filtered_out = tuple(
        c.info()
        for c in sorted(candidates, key=lambda c: (c.lower_name, c.key))
        if c not in chosen and c.key not in refused
    )
    problems = []
    if unknown:
        problems.append(
            "no installed plugin is named " + ", ".join(repr(entry) for entry in unknown)
        )
    for name in ambiguous:
        choices = " or ".join(sorted(c.qualified_name for c in groups[name]))
        problems.append(f"{name!r} is provided by several distributions; name one: {choices}")
    warning = None
    if problems:
        warning = (
            f"PDC_PLUGINS={raw!r}: {'; '.join(problems)}. "
            f"Installed plugins: {', '.join(selectors) or 'none'}"
        )
    return _Plan(
        load=chosen,
        refused=refused,
        selection=PluginSelection(
            raw=raw,
            filtered_out=filtered_out,
            unmatched=tuple(unknown + ambiguous),
            problem="; ".join(problems) or None,
            choices=selectors,
        ),
        warning=warning,
    )
