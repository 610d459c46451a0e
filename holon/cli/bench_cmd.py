"""``holon bench ...``: benchmarks that report ratios to a physical baseline measured in the same run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import JsonOpt, ctx_of, emit

if TYPE_CHECKING:
    from holon.memory.search import RankParams

app = typer.Typer(help="Benchmarks (each measures its own baseline in the same run).", no_args_is_help=True)


@app.callback()
def _quiet() -> None:
    """Benchmarks log nothing: their homes are temporary and the output is their report."""
    from holon.logs import configure_logging

    configure_logging(console="off")


@contextmanager
def _progress(name: str) -> Iterator[None]:
    """Show the bench's ``step`` calls on stderr: a bar on a terminal, a few plain lines otherwise."""
    from holon.bench.progress import reporting
    from holon.cli.progress import progress

    with progress(f"bench {name}") as bar:

        def sink(label: str, done: int, total: int | None) -> None:
            bar.update(done, total, label=f"bench {name}: {label}")

        with reporting(sink):
            yield


@app.command("ledger")
def ledger(
    ctx: typer.Context,
    events: Annotated[
        int, typer.Option("--events", min=1000, help="Ledger size for the replay measurement.")
    ] = 100_000,
    rounds: Annotated[int, typer.Option(min=1, help="Alternating rounds; medians are reported.")] = 3,
    synchronous: Annotated[str, typer.Option(help="PRAGMA synchronous for both sides.")] = "NORMAL",
    json_out: JsonOpt = False,
) -> None:
    """Append throughput (CPU time) vs raw sqlite3 on the same table and a bare one, and eventsourcing's
    SQLite recorder when installed; replay speed."""
    from holon.bench.ledger import format_report, run_ledger_bench

    c = ctx_of(ctx, None, json_out)
    with _progress("ledger"):
        result = run_ledger_bench(replay_events=events, rounds=rounds, synchronous=synchronous.upper())
    emit(c, result, format_report(result))


@app.command("turn")
def turn(
    ctx: typer.Context,
    events: Annotated[
        int,
        typer.Option(
            "--large-events", "--events", min=10_000, help="Events in the large ledger (filling 1M takes minutes)."
        ),
    ] = 1_000_000,
    turns: Annotated[int, typer.Option(min=20, help="Measured turns per ledger size.")] = 200,
    history_turns: Annotated[
        int, typer.Option(min=1, help="Settled turns of the measured agent, the same on both ledgers.")
    ] = 200,
    synchronous: Annotated[str, typer.Option(help="PRAGMA synchronous.")] = "NORMAL",
    json_out: JsonOpt = False,
) -> None:
    """Runtime overhead per turn (model time excluded): the same agent history in a small and a large ledger."""
    from holon.bench.turn import format_report, run_turn_bench

    c = ctx_of(ctx, None, json_out)
    with _progress("turn"):
        result = run_turn_bench(
            large_events=events, turns=turns, history_turns=history_turns, synchronous=synchronous.upper()
        )
    emit(c, result, format_report(result))


@app.command("context")
def context(
    ctx: typer.Context,
    events: Annotated[int, typer.Option("--events", min=10_000, help="Ledger size.")] = 1_000_000,
    samples: Annotated[int, typer.Option(min=20, help="Measured turns per budget.")] = 100,
    json_out: JsonOpt = False,
) -> None:
    """Context assembly latency at 8k/32k/128k budgets on a large ledger, and prefix stability."""
    from holon.bench.context import format_report, run_context_bench

    c = ctx_of(ctx, None, json_out)
    with _progress("context"):
        result = run_context_bench(events=events, samples=samples)
    emit(c, result, format_report(result))


@app.command("continuity")
def continuity(
    ctx: typer.Context,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Directory of scenario files (default: the repo's tests/scenarios).")
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh/--no-fresh", help="Check that a fresh process rebuilds the same prompts.")
    ] = True,
    json_out: JsonOpt = False,
) -> None:
    """Continuity scenarios under every variant (plain, paraphrase, zh, long filler, 30-turn prefix) at
    every budget: cells passed per variant. What the rendered prompt shows is checked, not what was declared."""
    from holon.bench.continuity import DEFAULT_DIR, format_report, run_continuity_bench

    c = ctx_of(ctx, None, json_out)
    with _progress("continuity"):
        result = run_continuity_bench(directory or DEFAULT_DIR, fresh_check=fresh)
    emit(c, result, format_report(result))


