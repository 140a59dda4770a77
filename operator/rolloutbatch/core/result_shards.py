"""Results past one ConfigMap: rows in append-only shards, a head document that indexes them.

A batch of at most ``rows_per_shard`` episodes keeps the guide's layout: one ConfigMap
(``<batch>-results``) whose document holds the summary, ``pods`` (every row) and ``groups``.
A bigger batch (decided by ``spec.episodes``, so it never changes mid-batch) keeps its rows in
shards ``<batch>-results-<n>`` in the order episodes became final. A shard is full at
``rows_per_shard`` rows or ``SHARD_BYTES`` of rows (the latter only while the rows left still fit
the shards ``MAX_SHARDS`` leaves: past that a shard fills by rows, and its document sheds row
fields as a whole batch's does, ``core.results.encode_results``), is written once more when it
fills, and never again: every checkpoint writes at most the open shard plus the head, so the write cost per row is
bounded whatever the batch's size. A group's entry (``core.groups``) is appended to
the shard that received the group's last row. The head then holds the summary and ``shards``
(name, rows, full) instead of ``pods``.

A shard's name is deterministic, so anyone with ConfigMap rights can take one before the
operator writes it. Such a name is skipped (listed in the index as ``skipped``) and its rows go to
the next free number: a neighbour's ConfigMap costs the batch nothing but a name.

:func:`assemble` turns a head and its shards back into one document with every row and group
entry; the SDK, the CLI and the operator's restore all read results through it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rolloutbatch.core.groups import group_entries, group_members
from rolloutbatch.core.model import BatchRef, EpisodeResult
from rolloutbatch.core.results import DROPPED, MAX_DOCUMENT_ROWS, dropped_fields, union_fields

DEFAULT_ROWS_PER_SHARD = 1000
SHARD_BYTES = 600 * 1024          # rows' JSON per shard; gzip and the 1 MiB limit leave the rest
# The status records a digest per results ConfigMap (service.results_store): a batch keeps at most
# this many shards (plus names others hold, skipped), whatever --results-shard-rows says and however
# big its rows, so the status stays far below the API's object size limit. Rows as big as an episode
# may make them (~24 KB) fill SHARD_BYTES in ~25 rows: 100,000 of them would need ~4,000 shards.
MAX_SHARDS = 1000


def rows_per_shard_for(episodes: int, rows_per_shard: int) -> int:
    """Rows per shard for a batch of ``episodes`` under --results-shard-rows ``rows_per_shard``: at
    most MAX_DOCUMENT_ROWS (a whole batch of more would not fit one ConfigMap, whatever the flag
    says), and enough that the batch needs at most MAX_SHARDS shards."""
    return max(1, min(rows_per_shard, MAX_DOCUMENT_ROWS), -(-episodes // MAX_SHARDS))


def shard_configmap_name(results_name: str, number: int) -> str:
    return f"{results_name}-{number}"


def is_results_configmap_name(results_name: str, name: str) -> bool:
    """Whether ``name`` is the head ``results_name`` or one of its shards' names."""
    number = name[len(results_name) + 1:] if name.startswith(f"{results_name}-") else ""
    return name == results_name or (number.isdigit() and shard_configmap_name(results_name, int(number)) == name)


@dataclass
class Shard:
    number: int
    indexes: list[int] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    size: int = 0
    full: bool = False
    dirty: bool = False
    skipped: bool = False     # its name is held by a ConfigMap not ours: never written, holds nothing


