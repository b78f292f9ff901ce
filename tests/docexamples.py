"""Read the examples of ``docs/PROTOCOL.md`` so tests check the document against the code.

An example is a fenced block whose info string is ``example`` followed by ``key=value`` attributes::

    ```example section=frame id=u8-field
    value: {"n": {"type": "U8", "value": 5}}
    hex:   01 6e 05 05
    ```

Each body line is ``key: text``; a line starting with whitespace continues the previous key.
``hex`` values may hold spaces and line breaks; :meth:`Example.hex` returns the bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROTOCOL_MD = Path(__file__).resolve().parent.parent / "docs" / "PROTOCOL.md"

_BLOCK = re.compile(r"^```example([^\n]*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Example:
    """One example block: its attributes and its ``key: text`` body lines."""

    attrs: dict[str, str]
    body: dict[str, str]

    @property
    def id(self) -> str:
        return self.attrs.get("id", "?")

    def hex(self, key: str = "hex") -> bytes:
        """The bytes written in hex under ``key``."""
        return bytes.fromhex("".join(self.body[key].split()))


def examples(section: str, path: Path = PROTOCOL_MD) -> list[Example]:
    """All examples whose ``section=`` attribute equals ``section``, in document order."""
    found: list[Example] = []
    for match in _BLOCK.finditer(path.read_text(encoding="utf-8")):
        attrs = dict(re.findall(r"(\w[\w-]*)=(\S+)", match.group(1)))
        if attrs.get("section") != section:
            continue
        body: dict[str, str] = {}
        key = None
        for line in match.group(2).splitlines():
            if key is not None and line[:1].isspace():
                body[key] += "\n" + line.strip()
                continue
            if ":" in line:
                key, text = line.split(":", 1)
                key = key.strip()
                body[key] = text.strip()
        found.append(Example(attrs, body))
    return found