def _sizes(text: str) -> tuple[int, ...]:
    from holon.errors import UsageError

    try:
        sizes = tuple(int(x.replace("_", "")) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise UsageError(f"--docs takes comma-separated document counts, not {text!r}") from e
    if not sizes or min(sizes) < 1_000:
        raise UsageError(f"--docs needs document counts of at least 1000, got {text!r}")
    return sizes


@app.command("cli")
def cli(
    ctx: typer.Context,
    runs: Annotated[int, typer.Option("--runs", min=1, help="Runs of holon --help (and python -c pass).")] = 10,
    daemon_runs: Annotated[
        int, typer.Option("--daemon-runs", min=1, help="Runs of holon run through a real daemon.")
    ] = 10,
    json_out: JsonOpt = False,
) -> None:
    """What the CLI costs: holon --help vs python -c pass, holon run via a daemon vs the bare API."""
    from holon.bench.cli import format_report, run_cli_bench

    c = ctx_of(ctx, None, json_out)
    result = run_cli_bench(runs=runs, daemon_runs=daemon_runs)
    emit(c, result, format_report(result))


@app.command("daemon")
def daemon(
    ctx: typer.Context,
    agents: Annotated[int, typer.Option(min=1, help="Agents driven at once.")] = 100,
    turns: Annotated[int, typer.Option(min=1, help="Turns per agent, one after the other.")] = 20,
    latency_ms: Annotated[float, typer.Option(min=0, help="The scripted model's latency per call.")] = 100.0,
    idle_agents: Annotated[int, typer.Option(min=1, help="Registered agents for the idle RSS and CPU.")] = 1_000,
    idle_window_s: Annotated[
        float, typer.Option(min=0.5, help="Seconds the idle daemon's CPU is measured over.")
    ] = 10.0,
    events_small: Annotated[int, typer.Option(min=100, help="Ledger size of the small restart.")] = 10_000,
    events_large: Annotated[int, typer.Option(min=100, help="Ledger size of the large restart.")] = 1_000_000,
    restart_agents: Annotated[int, typer.Option(min=1, help="Agents in the restart ledgers.")] = 100,
    restart_runs: Annotated[int, typer.Option(min=1, help="Measured starts per restart size (median).")] = 3,
    input_clients: Annotated[
        str, typer.Option(help="Concurrent posting clients of the input section, comma-separated.")
    ] = "1,8,32",
    inputs: Annotated[int, typer.Option(min=1, help="Inputs posted per client count (split among the clients).")] = 960,
    input_agents: Annotated[int, typer.Option(min=1, help="Paused agents the inputs go to, per client count.")] = 10,
    input_rounds: Annotated[
        int, typer.Option(min=1, help="Rounds of the input section, group commit on and off alternating (median).")
    ] = 3,
    sections: Annotated[
        str, typer.Option(help="Which to run, comma-separated: throughput, idle, restart, inputs.")
    ] = "throughput,idle,restart,inputs",
    json_out: JsonOpt = False,
) -> None:
    """Many agents through the real daemon process: turns/s against the model's latency bound, CPU per
    turn, idle RSS and restart time; inputs per second over HTTP with group commit and without."""
    from holon.bench.daemon import SECTIONS, format_report, run_daemon_bench
    from holon.errors import UsageError

    c = ctx_of(ctx, None, json_out)
    chosen = tuple(s.strip() for s in sections.split(",") if s.strip())
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown or not chosen:
        raise UsageError(f"--sections {sections!r}: choose from {', '.join(SECTIONS)}")
    try:
        levels = tuple(int(n) for n in input_clients.split(",") if n.strip())
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise UsageError(f"--input-clients {input_clients!r}: positive whole numbers, comma-separated (1,8,32)")
    with _progress("daemon"):
        result = run_daemon_bench(
            agents=agents, turns=turns, latency_ms=latency_ms, idle_agents=idle_agents,
            idle_window_s=idle_window_s,
            events_small=events_small, events_large=events_large,
            restart_agents=restart_agents, restart_runs=restart_runs,
            input_clients=levels, inputs=inputs, input_agents=input_agents, input_rounds=input_rounds,
            sections=chosen,
        )  # fmt: skip
    emit(c, result, format_report(result))


@app.command("dashboard")
def dashboard(
    ctx: typer.Context,
    agents: Annotated[int, typer.Option(min=1, help="Registered agents on the agents page.")] = 1_000,
    samples: Annotated[int, typer.Option(min=1, help="Timed GETs of the agents page (and of the anchor).")] = 30,
    live_inputs: Annotated[int, typer.Option(min=1, help="Messages posted while following the live view.")] = 30,
    json_out: JsonOpt = False,
) -> None:
    """The dashboard over real HTTP: the agents page with many agents against the same daemon's JSON list,
    and the live view's delay from an input's acknowledgement to its event on the page's stream."""
    from holon.bench.dashboard import format_report, run_dashboard_bench

    c = ctx_of(ctx, None, json_out)
    with _progress("dashboard"):
        result = run_dashboard_bench(agents=agents, samples=samples, live_inputs=live_inputs)
    emit(c, result, format_report(result))


@app.command("chaos")
def chaos(
    ctx: typer.Context,
    kills: Annotated[int, typer.Option(min=0, help="SIGKILLs of the daemon, at random moments of the load.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the kill moments, input sizes and agents chosen.")] = 1,
    duration_s: Annotated[float, typer.Option(min=1, help="Seconds of load (longer if the kills need it).")] = 30.0,
    agents: Annotated[int, typer.Option(min=1, help="Agents on the scripted model.")] = 4,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent posting clients.")] = 3,
    latency_ms: Annotated[float, typer.Option(min=0, help="The scripted model's latency per call.")] = 50.0,
    drain_s: Annotated[
        float, typer.Option(min=1, help="How long the daemon may take to go idle after the load.")
    ] = 60.0,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Build the home here and keep it (default: a temporary one).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """SIGKILL the daemon under mixed-size HTTP load with idempotent retries; account for every
    acknowledged input from the ledger. Exit code 1 unless none was lost, unanswered or answered twice."""
    from holon.bench.chaos import format_report, run_chaos_bench
    from holon.errors import UsageError

    c = ctx_of(ctx, None, json_out)
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise UsageError(f"--dir {directory} is not empty; the bench builds a new home there")
    with _progress("chaos"):
        result = run_chaos_bench(
            agents=agents, clients=clients, duration_s=duration_s, kills=kills, seed=seed, latency_ms=latency_ms,
            drain_s=drain_s, directory=directory,
        )  # fmt: skip
    emit(c, result, format_report(result))
    if not result["ok"]:
        raise typer.Exit(1)


@app.command("search")
def search_bench(
    ctx: typer.Context,
    docs: Annotated[
        str, typer.Option("--docs", help="Index sizes to measure, comma-separated; built in ascending order.")
    ] = "100000,1000000",
    queries: Annotated[int, typer.Option("--queries", min=2, help="Measured queries per class and size.")] = 50,
    seed: Annotated[int, typer.Option(help="Seed of the generated documents and queries.")] = 7,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Build the home here and keep it (default: a temporary one).")
    ] = None,
    exact: Annotated[
        bool, typer.Option("--exact/--no-exact", help="Also rank each query exactly, for recall@10 (slow at 1M).")
    ] = True,
    json_out: JsonOpt = False,
) -> None:
    """MemorySearch p50/p95 on large indexes (rare, common, multi-word queries) vs a body-only FTS5 index and
    tantivy (when installed) built from the same documents; recall@10 against holon's exact ranking; index size."""
    from holon.bench.search import format_report, run_search_bench
    from holon.errors import UsageError

    c = ctx_of(ctx, None, json_out)
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise UsageError(f"--dir {directory} is not empty; the bench builds a new home there")
    with _progress("search"):
        result = run_search_bench(sizes=_sizes(docs), queries=queries, seed=seed, directory=directory, exact=exact)
    emit(c, result, format_report(result))


@app.command("locomo")
def locomo(
    ctx: typer.Context,
    data: Annotated[Path, typer.Option("--data", help="Directory of LoCoMo conversation files (conv-*.json).")] = Path(
        "../shared/datasets/locomo"
    ),
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="Report recall@K beside recall@5/10/20.")] = 10,
    embeddings: Annotated[
        str,
        typer.Option(
            "--embeddings", help="none (lexical only), local (holon[embed] MiniLM) or a litellm embedding model."
        ),
    ] = "none",
    weights: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a ranking weight, e.g. --set segment=0 (repeatable; names: holon.memory.search.RankParams). "
            "How RFC 0004 measures each signal.",
        ),
    ] = None,
    conversations: Annotated[
        str,
        typer.Option(
            "--conversations",
            help="all (every file in --data), development (conv-26/30/41/42/43), held-out (conv-44/47/48/49/50) "
            "or names separated by commas.",
        ),
    ] = "all",
    json_out: JsonOpt = False,
) -> None:
    """MemorySearch recall@k on LoCoMo: every turn appended as a message, every question searched."""
    from holon.bench.locomo import format_report, run_locomo_bench
    from holon.config import MemorySettings, Settings
    from holon.runtime.embedders import embedder_from_settings

    c = ctx_of(ctx, None, json_out)
    name = "" if embeddings == "none" else embeddings
    embedder = embedder_from_settings(Settings(memory=MemorySettings(embeddings=name)))
    with _progress("locomo"):
        result = run_locomo_bench(
            data, k=k, embedder=embedder, params=_rank_params(weights or []), conversations=conversations
        )
    emit(c, result, format_report(result))


