"""In-process runner: the fairfl ServerApp logic and a ClientApp on an in-memory Grid.

No Ray, no network: each message is copied through Flower's protobuf serialisation and
handed to the ClientApp in the same process, so strategies see exactly what they would
see from SuperNodes. Used by tests and fast sweeps; the same seed gives the same final
model as Flower's simulation engine with full participation. The nodes' ``Context.state``
(Ditto's personal models) goes into each checkpoint and comes back on a resume, so a
resumed run equals one that never stopped, personal models included.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Message, RecordDict
from flwr.app.error import Error
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from fairfl._compat import server_task_identity, set_message_id, wire_copy
from fairfl.server.checkpoint import load_checkpoint
from fairfl.server.run import RunOutcome, run_federation

if TYPE_CHECKING:
    from fairfl.server.preflight import CheckedRun

#: A fault injector: given the instruction and the honest reply, return the reply the
#: server should see instead, or ``None`` to make the node silent this time.
ReplyFilter = Callable[[Message, Message], Message | None]


class InMemoryGrid(Grid):
    """A Flower ``Grid`` whose nodes are ClientApp calls in this process.

    Parameters
    ----------
    client_app : ClientApp
        The ClientApp every node runs.
    node_configs : Mapping[int, Mapping[str, Any]]
        Node id -> that node's ``node_config`` (``partition-id``, ``num-partitions``).
    run_config : Mapping[str, Any]
        The run config every node sees.
    run_id : int
        Run id stamped on messages.
    reply_filter : ReplyFilter | None
        Optional fault injection (dropouts, corrupted or adversarial replies).
    """

    def __init__(
        self,
        client_app: ClientApp,
        node_configs: Mapping[int, Mapping[str, Any]],
        run_config: Mapping[str, Any],
        *,
        run_id: int = 1,
        reply_filter: ReplyFilter | None = None,
    ) -> None:
        self.client_app = client_app
        self.run_id = run_id
        self.reply_filter = reply_filter
        self.contexts = {
            node_id: Context(
                run_id=run_id,
                node_id=node_id,
                node_config=dict(config),
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for node_id, config in node_configs.items()
        }
        self._ids = itertools.count(1)
        self._pending: dict[str, Message] = {}
        self._run: Any = None

    def client_states(self) -> dict[int, RecordDict]:
        """Each node's ``Context.state`` by client key (partition id, else node id).

        Checkpoints keep them (:func:`fairfl.server.checkpoint.client_states_of`), so a
        resumed run's clients continue from their state at the checkpointed round
        (Ditto's personal models), whatever node ids the resumed run gives them.
        """
        return {
            _client_key(node_id, context): context.state
            for node_id, context in self.contexts.items()
        }

    def load_client_states(self, states: Mapping[int, RecordDict]) -> None:
        """Give each node the checkpointed state of its client key (:meth:`client_states`)."""
        for node_id, context in self.contexts.items():
            state = states.get(_client_key(node_id, context))
            if state is not None:
                context.state = wire_copy(state)

    def set_run(self, run: Any) -> None:
        """Store the run (unused in process)."""
        self._run = run

    @property
    def run(self) -> Any:
        """The run set with :meth:`set_run`."""
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Create an instruction message to one node."""
        return Message(
            content=content,
            message_type=message_type,
            dst_node_id=dst_node_id,
            group_id=group_id,
            ttl=ttl,
        )

    def get_node_ids(self) -> Iterable[int]:
        """Ids of all nodes (all are always connected)."""
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Queue messages; return their ids."""
        ids = []
        for message in messages:
            message_id = f"msg-{next(self._ids)}"
            set_message_id(message, message_id)
            self._pending[message_id] = message
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Deliver the queued messages and return the replies (silent nodes: none)."""
        replies = []
        for message_id in message_ids:
            instruction = self._pending.pop(message_id, None)
            if instruction is None:
                continue
            reply = self._deliver(instruction)
            if reply is not None:
                replies.append(reply)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push, deliver and collect in one call."""
        return self.pull_messages(self.push_messages(messages))

    def _deliver(self, instruction: Message) -> Message | None:
        node_id = instruction.metadata.dst_node_id
        # Flower's own runtime builds the delivered message this way; its public
        # overloads leave out the metadata keyword.
        received = Message(  # type: ignore[call-overload]
            content=wire_copy(instruction.content),
            metadata=instruction.metadata,
        )
        try:
            answer = self.client_app(received, self.contexts[node_id])
            reply = Message(content=wire_copy(answer.content), reply_to=instruction)
        except Exception:  # a client crash becomes an error reply, as in Flower
            reply = Message(
                Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=traceback.format_exc()),
                reply_to=instruction,
            )
        set_message_id(reply, f"reply-{instruction.metadata.message_id}")
        if self.reply_filter is not None:
            return self.reply_filter(instruction, reply)
        return reply


def _client_key(node_id: int, context: Context) -> int:
    """A node's client key: its ``partition-id``, else its node id."""
    return int(context.node_config.get("partition-id", node_id))


def node_configs_for(num_partitions: int, first_node_id: int = 1001) -> dict[int, dict[str, Any]]:
    """One node per partition, as the simulation engine assigns them."""
    return {
        first_node_id + p: {"partition-id": p, "num-partitions": num_partitions}
        for p in range(num_partitions)
    }


def run_inprocess(
    run_config: Mapping[str, Any],
    *,
    client_app: ClientApp | None = None,
    reply_filter: ReplyFilter | None = None,
    node_configs: Mapping[int, Mapping[str, Any]] | None = None,
    checked: CheckedRun | None = None,
) -> RunOutcome:
    """Run a whole federation in this process.

    Parameters
    ----------
    run_config : Mapping[str, Any]
        Run-config keys as in ``[tool.flwr.app.config]``; missing keys take the
        defaults of :class:`fairfl.settings.RunSettings` and of the rule.
    client_app : ClientApp | None
        Defaults to fairfl's ClientApp.
    reply_filter : ReplyFilter | None
        Optional fault injection.
    node_configs : Mapping[int, Mapping[str, Any]] | None
        Defaults to one node per partition (``num-partitions`` of the run config).
    checked : CheckedRun | None
        The result of ``check_run(run_config, local_clients=True)`` where the caller
        already checked the run (``fairfl run``), so that it is checked, and its rule
        built, once; ``None`` checks it here.

    Raises
    ------
    ValueError
        Before anything runs, if the run config fails a check of
        :func:`fairfl.server.preflight.check_run` (the clients run here, so their
        extras and partitions are checked too), or if ``checked`` was checked without
        the clients (``local_clients=False``); else as
        :func:`fairfl.server.run.run_federation`.
    """
    from fairfl.server.preflight import check_run

    if checked is None:
        checked = check_run(run_config, local_clients=True)
    elif not checked.local_clients:
        # The clients run here: a check that left out their extras and data misses
        # what would otherwise fail every client in round 1.
        raise ValueError(
            "run_inprocess: checked must come from check_run(..., local_clients=True), "
            "the clients run in this process"
        )
    if client_app is None:
        from fairfl.client.app import app as fairfl_client_app

        client_app = fairfl_client_app
    nodes = node_configs or node_configs_for(checked.settings.num_partitions)
    grid = InMemoryGrid(client_app, nodes, run_config, reply_filter=reply_filter)
    if checked.settings.resume_from:
        # The clients' state at the checkpointed round (Ditto's personal models); the
        # server's part is restored, and the checkpoint checked, by run_federation.
        grid.load_client_states(load_checkpoint(Path(checked.settings.resume_from)).client_state)
    with server_task_identity(grid.run_id):
        return run_federation(grid, run_config, checked=checked)
