"""The concurrency stack's upper half: mailboxes, actor handles and runners, mailbox
actors and the nursery. Knows no device. Only this package touches a
:class:`Mailbox`'s internals; other layers use its public fast-path methods."""

from . import _mesh_mailbox  # noqa: F401 - registers the mailbox fast path of meshes
from ._broadcast import (
    BroadcastReceiveStream,
    BroadcastSendStream,
    BroadcastStreamStatistics,
    create_broadcast_stream,
)
from ._mailbox import (
    CATCH_UP_AT,
    DEFAULT_CAPACITY,
    DEFAULT_PRIORITY,
    EMPTY,
    Backpressure,
    Control,
    Mailbox,
    MailboxStatistics,
    check_priority,
)
from ._mailbox_actor import Actor, BatchReply, MailboxActor, MailboxActorRef
from ._mesh import ActorMesh, Coordinates, MeshError, member_targets, mesh_port, shared_target
from ._nursery import ActorNursery, RestartPolicy, open_nursery
from ._refs import (
    ActorRef,
    ActorRunner,
    ActorState,
    ActorStatistics,
    Placement,
    StartOptions,
    cancellation_first,
    runner_for,
)

__all__ = [
    "CATCH_UP_AT",
    "DEFAULT_CAPACITY",
    "DEFAULT_PRIORITY",
    "EMPTY",
    "Actor",
    "ActorMesh",
    "ActorNursery",
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "Backpressure",
    "BatchReply",
    "BroadcastReceiveStream",
    "BroadcastSendStream",
    "BroadcastStreamStatistics",
    "Control",
    "Coordinates",
    "Mailbox",
    "MailboxActor",
    "MailboxActorRef",
    "MailboxStatistics",
    "MeshError",
    "Placement",
    "RestartPolicy",
    "StartOptions",
    "cancellation_first",
    "check_priority",
    "create_broadcast_stream",
    "member_targets",
    "mesh_port",
    "shared_target",
    "open_nursery",
    "runner_for",
]
