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

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not self.is_initialized:
            shape = (self.rows, key_states.shape[1], self.capacity, key_states.shape[3])
            self._keys, self._values = key_states.new_empty(shape), value_states.new_empty(shape)
            self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"a KV buffer of {self.capacity} positions cannot hold {end}")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._keys[:, :, :end], self._values[:, :, :end]
        return self.keys, self.values

    def batch_select_indices(self, indices: Any) -> None:
        self._keys, self._values = self._keys[indices], self._values[indices]
        self.rows = len(indices)
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]


def merge_layers(a: BufferLayer, b: BufferLayer, width: int, capacity: int) -> BufferLayer:
    """One layer holding ``a``'s rows then ``b``'s, each right-aligned to ``width`` filled positions.

    The buffers start zeroed: the padding in front of the shorter rows is masked out, but it must hold numbers
    (garbage memory could be NaN, and NaN times a zero attention weight is still NaN).
    """
    merged = BufferLayer(a.rows + b.rows, capacity)
    shape = (a.rows + b.rows, a.keys.shape[1], capacity, a.keys.shape[3])
    merged._keys, merged._values = a.keys.new_zeros(shape), a.values.new_zeros(shape)
    merged.dtype, merged.device, merged.is_initialized = a.dtype, a.device, True
    for rows, layer in ((slice(0, a.rows), a), (slice(a.rows, a.rows + b.rows), b)):
        merged._keys[rows, :, width - layer.length : width] = layer.keys
        merged._values[rows, :, width - layer.length : width] = layer.values
    merged.length = width
    merged.keys, merged.values = merged._keys[:, :, :width], merged._values[:, :, :width]
    return merged
