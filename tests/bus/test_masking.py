"""What busgate shows of a URL (bus/masking.py): everything but the password."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from bus.masking import MASK, mask_url, mask_urls_in

CASES = [
    # (URL, as shown)
    ("bus://127.0.0.1:4000", "bus://127.0.0.1:4000"),
    ("bus://gateway@127.0.0.1:4000", "bus://gateway@127.0.0.1:4000"),  # a name is no secret
    ("bus://gateway:s3cret@127.0.0.1:4000", "bus://gateway:***@127.0.0.1:4000"),
    ("bus+tls://gw:s3cret@broker.example:4000", "bus+tls://gw:***@broker.example:4000"),
    ("gw:s3cret@127.0.0.1:4000", "gw:***@127.0.0.1:4000"),  # --bus without a scheme
    ("bus://gw:p@ss:w0rd@host:4000", "bus://gw:***@host:4000"),  # the last @ ends it
    ("bus://gw:a,b@host:4000", "bus://gw:***@host:4000"),  # one URL: a comma is the password's
    ("bus://gw:%40pw@host:4000", "bus://gw:***@host:4000"),
    ("bus://gw:@host:4000", "bus://gw:***@host:4000"),  # an empty password: its shape hidden too
    ("nats://alice:pw@127.0.0.1:4222?prefix=prod", "nats://alice:***@127.0.0.1:4222?prefix=prod"),
    (
        "nats://alice:pw@a:4222,alice:pw@b:4222,nats://c:4222",
        "nats://alice:***@a:4222,alice:***@b:4222,nats://c:4222",
    ),
    ("nats://token@127.0.0.1:4222", "nats://token@127.0.0.1:4222"),
    ("https://idp.example/jwks.json?x=a@b", "https://idp.example/jwks.json?x=a@b"),
    ("https://u:pw@idp.example/a@b", "https://u:***@idp.example/a@b"),
    ("", ""),
]


def _first(url: str) -> str:
    """The URL, or the first server of a ``nats://`` list."""
    return url.split(",")[0] if url.startswith("nats://") else url


@pytest.mark.parametrize(("url", "shown"), CASES)
def test_the_password_and_nothing_else_is_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    before, after = urlsplit(_first(url)), urlsplit(_first(shown))
    assert (after.hostname, after.port, after.username) == (
        before.hostname,
        before.port,
        before.username,
    )
    if before.password is not None:
        assert after.password == MASK


def test_urls_inside_a_message_are_masked() -> None:
    text = "bad port in bus URL 'bus://gw:s3cret@host:x' (see nats://a:pw@h:4222, bus://h:1)"
    assert mask_urls_in(text) == (
        "bad port in bus URL 'bus://gw:***@host:x' (see nats://a:***@h:4222, bus://h:1)"
    )
    assert mask_urls_in("no URL here: mail me@example.com") == "no URL here: mail me@example.com"
