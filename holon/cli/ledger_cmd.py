"""``holon ledger ...``: read, check, replay and maintain the ledger."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import Ctx, HomeOpt, JsonOpt, ctx_of, emit, open_store
from holon.clock import format_us

if TYPE_CHECKING:
    from holon.ledger import Event

app = typer.Typer(help="Read, verify, replay and maintain the ledger.", no_args_is_help=True)

#: The largest integer SQLite can bind; larger command-line numbers are usage errors, not crashes.
_SQLITE_MAX_INT = 2**63 - 1

AgentOpt = Annotated[str | None, typer.Option("--agent", help="Only this agent's events (name or id).")]


def _summary(event: Event) -> str:
    data = event.payload.model_dump(mode="json", exclude={"type"})
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 100 else text[:97] + "..."


def _event_json(event: Event) -> dict[str, Any]:
    from holon.ledger.store import canonical_event

    return json.loads(canonical_event(event))


def _print_event(c: Ctx, event: Event, names: dict[str, str]) -> None:
    if c.json:
        sys.stdout.write(json.dumps(_event_json(event), ensure_ascii=False, sort_keys=True) + "\n")
    else:
        who = names.get(event.agent_id, event.agent_id)
        sys.stdout.write(f"{event.seq:>8}  {format_us(event.ts_us)}  {who:<12}  {event.type:<22}  {_summary(event)}\n")
    sys.stdout.flush()


@app.command("tail")
def tail(
    ctx: typer.Context,
    agent: AgentOpt = None,
    lines: Annotated[
        int, typer.Option("-n", "--lines", min=1, max=_SQLITE_MAX_INT, help="How many recent events.")
    ] = 20,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print the most recent events (JSON lines with --json); --follow keeps watching."""
    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        agent_id = store.agent(agent).agent_id if agent else None
        names = {a.agent_id: a.name for a in store.agents()}
        events = store.ledger.tail(lines, agent_id=agent_id)
        for event in events:
            _print_event(c, event, names)
        last = events[-1].seq if events else store.ledger.head()
        while follow:
            time.sleep(0.25)
            for event in store.ledger.read(last, agent_id=agent_id):
                if event.agent_id not in names:
                    names = {a.agent_id: a.name for a in store.agents()}
                _print_event(c, event, names)
                last = event.seq


