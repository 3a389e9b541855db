"""A KV-cache layer written in place, for the engine's batches (imports transformers: load it where used)."""

from typing import Any

from transformers.cache_utils import DynamicLayer


class BufferLayer(DynamicLayer):
    """A cache layer whose keys/values live in one buffer of ``capacity`` positions, allocated once per batch.

    ``DynamicLayer`` concatenates every step's keys/values onto the cache, copying all of it, shared prefix
    included, once per generated token; here each step writes its positions in place and the layer exposes views
    of the filled part. ``keys``/``values`` given at construction (a retained batch-1 prefix) are broadcast over
    the ``rows``.
    """

    def __init__(self, rows: int, capacity: int, keys: Any = None, values: Any = None) -> None:
        super().__init__()
        self.rows, self.capacity, self.length = rows, capacity, 0
        if keys is not None:
            self.update(keys, values)

    def _allocate(self, keys: Any, values: Any, zeroed: bool = False) -> None:
        """Buffers of ``rows`` x ``capacity`` positions shaped (heads, head size) like ``keys``/``values``."""
        shape = (self.rows, keys.shape[1], self.capacity, keys.shape[3])
        new = (lambda t: t.new_zeros(shape)) if zeroed else (lambda t: t.new_empty(shape))
        self._keys, self._values = new(keys), new(values)
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def _expose(self) -> tuple[Any, Any]:
        """Point ``keys``/``values`` at the filled part of the buffers."""
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]
        return self.keys, self.values

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not self.is_initialized:
            self._allocate(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"a KV buffer of {self.capacity} positions cannot hold {end}")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        return self._expose()

    def rows_view(self, start: int, stop: int) -> "BufferLayer":
        """A layer over rows ``start:stop`` of this one's buffers (no copy): a forward pass on those rows alone
        writes its keys/values here. Call :meth:`grow` on this layer afterwards."""
        view = BufferLayer(stop - start, self.capacity)
        view._keys, view._values = self._keys[start:stop], self._values[start:stop]
        view.length, view.dtype, view.device, view.is_initialized = self.length, self.dtype, self.device, True
        view._expose()
        return view

    def grow(self, length: int) -> None:
        """Mark the first ``length`` positions filled (after :meth:`rows_view` passes wrote them)."""
        self.length = length
        self._expose()

    def batch_select_indices(self, indices: Any) -> None:
        self._keys, self._values = self._keys[indices], self._values[indices]
        self.rows = len(indices)
        self._expose()


def merge_layers(a: BufferLayer, b: BufferLayer, width: int, capacity: int) -> BufferLayer:
    """One layer holding ``a``'s rows then ``b``'s, each right-aligned to ``width`` filled positions.

    The buffers start zeroed: the padding in front of the shorter rows is masked out, but it must hold numbers
    (garbage memory could be NaN, and NaN times a zero attention weight is still NaN).
    """
    merged = BufferLayer(a.rows + b.rows, capacity)
    merged._allocate(a.keys, a.values, zeroed=True)
    for rows, layer in ((slice(0, a.rows), a), (slice(a.rows, a.rows + b.rows), b)):
        merged._keys[rows, :, width - layer.length : width] = layer.keys
        merged._values[rows, :, width - layer.length : width] = layer.values
    merged.length = width
    merged._expose()
    return merged
