"""Block manager invariants under random operation sequences (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from switchyard.engine.block_manager import NULL_BLOCK, BlockManager
from switchyard.engine.sampling_params import SamplingParams
from switchyard.engine.sequence import Request, RequestTiming, Sequence


def make_seq(seq_id: int, num_tokens: int) -> Sequence:
    request = Request(
        request_id=str(seq_id),
        prompt_token_ids=[1] * num_tokens,
        params=SamplingParams(),
        max_tokens=16,
        eos_token_ids=(),
        timing=RequestTiming(arrival=0.0),
    )
    return Sequence(seq_id=seq_id, request=request, sample_index=0, token_ids=[1] * num_tokens)


def test_allocate_grows_table_and_free_returns_blocks() -> None:
    manager = BlockManager(num_blocks=10, block_size=4)
    seq = make_seq(0, 9)
    assert manager.allocate_slots(seq, 9) == []
    assert len(seq.block_table) == 3
    seq.num_computed_tokens = 9
    assert manager.allocate_slots(seq, 3) == []  # positions 9..11 stay in block 3
    assert len(seq.block_table) == 3
    assert manager.allocate_slots(seq, 4) == []
    assert len(seq.block_table) == 4
    manager.free(seq)
    assert manager.num_free_blocks == 10
    manager.check_invariants([seq])


def test_allocation_that_does_not_fit_changes_nothing() -> None:
    manager = BlockManager(num_blocks=2, block_size=4)
    seq = make_seq(0, 12)
    assert manager.allocate_slots(seq, 12) is None
    assert seq.block_table == [] and manager.num_free_blocks == 2


def test_fork_shares_blocks_and_copy_on_write_copies_only_the_partial_block() -> None:
    manager = BlockManager(num_blocks=10, block_size=4)
    parent = make_seq(0, 6)
    manager.allocate_slots(parent, 6)
    parent.num_computed_tokens = 6
    child = make_seq(1, 6)
    child.num_computed_tokens = 6
    manager.fork(parent, child)
    assert manager.num_used_blocks == 2
    assert manager.ref_counts[parent.block_table[0]] == 2
    copies = manager.allocate_slots(child, 1)  # writes position 6, inside the shared second block
    assert copies == [(parent.block_table[1], child.block_table[1])]
    assert child.block_table[0] == parent.block_table[0]
    assert manager.num_used_blocks == 3
    assert manager.allocate_slots(parent, 1) == []  # now the parent's last block is its own again
    manager.check_invariants([parent, child])


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["new", "grow", "fork", "free"]), st.integers(0, 20), st.integers(1, 40)
            ),
            max_size=60,
        )
    )


@settings(max_examples=300, deadline=None)
@given(ops=operations(), num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4, 16]))
def test_invariants_hold_under_random_operations(
    ops: list[tuple[str, int, int]], num_blocks: int, block_size: int
) -> None:
    manager = BlockManager(num_blocks, block_size)
    live: list[Sequence] = []
    next_id = 0
    for op, pick, count in ops:
        if op == "new" or not live:
            seq = make_seq(next_id, count)
            next_id += 1
            if manager.allocate_slots(seq, count) is not None:
                seq.num_computed_tokens = count
                live.append(seq)
        elif op == "grow":
            seq = live[pick % len(live)]
            before = manager.num_free_blocks
            needed = manager.blocks_needed(seq, count)
            copies = manager.allocate_slots(seq, count)
            if copies is None:
                assert needed > before
            else:
                assert before - manager.num_free_blocks == needed
                seq.num_computed_tokens += count
                seq.token_ids.extend([1] * count)
        elif op == "fork":
            parent = live[pick % len(live)]
            child = make_seq(next_id, parent.num_computed_tokens)
            next_id += 1
            child.num_computed_tokens = parent.num_computed_tokens
            manager.fork(parent, child)
            live.append(child)
        else:
            seq = live.pop(pick % len(live))
            manager.free(seq)
        manager.check_invariants(live)
        # Every token a sequence has computed has a block.
        for seq in live:
            assert len(seq.block_table) * block_size >= seq.num_computed_tokens
    for seq in live:
        manager.free(seq)
    manager.check_invariants([])
    assert manager.num_free_blocks == num_blocks


def test_release_outside_window_by_hand() -> None:
    """Window 6, blocks of 4. After 13 computed tokens the next query (position 13) sees keys 8..13, so blocks
    0 (positions 0-3) and 1 (4-7) are released; block 2 (8-11) is still needed."""
    manager = BlockManager(num_blocks=8, block_size=4, window=6)
    seq = make_seq(0, 13)
    assert manager.allocate_slots(seq, 13) == []
    seq.num_computed_tokens = 13
    assert manager.release_outside_window(seq) == 2
    assert seq.block_table[:2] == [NULL_BLOCK, NULL_BLOCK] and NULL_BLOCK not in seq.block_table[2:]
    assert manager.num_used_blocks == 2 and manager.num_free_blocks == 5  # 8, less the NULL block, less 2
    manager.check_invariants([seq])
    assert manager.release_outside_window(seq) == 0  # nothing more until the sequence grows
    manager.free(seq)
    assert manager.num_free_blocks == 7
    manager.check_invariants([])


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(1, 20),
    block_size=st.sampled_from([1, 2, 4, 8]),
    chunks=st.lists(st.integers(1, 9), min_size=1, max_size=40),
    fork_at=st.integers(0, 40),
)
def test_windowed_sequences_hold_a_bounded_number_of_blocks(
    window: int, block_size: int, chunks: list[int], fork_at: int
) -> None:
    """Two sequences (one forked from the other midway) grow by random chunks; after each chunk the released
    blocks leave each sequence no more than the window's blocks plus the chunk's, every key a future query
    can see is still owned, and reference counts stay exact."""
    manager = BlockManager(num_blocks=256, block_size=block_size, window=window)
    seqs = [make_seq(0, sum(chunks) + 1)]
    for step, chunk in enumerate(chunks):
        if step == fork_at:
            child = make_seq(1, sum(chunks) + 1)
            manager.fork(seqs[0], child)
            child.num_computed_tokens = seqs[0].num_computed_tokens
            seqs.append(child)
        for seq in seqs:
            assert manager.allocate_slots(seq, chunk) is not None
            seq.num_computed_tokens += chunk
            manager.release_outside_window(seq)
            live = [b for b in seq.block_table if b != NULL_BLOCK]
            assert len(live) <= -(-window // block_size) + -(-chunk // block_size) + 1
            first_needed = max(0, seq.num_computed_tokens - window + 1) // block_size
            assert NULL_BLOCK not in seq.block_table[first_needed:]
        manager.check_invariants(seqs)
    for seq in seqs:
        manager.free(seq)
    manager.check_invariants([])
    assert manager.num_free_blocks == 255
