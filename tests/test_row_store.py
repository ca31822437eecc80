"""Rows of the ingest state read by number from the batches' files, against in-memory arrays."""

import numpy as np
import pytest

from gpucurate.io.row_store import read_lists, read_rows, write_lists, write_rows

RECORD = np.dtype([("hash", np.uint64), ("ts", np.int64), ("flag", np.bool_)])


def test_records_and_lists_come_back_by_row(tmp_path):
    rng = np.random.default_rng(3)
    records = np.zeros(1000, RECORD)
    records["hash"] = rng.integers(0, 2**63, 1000)
    records["ts"] = np.arange(1000)
    lengths = rng.integers(0, 6, 1000)
    offsets = np.r_[0, np.cumsum(lengths)]
    values = rng.integers(0, 2**63, offsets[-1]).astype(np.uint64)
    record_files, list_files = [], []
    for k, (a, b) in enumerate([(0, 300), (300, 301), (301, 1000)]):  # three batches
        record_files.append(write_rows(tmp_path / f"d{k}", a, records[a:b]))
        list_files.append(write_lists(tmp_path / f"s{k}", a, offsets[a:b + 1], values))
    asked = np.concatenate([rng.integers(0, 1000, 200), [999, 0, 300, 300]])
    assert np.array_equal(read_rows(record_files, RECORD, asked), records[asked])
    got_offsets, got_values = read_lists(list_files, np.uint64, asked)
    assert np.array_equal(np.diff(got_offsets), lengths[asked])
    expected = np.concatenate([values[offsets[r]:offsets[r + 1]] for r in asked])
    assert np.array_equal(got_values, expected)
    assert len(read_rows(record_files, RECORD, np.empty(0, np.int64))) == 0
    with pytest.raises(RuntimeError, match="row 1000"):
        read_rows(record_files, RECORD, np.array([1000]))
