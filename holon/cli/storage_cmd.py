"""``holon storage migrate --to URL``: move a home's ledger to another engine (RFC 0008, section 6).

Three parts, each reported on its own so a user knows which ran: the copy (``holon.ledger.move``),
``verify`` on the target (chain, gapless, blob hashes, and the same head hash as the source), and
the projections rebuilt on the target by catch-up and checked by ``replay``. Exit 0 when all that
could run passed; 2 for a bad, unreachable or non-empty target; 1 when the copy fails verification.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit
from holon.errors import ConflictError, HolonError, UsageError

if TYPE_CHECKING:
    from holon.config import HomePaths, Settings
    from holon.ledger import Ledger
    from holon.ledger.engine import Engine

app = typer.Typer(help="Where the ledger lives: move a home between SQLite and PostgreSQL.", no_args_is_help=True)


def _engine(paths: HomePaths, settings: Settings, url: str) -> tuple[Settings, Engine]:
    """The unopened engine ``url`` names (with the home's other storage settings)."""
    from pydantic import ValidationError

    from holon.config import StorageSettings
    from holon.ledger.engines import engine_for

    try:
        storage = StorageSettings.model_validate({**settings.storage.model_dump(), "url": url})
    except ValidationError as e:
        raise UsageError(f"bad storage URL {url!r}: {e.errors()[0]['msg']}") from e
    s = settings.model_copy(update={"storage": storage})
    return s, engine_for(paths, s)


def _open_target(engine: Engine, clock: Any) -> Ledger:
    from holon.ledger import Ledger
    from holon.ledger.move import TargetRefused
    from holon.projections.projector import Projector

    try:
        return Ledger(engine, clock=clock, hooks=[Projector()], create=True)
    except HolonError as e:
        if e.exit_code == 2:  # unreachable: already one line with exit 2
            raise
        raise TargetRefused(f"cannot use {engine.location} as the target: {e}") from e


@contextlib.contextmanager
def _host_lock(root: Path) -> Iterator[None]:
    """Hold the home's host lock (``AgentHost.start``'s) for the whole move: a running daemon
    would append to the source behind the copy's back, so it must be stopped, and none may start."""
    path = root / "run" / "host.lock"
    if not path.parent.is_dir():
        yield
        return
    with path.open("a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            fh.seek(0)
            owner = fh.read().strip() or "?"
            raise ConflictError(
                f"a holon process (pid {owner}) is running agents in this home: stop it ('holon daemon stop') "
                "before moving its ledger"
            ) from e
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@app.command("migrate")
def migrate(
    ctx: typer.Context,
    to: Annotated[str, typer.Option("--to", help="Target: postgresql://USER@HOST:PORT/DB or sqlite:///PATH (empty).")],
    source: Annotated[
        str | None, typer.Option("--from", help="Source URL instead of the home's own storage ([storage] url).")
    ] = None,
    chunk: Annotated[int, typer.Option(min=1, max=1_000_000, help="Events per transaction on the target.")] = 10_000,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Copy the ledger (events and blobs, as stored) into an empty database, verify it there and
    rebuild the projections from it. The home's daemon must be stopped; the source is not changed."""
    from holon.clock import SystemClock
    from holon.config import load_settings
    from holon.errors import HomeNotFoundError

    c = ctx_of(ctx, home, json_out)
    settings = load_settings(c.paths)
    clock = SystemClock()
    if source is None:
        if not c.paths.db.exists() and not settings.storage.url:
            raise HomeNotFoundError(f"no holon home at {c.paths.root} (run 'holon init' or pass --home)")
        _, src = _engine(c.paths, settings, settings.storage.url or f"sqlite:///{c.paths.db}")
    else:
        _, src = _engine(c.paths, settings, source)
    tgt_settings, tgt = _engine(c.paths, settings, to)
    if src.location == tgt.location:
        raise UsageError(f"the target is the source ({src.location})")
    with _host_lock(c.paths.root) if source is None else contextlib.nullcontext():
        src.open(create=False, now_us=clock.now_us)
        try:
            target = _open_target(tgt, clock)
            try:
                data = _run(c.json, src, target, tgt_settings, c.paths, chunk=chunk)
            finally:
                target.close()
        finally:
            src.close()
    _report(c, data)


def _run(
    quiet: bool, src: Engine, target: Ledger, settings: Settings, paths: HomePaths, *, chunk: int
) -> dict[str, Any]:
    from holon.cli.progress import progress
    from holon.ledger.move import TargetRefused, copy_ledger

    with src.reader() as r:
        total = src.head(r).seq
    data: dict[str, Any] = {"source": src.location, "target": target.engine.location}
    with progress("copying the ledger", total or None, quiet=quiet) as bar:
        try:
            res = copy_ledger(src, target.engine, chunk=chunk, progress=bar.update)
        except TargetRefused:
            raise
        except HolonError as e:  # the chunks committed so far stay: say so, and how to start again
            e.message = f"{e.message} (the target keeps the chunks copied so far: empty it before retrying)"
            e.args = (e.message,)
            raise
    data["copy"] = {
        "events": res.events,
        "blobs": res.blobs,
        "head_seq": res.head_seq,
        "head_hash": res.head_hash,
        "seconds": round(res.seconds, 3),
        "events_per_s": round(res.events_per_s, 1),
    }
    t0 = time.perf_counter()
    v = target.verify()
    ok = v.ok and v.events == res.events and target.head() == res.head_seq
    data["verify"] = {"ok": ok, "events": v.events, "seconds": round(time.perf_counter() - t0, 3)}
    if v.problem:
        data["verify"]["problem"] = v.problem
    if not ok:
        data["projections"] = {"rebuilt": False, "reason": "verification failed"}
        return data
    data["projections"] = _rebuild(target, settings, paths)
    if data["projections"]["rebuilt"]:
        data["evolve"] = _copy_queue(src, target, settings, paths)
        data["hook_tokens"] = _copy_tokens(src, target, settings, paths)
    return data


def _copy_queue(src: Engine, target: Ledger, settings: Settings, paths: HomePaths) -> dict[str, Any]:
    """The evolve queue's jobs and cursor, copied as stored (done and dead jobs are not derivable)."""
    from holon.evolve.jobs import copy_queue
    from holon.projections.projector import Projector
    from holon.projections.store import Store

    projector = next(h for h in target.hooks if isinstance(h, Projector))
    with src.reader() as r:
        jobs = copy_queue(r, Store(paths, settings, target, projector)) if src.has_table(r, "evolve_jobs") else 0
    return {"jobs": jobs}


def _copy_tokens(src: Engine, target: Ledger, settings: Settings, paths: HomePaths) -> dict[str, Any]:
    """Hook tokens, so a moved home's URLs keep working: the home's file is a SQLite home's record,
    the ``hook_tokens`` table a PostgreSQL one's; a SQLite file other than the home's has none."""
    from holon.daemon.hooks import HookTokens, TokenMap, hook_tokens
    from holon.projections.projector import Projector
    from holon.projections.store import Store

    def home_file(engine: Engine) -> bool:
        return engine.dialect == "sqlite" and Path(engine.location).resolve() == paths.db.resolve()

    if src.dialect == "postgresql":
        with src.reader() as r:
            have = src.has_table(r, "hook_tokens")
            rows = r.fetchall("SELECT agent_id, token FROM hook_tokens", ()) if have else []
        tokens = {str(a): str(t) for a, t in rows}
    elif home_file(src):
        tokens = HookTokens(paths.root).all()
    else:
        return {"tokens": 0, "reason": "the source is not this home's file"}
    if not tokens:
        return {"tokens": 0}
    sink: TokenMap
    if target.engine.dialect == "postgresql":
        projector = next(h for h in target.hooks if isinstance(h, Projector))
        sink = hook_tokens(Store(paths, settings, target, projector))
    elif home_file(target.engine):
        sink = HookTokens(paths.root)
    else:
        return {"tokens": 0, "reason": "the target is not this home's file"}
    sink.load(tokens)
    return {"tokens": len(tokens)}


def _rebuild(target: Ledger, settings: Settings, paths: HomePaths) -> dict[str, Any]:
    """Projections rebuilt on the target by catch-up (not copied), then compared by ``replay``."""
    from holon.projections.projector import Projector
    from holon.projections.store import Store

    projector = next(h for h in target.hooks if isinstance(h, Projector))
    store = Store(paths, settings, target, projector)
    t0 = time.perf_counter()
    try:
        store.catch_up()
        r = store.replay()
    except HolonError as e:
        return {"rebuilt": False, "reason": f"not supported on this engine yet: {e}"}
    out: dict[str, Any] = {"rebuilt": True, "replay_ok": r.ok, "seconds": round(time.perf_counter() - t0, 3)}
    if not r.ok:
        out["mismatches"] = r.mismatches
    return out


def _report(c: Any, data: dict[str, Any]) -> None:
    cp, v, pj = data["copy"], data["verify"], data["projections"]
    lines = [
        f"copied {cp['events']} events and {cp['blobs']} blobs from {data['source']} to {data['target']} "
        f"in {cp['seconds']:.1f} s ({cp['events_per_s']:,.0f} events/s)",
        f"verify on the target: {'ok' if v['ok'] else 'FAILED: ' + v.get('problem', 'head or count differs')} "
        f"({v['events']} events, head {cp['head_seq']})",
    ]
    if pj["rebuilt"]:
        lines.append(
            f"projections rebuilt on the target: {'replay identical' if pj['replay_ok'] else 'REPLAY DIFFERS'}"
        )
    else:
        lines.append(f"projections not rebuilt: {pj['reason']}")
    if "evolve" in data:
        lines.append(f"evolve jobs copied as stored: {data['evolve']['jobs']}")
    if "hook_tokens" in data:
        ht = data["hook_tokens"]
        why = f" ({ht['reason']}: they are minted anew on first use)" if "reason" in ht else ""
        lines.append(f"hook tokens copied: {ht['tokens']}{why}")
    emit(c, data, "\n".join(lines))
    if not v["ok"] or (pj["rebuilt"] and not pj["replay_ok"]):
        raise typer.Exit(1)
