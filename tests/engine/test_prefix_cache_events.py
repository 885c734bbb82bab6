"""Prefix cache events: every stored and evicted block is logged by its chained hash, and a reader that replays
the log (taking snapshots when told to) always knows exactly which blocks are cached."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from switchyard.engine.block_manager import BlockManager
from switchyard.engine.kv_event_log import KVEventBatch, KVEventKind, KVEventLog
from switchyard.engine.prefix_cache import PrefixCache, PrefixNode
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import Request, RequestTiming, Sequence
from switchyard.prefix_hash import block_hash, prompt_block_hashes


def _sequence(seq_id: int, tokens: list[int]) -> Sequence:
    request = Request(
        request_id=str(seq_id),
        prompt_token_ids=list(tokens),
        params=SamplingParams(),
        max_tokens=16,
        eos_token_ids=(),
        timing=RequestTiming(arrival=0.0),
    )
    return Sequence(seq_id=seq_id, request=request, sample_index=0, token_ids=list(tokens))


def _admit(manager: BlockManager, seq: Sequence) -> bool:
    """Prefill seq whole (after its cached prefix) and cache its full blocks; False if blocks ran out."""
    manager.match_prefix(seq)
    remaining = seq.num_tokens - seq.num_computed_tokens
    if manager.allocate_slots(seq, remaining) is None:
        manager.free(seq)
        seq.num_computed_tokens = 0
        return False
    seq.num_computed_tokens += remaining
    manager.cache_full_blocks(seq)
    return True


def _cache(manager: BlockManager) -> PrefixCache:
    assert manager.prefix_cache is not None
    return manager.prefix_cache


def _events(cache: PrefixCache, after: int = 0) -> list[tuple[KVEventKind, int]]:
    batch = cache.events.read(after, cache.events.epoch, cache.cached_block_hashes)
    assert not batch.reset
    return [(event.kind, event.block_hash) for event in batch.events]


STORED, EVICTED = KVEventKind.STORED, KVEventKind.EVICTED


def test_stored_events_carry_the_prompts_chained_block_hashes() -> None:
    manager = BlockManager(16, 4, enable_prefix_cache=True)
    tokens = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # two full blocks and a partial one
    assert _admit(manager, _sequence(0, tokens))
    cache = _cache(manager)
    expected = prompt_block_hashes(tokens, 4)
    assert len(expected) == 2
    assert _events(cache) == [(STORED, expected[0]), (STORED, expected[1])]
    assert expected[0] == block_hash(None, tokens[:4])
    assert expected[1] == block_hash(expected[0], tokens[4:8])
    assert sorted(cache.cached_block_hashes()) == sorted(expected)


def test_a_shared_prefix_is_stored_once_and_an_equal_block_elsewhere_gets_its_own_hash() -> None:
    manager = BlockManager(32, 4, enable_prefix_cache=True)
    first = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    second = [1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23, 24]
    moved = [9, 9, 9, 9, 1, 2, 3, 4]  # the block (1, 2, 3, 4) after another prefix
    for index, tokens in enumerate((first, second, moved)):
        assert _admit(manager, _sequence(index, tokens))
    stored = [h for kind, h in _events(_cache(manager)) if kind is STORED]
    hashes = (
        prompt_block_hashes(first, 4) + prompt_block_hashes(second, 4)[2:] + prompt_block_hashes(moved, 4)
    )
    assert stored == hashes
    assert len(set(stored)) == len(stored)  # (1, 2, 3, 4) at the start and after (9, 9, 9, 9) differ


def test_eviction_and_reset_log_evicted_blocks() -> None:
    manager = BlockManager(4, 2, enable_prefix_cache=True)
    old = _sequence(0, [1, 2, 3, 4, 5])  # two full blocks cached, three blocks held
    assert _admit(manager, old)
    manager.free(old)
    old_hashes = prompt_block_hashes([1, 2, 3, 4], 2)
    new = _sequence(1, [7, 8, 9, 10, 11, 12, 13])  # needs all four blocks: both cached ones are evicted
    assert _admit(manager, new)
    cache = _cache(manager)
    new_hashes = prompt_block_hashes(new.token_ids, 2)
    events = _events(cache)
    assert sorted(h for kind, h in events if kind is EVICTED) == sorted(old_hashes)
    assert [h for kind, h in events if kind is STORED] == old_hashes + new_hashes
    # The leaf goes before its parent: a reader never sees a child outlive its prefix.
    assert [h for kind, h in events if kind is EVICTED] == old_hashes[::-1]
    seen = cache.events.last_seq
    manager.free(new)
    assert manager.reset_prefix_cache() == 3
    assert sorted(h for kind, h in _events(cache, seen)) == sorted(new_hashes)
    assert cache.cached_block_hashes() == []


def _log_with(events: int, capacity: int) -> KVEventLog:
    log = KVEventLog(block_size=4, capacity=capacity)
    for number in range(events):
        log.record(STORED, number)
    return log


def test_a_reader_behind_the_bounded_log_or_on_another_epoch_gets_a_snapshot() -> None:
    log = _log_with(10, capacity=4)  # keeps events 7..10
    snapshot = (100, 200)

    def read(after: int, epoch: str | None = None, max_events: int = 4096) -> KVEventBatch:
        return log.read(after, epoch, lambda: snapshot, max_events)

    assert read(6).events[0].seq == 7 and not read(6).reset
    assert [e.seq for e in read(8).events] == [9, 10] and read(8).next == 10
    assert read(10).events == () and read(10).next == 10 and not read(10).reset
    for behind in (read(5), read(-1), read(11), read(8, epoch="another")):
        assert behind.reset and behind.blocks == snapshot and behind.next == 10 and behind.events == ()
    paged = read(6, log.epoch, max_events=3)
    assert [e.seq for e in paged.events] == [7, 8, 9] and paged.next == 9
    assert read(0).reset and not _log_with(0, capacity=4).read(0, None, lambda: ()).reset


class _Mirror:
    """A reader replaying the log as a router does: snapshots replace, events add and remove."""

    def __init__(self) -> None:
        self.blocks: set[int] = set()
        self.cursor, self.epoch = -1, None

    def catch_up(self, cache: PrefixCache, max_events: int) -> None:
        while True:
            batch = cache.events.read(self.cursor, self.epoch, cache.cached_block_hashes, max_events)
            if batch.reset:
                self.blocks = set(batch.blocks)
            for event in batch.events:
                if event.kind is STORED:
                    self.blocks.add(event.block_hash)
                else:
                    self.blocks.remove(event.block_hash)
            self.cursor, self.epoch = batch.next, batch.epoch
            if len(batch.events) < max_events:
                return


def _path_tokens(node: PrefixNode) -> list[int]:
    tokens: list[int] = []
    while node.parent is not None:
        tokens[:0] = node.tokens
        node = node.parent
    return tokens


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    num_blocks=st.integers(2, 10),
    capacity=st.integers(1, 12),
    max_events=st.integers(1, 5),
)
def test_replaying_the_log_mirrors_the_cache_exactly(
    data: st.DataObject, num_blocks: int, capacity: int, max_events: int
) -> None:
    """Random admissions, growth, frees and resets, read at random moments through a small bounded log: the
    mirror always equals the cached blocks, and each block's hash is the chained hash of its token path."""
    bs = 2
    manager = BlockManager(num_blocks, bs, enable_prefix_cache=True)
    cache = _cache(manager)
    cache.events = KVEventLog(bs, capacity)
    mirror = _Mirror()
    live: list[Sequence] = []
    for step in range(data.draw(st.integers(1, 40))):
        action = data.draw(st.sampled_from(["admit", "grow", "free", "reset", "read"]))
        if action == "admit" or not live:
            tokens = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=12))
            seq = _sequence(step, tokens)
            if _admit(manager, seq):
                live.append(seq)
        elif action == "grow":
            seq = live[data.draw(st.integers(0, len(live) - 1))]
            extra = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=4))
            if manager.allocate_slots(seq, len(extra)) is not None:
                seq.token_ids.extend(extra)
                seq.num_computed_tokens += len(extra)
                manager.cache_full_blocks(seq)
        elif action == "free":
            manager.free(live.pop(data.draw(st.integers(0, len(live) - 1))))
        elif action == "reset":
            manager.reset_prefix_cache()
        else:
            mirror.catch_up(cache, max_events)
            assert mirror.blocks == set(cache.cached_block_hashes())
    mirror.catch_up(cache, max_events)
    assert mirror.blocks == set(cache.cached_block_hashes())
    for block in range(num_blocks):
        node = cache.node_of(block)
        if node is not None:
            assert node.hash == prompt_block_hashes(_path_tokens(node), bs)[-1]
