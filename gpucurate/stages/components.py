"""Connected components of an edge list that is never gathered: min-label propagation with pointer jumping,
on a Dask DataFrame (``component_labels``, on a cluster) or by the engine's bucketed exchanges between
ranges of the table's rows (``exchange_components``, in one process, within ``run.memory_limit``).

Nodes are table rows ``0 <= row < n_rows``. Every collection is range-partitioned on the node with the
same divisions, so joins on a node are partition-wise; each round moves data through three shuffles:
messages to the neighbours (edge ``a -> b`` carries ``label(a)`` to ``b``), and the pointer jump
(``label <- label(label)``, which halves the distance to the root) as a request to the label's node and
its answer back. A node's label is the smallest row of
its component, whatever the partitioning, so the result is deterministic. Rounds are logged; they stop
when no label changes (about log2 of the components' diameter, plus one).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ..engine.executor import Executor
from ..engine.shuffle import by_bucket, exchange, owner_of, to_owners
from ..engine.tasks import delayed

log = logging.getLogger("gpucurate")

_LABELS = pd.DataFrame({"label": pd.Series([], dtype=np.int64)}, index=pd.Index([], dtype=np.int64, name="node"))
_MESSAGES = pd.DataFrame({"b": pd.Series([], dtype=np.int64), "label": pd.Series([], dtype=np.int64)})
_NODE_LABELS = pd.DataFrame({"node": pd.Series([], dtype=np.int64), "label": pd.Series([], dtype=np.int64)})


def row_divisions(n_rows: int, npartitions: int) -> tuple:
    """Divisions that range-partition table rows ``0 <= row < n_rows`` into about ``npartitions``."""
    bounds = np.unique(np.linspace(0, max(n_rows - 1, 1), max(1, npartitions) + 1).astype(np.int64))
    return tuple(int(b) for b in bounds) if len(bounds) > 1 else (0, max(n_rows - 1, 1))


def _first_labels(adj: pd.DataFrame) -> pd.DataFrame:
    """label = min(node, its neighbours) for each node of one partition of the adjacency ``a -> b``."""
    if len(adj) == 0:
        return _LABELS.copy()
    smallest = adj["b"].groupby(level=0, sort=True).min()
    return pd.DataFrame({"label": np.minimum(smallest.index.to_numpy(), smallest.to_numpy())},
                        index=pd.Index(smallest.index.to_numpy(np.int64), name="node"))


def _messages(adj: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """``(b, label(a))`` for each edge ``a -> b`` of one partition."""
    if len(adj) == 0:
        return _MESSAGES.copy()
    return pd.DataFrame({"b": adj["b"].to_numpy(np.int64),
                         "label": labels["label"].reindex(adj.index).to_numpy(np.int64)})


def _lower(labels: pd.DataFrame, messages: pd.DataFrame) -> pd.DataFrame:
    """Each node's label lowered to the smallest label its neighbours sent."""
    if len(messages) == 0:
        return labels
    smallest = messages["label"].groupby(level=0).min().reindex(labels.index)
    new = np.minimum(labels["label"].to_numpy(), smallest.fillna(np.iinfo(np.int64).max).to_numpy(np.int64))
    return pd.DataFrame({"label": new}, index=labels.index)


def _ask(labels: pd.DataFrame) -> pd.DataFrame:
    """Requests ``(label, node)``: each node asks its label's node for that node's label."""
    return pd.DataFrame({"node": labels.index.to_numpy(np.int64), "label": labels["label"].to_numpy(np.int64)})


