"""Meshes of remote actors: one member per bundle of a Ray placement group.

``start_mesh(target, shape=..., placement=pdc_ray.on(...))`` already places every member
with the same options (``num_gpus=1``: one per GPU, wherever Ray finds one).
:func:`bundles` places member ``i`` in bundle ``i`` of a placement group instead, so a
``STRICT_SPREAD`` group gives one member per node and a ``PACK`` group keeps them
together::

    async with pdc_ray.placement_group([{"GPU": 1}] * 4, strategy="STRICT_SPREAD") as pg:
        async with open_nursery() as nursery:
            mesh = await nursery.start_mesh(
                Scorer, shape={"node": 4}, placement=pdc_ray.bundles(pg, num_gpus=1)
            )
"""

from __future__ import annotations

from typing import Any

from ._placement import RayPlacement, on

__all__ = ["bundles"]


def bundles(placement_group: Any, count: int | None = None, **options: Any) -> list[RayPlacement]:
    """One :class:`~pdc_ray.RayPlacement` per bundle of ``placement_group``, in bundle
    order, for ``start_mesh(..., placement=...)`` (member ``i`` in bundle ``i``).

    ``count`` is the number of bundles (default: the group's ``bundle_count``);
    ``options`` are the other arguments of :func:`pdc_ray.on` (``num_gpus``,
    ``backend``, ``engine``, ...). Raises :class:`TypeError` when the count is unknown
    and :class:`ValueError` for what :func:`pdc_ray.on` refuses.
    """
    if count is None:
        count = getattr(placement_group, "bundle_count", None)
        if not isinstance(count, int):
            raise TypeError(f"cannot tell how many bundles {placement_group!r} has: give count=")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an int >= 1, not {count!r}")
    for key in ("placement_group", "bundle_index", "node"):
        if key in options:
            raise TypeError(f"bundles() sets {key} itself")
    return [on(placement_group=placement_group, bundle_index=i, **options) for i in range(count)]
