"""``busgate frame decode | encode``, run as the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bus.frame.codec import decode, encode
from bus.frame.frame import U8, Array, DataFrame
from bus.frame.jsonmap import to_typed
from tests.docexamples import Example, examples

BUSGATE = Path(sys.executable).parent / "busgate"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUSGATE), "frame", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_decode_prints_every_field_with_name_type_and_value() -> None:
    frame = DataFrame({"CMD": "echo", "n": U8(5), "sub": {"a": Array([True])}})
    result = run("decode", encode(frame).hex())
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == to_typed(frame)
    assert '{"name": "n", "type": "U8", "value": 5}' in result.stdout.splitlines()[2]


def test_decode_reads_stdin_with_spaces_and_encode_reverses_it() -> None:
    frame = DataFrame({"x": -1, "s": "caf\u00e9", "d": 1.5, "b": b"\x00\x01"})
    spaced = encode(frame).hex(" ", 4)
    decoded = run("decode", stdin=spaced + "\n")
    assert decoded.returncode == 0, decoded.stderr
    encoded = run("encode", stdin=decoded.stdout)
    assert encoded.returncode == 0, encoded.stderr
    assert bytes.fromhex(encoded.stdout.strip()) == encode(frame)


def test_encode_accepts_kestrel_json_objects() -> None:
    result = run("encode", '{"a": [1, "x"], "n": null}')
    assert result.returncode == 0, result.stderr
    assert decode(bytes.fromhex(result.stdout)).to_dict() == {"a": [1, "x"], "n": None}


def test_decode_kestrel_and_message_views() -> None:
    assert run("decode", "--kestrel", "016e0505").stdout.strip() == '{"n":5}'
    body = run("decode", "--message", b"hi there".hex())
    assert json.loads(body.stdout)[-1] == {"name": "ENC", "type": "STRING", "value": "STR"}


# A sample of PROTOCOL.md's examples keeps this suite quick; test_codec checks them all.
SAMPLE = [e for e in examples("frame") if e.id in {"array", "nested", "date", "repeated-names"}]


@pytest.mark.parametrize("example", SAMPLE, ids=lambda e: e.id)
def test_document_examples_through_the_tool(example: Example) -> None:
    result = run("decode", example.body["hex"])
    assert json.loads(result.stdout) == json.loads(example.body["fields"])


def _nested_hex(depth: int) -> str:
    raw = b""
    for _ in range(depth):
        raw = b"\x00\x00" + len(raw).to_bytes(4, "big") + raw
    return raw.hex()


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("decode", "xyz"), None, "not hex"),
        (("decode", "0161"), None, "not a data frame: truncated"),
        (("decode", "016112"), None, "unknown field type 18"),
        (("encode", "{not json"), None, "not JSON"),
        (("encode",), '[{"name": "n", "type": "U8", "value": 300}]', "out of range"),
        (("encode",), '[{"name": "n", "type": "NOPE", "value": 1}]', "unknown type"),
        (("encode",), '{"s": "\\u20ac"}', "Latin-1"),
        (("encode",), "42", "expected a list"),
        (("encode",), "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (("encode",), '{"a":' * 3000 + "1" + "}" * 3000, "nested too deeply"),
        (("encode",), '{"a":' * 50 + "1" + "}" * 50, "nested deeper than max_depth"),
        (
            ("encode",),
            '[{"name": "a", "type": "FRAME", "value": ' * 2000 + "[]" + "}]" * 2000,
            "nested too deeply",
        ),
        (("decode", _nested_hex(40)), None, "max_depth"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(
    args: tuple[str, ...], stdin: str | None, message: str
) -> None:
    result = run(*args, stdin=stdin)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("busgate frame: error:")
    assert message in lines[0]
