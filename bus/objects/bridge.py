"""The bridge: one bus, not two (docs/PROTOCOL.md section 7).

A :class:`Bridge` is a peer of an :class:`~bus.objects.tcp.ObjectServer` (routing id
``bus-bridge``, by default) and a :class:`bus.asyncio.client.Client` of the native bus at once:

- an Object System ``services/request`` whose ``name`` is a native group becomes an RQS with
  ``ENC=JSON`` (CMD from ``request``, arguments from the JSON payload); each ACK or NAK comes
  back as a ``services/reply`` with ``in-reply-to`` and ``to`` the requester;
- a native event (TYP=EVT) on ``major.minor`` becomes a content object of type
  ``bus/major.minor`` (and ``bus-type`` ``major.minor``) with the JSON of its PLD as payload; an
  Object System content object of type ``bus/major.minor`` (or any ``bus/...`` type with a
  ``bus-type`` attribute, what Objectoplex's own library can send) with a JSON-object payload
  is published on the bus as ``major.minor``;
- every group seen in ``OAM.SERVICE`` heartbeats is registered as a service (``services/register``
  from the bridge), so it shows in ``services/discovery``; it is unregistered when it goes.

:func:`bus.objects.bridging.open_bridge` runs it for ``busgate broker --objects-port``: it
opens the bridge's bus client (in-process for the broker's own), retries while it cannot, and
answers the Object System meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Hashable
from typing import Any, Final

import orjson

from bus.asyncio.client import Client, Subscription
from bus.asyncio.directory import ServiceDirectory
from bus.errors import BusError, NoRespondersError, RequestTimeout
from bus.frame.enums import Encoding
from bus.frame.jsonmap import to_json
from bus.message.message import Message, MessageType
from bus.objects.codec import BusinessObject
from bus.objects.tcp import ObjectServer

__all__ = [
    "BRIDGE_ID",
    "BUS_TYPE",
    "LINK_SECRET_ENV",
    "TYPE_PREFIX",
    "Bridge",
    "bus_type_of",
    "event_to_object",
    "object_to_event",
]

log = logging.getLogger(__name__)

#: The variable holding the secret busgate's own object servers link with (PROTOCOL.md 6.6).
LINK_SECRET_ENV: Final = "BUSGATE_OBJECTS_LINK_SECRET"
#: ``answer`` (default) or ``ignore``: what the listener does with a ping sent before subscribing.
PING_ENV: Final = "BUSGATE_OBJECTS_PING_BEFORE_SUBSCRIBE"
#: The bridge's routing id on the Object System network.
BRIDGE_ID: Final = "bus-bridge"
#: Content type prefix of native events on the Object System: ``bus/sensor.temp``.
TYPE_PREFIX: Final = "bus/"
#: The attribute naming a ``bus/...`` object's native type whole (PROTOCOL.md 7.2).
BUS_TYPE: Final = "bus-type"
JSON_TYPE: Final = "application/json"
_JSON_TYPES: Final = frozenset({"application/json", "text/json"})
_MAX_CONCURRENT: Final = 64
_QUEUE_SIZE: Final = 10_000
_SENT_MEMORY: Final = 4096


def bus_type_of(obj: BusinessObject) -> str | None:
    """The native ``major.minor`` type of a ``bus/...`` content object: its ``bus-type``
    attribute when it has one (what survives Objectoplex's library, which cuts a content type
    at its first dot: ``bus/alarm.oplex`` leaves it as ``bus/alarm``), else what follows
    ``bus/`` in its content type (``bus/x.y`` -> ``x.y``). None for anything else."""
    content_type = obj.type
    if obj.event is not None or content_type is None:
        return None
    base = content_type.split(";", 1)[0].strip()
    if not base.lower().startswith(TYPE_PREFIX) or len(base) == len(TYPE_PREFIX):
        return None
    named = obj.metadata.get(BUS_TYPE)
    if isinstance(named, str) and named:
        return named
    return base[len(TYPE_PREFIX) :]


def event_to_object(message: Message) -> BusinessObject:
    """A native event as an Object System content object (type ``bus/<GRP>``, ``bus-type``
    ``<GRP>`` for clients whose library cuts the type, JSON payload)."""
    payload = to_json(message.payload).encode("utf-8")
    grp = message.grp
    metadata: dict[str, Any] = {"type": f"{TYPE_PREFIX}{grp}", BUS_TYPE: grp}
    if message.mid:
        metadata["id"] = message.mid
    return BusinessObject(metadata, payload)


def object_to_event(obj: BusinessObject) -> Message | None:
    """An Object System ``bus/x.y`` content object as a native event, or ``None`` if it is not one.

    The payload must be a JSON object (it becomes PLD); anything else is not bridged.
    """
    bus_type = bus_type_of(obj)
    if bus_type is None:
        return None
    try:
        data = orjson.loads(obj.payload) if obj.payload else {}
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    return Message.event(bus_type, data)


def _request_args(obj: BusinessObject) -> dict[str, Any]:
    """The arguments of a ``services/request``: its JSON payload, else its ``args`` attribute."""
    content_type = (obj.type or "").split(";", 1)[0].strip().lower()
    if obj.payload and content_type in _JSON_TYPES:
        try:
            value = orjson.loads(obj.payload)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"payload is not JSON: {exc.msg}") from exc
        if not isinstance(value, dict):
            raise ValueError("the JSON payload must be an object")
        return value
    args = obj.metadata.get("args", {})
    if not isinstance(args, dict):
        raise ValueError("args must be a JSON object")
    return args


class _BridgePeer:
    """The bridge's connection on the object server: deliveries go to a queue."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[BusinessObject] = asyncio.Queue(_QUEUE_SIZE)
        self.dropped = 0

    def send(self, data: bytes, obj: BusinessObject) -> None:
        try:
            self.queue.put_nowait(obj)
        except asyncio.QueueFull:
            self.dropped += 1

    def close(self, reason: str) -> None:
        log.warning("object server closed the bus bridge: %s", reason)


