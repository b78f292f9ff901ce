"""``bus/asyncio/jetstream_stream.py`` without a server: how many replicas the stream gets, and
which JetStream failures are worth trying again (PROTOCOL.md 10.1)."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from bus.asyncio.jetstream_stream import REPLICAS_ENV, Replicas, stream_config, transient
from bus.errors import ConfigError

CLUSTER = {"jetstream": True, "cluster": "c", "connect_urls": ["a:1", "b:1", "c:1"]}


@pytest.mark.parametrize(
    ("url", "info", "env", "expected"),
    [
        ("nats://a", {"jetstream": True}, {}, Replicas(None, False, 1)),  # a server alone
        ("nats://a", CLUSTER, {}, Replicas(None, True, 3)),
        ("nats://a?replicas=1", CLUSTER, {}, Replicas(1, True, 3)),
        ("nats://a", CLUSTER, {REPLICAS_ENV: "5"}, Replicas(5, True, 3)),
        ("nats://a?replicas=3", CLUSTER, {REPLICAS_ENV: "1"}, Replicas(3, True, 3)),  # URL wins
        (
            "nats://a",
            {**CLUSTER, "connect_urls": None},
            {REPLICAS_ENV: " "},
            Replicas(None, True, 1),
        ),
    ],
)
def test_replicas_asked_for_or_by_the_cluster(
    url: str, info: dict[str, object], env: dict[str, str], expected: Replicas
) -> None:
    assert Replicas.of(url, info, env) == expected


def test_the_default_is_three_on_a_cluster_one_alone_else_what_was_asked() -> None:
    assert Replicas(None, True, 3).wanted == 3
    assert Replicas(None, True, 2).wanted == 3  # placement decides: 1 when it cannot place 3
    assert Replicas(None, False, 1).wanted == 1
    assert Replicas(2, False, 1).wanted == 2
    assert stream_config("S", "bus", 3).num_replicas == 3


@pytest.mark.parametrize("value", ["0", "6", "three", "-1"])
def test_a_bad_variable_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=REPLICAS_ENV):
        Replicas.of("nats://a", CLUSTER, {REPLICAS_ENV: value})


def test_no_answer_and_503_are_tried_again_a_refusal_is_not() -> None:
    assert transient(nats.errors.TimeoutError())
    assert transient(nats.js.errors.ServiceUnavailableError(code=503, description="no leader"))
    assert transient(nats.js.errors.BadRequestError(code=400, err_code=10005))  # placement
    assert not transient(nats.js.errors.BadRequestError(code=400, err_code=10065))  # overlap
    assert not transient(nats.js.errors.ServiceUnavailableError(code=503, err_code=10039))
