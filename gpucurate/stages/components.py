"""Connected components of an edge list that stays in a Dask DataFrame: min-label propagation with
pointer jumping.

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
from ..engine.shuffle import to_owners
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
