"""Which services are alive on the bus, learnt from their heartbeats (sans-I/O core).

Seed 000 says a service announces itself with heartbeats on the ``OAM.SERVICE`` topic and that
"by correlating the instance identifiers, it is possible to determine how many instances are
servicing each channel". This module holds both halves of that:

- the heartbeat payload (:class:`Heartbeat`, :func:`heartbeat_payload`, :func:`parse_heartbeat`),
  written by :class:`bus.asyncio.service.Service` and read here;
- :class:`ServiceTable`, the sans-I/O core: heartbeats and the current time go in, directory
  events (:class:`InstanceJoined`, :class:`InstanceLeft`) and listings come out. No clock inside;
- :class:`bus.asyncio.directory.ServiceDirectory`, the thin asyncio driver: it subscribes to
  ``OAM.SERVICE`` through a client, feeds the table with the wall-clock time, expires silent
  instances.

Heartbeat payload (the ``PLD`` of a message with ``TYP=HBT`` published on ``OAM.SERVICE``; the
directory also reads ``OAM.SERVICES``, where Kestrel's code publishes)::

    Event       "Heartbeat" | "Terminating"   (Kestrel's exit message uses Event="Terminating")
    InstanceId  text, unique per running instance
    GroupName   the group the instance consumes (Kestrel's field name)
    Status      "Running" | "Draining" | "Terminating"
    Load        frame: InFlight, Queued, Handled, Failed (counts since start)
    IntervalMS  the instance's heartbeat interval in milliseconds (absent: 60000, Kestrel's)
    Commands    the CMD names the instance answers
    Host        host name of the instance
    Schemas     optional: one JSON text (or, from a JSON service, the object itself), CMD name ->
                {"args": JSON Schema, "answer": JSON Schema, "summary": text}
                (bus.discovery.schemas)

An instance is dropped when it says ``Terminating`` or after ``missed_intervals`` (default 3) of
its own intervals without a heartbeat. A directory can ask every service for a heartbeat at once
by publishing on ``OAM.PROBE`` (see :data:`PROBE_TYPE`), so a fresh listing does not have to wait a
whole interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from bus.discovery.schemas import CommandSchema, decode_schemas, encode_schemas
from bus.errors import DecodeError

__all__ = [
    "HEARTBEAT_TYPE",
    "KESTREL_HEARTBEAT_TYPE",
    "KESTREL_INTERVAL_MS",
    "PROBE_TYPE",
    "DirectoryEvent",
    "Heartbeat",
    "HeartbeatEvent",
    "InstanceInfo",
    "InstanceJoined",
    "InstanceLeft",
    "Load",
    "ServiceInfo",
    "ServiceStatus",
    "ServiceTable",
    "heartbeat_payload",
    "parse_heartbeat",
    "system_event_allowed",
]

#: The topic heartbeats are published on (seed 000's README; its code says ``OAM.SERVICES``).
HEARTBEAT_TYPE = "OAM.SERVICE"
#: Kestrel's code publishes on this name instead; the directory listens to both.
KESTREL_HEARTBEAT_TYPE = "OAM.SERVICES"
#: A publication on this topic makes every running service send a heartbeat at once.
PROBE_TYPE = "OAM.PROBE"
#: Who subscribes to what (bus.presence.PRESENCE_TYPE; not imported: services stay below it).
PRESENCE_TYPE: Final = "OAM.PRESENCE"


def system_event_allowed(typ: str | None, type_: str) -> bool:
    """Whether a client may send an event of the system's ``OAM.*`` / ``_INBOX.*`` types.

    Only what the system itself sends: heartbeats (``TYP=HBT``) on ``OAM.SERVICE`` and
    Kestrel's ``OAM.SERVICES``, presence (``TYP=HBT`` on ``OAM.PRESENCE``), and directory
    probes (``TYP=EVT``) on ``OAM.PROBE``. Anything
    else there (an EVT made to look like a heartbeat, a ``Terminating`` for someone else's
    instance sent as an event) is refused by the broker (PROTOCOL.md 5.3).
    """
    if typ == "HBT":  # and presence, which travels as heartbeats do (PROTOCOL.md 5.16)
        return type_ in (HEARTBEAT_TYPE, KESTREL_HEARTBEAT_TYPE, PRESENCE_TYPE)
    return typ == "EVT" and type_ == PROBE_TYPE


#: The interval of a heartbeat that names none (Kestrel's ``AbstractService``: 60000 ms).
KESTREL_INTERVAL_MS: Final = 60_000


class HeartbeatEvent(StrEnum):
    """The ``Event`` field of a heartbeat payload."""

    HEARTBEAT = "Heartbeat"
    TERMINATING = "Terminating"


class ServiceStatus(StrEnum):
    """The ``Status`` an instance reports."""

    RUNNING = "Running"
    DRAINING = "Draining"
    TERMINATING = "Terminating"


@dataclass(frozen=True)
class Load:
    """How busy an instance is: requests running, waiting for a slot, done and failed."""

    in_flight: int = 0
    queued: int = 0
    handled: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat, as a service sends it."""

    instance_id: str
    group: str
    event: HeartbeatEvent = HeartbeatEvent.HEARTBEAT
    status: str = ServiceStatus.RUNNING
    load: Load = field(default_factory=Load)
    interval: float = 5.0
    commands: tuple[str, ...] = ()
    host: str = ""
    schemas: Mapping[str, CommandSchema] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class InstanceInfo:
    """What the directory knows of one live instance.

    ``office`` is the post office its heartbeats came from (the part of ``SRC`` before the
    first ``.``, which the broker stamps; ``""`` when they named none): an instance is the
    pair ``(office, InstanceId)``, so a heartbeat can describe and end only the instances of
    the post office that sends it (PROTOCOL.md 5.10).
    """

    heartbeat: Heartbeat
    first_seen: float
    last_seen: float
    office: str = ""

    @property
    def instance_id(self) -> str:
        """The instance's id."""
        return self.heartbeat.instance_id

    @property
    def group(self) -> str:
        """The group the instance consumes."""
        return self.heartbeat.group


