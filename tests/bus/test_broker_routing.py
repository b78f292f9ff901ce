"""The broker's sans-I/O routing tables (``bus/broker/routing.py``, PROTOCOL.md 5.2-5.4)."""

from __future__ import annotations

from collections import Counter

import pytest

from bus.broker.routing import (
    CACHE_BYTES,
    CACHE_ENTRIES,
    MAX_NAME,
    Router,
    check_pattern,
    matches,
)
from bus.errors import ConfigError, LimitError, RefusedError
from tests.docexamples import Example, examples

ROUTING_EXAMPLES = examples("routing")


def test_the_document_has_routing_examples() -> None:
    assert len(ROUTING_EXAMPLES) >= 5


@pytest.mark.parametrize("example", ROUTING_EXAMPLES, ids=lambda e: e.id)
def test_pattern_examples_of_the_document(example: Example) -> None:
    pattern = example.body["pattern"]
    for event_type in example.body["matches"].split():
        assert matches(pattern, event_type), (pattern, event_type)
    for event_type in example.body.get("misses", "").split():
        assert not matches(pattern, event_type), (pattern, event_type)


@pytest.mark.parametrize("example", ROUTING_EXAMPLES, ids=lambda e: e.id)
def test_router_subscribers_agree_with_the_examples(example: Example) -> None:
    router = Router()
    router.add_connection(1, "po", "_INBOX.1")
    router.subscribe(1, example.body["pattern"])
    for event_type in example.body["matches"].split():
        assert router.subscribers(event_type) == [1]
    for event_type in example.body.get("misses", "").split():
        assert router.subscribers(event_type) == []


@pytest.mark.parametrize("bad", ["", "a..b", ".a", "a.>.b", "a*", "se>nsor", "x" * 256])
def test_malformed_patterns_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError):
        check_pattern(bad)


def _router(consumers: int, group: str = "demo") -> Router:
    router = Router()
    for conn in range(1, consumers + 1):
        router.add_connection(conn, f"po{conn}", f"_INBOX.{conn}")
        router.consume(conn, group)
    return router


def test_competing_consumers_share_requests_evenly() -> None:
    router = _router(3)
    counts = Counter(router.choose("demo") for _ in range(300))
    assert counts == {1: 100, 2: 100, 3: 100}


def test_a_leaving_consumer_keeps_the_rotation_fair() -> None:
    router = _router(3)
    router.choose("demo")  # 1
    router.choose("demo")  # 2
    router.leave(1, "demo")
    assert [router.choose("demo") for _ in range(4)] == [3, 2, 3, 2]


def test_no_consumer_means_none_and_all_means_every_consumer() -> None:
    router = _router(2)
    assert router.choose("other") is None
    assert router.consumers("demo") == [1, 2]
    router.remove_connection(1)
    router.remove_connection(2)
    assert router.choose("demo") is None
    assert router.groups() == {}


def test_a_connection_gets_one_copy_however_many_patterns_match() -> None:
    router = Router()
    router.add_connection(1, "a", "_INBOX.a")
    router.add_connection(2, "b", "_INBOX.b")
    for pattern in ("sensor", "sensor.*", "sensor.temp", ">"):
        router.subscribe(1, pattern)
    router.subscribe(2, "pump")
    assert router.subscribers("sensor.temp") == [1]
    assert router.subscribers("pump.on") == [1, 2]
    router.unsubscribe(1, ">")
    assert router.subscribers("pump.on") == [2]


def test_removing_a_connection_forgets_everything_it_held() -> None:
    router = Router()
    router.add_connection(1, "a", "_INBOX.a")
    router.subscribe(1, "sensor.*")
    router.consume(1, "demo")
    assert router.subscribers("sensor.temp") == [1]
    router.remove_connection(1)
    assert router.subscribers("sensor.temp") == []
    assert router.choose("demo") is None
    assert router.choose("_INBOX.a") is None
    assert router.office("a") is None
    router.remove_connection(1)  # idempotent


def test_max_subscriptions_counts_patterns_and_groups_but_not_the_inbox() -> None:
    router = Router(max_subscriptions=2)
    router.add_connection(1, "a", "_INBOX.a")
    router.subscribe(1, "x")
    router.consume(1, "g")
    with pytest.raises(LimitError) as caught:
        router.subscribe(1, "y")
    assert caught.value.limit == "max_subscriptions"
    assert router.subscribe(1, "x") is False  # a repeat is not a new subscription


