"""NexMark events as Parquet: the files hold exactly the generator's events, in event order, and
`env.from_parquet` reads them back as the same events."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from runtime.connectors.parquet import ParquetSource
from runtime.workloads.nexmark import NexmarkConfig
from runtime.workloads.nexmark.__main__ import main
from runtime.workloads.nexmark.dataset import MANIFEST, write_events
from runtime.workloads.nexmark.generator import EVENT_SCHEMA, NexmarkGenerator
from vocabulary.ports import ManualClock

CONFIG = NexmarkConfig(seed=11, out_of_order_group_size=4)
COUNT = 5_003


def test_the_files_hold_the_generators_events_in_order(tmp_path) -> None:
    paths = write_events(CONFIG, COUNT, str(tmp_path), files=3, row_group_rows=700)
    assert [p.rsplit("/", 1)[1] for p in paths] == [f"events-0000{i}-of-00003.parquet" for i in range(3)]
    table = pq.read_table(paths)
    assert table.schema.remove_metadata() == EVENT_SCHEMA
    assert table.to_pylist() == NexmarkGenerator(CONFIG, COUNT).batch(np.arange(COUNT)).to_pylist()
    assert [pq.read_metadata(paths[0]).row_group(g).num_rows for g in range(3)] == [700, 700, 267]
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["count"] == COUNT and NexmarkConfig.from_dict(manifest["config"]) == CONFIG


def test_from_parquet_reads_the_same_events_as_the_source(tmp_path) -> None:
    write_events(CONFIG, COUNT, str(tmp_path), files=2, row_group_rows=1_000)
    source = ParquetSource(str(tmp_path))
    rows = []
    for split in source.splits():
        reader = source.reader(split, ManualClock())
        while not reader.finished():
            rows.extend(reader.read(333))
    records = NexmarkGenerator(CONFIG, COUNT).records(np.arange(COUNT))
    assert [{k: v for k, v in row.items() if v is not None} for row in rows] == records


def test_the_command_line_writes_what_its_options_say(tmp_path, capsys) -> None:
    assert main(["--events", "1000", "--out", str(tmp_path), "--seed", "11", "--out-of-order", "4",
                 "--hot-ratio", "50", "--files", "2"]) == 0
    assert "wrote 1,000 events in 2 file(s)" in capsys.readouterr().out
    expected = NexmarkGenerator(NexmarkConfig(seed=11, out_of_order_group_size=4).with_hot_ratio(50), 1000)
    assert pq.read_table(str(tmp_path)).to_pylist() == expected.batch(np.arange(1000)).to_pylist()
    with pytest.raises(SystemExit) as exit_info:
        main(["--events", "10", "--out", str(tmp_path), "--files", "0"])
    assert exit_info.value.code == 2
    assert "files must be an integer >= 1, got 0" in capsys.readouterr().err