@dataclass(frozen=True)
class ServiceInfo:
    """One group and its live instances, summed up."""

    group: str
    instances: int
    status: str
    last_seen: float
    load: Load
    commands: tuple[str, ...]
    schemas: Mapping[str, CommandSchema] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class InstanceJoined:
    """A heartbeat arrived from an instance the directory did not know."""

    instance: InstanceInfo


@dataclass(frozen=True)
class InstanceLeft:
    """An instance left: it said ``Terminating`` (reason ``"terminating"``) or fell silent
    (reason ``"expired"``)."""

    instance: InstanceInfo
    reason: str


DirectoryEvent = InstanceJoined | InstanceLeft


def heartbeat_payload(hb: Heartbeat) -> dict[str, Any]:
    """Build the ``PLD`` of a heartbeat message.

    Args:
        hb: the heartbeat to send.

    Returns:
        A dict ready for ``DataFrame.from_dict`` (field names as in the module docstring).
    """
    return {
        "Event": str(hb.event),
        "InstanceId": hb.instance_id,
        "GroupName": hb.group,
        "Status": str(hb.status),
        "Load": {
            "InFlight": hb.load.in_flight,
            "Queued": hb.load.queued,
            "Handled": hb.load.handled,
            "Failed": hb.load.failed,
        },
        "IntervalMS": round(hb.interval * 1000),
        "Commands": list(hb.commands),
        "Host": hb.host,
        # Not on the last one: the directory forgets the instance at once anyway.
        **(
            {"Schemas": encode_schemas(hb.schemas)}
            if hb.schemas and hb.event is not HeartbeatEvent.TERMINATING
            else {}
        ),
    }


