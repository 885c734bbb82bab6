"""Tensor parallelism: worker processes that hold the other ranks' shards and follow rank 0's steps."""
