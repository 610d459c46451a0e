"""Curated files in the search index: one document per markdown section, re-read when a file changes.

Operators may edit curated files by hand, so the index keeps, per owner and file, the size and
mtime it indexed (``search_files``) and re-reads a file whose stamp moved (``sync_files``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from holon.memory import markdown
from holon.memory.index_schema import sidecar
from holon.memory.index_writer import Doc, _Writer
from holon.projections.framework import Host

__all__ = ["FileSource", "file_docs", "sync_files"]


@dataclass(frozen=True, slots=True)
class FileSource:
    """A curated file the index should hold, with the ref MemoryGet resolves."""

    owner: str
    ref: str
    path: Path
    title: str


def sync_files(ledger: Host, files: Iterable[FileSource], *, complete: Iterable[str] = ()) -> int:
    """Re-index the files that changed since they were last indexed. Returns how many did.

    ``complete`` names owners whose files ``files`` lists in full: an indexed file of theirs
    that is no longer listed was deleted (by hand, or moved away), and its documents go.
    """
    files = list(files)
    # (owner, ref, the file or None when it is gone from its listing, mtime, size)
    stale: list[tuple[str, str, FileSource | None, int, int]] = []
    for f in files:
        try:
            st = f.path.stat()
        except OSError:
            st = None
        mtime, size = (st.st_mtime_ns, st.st_size) if st is not None else (-1, -1)
        row = ledger.query("SELECT mtime_ns, size FROM search_files WHERE owner = ? AND path = ?", (f.owner, f.ref))
        if not row or tuple(row[0]) != (mtime, size):
            stale.append((f.owner, f.ref, f, mtime, size))
    listed = {(f.owner, f.ref) for f in files}
    for owner in dict.fromkeys(complete):
        for (ref,) in ledger.query("SELECT path FROM search_files WHERE owner = ?", (owner,)):
            if (owner, ref) not in listed:
                stale.append((owner, ref, None, -1, -1))
    if not stale:
        return 0
    with ledger.transaction() as tx:
        conn = sidecar(tx.conn)
        writer = _Writer(conn)
        for owner, ref, source, mtime, size in stale:
            prefix = f"{owner}|{ref}#"  # a range over the unique key index (keys start with the owner)
            for (doc_id,) in conn.execute(
                "SELECT id FROM search_docs WHERE key >= ? AND key < ? AND owner = ?",
                (prefix, prefix + "\U0010ffff", owner),
            ).fetchall():
                writer.delete(doc_id)
            if source is None:
                conn.execute("DELETE FROM search_files WHERE owner = ? AND path = ?", (owner, ref))
                continue
            if mtime >= 0:
                for doc in file_docs(source, mtime):
                    writer.upsert(doc)
            conn.execute(
                "INSERT INTO search_files(owner, path, mtime_ns, size) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(owner, path) DO UPDATE SET mtime_ns = excluded.mtime_ns, size = excluded.size",
                (source.owner, source.ref, mtime, size),
            )
        writer.finish()
    return len(stale)


def file_docs(f: FileSource, mtime_ns: int) -> Iterator[Doc]:
    """One document per markdown section (heading and the text up to the next heading)."""
    try:
        text = f.path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    ts = mtime_ns // 1_000
    for i, part in enumerate(markdown.parts(text)):
        heading, body = part.title, "\n".join(part.body).strip()
        if not body and not heading:
            continue
        title = f"{f.title} > {heading}" if heading else f.title
        yield Doc(f"{f.owner}|{f.ref}#{i}", f.ref, owner=f.owner, kind="file", ts_us=ts, title=title, text=body)