def parse_heartbeat(payload: Mapping[str, Any]) -> Heartbeat:
    """Read a heartbeat payload (as ``DataFrame.to_dict()`` gives it).

    Kestrel's own heartbeats (on ``OAM.SERVICES``) are understood too: its status frame has no
    ``IntervalMS`` (Kestrel beats every :data:`KESTREL_INTERVAL_MS`), names the host in
    ``DnsName``/``IpAddress`` and the state in its ``State`` frame (``Running``, ``Started``,
    ``Exiting``); its exit message carries only ``Event`` and ``InstanceId``.

    Args:
        payload: the heartbeat's ``PLD`` as a mapping.

    Returns:
        The heartbeat.

    Raises:
        DecodeError: ``InstanceId`` is missing or a field has the wrong type.
    """
    instance_id = payload.get("InstanceId")
    if not isinstance(instance_id, str) or not instance_id:
        raise DecodeError("heartbeat without InstanceId")
    event = _text(payload, "Event", HeartbeatEvent.HEARTBEAT)
    terminating = event == HeartbeatEvent.TERMINATING
    load = payload.get("Load")
    status = ServiceStatus.TERMINATING if terminating else _kestrel_status(payload)
    return Heartbeat(
        instance_id=instance_id,
        group=_text(payload, "GroupName", ""),
        event=HeartbeatEvent.TERMINATING if terminating else HeartbeatEvent.HEARTBEAT,
        status=_text(payload, "Status", status),
        load=_parse_load(load) if isinstance(load, Mapping) else Load(),
        interval=_number(payload, "IntervalMS", KESTREL_INTERVAL_MS) / 1000,
        commands=_commands(payload.get("Commands")),
        host=_text(payload, "Host", _kestrel_host(payload)),
        schemas=_schemas(payload.get("Schemas")),
    )


def _schemas(value: object) -> Mapping[str, CommandSchema]:
    # A service whose schemas cannot be read still answers: it is listed, its commands
    # unchecked (the gateway forwards their arguments as they come).
    try:
        return decode_schemas(value)
    except DecodeError:
        return {}


#: Kestrel's loader states (``State`` frame of its status) and what the directory calls them.
_KESTREL_STATES: Final = {
    "Running": ServiceStatus.RUNNING,
    "Started": ServiceStatus.RUNNING,
    "Exiting": ServiceStatus.DRAINING,
}


def _kestrel_status(payload: Mapping[str, Any]) -> str:
    state = payload.get("State")
    if isinstance(state, Mapping):
        for value in state.values():
            if isinstance(value, str) and value in _KESTREL_STATES:
                return str(_KESTREL_STATES[value])
    return str(ServiceStatus.RUNNING)


def _kestrel_host(payload: Mapping[str, Any]) -> str:
    for name in ("DnsName", "IpAddress"):
        value = payload.get(name)
        if isinstance(value, str) and value and value != "unknown":
            return value
    return ""


def _text(payload: Mapping[str, Any], name: str, default: str) -> str:
    value = payload.get(name, default)
    if not isinstance(value, str):
        raise DecodeError(f"heartbeat field {name} is not text")
    return value


def _number(payload: Mapping[str, Any], name: str, default: int) -> float:
    value = payload.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise DecodeError(f"heartbeat field {name} is not a non-negative number")
    return float(value)


def _parse_load(load: Mapping[str, Any]) -> Load:
    return Load(
        in_flight=int(_number(load, "InFlight", 0)),
        queued=int(_number(load, "Queued", 0)),
        handled=int(_number(load, "Handled", 0)),
        failed=int(_number(load, "Failed", 0)),
    )