class Bridge:
    """Joins an object server and the native bus.

    Args:
        server: the Object System server to join.
        client: a connected bus client.
        routing_id: the bridge's routing id (default ``bus-bridge``).
        events: native subscription pattern of events brought to the Object System (default
            ``>``: all; ``None``: none). ``OAM.*`` events are never brought over.
        timeout: default seconds for a bridged request (a request's ``timeout`` attribute wins).
    """

    def __init__(
        self,
        server: ObjectServer,
        client: Client,
        *,
        routing_id: str = BRIDGE_ID,
        events: str | None = ">",
        timeout: float = 5.0,
    ) -> None:
        self.server = server
        self.client = client
        self.routing_id = routing_id
        self.events = events
        self.timeout = timeout
        self._peer = _BridgePeer()
        self._conn: Hashable | None = None
        self._directory = ServiceDirectory(client)
        self._registered: set[str] = set()
        self._slots = asyncio.Semaphore(_MAX_CONCURRENT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._subscription: Subscription | None = None
        self._sent: deque[str] = deque(maxlen=_SENT_MEMORY)

    @property
    def native_groups(self) -> set[str]:
        """Groups that native services announce by heartbeats."""
        return {info.group for info in self._directory.services()}

    async def start(self) -> None:
        """Join the object server, subscribe on the bus, follow heartbeats."""
        self._conn = self.server.attach(self._peer)
        subscribe = {
            "event": "routing/subscribe",
            "routing-id": self.routing_id,
            "subscriptions": ["@services/request", f"{TYPE_PREFIX}*"],
            "name": "bus bridge",
        }
        self.server.receive(self._conn, BusinessObject(subscribe))
        await self._directory.start()
        self._loops = [asyncio.create_task(self._object_loop(), name="bridge-objects")]
        self._loops.append(asyncio.create_task(self._directory_loop(), name="bridge-directory"))
        if self.events is not None:
            # relay: its clients are counted where they are (presence, PROTOCOL.md 5.16)
            self._subscription = await self.client.subscribe(self.events, relay=True)
            self._loops.append(asyncio.create_task(self._event_loop(), name="bridge-events"))

    async def stop(self) -> None:
        """Leave the object server (its clients hear ``routing/disconnect``) and the bus."""
        for task in [*self._loops, *self._tasks]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._tasks, return_exceptions=True)
        await self._directory.stop()
        if self._subscription is not None:
            with contextlib.suppress(BusError):
                await self._subscription.unsubscribe()
        if self._conn is not None:
            self.server.detach(self._conn)
            self._conn = None

    def _inject(self, metadata: dict[str, Any], payload: bytes = b"") -> None:
        if self._conn is not None:
            self.server.receive(self._conn, BusinessObject(metadata, payload))

    # -- Object System -> bus ---------------------------------------------------------------

    async def _object_loop(self) -> None:
        while True:
            obj = await self._peer.queue.get()
            if obj.event == "services/request":
                if self._should_answer(obj):
                    await self._slots.acquire()
                    self._spawn(self._call(obj))
            elif obj.event is None:
                await self._publish(obj)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _should_answer(self, obj: BusinessObject) -> bool:
        """A native group, or a name no Object System service registered."""
        name = obj.metadata.get("name")
        if not isinstance(name, str) or not name:
            return False
        if name in self._registered or name in self.native_groups:
            return True
        holders = self.server.router.services(name)
        return not any(rid != self.routing_id for _, rid in holders)

    async def _call(self, obj: BusinessObject) -> None:
        try:
            await self._call_native(obj)
        finally:
            self._slots.release()

    async def _call_native(self, obj: BusinessObject) -> None:
        name = str(obj.metadata["name"])
        cmd = obj.metadata.get("request", obj.metadata.get("cmd", ""))
        timeout = obj.metadata.get("timeout", self.timeout)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            timeout = self.timeout
        try:
            args = _request_args(obj)
            if not isinstance(cmd, str) or not cmd:
                raise ValueError("services/request to a bus service needs a request (command)")
        except ValueError as exc:
            self._reply(obj, {"error": str(exc), "rcd": 400})
            return
        try:
            stream = self.client.request_stream(
                name, cmd, args, timeout=float(timeout), enc=Encoding.JSON
            )
            async for response in stream:
                self._reply_with(obj, response)
        except NoRespondersError:
            self._reply(obj, {"error": "no responders", "rcd": 503})
        except RequestTimeout:
            self._reply(obj, {"error": f"no answer within {timeout:g} s", "rcd": 504})
        except BusError as exc:
            self._reply(obj, {"error": str(exc), "rcd": exc.status_hint})

    def _reply_with(self, obj: BusinessObject, response: Message) -> None:
        # Flag.END (PROTOCOL.md 2.3): a response that only closes a stream, no data of its own.
        if getattr(response, "end", False) and response.typ == MessageType.ACK.value:
            self._reply(obj, {"end": True})
            return
        fields: dict[str, Any] = {"type": JSON_TYPE}
        if response.typ == MessageType.NAK.value:
            fields["error"] = response.msg or "NAK"
        elif response.msg:
            fields["msg"] = response.msg
        if response.rcd is not None:
            fields["rcd"] = response.rcd
        if response.more:
            fields["more"] = True
        self._reply(obj, fields, to_json(response.payload).encode("utf-8"))

    def _reply(self, obj: BusinessObject, fields: dict[str, Any], payload: bytes = b"") -> None:
        metadata: dict[str, Any] = {"event": "services/reply", "name": obj.metadata.get("name")}
        if obj.id is not None:
            metadata["in-reply-to"] = obj.id
        if obj.route:
            metadata["to"] = obj.route[0]
        self._inject({**metadata, **fields}, payload)

    async def _publish(self, obj: BusinessObject) -> None:
        message = object_to_event(obj)
        if message is None:
            return
        base = (obj.type or "").split(";", 1)[0].strip()
        if message.mid and base == f"{TYPE_PREFIX}{message.grp}":
            # The Object System has it as that bus type already: our publication coming back
            # is not brought over again. One whose ``bus-type`` its content type does not spell
            # whole (a type cut at the dot) comes back as a ``bus/<type>`` object, so clients
            # choosing bus types by content type see it (PROTOCOL.md 7.2).
            self._sent.append(message.mid)
        with contextlib.suppress(BusError):
            await self.client.send(message)

    # -- bus -> Object System ---------------------------------------------------------------

    async def _event_loop(self) -> None:
        assert self._subscription is not None
        async for message in self._subscription:
            group = message.grp or ""
            if message.typ != MessageType.EVT.value or group.startswith("OAM."):
                continue
            if message.mid in self._sent:
                continue  # our own publication coming back
            obj = event_to_object(message)
            self._inject(obj.metadata, obj.payload)

    async def _directory_loop(self) -> None:
        while True:
            self._sync_services()
            seen = self._directory.version

            def changed(directory: ServiceDirectory, seen: int = seen) -> bool:
                return directory.version != seen

            # Expiry of silent instances changes the listing without a new version: poll too.
            with contextlib.suppress(TimeoutError):
                await self._directory.wait_for(changed, timeout=1.0)

    def _sync_services(self) -> None:
        groups = self.native_groups
        for name in sorted(groups - self._registered):
            self._inject({"event": "services/register", "name": name, "origin": "bus"})
        for name in sorted(self._registered - groups):
            self._inject({"event": "services/unregister", "name": name, "origin": "bus"})
        self._registered = groups
