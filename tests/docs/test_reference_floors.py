"""The reference documents ``pdc_core.Mailbox``, built of private floors (its state,
policy, anyio stream and single-consumer lane), as one class: its bases are the public
ones the floors stand on, and a class documented with ``:inherited-members:`` lists no
member that a third-party base defines (anyio's ``TypedAttributeProvider.extra``, whose
types have no page: the site's ``-W`` build would fail on them)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from anyio import TypedAttributeProvider
from anyio.abc import ObjectReceiveStream, ObjectSendStream

import pdc_core


@pytest.fixture
def pdc_api(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    pytest.importorskip(
        "sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'"
    )
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "docs" / "_ext"))
    import pdc_api

    return pdc_api


def test_the_mailbox_s_floors_are_found(pdc_api: ModuleType) -> None:
    floors = [cls.__name__ for cls in pdc_api._private_floors(pdc_core.Mailbox)]
    assert floors == ["MailboxLane", "MailboxStream", "MailboxPolicy", "MailboxState"]
    assert pdc_api._private_floors(pdc_core.MailboxStatistics) == ()


def test_the_mailbox_shows_the_public_bases_its_floors_stand_on(pdc_api: ModuleType) -> None:
    bases: list[Any] = list(pdc_core.Mailbox.__bases__)
    pdc_api._drop_object_base(None, "pdc_core.Mailbox", pdc_core.Mailbox, {}, bases)
    assert [getattr(base, "__origin__", base) for base in bases] == [
        ObjectSendStream,
        ObjectReceiveStream,
    ]


def test_inherited_members_stop_at_code_outside_pdc(pdc_api: ModuleType) -> None:
    skip = pdc_api._skip_third_party_inherited
    inherited = {"inherited_members": {"ObjectSendStream"}}
    extra = vars(TypedAttributeProvider)["extra"]
    assert skip(None, "class", "extra", extra, False, inherited) is True
    assert skip(None, "class", "send", pdc_core.Mailbox.send, False, inherited) is None
    assert skip(None, "class", "extra", extra, False, {}) is None  # no floors: untouched


def test_the_mailbox_documents_its_floors_members_as_its_own(pdc_api: ModuleType) -> None:
    entry = next(e for e in pdc_api.pdc_faces.entries("pdc_core") if e.name == "Mailbox")
    assert "   :inherited-members: ObjectSendStream" in pdc_api._entry_rst(entry)
