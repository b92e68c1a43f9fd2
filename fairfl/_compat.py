"""The few Flower internals fairfl touches, in one place.

The in-process runner builds and answers Messages outside Flower's runtimes. That needs
Flower internals that move between releases: the task identity a ``Message`` reads on
construction (flwr >= 1.41), the message id (set by the SuperLink, no public setter) and
the protobuf serde. Keep every such use here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from flwr.app import Message, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

try:  # flwr >= 1.41: Message() reads the sender's identity from TaskIdentity.
    from flwr.supercore.task_identity import TaskIdentity
except ImportError:  # pragma: no cover - older flwr has no task identity
    TaskIdentity = None  # type: ignore[assignment,misc]

SERVER_NODE_ID = 1


@contextmanager
def server_task_identity(run_id: int) -> Iterator[None]:
    """Let strategies create Messages as the ServerApp of ``run_id`` would."""
    if TaskIdentity is None:  # pragma: no cover
        yield
        return
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = SERVER_NODE_ID
    TaskIdentity.task_id = 1
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def set_message_id(message: Message, message_id: str) -> None:
    """Give a message the id a SuperLink would (there is no public setter)."""
    message.metadata.__dict__["_message_id"] = message_id


def wire_copy(content: RecordDict) -> RecordDict:
    """Copy records through Flower's protobuf serialisation, as the network would."""
    return recorddict_from_proto(recorddict_to_proto(content))
