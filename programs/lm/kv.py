"""A KV-cache layer written in place, for the engine's batches (imports transformers: load it where used)."""

from typing import Any

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class BufferLayer(DynamicLayer):
    """A cache layer whose keys/values live in one buffer, allocated once per batch.

    ``DynamicLayer`` concatenates every step's keys/values onto the cache, copying all of it, shared prefix
    included, once per generated token; here each step writes its positions in place and the layer exposes views
    of the filled part: the first ``rows`` rows, columns ``start:length``. Rows are right-aligned (they all end
    at ``length``); a row shorter than the others is padded on the left, and the padding is masked out.

    The buffer can be bigger than what is filled, so that a running batch changes without copying its rows:
    ``spare_rows`` for requests that join it (:meth:`join`), ``slack`` columns on the left for a joining row
    longer than the batch, and the columns after ``length`` for the tokens still to generate. A row that leaves
    is overwritten by the last one (:meth:`keep_rows`). ``keys``/``values`` given at construction (a retained
    batch-1 prefix) are broadcast over the ``rows``.
    """

    def __init__(
        self, rows: int, capacity: int, keys: Any = None, values: Any = None, *, spare_rows: int = 0, slack: int = 0
    ) -> None:
        super().__init__()
        self.rows, self.spare_rows, self.capacity = rows, spare_rows, capacity + slack
        self.start = self.length = slack
        if keys is not None:
            self.update(keys, values)

    def _allocate(self, keys: Any, values: Any) -> None:
        """Buffers of ``rows + spare_rows`` x ``capacity`` positions shaped (heads, head size) like ``keys``, zeroed:
        the engine's decode step (``step.py``) attends over the whole capacity with the unfilled part masked out,
        and a masked position must hold a number (NaN times a zero attention weight is still NaN)."""
        shape = (self.rows + self.spare_rows, keys.shape[1], self.capacity, keys.shape[3])
        self._keys, self._values = keys.new_zeros(shape), values.new_zeros(shape)
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def _expose(self) -> tuple[Any, Any]:
        """Point ``keys``/``values`` at the filled part of the buffers."""
        filled = (slice(0, self.rows), slice(None), slice(self.start, self.length))
        self.keys, self.values = self._keys[filled], self._values[filled]
        return self.keys, self.values

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not self.is_initialized:
            self._allocate(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"a KV buffer of {self.capacity} positions cannot hold {end}")
        self._keys[: self.rows, :, self.length : end] = key_states
        self._values[: self.rows, :, self.length : end] = value_states
        self.length = end
        return self._expose()

    def row_view(self, row: int, start: int, length: int) -> "BufferLayer":
        """A layer over one row of this one's buffers (no copy), filled over columns ``start:length``: a forward
        pass on that row alone writes its keys/values after them. Call :meth:`grow` on this layer afterwards."""
        view = BufferLayer(1, 0)
        view._keys, view._values = self._keys[row : row + 1], self._values[row : row + 1]
        view.capacity, view.start, view.length = self.capacity, start, length
        view.dtype, view.device, view.is_initialized = self.dtype, self.device, True
        view._expose()
        return view

    def zero_row(self, row: int, start: int, stop: int) -> None:
        """Zero columns ``start:stop`` of ``row`` (padding: masked out, but NaN times a zero weight is still NaN)."""
        self._keys[row, :, start:stop] = 0
        self._values[row, :, start:stop] = 0

    def grow(self, length: int) -> None:
        """Mark the positions up to ``length`` filled (after :meth:`row_view` passes wrote them)."""
        self.length = length
        self._expose()

    def batch_select_indices(self, indices: Any) -> None:
        """Keep the rows ``indices`` (repeats allowed), copied into new buffers with no spare rows."""
        self._keys, self._values = self._keys[indices], self._values[indices]
        self.rows, self.spare_rows = len(indices), 0
        self._expose()

    def keep_rows(self, order: list[int]) -> None:
        """Keep the rows ``order`` (distinct), row ``order[i]`` becoming row ``i``; the others become spare.

        Rows are copied one by one, so a row may only move to a place no later row is read from: the engine keeps
        the rows that stay where they are and moves rows from the end into the holes (see ``survivors``).
        """
        filled = slice(self.start, self.length)
        for dst, src in enumerate(order):
            if src != dst:
                self._keys[dst, :, filled] = self._keys[src, :, filled]
                self._values[dst, :, filled] = self._values[src, :, filled]
        self.spare_rows += self.rows - len(order)
        self.rows = len(order)
        self._expose()

    def trim(self, columns: int) -> None:
        """Drop the first ``columns`` filled positions (padding that no row attends to any more)."""
        self.start += columns
        self._expose()

    def can_join(self, other: "BufferLayer", room: int) -> bool:
        """Whether ``other``'s rows fit in the spare rows and slack, with ``room`` more positions after."""
        width = other.length - other.start
        return other.rows <= self.spare_rows and self.length - width >= 0 and self.length + room <= self.capacity

    def join(self, other: "BufferLayer") -> int:
        """Append ``other``'s rows, right-aligned, in place (check :meth:`can_join` first); returns by how many
        columns the filled part grew on the left (a joining row longer than the batch)."""
        width = other.length - other.start
        start = min(self.start, self.length - width)
        grown, (old, self.start) = self.start - start, (self.start, start)
        for buffer, data in ((self._keys, other.keys), (self._values, other.values)):
            buffer[: self.rows, :, start:old] = 0  # new padding: masked out, but it must hold numbers, not NaN
            rows = slice(self.rows, self.rows + other.rows)
            buffer[rows, :, start : self.length - width] = 0
            buffer[rows, :, self.length - width : self.length] = data
        self.rows, self.spare_rows = self.rows + other.rows, self.spare_rows - other.rows
        self._expose()
        return grown