def _commands(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(name for name in value.split(",") if name)
    if isinstance(value, list | tuple):
        return tuple(str(name) for name in value)
    if isinstance(value, Mapping):  # a frame of unnamed fields may come back as a mapping
        return tuple(str(name) for name in value.values())
    raise DecodeError("heartbeat field Commands is not a list")


class ServiceTable:
    """The sans-I/O directory: heartbeats and times in, events and listings out.

    Args:
        missed_intervals: an instance silent for this many of its own heartbeat intervals is
            dropped (default 3: one lost heartbeat is not enough to forget a service).
    """

    def __init__(self, missed_intervals: float = 3) -> None:
        self.missed_intervals = missed_intervals
        self._instances: dict[tuple[str, str], InstanceInfo] = {}  # by (office, InstanceId)

    def observe(self, hb: Heartbeat, now: float, office: str = "") -> list[DirectoryEvent]:
        """Take one heartbeat.

        Args:
            hb: the heartbeat.
            now: the current time in seconds (any clock, the same for every call).
            office: the post office that sent it (``SRC`` up to its first ``.``; ``""``: none
                named). Only that office's instance of this id is described or ended: another
                office's heartbeat with the same ``InstanceId`` is another instance.

        Returns:
            ``[InstanceJoined]`` for a new instance, ``[InstanceLeft]`` on ``Terminating`` of a
            known instance, else ``[]``.
        """
        key = (office, hb.instance_id)
        known = self._instances.get(key)
        if hb.event == HeartbeatEvent.TERMINATING:
            if known is None:
                return []
            del self._instances[key]
            return [InstanceLeft(known, "terminating")]
        if known is not None and not hb.group:  # Kestrel-style beat without a group: keep ours
            hb = _with_group(hb, known.group)
        first_seen = known.first_seen if known is not None else now
        info = InstanceInfo(heartbeat=hb, first_seen=first_seen, last_seen=now, office=office)
        self._instances[key] = info
        return [] if known is not None else [InstanceJoined(info)]

    def expire(self, now: float) -> list[DirectoryEvent]:
        """Drop every instance silent for ``missed_intervals`` of its intervals.

        Args:
            now: the current time, on the clock given to :meth:`observe`.

        Returns:
            One ``InstanceLeft(reason="expired")`` per dropped instance.
        """
        gone = [info for info in self._instances.values() if self._deadline(info) <= now]
        for info in gone:
            del self._instances[(info.office, info.instance_id)]
        return [InstanceLeft(info, "expired") for info in gone]

    def next_deadline(self) -> float | None:
        """The time at which the next instance expires if it stays silent (``None``: empty)."""
        return min((self._deadline(info) for info in self._instances.values()), default=None)

    def instances(self, group: str | None = None) -> list[InstanceInfo]:
        """The live instances (of one group, or all), sorted by group then instance id."""
        found = [i for i in self._instances.values() if group is None or i.group == group]
        return sorted(found, key=lambda i: (i.group, i.instance_id, i.office))

    def services(self) -> list[ServiceInfo]:
        """One :class:`ServiceInfo` per group with live instances, sorted by group."""
        groups: dict[str, list[InstanceInfo]] = {}
        for info in self.instances():
            groups.setdefault(info.group, []).append(info)
        return [_summarize(group, infos) for group, infos in groups.items()]

    def command_schema(self, group: str, cmd: str) -> CommandSchema | None:
        """What ``cmd`` of ``group`` declares, from its newest instance that declares it
        (during a rolling deploy the new version's schema wins), or None."""
        found: InstanceInfo | None = None
        for info in self._instances.values():
            if info.group == group and cmd in info.heartbeat.schemas:
                if found is None or info.first_seen > found.first_seen:
                    found = info
        return None if found is None else found.heartbeat.schemas[cmd]

    def _deadline(self, info: InstanceInfo) -> float:
        return info.last_seen + self.missed_intervals * info.heartbeat.interval


def _with_group(hb: Heartbeat, group: str) -> Heartbeat:
    return Heartbeat(
        hb.instance_id,
        group,
        hb.event,
        hb.status,
        hb.load,
        hb.interval,
        hb.commands,
        hb.host,
        hb.schemas,
    )


def _summarize(group: str, infos: list[InstanceInfo]) -> ServiceInfo:
    statuses = {info.heartbeat.status for info in infos}
    # A group answers while any instance runs; otherwise show what its instances say.
    status = "Running" if "Running" in statuses else "/".join(sorted(statuses))
    commands = sorted({name for info in infos for name in info.heartbeat.commands})
    loads = [info.heartbeat.load for info in infos]
    schemas: dict[str, CommandSchema] = {}
    for info in sorted(infos, key=lambda i: i.first_seen):  # the newest instance's win
        schemas.update(info.heartbeat.schemas)
    return ServiceInfo(
        group=group,
        instances=len(infos),
        status=status,
        last_seen=max(info.last_seen for info in infos),
        load=Load(
            in_flight=sum(load.in_flight for load in loads),
            queued=sum(load.queued for load in loads),
            handled=sum(load.handled for load in loads),
            failed=sum(load.failed for load in loads),
        ),
        commands=tuple(commands),
        schemas=schemas,
    )
