"""Keys and values of prompt prefixes kept across requests, in a radix tree of token ids (imports torch lazily).

A prompt that starts with tokens the engine has computed before (a system turn, the demonstrations, a multi-call
method's question and the steps so far) needs keys/values only for the tokens after that prefix: the attention of
a causal model at position ``t`` depends on tokens ``0..t`` only, so the keys/values of a prefix are the same in
every prompt that starts with it. This is vLLM's automatic prefix caching and SGLang's RadixAttention, on CPU
tensors.

Each node of the tree holds one segment of token ids and their keys/values (one ``(keys, values)`` pair per
layer, shaped ``(1, heads, tokens, head size)``); a path from the root spells a prompt that was computed. Prompts
that share a start share its node, so eight questions after the same demonstrations store the demonstrations
once. :meth:`PrefixCache.match` returns the keys/values of the longest stored prefix of a prompt;
:meth:`PrefixCache.insert` stores a computed prompt, splitting a node where the prompt leaves it. The tree is
bounded by ``max_bytes``: past it, the least recently used leaves are evicted (a node whose children are all gone
becomes a leaf). Only the engine's worker thread calls it, so it takes no lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items (token ids, or a request's messages) ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(eq=False)
class _Node:
    ids: tuple[int, ...]
    layers: list[tuple[Any, Any]]  # per layer (keys, values) of ``ids``: (1, heads, len(ids), head size)
    parent: _Node | None = None
    children: dict[int, _Node] = field(default_factory=dict)
    used: int = 0  # the tick of its last match or insert (least recently used leaves are evicted first)

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


class PrefixCache:
    """A radix tree of computed prompts and their keys/values, bounded by ``max_bytes``; see the module docstring.

    Counters: ``hits`` (matches of at least ``min_tokens``), ``misses``, ``evicted`` (nodes), ``nbytes`` (held).
    """

    def __init__(self, max_bytes: int, min_tokens: int = 16) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes, self.min_tokens = max_bytes, min_tokens
        self.root = _Node((), [])
        self.nbytes = self.hits = self.misses = self.evicted = 0
        self._tick = 0

    def _touch(self, node: _Node) -> None:
        self._tick += 1
        while node is not None:
            node.used = self._tick
            node = node.parent

    def match(self, ids: list[int], limit: int | None = None) -> tuple[int, list[tuple[Any, Any]] | None]:
        """(n, per-layer keys/values of ``ids[:n]``) for the longest stored prefix, at most ``limit`` tokens; (0,
        None) below ``min_tokens``. A prefix within one node is a view of it; across nodes, a concatenation."""
        limit = len(ids) if limit is None else min(limit, len(ids))
        node, n, path = self.root, 0, []
        while n < limit and (child := node.children.get(ids[n])) is not None:
            shared = min(common_prefix(child.ids, ids[n:limit]), limit - n)
            path.append((child, shared))
            n += shared
            if shared < len(child.ids):
                break
            node = child
        if n < self.min_tokens:
            self.misses += 1
            return 0, None
        import torch

        self.hits += 1
        self._touch(path[-1][0])
        parts = [[(k[:, :, :m], v[:, :, :m]) for k, v in child.layers] for child, m in path]
        if len(parts) == 1:
            return n, parts[0]
        layers = [
            (torch.cat([p[i][0] for p in parts], dim=2), torch.cat([p[i][1] for p in parts], dim=2))
            for i in range(len(parts[0]))
        ]
        return n, layers

    def insert(self, ids: list[int], layers: list[tuple[Any, Any]]) -> None:
        """Store ``ids`` with their per-layer keys/values (``(1, heads, len(ids), head size)``, copied: the caller
        may overwrite them), sharing the nodes of any stored prompt it starts like; then evict to ``max_bytes``.
        A prompt whose own part is bigger than ``max_bytes`` is not stored (only the part it shares is touched)."""
        if len(ids) < self.min_tokens or self.max_bytes == 0:
            return
        node, n = self.root, 0
        while n < len(ids):
            child = node.children.get(ids[n])
            if child is None:
                per_token = sum(k[:, :, :1].nbytes + v[:, :, :1].nbytes for k, v in layers)
                if (len(ids) - n) * per_token > self.max_bytes:
                    break  # it would only push out everything else and then itself
                rest = [(k[:, :, n:].clone(), v[:, :, n:].clone()) for k, v in layers]
                child = _Node(tuple(ids[n:]), rest, parent=node)
                node.children[ids[n]] = child
                self.nbytes += child.nbytes
                node = child
                break
            shared = common_prefix(child.ids, ids[n:])
            if shared < len(child.ids):
                self._split(child, shared)
            n += shared
            node = child
        self._touch(node)
        self._evict()

    def _split(self, node: _Node, at: int) -> None:
        """Cut ``node`` after ``at`` tokens: it keeps the head; a new child takes the tail and the children."""
        tail = _Node(node.ids[at:], [(k[:, :, at:].clone(), v[:, :, at:].clone()) for k, v in node.layers], node)
        tail.children, tail.used = node.children, node.used
        for grandchild in tail.children.values():
            grandchild.parent = tail
        node.ids, node.children = node.ids[:at], {tail.ids[0]: tail}
        node.layers = [(k[:, :, :at].clone(), v[:, :, :at].clone()) for k, v in node.layers]

    def _nodes(self):
        """Every node below the root."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            yield node

    def _evict(self) -> None:
        while self.nbytes > self.max_bytes:
            leaf = min((node for node in self._nodes() if not node.children), key=lambda node: node.used)
            del leaf.parent.children[leaf.ids[0]]
            self.nbytes -= leaf.nbytes
            self.evicted += 1

    def clear(self) -> None:
        self.root, self.nbytes = _Node((), []), 0

    def __len__(self) -> int:
        """Nodes held."""
        return sum(1 for _ in self._nodes())