def survivors(keep: list[int]) -> list[int]:
    """The order for :meth:`BufferLayer.keep_rows` that keeps the rows ``keep`` (ascending) and copies the fewest:
    rows before ``len(keep)`` stay, rows after it fill the holes."""
    n = len(keep)
    stay = [r for r in keep if r < n]
    holes = iter(sorted(set(range(n)) - set(stay)))
    order = list(range(n))
    for r in keep:
        if r >= n:
            order[next(holes)] = r
    return order


def merge_layers(a: BufferLayer, b: BufferLayer, width: int, capacity: int, spare_rows: int, slack: int) -> BufferLayer:
    """One layer holding ``a``'s rows then ``b``'s, each right-aligned to ``width`` filled positions, in new buffers.

    The rows' buffers start zeroed: the padding in front of the shorter rows is masked out, but it must hold numbers
    (garbage memory could be NaN, and NaN times a zero attention weight is still NaN). Spare rows are left
    unwritten (:meth:`BufferLayer.join` zeroes what it uses).
    """
    merged = BufferLayer(a.rows + b.rows, capacity, spare_rows=spare_rows, slack=slack)
    merged._allocate(a.keys, a.values)
    merged._keys[: merged.rows].zero_()
    merged._values[: merged.rows].zero_()
    end = slack + width
    for rows, layer in ((slice(0, a.rows), a), (slice(a.rows, a.rows + b.rows), b)):
        filled = layer.length - layer.start
        merged._keys[rows, :, end - filled : end] = layer.keys
        merged._values[rows, :, end - filled : end] = layer.values
    merged.length = end
    merged._expose()
    return merged


def position_bytes(model: Any) -> int:
    """The bytes of keys and values one position of one row takes in ``model``'s cache, every layer together."""
    config = model.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * dim * model.dtype.itemsize


def buffer_cache(model: Any, rows: int, capacity: int, *, filled: int = 0, spare_rows: int = 0, slack: int = 0) -> Any:
    """A ``DynamicCache`` of :class:`BufferLayer`s for ``model``: ``rows`` rows of ``capacity`` positions, the
    buffers allocated now (so that a forward pass writes into them), the first ``filled`` positions zeros."""
    import torch

    config = model.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    zeros = torch.zeros((1, config.num_key_value_heads, filled, dim), dtype=model.dtype, device=model.device)
    cache = DynamicCache(config=config)
    cache.layers = [
        BufferLayer(rows, capacity, zeros, zeros, spare_rows=spare_rows, slack=slack)
        for _ in range(config.num_hidden_layers)
    ]
    return cache