def _answer(requests: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """``(node, label(label(node)))`` for the requests of one partition (indexed by the label asked)."""
    if len(requests) == 0:
        return _NODE_LABELS.copy()
    return pd.DataFrame({"node": requests["node"].to_numpy(np.int64),
                         "label": labels["label"].reindex(requests.index).to_numpy(np.int64)})


def _changed(old: pd.DataFrame, new: pd.DataFrame) -> int:
    return int((old["label"].to_numpy() != new["label"].reindex(old.index).to_numpy()).sum())


def labels_by_owner(labels: pd.DataFrame, part_offsets: np.ndarray) -> tuple:
    """One partition of ``component_labels`` cut by the table partitions holding its nodes: one
    ``(rows, labels)`` piece per partition."""
    nodes = labels.index.to_numpy(np.int64)
    order = np.argsort(nodes, kind="stable")
    return to_owners(nodes[order], (labels["label"].to_numpy(np.int64)[order],), part_offsets)


def label_column(state: dict, first_row: int, pieces: list, *, name: str) -> dict:
    """A partition's column ``name`` of component labels from its ``labels_by_owner`` pieces: the label of
    each row with an edge, -1 for the others."""
    label = np.full(len(state["ord"]), -1, np.int64)
    for rows, of in pieces:
        label[rows - first_row] = of
    return {name: label}


def dask_components(edges, n_rows: int, executor: Executor, npartitions: int) -> tuple[np.ndarray, np.ndarray]:
    """``component_labels`` collected: ``(nodes, labels)`` int64 arrays over the rows that have an edge,
    sorted by row."""
    parts = executor.compute(component_labels(edges, n_rows, executor, npartitions).to_delayed(),
                             "components: collect")
    nodes = np.concatenate([p.index.to_numpy(np.int64) for p in parts] + [np.empty(0, np.int64)])
    values = np.concatenate([p["label"].to_numpy(np.int64) for p in parts] + [np.empty(0, np.int64)])
    order = np.argsort(nodes, kind="stable")
    return nodes[order], values[order]


def component_labels(edges, n_rows: int, executor: Executor, npartitions: int):
    """Components of the undirected edges ``edges`` (Dask DataFrame with int64 columns ``i``, ``j``).

    Returns the persisted Dask DataFrame of the rows that have an edge (index ``node``, range-partitioned by
    ``row_divisions(n_rows, npartitions)``) with each row's ``label``: the smallest row of its component.
    Rows without an edge are their own component.
    """
    import dask.dataframe as dd
    divisions = row_divisions(n_rows, npartitions)
    both = dd.concat([edges[["i", "j"]].rename(columns={"i": "a", "j": "b"}),
                      edges[["j", "i"]].rename(columns={"j": "a", "i": "b"})])
    adj = executor.persist(both.set_index("a", divisions=divisions), "components: adjacency")
    labels = executor.persist(adj.map_partitions(_first_labels, meta=_LABELS, align_dataframes=False),
                              "components: round 0")
    rounds = 0
    while True:
        rounds += 1
        messages = adj.map_partitions(_messages, labels, meta=_MESSAGES).set_index("b", divisions=divisions)
        lowered = dd.map_partitions(_lower, labels, messages, meta=_LABELS)
        requests = lowered.map_partitions(_ask, meta=_NODE_LABELS).set_index("label", divisions=divisions)
        jumped = dd.map_partitions(_answer, requests, lowered, meta=_NODE_LABELS)
        new = executor.persist(jumped.set_index("node", divisions=divisions), f"components: round {rounds}")
        changed = sum(executor.compute([delayed(_changed)(o, n) for o, n in
                                        zip(labels.to_delayed(), new.to_delayed())], "components: compare"))
        labels = new
        log.info("components on Dask: round %d, %d label(s) changed", rounds, changed)
        if changed == 0:
            return labels


# -- the same propagation by the engine's exchanges: node ``v`` lives in the range of rows holding ``v``;
# an adjacency entry ``a -> b`` and a message ``label -> b`` are packed into one uint64, high word first, so
# one sort groups them by node with the smallest neighbour or label first

_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def _pack(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    return (high.astype(np.uint64) << _SHIFT) | low.astype(np.uint64)


def _high(packed: np.ndarray) -> np.ndarray:
    return (packed >> _SHIFT).astype(np.int64)


def _low(packed: np.ndarray) -> np.ndarray:
    return (packed & _LOW).astype(np.int64)


def _run_starts(node: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``node`` starts."""
    return np.flatnonzero(np.r_[True, node[1:] != node[:-1]]) if len(node) else np.empty(0, np.int64)


def _sorted_runs(packed: np.ndarray) -> tuple:
    """``(node, smallest low word)`` of each run of equal high words of the sorted ``packed``."""
    node = _high(packed)
    starts = _run_starts(node)
    return node[starts], _low(packed[starts])


def _edge_split(edges: pd.DataFrame, n_ranges: int, node_bounds: np.ndarray, threshold: float | None) -> tuple:
    """Both directions ``a -> b`` of the edges ``(i, j)`` of one frame (with ``threshold``, those whose
    ``score`` is at least it), one piece per range of ``a``."""
    i, j = edges["i"].to_numpy(np.int64), edges["j"].to_numpy(np.int64)
    if threshold is not None:
        keep = edges["score"].to_numpy() >= threshold - 1e-12
        i, j = i[keep], j[keep]
    a, b = np.concatenate([i, j]), np.concatenate([j, i])
    return by_bucket(owner_of(node_bounds, a), n_ranges, _pack(a, b))


def _adjacency(pieces: list) -> tuple:
    """A range's adjacency: ``a << 32 | b`` sorted, and the degree of each of its nodes in order."""
    adjacency = np.sort(np.concatenate([p[0] for p in pieces] + [np.empty(0, np.uint64)]))
    return adjacency, np.diff(np.r_[_run_starts(_high(adjacency)), len(adjacency)])


def _initial_labels(adjacency: tuple) -> dict:
    """A range's nodes with an edge (sorted), each one's first label (the smallest of itself and its
    neighbours: its first adjacency entry) and whether it changed since it last sent (all: none has)."""
    nodes, smallest = _sorted_runs(adjacency[0])
    return {"nodes": nodes, "labels": np.minimum(nodes, smallest), "changed": np.ones(len(nodes), bool)}


def _message_split(adjacency: tuple, state: dict, n_ranges: int, node_bounds: np.ndarray) -> tuple:
    """``label(a) -> b`` for each edge ``a -> b`` whose ``a`` changed label since it last sent (the others'
    neighbours have their label already), one piece per range of ``b``."""
    entries, degree = adjacency
    changed = state["changed"]
    b = _low(entries[np.repeat(changed, degree)])
    label = np.repeat(state["labels"][changed], degree[changed])
    return by_bucket(owner_of(node_bounds, b), n_ranges, _pack(b, label))


def _lowered(state: dict, pieces: list) -> dict:
    """Each node's label lowered to the smallest its neighbours sent."""
    nodes, smallest = _sorted_runs(np.sort(np.concatenate([p[0] for p in pieces] + [np.empty(0, np.uint64)])))
    labels = state["labels"].copy()
    at = np.searchsorted(state["nodes"], nodes)
    labels[at] = np.minimum(labels[at], smallest)
    return {**state, "lowered": labels}


def _ask_split(state: dict, n_ranges: int, node_bounds: np.ndarray) -> tuple:
    """The pointer jump's requests ``label << 32 | node``, one piece per range of the label asked (a
    node that is its own label has nothing to ask)."""
    ask = state["lowered"] != state["nodes"]
    labels = state["lowered"][ask]
    return by_bucket(owner_of(node_bounds, labels), n_ranges, _pack(labels, state["nodes"][ask]))


def _answer_split(pieces: list, state: dict, n_ranges: int, node_bounds: np.ndarray) -> tuple:
    """The answers ``node << 32 | label(label(node))``, one piece per range of the node that asked."""
    asked = np.concatenate([p[0] for p in pieces] + [np.empty(0, np.uint64)])
    node = _low(asked)
    label = state["lowered"][np.searchsorted(state["nodes"], _high(asked))]
    return by_bucket(owner_of(node_bounds, node), n_ranges, _pack(node, label))


def _jumped(state: dict, pieces: list) -> dict:
    """The round's labels: lowered, then jumped to the label's label; ``changed`` against the round before."""
    labels = state["lowered"].copy()
    answers = np.concatenate([p[0] for p in pieces] + [np.empty(0, np.uint64)])
    labels[np.searchsorted(state["nodes"], _high(answers))] = _low(answers)
    return {"nodes": state["nodes"], "labels": labels, "changed": labels != state["labels"]}


def _n_changed(state: dict) -> int:
    return int(state["changed"].sum())


def label_pieces(states: list, node_bounds: np.ndarray, part_offsets: np.ndarray) -> list:
    """Per table partition, ``[(rows, labels)]`` of its rows that have an edge (``label_column``'s pieces),
    cut from the ``exchange_components`` states of the row ranges ``node_bounds``."""
    pieces = []
    for q in range(len(part_offsets) - 1):
        g = min(int(np.searchsorted(node_bounds, part_offsets[q], side="right")) - 1, len(states) - 1)
        pieces.append([delayed(_rows_between)(states[g], int(part_offsets[q]), int(part_offsets[q + 1]))])
    return pieces


def _rows_between(state: dict, low: int, high: int) -> tuple:
    cut = np.searchsorted(state["nodes"], [low, high])
    return state["nodes"][cut[0]:cut[1]], state["labels"][cut[0]:cut[1]]


def n_adjacent(adjacency: tuple) -> int:
    return len(adjacency[0])


#: adjacency entries (two an edge) a range of nodes holds, about: the ranges of ``exchange_components``
#: are this many entries of the ``n_pairs`` given (at most), so that each round's exchanges make a few
#: pieces per range, not partitions x partitions
ENTRIES_PER_RANGE = 8_000_000


def node_ranges(part_offsets: np.ndarray, n_pairs: int) -> np.ndarray:
    """Row bounds of the ranges of table partitions whose nodes one task of ``exchange_components`` holds:
    enough ranges for ``2 n_pairs`` adjacency entries at ``ENTRIES_PER_RANGE`` each, at most one a
    partition."""
    n_parts = len(part_offsets) - 1
    n_ranges = max(1, min(n_parts, -(-2 * int(n_pairs) // ENTRIES_PER_RANGE)))
    return np.asarray(part_offsets)[np.unique(np.linspace(0, n_parts, n_ranges + 1).round().astype(np.int64))]


def exchange_components(edges: list, threshold: float | None, node_bounds: np.ndarray, executor: Executor) -> tuple:
    """Components of the edges in ``edges`` ((delayed) frames ``(i, j)`` of table rows; with ``threshold``,
    ``(i, j, score)`` frames whose pairs with ``score >= threshold`` are the edges), by the engine's
    exchanges between ranges of rows (``node_bounds``, from ``node_ranges``): no step holds more than a
    range's nodes and the pieces sent to it, which the engine keeps within ``run.memory_limit`` or on disk.

    Returns ``(states, n_edges)``: per range, the kept state of its rows that have an edge, ``nodes``
    (sorted rows) and ``labels`` (the smallest row of each one's component, as ``component_labels``), which
    ``label_pieces`` cuts by table partition; and the number of edges.
    """
    n_ranges = len(node_bounds) - 1
    to_nodes = exchange(executor, _edge_split, [(f,) for f in edges], n_ranges, node_bounds, threshold,
                        desc="components: edges")
    # kept apart from the labels, which each round replaces
    adjacency, entries = executor.persist_tasks([delayed(_adjacency)(pieces) for pieces in to_nodes],
                                                "components: adjacency", measure=n_adjacent)
    states = executor.persist_tasks([delayed(_initial_labels)(a) for a in adjacency], "components: round 0")
    rounds = 0
    while True:
        rounds += 1
        messages = exchange(executor, _message_split, list(zip(adjacency, states)), n_ranges, node_bounds,
                            desc=f"components: round {rounds}: labels")
        lowered = executor.persist_tasks([delayed(_lowered)(s, m) for s, m in zip(states, messages)],
                                         f"components: round {rounds}: lower")
        asks = exchange(executor, _ask_split, [(s,) for s in lowered], n_ranges, node_bounds,
                        desc=f"components: round {rounds}: jump")
        answers = exchange(executor, _answer_split, list(zip(asks, lowered)), n_ranges, node_bounds,
                           desc=f"components: round {rounds}: answer")
        states, changed = executor.persist_tasks([delayed(_jumped)(s, a) for s, a in zip(lowered, answers)],
                                                 f"components: round {rounds}", measure=_n_changed)
        log.info("components by exchanges: round %d, %d label(s) changed", rounds, sum(changed))
        if sum(changed) == 0:
            return states, sum(entries) // 2


def labels_by_exchanges(edges: list, threshold: float | None, part_offsets: np.ndarray, n_pairs: int,
                        executor: Executor) -> tuple:
    """``exchange_components`` over ranges sized for ``n_pairs`` pairs (``node_ranges``): per table partition
    its ``label_column`` pieces, and the number of edges."""
    bounds = node_ranges(part_offsets, n_pairs)
    states, n_edges = exchange_components(edges, threshold, bounds, executor)
    return label_pieces(states, bounds, part_offsets), n_edges
