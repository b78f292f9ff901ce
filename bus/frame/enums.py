"""The numeric codes that travel on our wires, as enums.

Every code here is fixed by a seed (see ``../shared/SEEDS.md`` and ``docs/PROTOCOL.md``):

- :class:`FieldType`: the data frame's 18 field type codes (seed 000, ``DataField.java``).
- :class:`FrameType`: the wire frame type byte (seed 002, DtronixMessageQueue ``MqFrameType``).
- :class:`CommandKind`: the first data byte of a ``Command`` wire frame.
- :class:`CloseReason`: the reason byte of a ``Disconnect`` command.
- :class:`Encoding`: how a whole message travelled (Kestrel's ``ENC`` field).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

__all__ = ["CloseReason", "CommandKind", "Encoding", "FieldType", "FrameType"]


class FieldType(IntEnum):
    """Data frame field type codes (seed 000; byte values of the original Java DataFrame)."""

    FRAME = 0
    UDEF = 1
    BYTEARRAY = 2
    STRING = 3
    S8 = 4
    U8 = 5
    S16 = 6
    U16 = 7
    S32 = 8
    U32 = 9
    S64 = 10
    U64 = 11
    FLOAT = 12
    DOUBLE = 13
    BOOLEAN = 14
    DATE = 15
    URI = 16
    ARRAY = 17


class FrameType(IntEnum):
    """Wire frame type byte (seed 002). ``UNSET`` never travels; 7 (Padding) is not ours."""

    UNSET = 0
    EMPTY = 1
    MORE = 2
    LAST = 3
    EMPTY_LAST = 4
    COMMAND = 5
    PING = 6


class CommandKind(IntEnum):
    """First data byte of a Command frame (seed 002)."""

    DISCONNECT = 0
    MQ_COMMAND = 1
    RPC_COMMAND = 2


class CloseReason(IntEnum):
    """Why a connection was closed: the byte after ``DISCONNECT`` in a Command frame (seed 002)."""

    UNKNOWN = 0
    SERVER_SHUTDOWN = 1
    CLIENT_CLOSING = 2
    SERVER_CLOSING = 3
    APPLICATION_ERROR = 4
    SOCKET_ERROR = 5
    TIMEOUT = 6
    PROTOCOL_ERROR = 7
    INTERNAL_ERROR = 8
    AUTHENTICATION_FAILURE = 9
    AUTHORIZATION_FAILURE = 10
    CONNECTION_REFUSED = 11


class Encoding(StrEnum):
    """Kestrel's ``ENC`` values: how a message travelled, and so how its replies travel."""

    FRAM = "FRAM"
    JSON = "JSON"
    STR = "STR"
    UNKN = "UNKN"
