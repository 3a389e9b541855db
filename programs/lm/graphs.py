"""The engine's decode step replayed as a CUDA graph: the step's kernels launched at once instead of one by one.

On a GPU a decode step of a small model is several hundred kernels of a few microseconds each, and launching them
from Python takes longer than running them: the GPU waits on the host. A CUDA graph records the kernels of one
call and replays them with a single launch. It replays the addresses it recorded, so:

- the step's small inputs (tokens, positions, the column it writes, the mask) are copied, each step, into tensors
  the graph owns;
- the KV buffers are read and written where they are. The engine allocates them once per batch and keeps them in
  place while rows join and leave (``kv.BufferLayer``), so a graph is recorded for each batch's buffers and row
  bucket, at the first step of that batch and bucket (which runs eagerly: its logits are that step's, and a
  compiled step compiles there, outside the recording), and every later step of the batch replays it.

A graph is keyed by the addresses and shapes of every buffer it reads, so it is replayed only over the very
memory it was recorded on. The latest ``KEPT`` graphs are held (a batch that merges into new buffers leaves its
graph unused; it is dropped, with its memory, when newer ones push it out).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

KEPT = 8
"""How many recorded graphs are held at once."""


class StepGraphs:
    """``run`` (a decode step: ``run(tokens, positions, keys, values, column, mask) -> logits``) recorded as a CUDA
    graph per KV buffers and row count, and replayed; see the module docstring."""

    def __init__(self, run: Callable[..., torch.Tensor], kept: int = KEPT) -> None:
        self.run = run
        self.kept = kept
        self.graphs: OrderedDict[tuple, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], torch.Tensor]] = OrderedDict()
        self.recorded = self.replayed = 0

    def __call__(self, tokens: Any, positions: Any, keys: list, values: list, column: Any, mask: Any) -> torch.Tensor:
        key = (tuple(mask.shape), tuple(keys[0].shape), tuple(t.data_ptr() for t in (*keys, *values)))
        held = self.graphs.get(key)
        if held is None:
            return self._record(key, tokens, positions, keys, values, column, mask)
        self.graphs.move_to_end(key)
        graph, inputs, logits = held
        for static, given in zip(inputs, (tokens, positions, column, mask), strict=True):
            static.copy_(given)
        graph.replay()
        self.replayed += 1
        return logits.clone()  # the graph's output is overwritten by its next replay

    def _record(self, key: tuple, tokens: Any, positions: Any, keys: list, values: list, column: Any, mask: Any):
        """Run the step eagerly (its logits are this step's), then record it over copies of its small inputs."""
        here = torch.cuda.current_stream()
        side = torch.cuda.Stream()  # warmed on a side stream, as torch asks before a capture
        side.wait_stream(here)
        with torch.cuda.stream(side):
            logits = self.run(tokens, positions, keys, values, column, mask)
        here.wait_stream(side)
        logits.record_stream(here)
        inputs = [t.clone() for t in (tokens, positions, column, mask)]
        graph = torch.cuda.CUDAGraph()
        # recorded, not run (the KV buffers are not written twice); other threads (another engine's worker) may use
        # the GPU meanwhile
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = self.run(inputs[0], inputs[1], keys, values, inputs[2], inputs[3])
        self.graphs[key] = (graph, inputs, out)
        self.recorded += 1
        while len(self.graphs) > self.kept:
            self.graphs.popitem(last=False)
        return logits

    def clear(self) -> None:
        """Drop every graph and the memory it holds."""
        self.graphs.clear()