class ShardBook:
    """Which rows and group entries live in which shard, and which shards need a write."""

    def __init__(self, rows_per_shard: int = DEFAULT_ROWS_PER_SHARD, shard_bytes: int = SHARD_BYTES,
                 episodes: int | None = None) -> None:
        self.rows_per_shard = max(1, rows_per_shard)
        self.shard_bytes = shard_bytes
        self.episodes = episodes          # the rows the batch will have; None: unknown (no bound kept)
        self.shards: list[Shard] = []
        self.placed: set[int] = set()
        self.grouped: set[int] = set()
        self.taken: set[int] = set()      # numbers whose names are held by ConfigMaps not ours

    def _open(self) -> Shard:
        if not self.shards or self.shards[-1].full:
            while len(self.shards) in self.taken:
                self.shards.append(Shard(len(self.shards), full=True, skipped=True))
            self.shards.append(Shard(len(self.shards)))
        return self.shards[-1]

    def give_up_name(self, number: int) -> None:
        """Shard ``number``'s name is taken by a ConfigMap that is not ours: never use it, and
        place what it held (rows, group entries) anew in the next free shard."""
        self.taken.add(number)
        if number >= len(self.shards) or self.shards[number].skipped:
            return
        old = self.shards[number]
        self.shards[number] = Shard(number, full=True, skipped=True)
        size = old.size // max(1, len(old.indexes))
        self.placed.difference_update(old.indexes)
        self.grouped.difference_update(old.groups)
        for index in old.indexes:
            self.add_row(index, size)
        for group in old.groups:
            self.add_group(group)

    def add_row(self, index: int, row_bytes: int) -> None:
        if index in self.placed:
            return
        shard = self._open()
        shard.indexes.append(index)
        shard.size += row_bytes
        shard.dirty = True
        self.placed.add(index)
        if self._fills(shard):
            shard.full = True   # dirty until its last write; never written after that

    def _fills(self, shard: Shard) -> bool:
        """Whether ``shard`` is full: at ``rows_per_shard`` rows, or at ``shard_bytes`` while
        closing it leaves the rows not yet placed enough shards within MAX_SHARDS."""
        if len(shard.indexes) >= self.rows_per_shard:
            return True
        if shard.size < self.shard_bytes:
            return False
        if self.episodes is None:
            return True
        left = max(0, self.episodes - len(self.placed))
        limit = max(MAX_SHARDS, -(-self.episodes // self.rows_per_shard))
        return len(self.shards) + -(-left // self.rows_per_shard) <= limit

    def add_group(self, group: int) -> None:
        if group in self.grouped:
            return
        shard = self.shards[-1] if self.shards and not self.shards[-1].skipped else self._open()
        shard.groups.append(group)
        shard.dirty = True
        self.grouped.add(group)

    def dirty(self) -> list[Shard]:
        return [s for s in self.shards if s.dirty]

    def written(self, number: int) -> None:
        self.shards[number].dirty = False

    def index(self, results_name: str) -> list[dict]:
        return [{"name": shard_configmap_name(results_name, s.number), "rows": len(s.indexes), "full": s.full}
                | ({"skipped": True} if s.skipped else {}) for s in self.shards]

    def restore(self, shard_documents: Iterable[Mapping], valid_indexes: set[int], samples_per_input: int = 1) -> None:
        """Rebuild the book from the shards an earlier process wrote.

        A row is placed where it restores: one not in ``valid_indexes`` (the tracker refused it)
        or not well-typed is left out and placed anew when judged again, so a later good copy
        of a row a user broke is the one kept (placing the broken one let the next checkpoint
        drop the good one). A group's entry is kept only when every row of the group is placed.
        A number given up before (``give_up_name``) stays skipped: the name is still not ours."""
        by_number: dict[int, Mapping] = {}
        for doc in shard_documents:
            number = doc.get("shard")
            if type(number) is int and 0 <= number < 100_000 and number not in by_number:
                by_number[number] = doc
        for number in range(max(by_number, default=-1) + 1):
            if number in self.taken:
                self.shards.append(Shard(number, full=True, skipped=True))
                continue
            doc = by_number.get(number) or {}
            shard = Shard(number, full=doc.get("full") is True)
            for row in doc.get("pods") if isinstance(doc.get("pods"), list) else []:
                index = row.get("index") if isinstance(row, Mapping) else None
                if (type(index) is int and index in valid_indexes and index not in self.placed
                        and _well_typed(row)):
                    shard.indexes.append(index)
                    shard.size += len(json.dumps(row, default=str))
                    self.placed.add(index)
            for group in doc.get("groups") if isinstance(doc.get("groups"), list) else []:
                number_ = group.get("group") if isinstance(group, Mapping) else None
                if type(number_) is int and number_ not in self.grouped:
                    shard.groups.append(number_)
                    self.grouped.add(number_)
            self.shards.append(shard)
            if number < max(by_number) or self._fills(shard):
                shard.full = True   # a shard before the last one is closed, whatever it says
        k = max(1, samples_per_input)
        for shard in self.shards:   # a group whose rows did not all restore is completed again later
            kept = [g for g in shard.groups if all(i in self.placed for i in group_members(g, k))]
            self.grouped.difference_update(set(shard.groups) - set(kept))
            shard.groups = kept


def shard_document(ref: BatchRef, shard: Shard, rows: list[dict], groups: list[dict]) -> dict:
    return {"batch": ref.name, "namespace": ref.namespace, "uid": ref.uid, "shard": shard.number,
            "full": shard.full, "pods": rows, "groups": groups}


def assemble(head: Mapping, shards: Iterable[Mapping]) -> dict:
    """One document with every row (by index) and group entry, from a head and its shards.

    A head without ``shards`` is already whole. Shards of another batch (by ``uid``) are ignored.
    The row fields any shard read shed are named in ``dropped_row_fields``, as a whole document's.
    """
    document = dict(head)
    if "shards" not in head:
        return document
    shards = list(shards)
    rows: dict[int, Mapping] = {}
    groups: dict[int, Mapping] = {}
    read: set = set()
    shed: list[tuple[str, ...]] = []
    for doc in shards:
        if doc.get("uid") != head.get("uid"):
            continue
        read.add(doc.get("shard"))
        shed.append(dropped_fields(doc))
        for row in doc.get("pods") if isinstance(doc.get("pods"), list) else []:
            if isinstance(row, Mapping) and type(row.get("index")) is int:
                # Of two rows for one index, one that restores wins: a row a user broke is
                # judged again and written to a later shard.
                if row["index"] not in rows or (not _well_typed(rows[row["index"]]) and _well_typed(row)):
                    rows[row["index"]] = row
        for entry in doc.get("groups") if isinstance(doc.get("groups"), list) else []:
            if isinstance(entry, Mapping) and type(entry.get("group")) is int:
                groups.setdefault(entry["group"], entry)
    document["pods"] = [rows[i] for i in sorted(rows)]
    if fields := union_fields(dropped_fields(head), *shed):
        document[DROPPED] = fields
    episodes, k = head.get("episodes"), head.get("samples_per_input", 1)
    if type(episodes) is int and type(k) is int and 1 <= k and 0 <= episodes <= 100_000:
        # Every group, final or not, from the rows (shards list only the final ones).
        document["groups"] = group_entries(episodes, k, rows)
    else:
        document["groups"] = [groups[g] for g in sorted(groups)]
    document["shards_read"] = sorted(n for n in read if type(n) is int)
    listed = head.get("shards") if isinstance(head.get("shards"), list) else []
    document["missing_shards"] = [e.get("name") for n, e in enumerate(listed)
                                  if isinstance(e, Mapping) and n not in read and e.get("skipped") is not True]
    return document


def _well_typed(row: Mapping) -> bool:
    try:
        EpisodeResult.from_row(row)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError):
        return False
    return True