def test_inboxes_are_private() -> None:
    router = Router()
    router.add_connection(1, "a", "_INBOX.a")
    router.add_connection(2, "b", "_INBOX.b")
    with pytest.raises(RefusedError):
        router.consume(2, "_INBOX.a")
    with pytest.raises(RefusedError):
        router.add_connection(3, "c", "_INBOX.a")
    assert router.consumers("_INBOX.a") == [1]


def test_mail_goes_to_the_newest_link_of_a_post_office() -> None:
    router = Router()
    router.add_connection(1, "pumps", "_INBOX.1")
    router.add_connection(2, "pumps", "_INBOX.2")
    assert router.office("pumps") == 2
    router.remove_connection(2)
    assert router.office("pumps") == 1
    assert router.offices() == {"pumps": 1}


def test_types_nobody_receives_are_remembered_apart_and_bounded() -> None:
    # 1,000 events with made-up types each stayed in the cache (250 MB with 256 KiB types);
    # the "nobody" answers are remembered apart, bounded, and evict none of the real entries.
    router = Router()
    router.add_connection(1, "alice", "_INBOX.a")
    router.subscribe(1, "sensor.*")
    assert router.subscribers("sensor.temp") == [1]
    for n in range(20_000):
        assert router.subscribers(f"junk{n}.x") == []
        entries, size = router.nobody_size()
        assert entries <= CACHE_ENTRIES and size <= CACHE_BYTES + MAX_NAME
    assert router.cache_size() == (1, len("sensor.temp"))  # the hot type is still cached
    assert router.subscribers("sensor.temp") == [1]


def test_a_remembered_nobody_is_forgotten_by_every_subscription_change() -> None:
    router = Router()
    router.add_connection(1, "alice", "_INBOX.a")
    assert router.subscribers("a.b") == [] and router.nobody_size() == (1, 3)
    assert router.subscribers("a.b") == []  # answered from memory
    router.subscribe(1, "a.*")
    assert router.subscribers("a.b") == [1]
    router.unsubscribe(1, "a.*")
    assert router.subscribers("a.b") == []
    router.add_connection(2, "bob", "_INBOX.b")
    router.subscribe(2, "a.b")
    assert router.subscribers("a.b") == [2]
    router.remove_connection(2)
    assert router.subscribers("a.b") == []
    router.subscribe(1, "a")
    assert router.subscribers("a.b") == [1]


def test_the_subscriber_cache_is_bounded_in_entries_and_bytes() -> None:
    router = Router()
    router.add_connection(1, "alice", "_INBOX.a")
    router.subscribe(1, ">")
    for n in range(CACHE_ENTRIES * 2):
        router.subscribers(f"t{n}.x")
        entries, size = router.cache_size()
        assert entries <= CACHE_ENTRIES and size <= CACHE_BYTES + MAX_NAME
    for n in range(CACHE_BYTES // MAX_NAME * 2):  # long names: the byte bound comes first
        router.subscribers(f"{n}.".ljust(MAX_NAME, "x"))
        entries, size = router.cache_size()
        assert size <= CACHE_BYTES + MAX_NAME
    assert router.subscribers("a.b") == [1]  # and it still answers right


def test_the_patterns_and_their_version_tell_a_reader_what_the_bus_wants() -> None:
    """What the MOP listener reads to ask MOP post offices for publications (PROTOCOL.md 11.4)."""
    router = Router()
    router.add_connection(1, "bob", "_INBOX.1")
    router.add_connection(2, "test1", "_INBOX.2")
    start = router.pattern_version
    router.subscribe(1, "sensor.*")
    router.subscribe(2, "sensor.*")
    router.subscribe(2, "pump")
    assert router.patterns() == {"sensor.*": {"bob", "test1"}, "pump": {"test1"}}
    version = router.pattern_version
    assert version > start
    assert not router.subscribe(1, "sensor.*")  # held already: nothing changed
    assert router.pattern_version == version
    router.remove_connection(2)
    assert router.patterns() == {"sensor.*": {"bob"}} and router.pattern_version > version