def _rank_params(pairs: list[str]) -> RankParams:
    import dataclasses

    from holon.errors import UsageError
    from holon.memory.search import RankParams

    known = {f.name: f.type for f in dataclasses.fields(RankParams) if f.name != "kind_weights"}
    changes: dict[str, Any] = {}  # Any: each value has its field's type, int or float (checked above)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            raise UsageError(f"--set takes NAME=NUMBER with NAME one of {', '.join(sorted(known))}; got {pair!r}")
        try:
            changes[key] = int(value) if known[key] in (int, "int") else float(value)
        except ValueError as e:
            raise UsageError(f"--set {key}: {value!r} is not a number") from e
    return RankParams(**changes)


@app.command("cluster")
def cluster(
    ctx: typer.Context,
    nodes: Annotated[str, typer.Option(help="Node counts of the throughput points, comma-separated.")] = "1,2,3",
    per_node: Annotated[int, typer.Option(min=1, help="Busy agents per node (its concurrency cap).")] = 2,
    latency_ms: Annotated[
        float, typer.Option(min=0, help="The fake model's latency per call (200 makes 3 nodes CPU-bound on 2 cores).")
    ] = 1000.0,
    seconds: Annotated[float, typer.Option(min=1, help="Seconds counted per throughput point.")] = 15.0,
    samples: Annotated[int, typer.Option(min=0, help="Failover samples (SIGKILLs) on three nodes.")] = 3,
    lease_s: Annotated[float, typer.Option(min=0.5, help="The nodes' lease in the failover samples.")] = 15.0,
    rounds: Annotated[int, typer.Option(min=1, help="Alternating append rounds; medians are reported.")] = 3,
    profile: Annotated[
        Path | None, typer.Option(help="Write per-thread CPU profiles of each throughput window under this directory.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Several `holon serve --node` processes on one throwaway PostgreSQL database: append vs raw
    psycopg, turns/s at 1-3 nodes with a latency-bound fake model, failover after SIGKILL, and
    every acknowledged input accounted for. Exit code 1 if one was lost or answered twice."""
    from holon.bench.cluster import format_report, run_cluster_bench

    c = ctx_of(ctx, None, json_out)
    counts = tuple(sorted({int(n) for n in nodes.split(",") if n.strip()}))
    with _progress("cluster"):
        result = run_cluster_bench(
            nodes=counts, per_node=per_node, latency_ms=latency_ms, seconds=seconds, samples=samples,
            lease_s=lease_s, rounds=rounds, profile=profile,
        )  # fmt: skip
    emit(c, result, format_report(result))
    if result["lost_inputs"] or result["duplicate_turns"]:
        raise typer.Exit(1)
