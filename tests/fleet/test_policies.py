"""Routing policies on crafted replicas, loads and prompt sets: who gets what, and why."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from switchyard.fleet.kv_events import KVEventsFormatError, parse_page
from switchyard.fleet.kv_index import KVIndex
from switchyard.fleet.policies import POLICIES, RouteDecision, RouteRequest, make_policy
from switchyard.fleet.policies.cache_aware import CacheAwareConfig, CacheAwarePolicy
from switchyard.fleet.policies.kv_aware import KVAwareConfig, KVAwarePolicy
from switchyard.fleet.policies.least_load import LeastLoadPolicy
from switchyard.fleet.policies.power_of_two import PowerOfTwoConfig, PowerOfTwoPolicy
from switchyard.fleet.policies.session import SessionPolicy
from switchyard.fleet.prefix_tree import PrefixTree
from switchyard.fleet.queued_prefill import QueuedPrefill
from switchyard.fleet.replica import Replica, ReplicaHealth, ReplicaLoad
from switchyard.prefix_hash import prompt_block_hashes


def replicas(count: int) -> list[Replica]:
    return [
        Replica(f"r{i}", f"http://127.0.0.1:{9000 + i}", "m", health=ReplicaHealth.HEALTHY)
        for i in range(count)
    ]


def text(prompt: str, session: str | None = None) -> RouteRequest:
    return RouteRequest(model="m", text=prompt, session=session)


def route(policy: object, request: RouteRequest, candidates: list[Replica]) -> RouteDecision:
    """choose + on_routed, as the gateway does for a request that was sent."""
    decision = policy.choose(request, candidates)  # type: ignore[attr-defined]
    policy.on_routed(request, decision)  # type: ignore[attr-defined]
    return decision


# ------------------------------------------------------------------- registry
def test_every_policy_is_registered_by_name_and_options_reach_its_config() -> None:
    assert set(POLICIES) == {
        "round_robin",
        "least_load",
        "power_of_two",
        "session",
        "cache_aware",
        "kv_aware",
    }
    for name in POLICIES:
        assert make_policy(name).name == name
    policy = make_policy("cache_aware", {"cache_threshold": 0.7, "balance_abs_threshold": 2})
    assert isinstance(policy, CacheAwarePolicy)
    assert policy.config == CacheAwareConfig(cache_threshold=0.7, balance_abs_threshold=2)
    with pytest.raises(ValueError, match="choose one of"):
        make_policy("fastest")
    with pytest.raises(ValueError, match=r"no option bogus; its options: .*cache_threshold"):
        make_policy("cache_aware", {"bogus": 1})
    with pytest.raises(ValueError, match="takes no options"):
        make_policy("least_load", {"seed": 1})
    with pytest.raises(ValueError, match="cache_threshold"):
        make_policy("cache_aware", {"cache_threshold": 2})


# ----------------------------------------------------------------- least_load
def test_least_load_counts_in_flight_scraped_waiting_and_kv_usage() -> None:
    pool = replicas(3)
    pool[0].in_flight, pool[1].in_flight, pool[2].in_flight = 2, 0, 1
    pool[1].load = ReplicaLoad(num_waiting=3)  # 3 queued there by other clients: busier than r2
    policy = LeastLoadPolicy()
    assert policy.choose(text("x"), pool) == RouteDecision(pool[2], "least_load")
    pool[1].load = ReplicaLoad(num_waiting=0, kv_cache_usage=0.9)
    pool[0].in_flight = pool[2].in_flight = 0
    # r1's nearly full cache tips it behind the two otherwise idle replicas, which take turns.
    fresh = LeastLoadPolicy()
    assert [fresh.choose(text("x"), pool).replica.name for _ in range(4)] == ["r0", "r2", "r0", "r2"]


def test_least_load_takes_turns_between_equals() -> None:
    pool = replicas(3)
    policy = LeastLoadPolicy()
    assert Counter(policy.choose(text("x"), pool).replica.name for _ in range(9)) == {
        "r0": 3,
        "r1": 3,
        "r2": 3,
    }


# --------------------------------------------------------------- power_of_two
def test_power_of_two_is_reproducible_with_a_seed_and_takes_the_less_loaded_of_two() -> None:
    pool = replicas(5)
    for index, replica in enumerate(pool):
        replica.in_flight = index
    first, second = PowerOfTwoPolicy(PowerOfTwoConfig(seed=7)), PowerOfTwoPolicy(PowerOfTwoConfig(seed=7))
    picks = [first.choose(text("x"), pool).replica.name for _ in range(50)]
    assert picks == [second.choose(text("x"), pool).replica.name for _ in range(50)]
    # The busiest replica loses every draw it is in; the idlest wins every draw it is in.
    assert "r4" not in picks and "r0" in picks
    pair = replicas(2)
    pair[0].in_flight = 3
    policy = PowerOfTwoPolicy(PowerOfTwoConfig(seed=1))
    assert {policy.choose(text("x"), pair).replica.name for _ in range(10)} == {"r1"}
    assert policy.choose(text("x"), pair[:1]) == RouteDecision(pair[0], "power_of_two")


def test_power_of_two_spreads_over_equal_replicas() -> None:
    pool = replicas(4)
    policy = PowerOfTwoPolicy(PowerOfTwoConfig(seed=3))
    counts = Counter(policy.choose(text("x"), pool).replica.name for _ in range(400))
    assert set(counts) == {"r0", "r1", "r2", "r3"} and min(counts.values()) > 50


# -------------------------------------------------------------------- session
def test_session_sticks_and_spreads() -> None:
    pool = replicas(4)
    policy = SessionPolicy()
    homes = {f"user-{n}": policy.choose(text("x", f"user-{n}"), pool).replica for n in range(200)}
    loads = random.Random(0)
    for _ in range(3):
        for session, home in homes.items():
            pool[loads.randrange(4)].in_flight += 1  # load does not move a session
            assert policy.choose(text("y", session), pool) == RouteDecision(home, "session")
    assert min(Counter(replica.name for replica in homes.values()).values()) > 25


def test_session_moves_only_the_leaving_replicas_sessions() -> None:
    pool = replicas(4)
    policy = SessionPolicy()
    before = {f"s{n}": policy.choose(text("x", f"s{n}"), pool).replica for n in range(300)}
    gone = pool[2]
    remaining = [replica for replica in pool if replica is not gone]
    after = {session: policy.choose(text("x", session), remaining).replica for session in before}
    moved = {session for session in before if before[session] is not after[session]}
    assert moved == {session for session, home in before.items() if home is gone}
    assert moved  # the leaving replica had sessions, and they found new homes
    # It comes back (a restart keeps the name): its sessions return to it.
    assert {s: policy.choose(text("x", s), pool).replica for s in before} == before


def test_session_retry_goes_to_the_runner_up_and_no_session_means_least_load() -> None:
    pool = replicas(3)
    policy = SessionPolicy()
    home = policy.choose(text("x", "alice"), pool).replica
    others = [replica for replica in pool if replica is not home]
    runner_up = policy.choose(text("x", "alice"), others).replica
    assert runner_up is not home and policy.choose(text("x", "alice"), others).replica is runner_up
    pool[0].in_flight = pool[1].in_flight = 1
    assert policy.choose(text("x"), pool) == RouteDecision(pool[2], "least_load")


# ---------------------------------------------------------------- prefix tree
def test_prefix_tree_matches_the_longest_shared_prefix() -> None:
    tree = PrefixTree()
    tree.insert("hello world")
    tree.insert("hello there")
    tree.insert("help")
    assert tree.match("hello world, again") == len("hello world")
    assert tree.match("hello thermos") == len("hello ther")
    assert tree.match("helium") == 3
    assert tree.match("") == 0 and tree.match("xyz") == 0
    assert tree.num_chars == len("hello world") + len("there") + len("p")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="abc", max_size=12), max_size=20), st.text(alphabet="abc", max_size=14))
def test_prefix_tree_agrees_with_brute_force(texts: list[str], query: str) -> None:
    tree = PrefixTree()
    for inserted in texts:
        tree.insert(inserted)

    def shared(a: str, b: str) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    assert tree.match(query) == max((shared(query, t) for t in texts), default=0)


def test_prefix_tree_stays_bounded_and_forgets_the_least_recently_used() -> None:
    tree = PrefixTree(max_chars=100, evict_to=0.9)
    old, fresh = "a" * 40, "b" * 40
    tree.insert(old)
    tree.insert(fresh)
    tree.insert(old + "x")  # uses `old` again: now `fresh` is the least recently used
    tree.insert("c" * 30)  # 111 chars: evict down to 90, least recently used first
    assert tree.num_chars <= 90
    assert tree.match(fresh) == 0 and tree.match(old + "x") == 41 and tree.match("c" * 30) == 30
    for n in range(200):
        tree.insert(f"{n:03d}" + "z" * 20)
        assert tree.num_chars <= 100


# ---------------------------------------------------------------- cache_aware
SYSTEM_A = "You are a careful assistant for a railway company. Answer questions about timetables politely. "
SYSTEM_B = "Tu es un poète. Réponds toujours en alexandrins, avec des rimes riches et beaucoup d'images. "


def test_cache_aware_sends_two_prompt_families_to_two_replicas_and_repeats_stick() -> None:
    pool = replicas(2)
    policy = CacheAwarePolicy()
    first_a = route(policy, text(SYSTEM_A + "When is the first train?"), pool)
    first_b = route(policy, text(SYSTEM_B + "Le matin."), pool)
    assert (first_a.reason, first_b.reason) == ("cache_miss", "cache_miss")
    assert first_a.replica is not first_b.replica  # the second miss goes to the emptier tree
    for n in range(5):
        a = route(policy, text(SYSTEM_A + f"Question {n}?"), pool)
        b = route(policy, text(SYSTEM_B + f"Vers {n}."), pool)
        assert (a.replica, a.reason) == (first_a.replica, "cache_hit")
        assert (b.replica, b.reason) == (first_b.replica, "cache_hit")


def test_cache_aware_balances_an_imbalanced_pool_and_needs_enough_of_a_match() -> None:
    pool = replicas(2)
    policy = CacheAwarePolicy(CacheAwareConfig(balance_abs_threshold=4, balance_rel_threshold=1.5))
    home = route(policy, text(SYSTEM_A + "one"), pool).replica
    other = pool[1] if home is pool[0] else pool[0]
    home.in_flight = 4  # 4 - 0 is not over 4: still balanced enough
    assert policy.choose(text(SYSTEM_A + "two"), pool) == RouteDecision(home, "cache_hit")
    home.in_flight = 5
    assert policy.choose(text(SYSTEM_A + "two"), pool) == RouteDecision(other, "balance")
    home.in_flight = 0
    # Sharing only "You are a " (10 of ~40 chars) is under the 0.3 threshold: a miss, to the smaller tree.
    assert policy.choose(text("You are a pirate. Say arr, please now."), pool) == RouteDecision(
        other, "cache_miss"
    )


def test_cache_aware_forgets_a_removed_replica() -> None:
    pool = replicas(2)
    policy = CacheAwarePolicy()
    home = route(policy, text(SYSTEM_A), pool).replica
    policy.on_replica_removed(home)
    pool[0].in_flight = 1 if home is pool[1] else 0
    pool[1].in_flight = 1 if home is pool[0] else 0
    assert policy.choose(text(SYSTEM_A), pool) == RouteDecision(home, "cache_miss")


# ------------------------------------------------------------------- kv_aware
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


BS = 4


def tokens(request_id: int, length: int, family: int) -> tuple[int, ...]:
    """`length` tokens: 24 of the family's prefix, then the request's own."""
    rng = random.Random(family)
    prefix = [rng.randrange(3, 300) for _ in range(24)]
    own = random.Random(1000 + request_id)
    return tuple(prefix + [own.randrange(3, 300) for _ in range(length - 24)])


def kv_request(token_ids: tuple[int, ...]) -> RouteRequest:
    return RouteRequest(model="m", text="", token_ids=token_ids)


def kv_policy(clock: Clock, **options: float) -> KVAwarePolicy:
    config = KVAwareConfig(default_block_size=BS, **options)  # type: ignore[arg-type]
    return KVAwarePolicy(config, KVIndex(config.pending_ttl, clock))


def test_kv_aware_routes_to_the_replica_holding_the_prefix() -> None:
    pool = replicas(3)
    policy = kv_policy(Clock())
    family_a, family_b = tokens(0, 40, family=1), tokens(1, 40, family=2)
    policy.index.reset(pool[1], BS, prompt_block_hashes(family_a[:24], BS))
    policy.index.reset(pool[2], BS, prompt_block_hashes(family_b, BS))
    follow_a = tokens(2, 33, family=1)
    assert policy.choose(kv_request(follow_a), pool) == RouteDecision(pool[1], "cache_hit", 24)
    # A prompt of exactly 40 tokens with all 10 blocks cached: the last token is always computed.
    assert policy.choose(kv_request(family_b), pool) == RouteDecision(pool[2], "cache_hit", 36)
    assert policy.choose(kv_request(tokens(3, 30, family=3)), pool).reason == "cache_miss"
    policy.index.evicted(pool[1], prompt_block_hashes(family_a, BS)[3])  # the prefix's 4th block is gone
    assert policy.choose(kv_request(follow_a), pool) == RouteDecision(pool[1], "cache_hit", 12)


def test_kv_aware_weighs_cached_tokens_against_load() -> None:
    pool = replicas(2)
    policy = kv_policy(Clock(), request_cost_tokens=10)
    prompt = tokens(0, 40, family=1)
    policy.index.reset(pool[0], BS, prompt_block_hashes(prompt[:24], BS))
    # cost r0 = (40 - 24) + 10 x load; cost r1 = 40 + 10 x load: r0 wins while its extra load is under 2.4.
    pool[0].in_flight = 2
    assert policy.choose(kv_request(prompt), pool).replica is pool[0]
    pool[0].in_flight = 3
    assert policy.choose(kv_request(prompt), pool) == RouteDecision(pool[1], "cache_miss", 0)
    pool[1].in_flight = 1
    assert policy.choose(kv_request(prompt), pool).replica is pool[0]


def test_kv_aware_spreads_new_prefixes_by_the_prefill_they_bring() -> None:
    """A request count cannot tell a replica prefilling a long new prompt from one streaming short cached
    turns; the prefill queued there (counted by the gateway until each request's first token) can."""
    pool = replicas(2)
    policy = kv_policy(Clock())  # request_cost_tokens 128, queued_prefill_weight 0.5
    first = tokens(0, 400, family=1)
    decision = route(policy, kv_request(first), pool)
    assert decision.replica is pool[0]
    prefill = QueuedPrefill.of(kv_request(first), decision)
    assert pool[0].queued_prefill_tokens == 400
    pool[0].in_flight, pool[1].in_flight = 1, 2  # r0 prefills 400 new tokens; r1 streams two cached turns
    # r0: 400 + 0.5 x 400 queued + 128 = 728; r1: 400 + 256 = 656 (counting requests alone, r0 would win).
    second = tokens(1, 400, family=2)
    assert policy.choose(kv_request(second), pool) == RouteDecision(pool[1], "cache_miss", 0)
    prefill.settle()  # the first request's first token came back: its prefill is done
    prefill.settle()  # counted off once
    assert pool[0].queued_prefill_tokens == 0
    assert policy.choose(kv_request(second), pool).replica is pool[0]
    # The queued prefill this request shares is not work ahead of it: a burst of one prefix still lands together.
    pool[0].in_flight = pool[1].in_flight = 0
    unconfirmed = kv_policy(Clock(), queued_prefill_weight=1.0)
    burst = QueuedPrefill.of(kv_request(first), route(unconfirmed, kv_request(first), pool))
    assert pool[0].queued_prefill_tokens == 400
    # r0: 4 + (400 - 396 shared); r1: 400.
    assert unconfirmed.choose(kv_request(first), pool) == RouteDecision(pool[0], "cache_hit", 396)
    burst.settle()
    with pytest.raises(ValueError, match="queued_prefill_weight"):
        KVAwareConfig(queued_prefill_weight=-1)


def test_kv_aware_balance_guard_and_fallback_without_tokens() -> None:
    pool = replicas(2)
    policy = kv_policy(Clock(), balance_abs_threshold=3, balance_rel_threshold=2, request_cost_tokens=0)
    prompt = tokens(0, 40, family=1)
    policy.index.reset(pool[0], BS, prompt_block_hashes(prompt, BS))
    pool[0].in_flight = 4
    assert policy.choose(kv_request(prompt), pool) == RouteDecision(pool[1], "balance", 0)
    pool[1].in_flight = 3  # 4 - 3 is balanced again: the cache decides (request_cost_tokens 0)
    assert policy.choose(kv_request(prompt), pool) == RouteDecision(pool[0], "cache_hit", 36)
    assert policy.choose(text("no tokens"), pool) == RouteDecision(pool[1], "least_load")


def test_kv_aware_burst_lands_together_before_events_and_pending_entries_lapse() -> None:
    clock = Clock()
    pool = replicas(3)
    policy = kv_policy(clock, pending_ttl=5.0)
    burst = [tokens(n, 36, family=7) for n in range(4)]
    first = route(policy, kv_request(burst[0]), pool)
    assert first.reason == "cache_miss"
    for prompt in burst[1:]:
        decision = route(policy, kv_request(prompt), pool)
        assert (decision.replica, decision.reason, decision.predicted_cached_tokens) == (
            first.replica,
            "cache_hit",
            24,
        )
    clock.now += 6  # no event confirmed them: the pending blocks lapse
    assert policy.choose(kv_request(tokens(9, 36, family=7)), pool).reason == "cache_miss"
    route(policy, kv_request(burst[0]), [first.replica])
    for block_hash in prompt_block_hashes(burst[0], BS)[:6]:
        policy.index.stored(first.replica, block_hash)  # confirmed by the replica's events
    clock.now += 60
    assert policy.choose(kv_request(tokens(9, 36, family=7)), pool) == RouteDecision(
        first.replica, "cache_hit", 24
    )


def test_kv_aware_forgets_a_restarted_replica() -> None:
    pool = replicas(2)
    policy = kv_policy(Clock())
    prompt = tokens(0, 40, family=1)
    policy.index.reset(pool[1], BS, prompt_block_hashes(prompt, BS))
    assert policy.choose(kv_request(prompt), pool).replica is pool[1]
    policy.on_replica_removed(pool[1])
    assert policy.choose(kv_request(prompt), pool).reason == "cache_miss"


def test_kv_events_pages_are_checked() -> None:
    page = parse_page(
        {
            "epoch": "e",
            "block_size": 16,
            "events": [[1, "stored", 5]],
            "next": 1,
            "reset": False,
            "blocks": [],
        }
    )
    assert page.events == ((1, "stored", 5),) and page.block_size == 16
    for bad in (
        [],
        {"epoch": "e"},
        {"epoch": "e", "block_size": 0, "next": 0, "reset": True},
        {"epoch": "e", "block_size": 16, "events": [[1, "moved", 5]], "next": 1, "reset": False},
        {"epoch": "e", "block_size": 16, "events": [[1, "stored"]], "next": 1, "reset": False},
    ):
        with pytest.raises(KVEventsFormatError):
            parse_page(bad)
