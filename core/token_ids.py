"""Token ids read from a dataset's shards stay inside its vocabulary: checked on the driver before a stage reads
them (`core.dataset.verify`), so that a shard whose ids a model cannot look up (one crafted, with its sha256
in the manifest made to match) is one line naming it, not an IndexError from inside a Ray worker.

The check reads the id columns a row group at a time (memory: one row group's ids) and takes their minimum and
maximum over the flattened lists (`pyarrow.compute.min_max`): the Parquet statistics in the footer are not
trusted, a crafted file holds what its writer chose there.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow.compute as pc

from core import storage


def check_token_ids(
    location: storage.Where,
    columns: Sequence[str],
    vocab_size: int,
    *,
    named_in: str,
    error: type[Exception],
    advice: str = "",
) -> None:
    """`error`, one line naming the shard at `location`, the column and the id, when a list column of
    `columns` (those the shard holds) has an id below 0 or at or above `vocab_size` (the vocabulary of the
    dataset `named_in` describes); `advice` ends the message."""
    parquet = storage.open_parquet(location)
    present = [name for name in columns if name in parquet.schema_arrow.names]
    for group in range(parquet.num_row_groups if present else 0):
        table = parquet.read_row_group(group, columns=present)
        for name in present:
            values = pc.list_flatten(table[name])
            if len(values) == values.null_count:
                continue
            low, high = (pc.min_max(values)[end].as_py() for end in ("min", "max"))
            if low < 0 or high >= vocab_size:
                bad = low if low < 0 else high
                raise error(
                    f"{location}: column {name} holds token id {bad}, outside the vocabulary [0, {vocab_size}) "
                    f"of {named_in}: the shard is damaged or was crafted{advice}"
                )