@app.command("show")
def show(
    ctx: typer.Context,
    seq: Annotated[int, typer.Argument(max=_SQLITE_MAX_INT, help="Sequence number of the event.")],
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one event in full, with the state of any blob it references."""
    from holon.ledger.events import BlobRef

    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        event = store.ledger.get(seq)
        data = _event_json(event)
        blobs = {}
        for name, value in event.payload:
            if isinstance(value, BlobRef):
                body = store.ledger.read_blob(value)
                blobs[name] = {"hash": body.hash, "size": body.size, "pruned": body.pruned}
    if blobs:
        data["blobs"] = blobs
    emit(c, data, json.dumps(data, ensure_ascii=False, sort_keys=True, indent=2))


@app.command("stats")
def stats(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Events and payload bytes per event type, blob bytes, database size."""
    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        s = store.ledger.stats()
    data = {
        "events": s.events,
        "head_seq": s.head_seq,
        "by_type": s.by_type,
        "blobs": s.blobs,
        "blob_bytes": s.blob_bytes,
        "blobs_pruned": s.blobs_pruned,
        "db_bytes": s.db_bytes,
    }
    lines = [f"{'type':<24} {'events':>10} {'payload bytes':>14}"]
    lines += [f"{t:<24} {v['count']:>10} {v['payload_bytes']:>14}" for t, v in s.by_type.items()]
    lines.append(f"{'total':<24} {s.events:>10} {sum(v['payload_bytes'] for v in s.by_type.values()):>14}")
    lines.append(f"blobs: {s.blobs} ({s.blob_bytes} bytes stored, {s.blobs_pruned} pruned)")
    lines.append(f"database file: {s.db_bytes} bytes")
    emit(c, data, "\n".join(lines))


@app.command("verify")
def verify(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Check the file, the gapless hash chain and the anchor; list bad rows as (seq, reason).

    Exit 0 when sound, 1 for bad rows, a broken chain or events lost (the anchor outside the
    database says more were committed), 5 when the database file itself is damaged or unreadable.
    """
    from holon.runtime.home import open_home

    c = ctx_of(ctx, home, json_out)
    with open_home(c.paths, catch_up=False) as store:  # a catch-up could trip on the damage verify reports
        r = store.ledger.verify()
    data: dict[str, Any] = {"ok": r.ok, "events": r.events, "first_bad_seq": r.first_bad_seq}
    if r.problem:
        data["problem"] = r.problem
    if r.bad_rows:
        data["bad_rows"] = [{"seq": seq, "reason": reason} for seq, reason in r.bad_rows]
        data["bad_row_count"] = r.bad_row_count
    if r.lost:
        data["lost"] = r.lost
    if r.anchor_seq is not None and not r.ok:
        data["anchor_seq"] = r.anchor_seq
    if r.ok:
        human = f"ok: {r.events} events, hash chain intact" + (
            f", anchor at seq {r.anchor_seq}" if r.anchor_seq is not None else ""
        )
    else:
        lines = [f"NOT OK: {r.problem}"]
        lines += [f"  event {seq}: {reason}" for seq, reason in r.bad_rows]
        if r.bad_row_count > len(r.bad_rows):
            lines.append(f"  ... {r.bad_row_count - len(r.bad_rows)} more bad rows")
        human = "\n".join(lines)
    emit(c, data, human)
    if not r.ok:
        raise typer.Exit(1)


@app.command("replay")
def replay(ctx: typer.Context, home: HomeOpt = None, json_out: JsonOpt = False) -> None:
    """Rebuild all projections from seq 0 into scratch tables and compare with the live ones.

    Exit 1 when they differ or an event cannot be read (see ``holon ledger verify``), 5 when the
    database file is damaged."""
    c = ctx_of(ctx, home, json_out)
    from holon.cli.progress import progress

    with open_store(c) as store, progress("replaying the ledger", store.ledger.head() or None, quiet=c.json) as bar:
        r = store.replay(progress=bar.update)
    data: dict[str, object] = {
        "ok": r.ok,
        "events": r.events,
        "mismatches": r.mismatches,
        "events_per_s": round(r.events_per_s, 1),
    }
    if r.examples:
        data["examples"] = r.examples
    if not r.cursor_ok:
        data["cursor_ok"] = False
    if r.bad_rows:
        data["bad_rows"] = [{"seq": seq, "reason": reason} for seq, reason in r.bad_rows]
    if r.ok:
        human = f"ok: {r.events} events replayed into {r.rows} rows, identical ({r.events_per_s:,.0f} events/s)"
    elif r.bad_rows:
        seq, reason = r.bad_rows[0]
        human = f"NOT OK: {len(r.bad_rows)} events cannot be read (event {seq}: {reason}); run 'holon ledger verify'"
    else:
        human = f"NOT OK: {r.mismatches} rows differ (e.g. {', '.join(r.examples)})"
    emit(c, data, human)
    if not r.ok:
        raise typer.Exit(1)


@app.command("prune")
def prune(
    ctx: typer.Context,
    older_than_days: Annotated[
        int | None, typer.Option(min=0, max=36_500, help="Override [ledger] blob_retention_days for this run.")
    ] = None,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Drop blob bodies past their retention; events and the hash chain are never touched."""
    c = ctx_of(ctx, home, json_out)
    with open_store(c) as store:
        days = store.settings.ledger.blob_retention_days if older_than_days is None else older_than_days
        if days == 0 and older_than_days is None:
            emit(c, {"pruned": 0, "retention_days": 0}, "retention is off (blob_retention_days = 0): nothing pruned")
            return
        cutoff = store.ledger.clock.now_us() - days * 86_400_000_000
        n = store.ledger.prune_blobs(older_than_us=cutoff)
    emit(c, {"pruned": n, "retention_days": days}, f"pruned {n} blob bodies older than {days} days")
