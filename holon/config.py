"""Configuration: embedded defaults < the TOML config file < ``HOLON_*`` environment variables.

The config file is ``$HOLON_CONFIG`` when set, otherwise ``<home>/holon.toml`` (``holon init``
writes one with every setting commented). The home is ``--home``, else ``$HOLON_HOME``, else
``~/.holon``. Environment variables are ``HOLON_<SECTION>_<KEY>``, e.g.
``HOLON_LEDGER_BLOB_THRESHOLD_BYTES=65536``.

Every problem is a one-line ``ConfigError`` naming the key and where it came from: an unknown
key, a bad value, unreadable TOML, or a ``$HOLON_CONFIG`` that does not exist.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from holon.errors import ConfigError
from holon.paths import HomePaths, resolve_home

__all__ = [
    "ApiSettings",
    "DaemonSettings",
    "HomePaths",
    "ContextSettings",
    "DEFAULT_ALLOWED_KEY_ENVS",
    "LedgerSettings",
    "LoggingSettings",
    "MemorySettings",
    "ModelDefaults",
    "RuntimeSettings",
    "Settings",
    "NodeSettings",
    "StorageSettings",
    "StorageTarget",
    "ToolsSettings",
    "config_path",
    "load_settings",
    "local_zone_name",
    "resolve_home",
    "setting_sources",
    "storage_target",
    "zone_problem",
]

ENV_PREFIX = "HOLON_"
#: Environment variables holon reads that are not settings.
_NON_SETTING_ENV = {"HOLON_HOME", "HOLON_CONFIG"}


class _Section(BaseModel):
    # TOML has ``inf`` and ``nan``: no setting means either (a budget of ``inf`` is not "no limit").
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LedgerSettings(_Section):
    synchronous: Literal["NORMAL", "FULL", "EXTRA"] = "FULL"
    """SQLite ``PRAGMA synchronous``. FULL survives power loss; NORMAL survives process crashes."""
    busy_timeout_ms: int = Field(30_000, ge=0, le=600_000)
    """How long a writer waits for another process's write transaction before failing."""
    blob_threshold_bytes: int = Field(16_384, ge=256, le=64 * 1024 * 1024)
    """Large text fields (tool output, model replies) above this size go to the blob store."""
    blob_preview_chars: int = Field(400, ge=0, le=4_096)
    """How much of a blob's text the event itself keeps as a preview."""
    blob_retention_days: int = Field(90, ge=0, le=36_500)
    """Blob bodies older than this may be pruned by ``holon ledger prune``; 0 keeps them forever."""


#: URL schemes ``[storage] url`` accepts: SQLite (the embedded default) and PostgreSQL (RFC 0008).
STORAGE_SCHEMES: dict[str, str] = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql"}


class StorageSettings(_Section):
    """Where the ledger lives (RFC 0008): the home's SQLite file, or a PostgreSQL database."""

    url: str = ""
    """``sqlite:///PATH`` (SQLAlchemy's form: ``sqlite:////abs/holon.db``; a relative PATH is
    under the home) or ``postgresql://USER@HOST:PORT/DB``. Empty: the home's own SQLite file,
    ``sqlite:///<home>/holon.db``."""
    connect_timeout_s: float = Field(5.0, gt=0, le=300)
    """How long connecting to a PostgreSQL server may take before holon reports it unreachable."""
    pool_size: int = Field(8, ge=1, le=256)
    """PostgreSQL connections kept for readers and the API (the appender has its own)."""
    prepare: bool = True
    """Let psycopg prepare statements that run often; ``false`` behind PgBouncer in transaction mode."""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        value = value.strip()
        if not value:
            return value
        scheme = value.split(":", 1)[0].lower() if ":" in value else ""
        if scheme not in STORAGE_SCHEMES:
            shown = f"scheme {scheme!r}" if scheme else "no scheme"
            raise ValueError(
                f"{shown} is not a storage engine holon knows; use sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
            )
        if STORAGE_SCHEMES[scheme] == "sqlite" and (not value.startswith(f"{scheme}:///") or value == f"{scheme}:///"):
            raise ValueError("a SQLite URL is sqlite:///PATH (three slashes; sqlite:////abs/path for an absolute path)")
        if STORAGE_SCHEMES[scheme] == "postgresql":
            try:
                urlsplit(value).port  # noqa: B018  # raises on a port that is not a number
            except ValueError as e:
                raise ValueError(f"not a PostgreSQL URL ({e}); use postgresql://USER@HOST:PORT/DB") from e
        return value


NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class NodeSettings(_Section):
    """This process as one node of several sharing a PostgreSQL ledger (RFC 0008, sections 3-4)."""

    name: str = ""
    """The node's name (also ``holon serve --node NAME``, ``HOLON_NODE_NAME``). Empty: a single
    node that owns every agent and takes no leases. Set: the daemon claims the name (a second
    process with it is refused), owns agents through leases with fencing tokens and shares them
    with the other live nodes. Needs ``[storage] url`` on PostgreSQL."""
    lease_s: float = Field(15.0, ge=0.5, le=3600)
    """How long an agent's lease lasts without a heartbeat (one every ``lease_s / 3``): a node that
    dies gives its agents up to the other nodes within about ``lease_s`` + 3 s."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        value = value.strip()
        if value and not NODE_NAME.match(value):
            raise ValueError("a node name is 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value


@dataclass(frozen=True, slots=True)
class StorageTarget:
    """A resolved ``[storage] url``: which engine, and its URL (a SQLite target has its file)."""

    engine: Literal["sqlite", "postgresql"]
    url: str
    path: Path | None = None


def storage_target(home: HomePaths, storage: StorageSettings) -> StorageTarget:
    """The ledger's place for ``home``: ``storage.url`` resolved, the home's SQLite file by default.

    A relative SQLite path is taken under the home (not the working directory), so a home keeps
    meaning the same files wherever holon is started from."""
    url = storage.url
    if not url:
        return StorageTarget("sqlite", f"sqlite:///{home.db}", home.db)
    scheme, rest = url.split(":", 1)
    if STORAGE_SCHEMES[scheme.lower()] == "postgresql":
        return StorageTarget("postgresql", url)
    raw = Path(rest[3:]).expanduser()
    path = raw if raw.is_absolute() else home.root / raw
    return StorageTarget("sqlite", f"sqlite:///{path}", path)


#: Key variables of well-known providers (litellm's own names): agents may name these by default.
DEFAULT_ALLOWED_KEY_ENVS: tuple[str, ...] = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "TOGETHERAI_API_KEY",
    "FIREWORKS_AI_API_KEY",
    "COHERE_API_KEY",
    "XAI_API_KEY",
    "PERPLEXITYAI_API_KEY",
    "CEREBRAS_API_KEY",
    "DEEPINFRA_API_KEY",
    "AZURE_API_KEY",
    "HUGGINGFACE_API_KEY",
    "VOYAGE_API_KEY",
)


class ModelDefaults(_Section):
    """The model agents use unless ``holon agent configure`` gives them their own."""

    model: str = ""
    """A litellm model name such as ``openai/gpt-4o-mini``. Empty: the embedded local model."""
    api_base: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """Name of the environment variable that holds the API key (never the key itself)."""
    temperature: float | None = Field(None, ge=0, le=2)
    max_output_tokens: int | None = Field(None, ge=1)
    context_window: int | None = Field(None, ge=256)
    timeout_s: float = Field(120.0, gt=0, le=3_600)
    """How long the model server may stay silent (connecting, or between two pieces of a reply)."""
    call_deadline_s: float = Field(600.0, gt=0, le=86_400)
    """Wall-clock limit of one model call, streaming included: a server that keeps the connection
    alive (keep-alive pings, a trickle of bytes) without finishing is cut here, as a timeout."""
    allowed_key_envs: tuple[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")], ...] = Field(
        DEFAULT_ALLOWED_KEY_ENVS, max_length=256
    )
    """Environment variables an agent's ``api_key_env`` may name (besides ``api_key_env`` above).
    Agents can be created over HTTP: without this list one could name any variable of the daemon
    (a database password) and have it sent as a bearer token. RFC 0002, "Secrets by name"."""
    allowed_api_bases: tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9.:_\[\]-]{1,253}$")], ...] = Field(
        (), max_length=256
    )
    """Hosts (names or addresses, no scheme or port) an agent's ``api_base`` may point at while a key
    variable is in effect. Loopback and the host of ``api_base`` above are always allowed."""


class RuntimeSettings(_Section):
    max_rounds: int = Field(12, ge=1, le=200)
    """Model rounds one turn may take before it settles as failed."""
    max_tokens_per_turn: int = Field(400_000, ge=1_000)
    max_cost_per_turn_usd: float | None = Field(None, gt=0)
    max_tool_errors: int = Field(6, ge=0, le=100)
    """Failed or malformed tool calls one turn tolerates."""
    retry_attempts: int = Field(4, ge=1, le=20)
    """Attempts per model call for rate limits, timeouts, server and connection errors."""
    max_inputs_per_turn: int = Field(10, ge=1, le=1000)
    """Pending inputs one turn takes, oldest first; the rest stay queued for the next turn."""
    timezone: str = ""
    """IANA zone (``Europe/Paris``) that schedules are read in: crontab lines fire at that zone's
    local time (DST included) and times without an offset are that zone's. Empty: the system's."""

    @field_validator("timezone")
    @classmethod
    def _zone_exists(cls, value: str) -> str:
        value = value.strip()
        if value and zone_problem(value):
            raise ValueError(zone_problem(value))
        return value

    def zone(self) -> str:
        """The zone name schedules use: ``timezone``, else the system's (``local_zone_name``)."""
        return self.timezone or local_zone_name()


class ContextSettings(_Section):
    default_context_window: int = Field(8_192, ge=1_024)
    """Window assumed for models litellm does not know and no setting names."""
    output_reserve_tokens: int | None = Field(None, ge=64)
    """Tokens kept free for the reply; default: the model's max output setting, else a quarter of
    the window, at most 4,096."""
    record_prompts: bool = True
    """Record the exact prompt of every model request in the ledger (``holon context show --render``)."""


class MemorySettings(_Section):
    embeddings: str = ""
    """Embedding model for MemorySearch: empty (lexical search only), ``local`` (the MiniLM model
    of the ``holon[embed]`` extra, offline) or a litellm embedding model such as
    ``openai/text-embedding-3-small``."""
    embedding_api_base: str | None = None
    embedding_api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """Name of the environment variable holding the embedding API key (never the key itself)."""


class EvolveSettings(_Section):
    """Durable memory (RFC 0006): the background evolve jobs and per-turn recall."""

    enabled: bool = True
    """Queue an evolve job after every settled turn and drain the queue in the daemon."""
    backfill: bool = True
    """On first use, queue jobs for turns settled before evolve existed in this home."""
    lease_s: float = Field(60.0, gt=0)
    max_attempts: int = Field(5, ge=1, le=100)
    backoff_s: float = Field(5.0, ge=0)
    model_extraction: bool = False
    """Also ask the agent's model for candidates (gated by ``min_confidence`` and verbatim evidence)."""
    min_confidence: float = Field(0.7, ge=0, le=1)
    recall_limit: int = Field(5, ge=0, le=50)
    """Durable entries shown to each turn."""
    recall_operator_cap: int = Field(2, ge=0, le=50)
    """At most this many operator-scope entries when entries of other scopes compete."""
    recall_pending: int = Field(2, ge=0, le=10)
    """Pending proposals shown to the turn, marked unconfirmed."""


class TraceSettings(_Section):
    """Trace export (RFC 0007): live OTLP/HTTP push of each settled turn's spans."""

    otlp_endpoint: str = ""
    """Where to push spans, e.g. ``http://127.0.0.1:4318/v1/traces``; empty: no live export."""
    otlp_protocol: Literal["http/json", "http/protobuf"] = "http/json"
    """OTLP/HTTP body encoding. JSON by default: HALO's desktop app reads it, and every OTLP/HTTP
    collector must accept it; ``http/protobuf`` is smaller on the wire."""
    otlp_headers_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """Name of the environment variable holding ``key=value,...`` headers (API keys stay there)."""
    service_name: str = "holon"
    project: str = "holon"
    """``inference.project_id`` of every span."""
    timeout_s: float = Field(5.0, gt=0, le=60)

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str) -> str:
        """An http(s) URL with a host (and a valid port), caught at load rather than at the first turn."""
        value = value.strip()
        if not value:
            return value
        try:
            url = urlsplit(value)
            port_ok = url.port is None or url.port > 0
        except ValueError as e:
            raise ValueError(f"not a valid URL ({e})") from e
        if url.scheme not in ("http", "https") or not url.hostname or not port_ok or any(c.isspace() for c in value):
            raise ValueError(
                f"must be an http:// or https:// URL with a host, like http://127.0.0.1:4318/v1/traces, not {value!r}"
            )
        return value


class LoggingSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    console: Literal["auto", "pretty", "json", "off"] = "auto"
    """Log lines on stderr. ``auto``: readable ones when stderr is a terminal; JSON ones from
    ``holon serve`` when it is not (systemd, Docker collect them); nothing otherwise."""
    file: bool = True
    """Write JSON lines to ``<home>/logs/holon.log``."""


_ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
#: An ``[api] allowed_hosts`` entry: a DNS name, an IPv4 address or a bracketed IPv6 one, then ``:port``.
_ALLOWED_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?)*\.?"
                           r"|\[[0-9a-f:.]{2,45}\])(?::[0-9]{1,5})?")  # fmt: skip


class ApiSettings(_Section):
    """The daemon's HTTP control API (``holon serve``)."""

    host: str = "127.0.0.1"
    """Address to listen on. Any non-loopback address requires a token (``token_env``)."""
    port: int = Field(7878, ge=0, le=65_535)
    token_env: str | None = Field(None, pattern=_ENV_VAR_NAME)
    """Name of the environment variable holding the API token (never the token itself). Unset: the
    daemon makes a random token at first start in ``<home>/api.token`` (0600); clients read it."""
    allowed_hosts: tuple[str, ...] = Field((), max_length=64)
    """Other names the API answers to (``Host`` header), e.g. a tunnel's ``holon.example.com``, with
    ``:port`` to allow only that port. Loopback (``localhost``, ``127.0.0.1``, ``[::1]``) with the
    daemon's own port is always allowed; any other ``Host`` or ``Origin`` is refused (DNS rebinding)."""

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_are_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Bare ``host`` or ``host:port`` (no scheme, path or wildcard), lower-cased."""
        out = []
        for entry in value:
            host = entry.strip().lower()
            if not _ALLOWED_HOST.fullmatch(host):
                raise ValueError(
                    f"{entry!r} is not a host name or address with an optional :port "
                    "(like holon.example.com, 192.168.1.5:7878 or [fd00::1]:7878; no scheme, path or *)"
                )
            out.append(host)
        return tuple(out)


class DaemonSettings(_Section):
    """The long-lived host (``holon serve`` / ``holon daemon``)."""

    grace_s: float = Field(20.0, ge=0, le=3_600)
    """On SIGTERM/SIGINT: how long running turns may take to finish before they are interrupted."""
    start_timeout_s: float = Field(30.0, gt=0, le=600)
    """How long ``holon daemon start`` waits for the daemon to report healthy."""
    tick_s: float = Field(1.0, gt=0, le=60)
    """How often waits are rechecked, budgets reset and the search index caught up."""
    budget_turns_per_day: int = Field(48, ge=0)
    """Turns a background agent may take per (UTC) day; per-agent setting ``budget_turns_per_day``."""
    budget_tokens_per_day: int = Field(2_000_000, ge=0)
    budget_cost_per_day_usd: float | None = Field(None, ge=0)
    """Dollars a background agent may spend per day, where litellm knows the price (unset: no limit)."""
    model_process: bool = True
    """Run model calls (litellm) in child processes, so that their CPU is not the turn loop's."""
    model_processes: int = Field(2, ge=1, le=16)
    """At most this many model processes; a second starts only while calls overlap."""
    model_process_idle_s: float = Field(0.0, ge=0, le=86_400)
    """A model process exits after this long without a call (the next call starts it again);
    ``0``: never, so the first reply after a quiet hour does not pay for a cold start."""
    warm_model: bool = True
    """Start the model process (and the local model server, when an agent uses it) with the
    daemon, in the background, rather than on the first call (RFC 0005, "Warm model path")."""
    group_commit: bool = True
    """Inputs arriving over HTTP together commit in one transaction (one fsync), in a worker
    thread (RFC 0001, "The append path"). ``false``: each input commits alone on the event loop, as
    before group commit; ``holon bench daemon`` measures that as its baseline."""


class LocalSettings(_Section):
    """The embedded local model server (``holon[local]``), used by agents with no model configured."""

    idle_stop_s: float = Field(0.0, ge=0, le=86_400 * 30)
    """Stop the local model server after this long without a call (the next call starts it
    again, taking seconds); ``0``: never (it stays warm while the daemon runs)."""


class ToolsSettings(_Section):
    """How agent tools run (RFC 0002, "Commands run confined")."""

    pass_env: tuple[str, ...] = ()
    """Names of daemon environment variables ``run_command`` passes on, beyond the fixed pass-list
    (PATH, LANG, LC_*, TERM, TZ, TMPDIR). Nothing else of the daemon's environment reaches a command."""
    isolation: Literal["auto", "namespaces", "none"] = "auto"
    """``namespaces``: every command runs in its own user, PID and mount namespaces with the holon
    home read-only except the agent's own home (refused where the kernel forbids it); ``auto``:
    that where available, else unconfined with a logged, status-visible warning; ``none``: unconfined."""
    command_wrapper: str = ""
    """A command line put in front of every command instead of the built-in namespaces, e.g. a
    ``bwrap ... --`` line; the command's ``bash -c CMD`` is appended to it."""

    @field_validator("pass_env")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in value if not re.fullmatch(_ENV_VAR_NAME, n)]
        if bad:
            raise ValueError(f"not an environment variable name: {bad[0]!r}")
        return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="_",
        env_nested_max_split=1,
        extra="forbid",
        frozen=True,
    )

    ledger: LedgerSettings = LedgerSettings()
    model: ModelDefaults = ModelDefaults()
    runtime: RuntimeSettings = RuntimeSettings()
    context: ContextSettings = ContextSettings()
    memory: MemorySettings = MemorySettings()
    evolve: EvolveSettings = EvolveSettings()
    trace: TraceSettings = TraceSettings()
    logging: LoggingSettings = LoggingSettings()
    api: ApiSettings = ApiSettings()
    daemon: DaemonSettings = DaemonSettings()
    tools: ToolsSettings = ToolsSettings()
    local: LocalSettings = LocalSettings()
    storage: StorageSettings = StorageSettings()
    node: NodeSettings = NodeSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file's contents arrive as init kwargs; the environment overrides them.
        return (env_settings, init_settings)


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not a usable IANA zone, or ``None`` when it is."""
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(name)
    except (ValueError, OSError) as e:  # ZoneInfoNotFoundError is a KeyError: caught below
        return f"{name!r} is not an IANA time zone like 'Europe/Paris' or 'UTC' ({e})"
    except KeyError:
        return f"{name!r} is not an IANA time zone like 'Europe/Paris' or 'UTC' (unknown zone)"
    return None


def local_zone_name() -> str:
    """The system's IANA zone: ``$TZ`` when it names one, else ``/etc/localtime``'s target, else
    ``/etc/timezone``, else ``UTC``. Schedules need a name (stored in the ledger with each cron
    timer), not an offset, so that they follow the zone's daylight-saving changes."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    with contextlib.suppress(OSError):
        target = os.path.realpath("/etc/localtime")
        if "/zoneinfo/" in target:
            candidates.append(target.split("/zoneinfo/", 1)[1])
    with contextlib.suppress(OSError, UnicodeDecodeError):
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    for name in candidates:
        if name and not name.startswith("/") and zone_problem(name) is None:
            return "UTC" if name in ("Etc/UTC", "Etc/Universal", "UCT", "Universal", "Zulu", "Etc/Zulu") else name
    return "UTC"


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config: {path}: not valid TOML: {e}") from e
    except UnicodeDecodeError as e:  # tomllib decodes the bytes itself and lets this through
        raise ConfigError(f"config: {path}: not valid UTF-8 (byte {e.start})") from e
    except OSError as e:
        raise ConfigError(f"config: cannot read {path}: {e.strerror}") from e


def _env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section}_{key}".upper()


def _check_env_keys(env: Mapping[str, str]) -> None:
    """Refuse ``HOLON_<SECTION>_<KEY>`` variables whose key does not exist (typos)."""
    sections = {name.upper(): field.annotation for name, field in Settings.model_fields.items()}
    for var in env:
        if not var.startswith(ENV_PREFIX) or var in _NON_SETTING_ENV:
            continue
        rest = var[len(ENV_PREFIX) :]
        for section, model in sections.items():
            if rest.startswith(section + "_"):
                key = rest[len(section) + 1 :].lower()
                if isinstance(model, type) and key not in model.model_fields:
                    raise ConfigError(f"config: unknown setting {var} (no key '{section.lower()}.{key}')")


def _describe(err: ValidationError, file: Path | None, env: Mapping[str, str]) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    parts = [str(p) for p in first["loc"]]
    source = str(file) if file else "defaults"
    if len(parts) == 2 and _env_name(*parts) in env:
        source = _env_name(*parts)
    if first["type"] == "extra_forbidden":
        return f"config: unknown key '{loc}' in {source}"
    return f"config: bad value for '{loc}' in {source}: {first['msg']}"


def config_path(home: HomePaths, config_file: str | Path | None = None) -> Path:
    """The config file ``load_settings`` reads: ``config_file``, else ``$HOLON_CONFIG``, else the home's."""
    named = config_file or os.environ.get("HOLON_CONFIG")
    return Path(named).expanduser().absolute() if named else home.config


def load_settings(
    home: HomePaths,
    *,
    config_file: str | Path | None = None,
) -> Settings:
    """Load settings for ``home``. Raises ``ConfigError`` with one line on any problem."""
    env = os.environ
    named = config_file or env.get("HOLON_CONFIG")
    path = config_path(home, config_file)
    if named and not path.is_file():
        raise ConfigError(f"config: {path} does not exist (named by HOLON_CONFIG or --config)")
    data = _read_toml(path) if path.is_file() else {}
    # Only sections are keys here: anything else would reach BaseSettings.__init__, whose own
    # options (``_env_file``, ``_cli_parse_args``, ...) must not be settable from a config file.
    unknown = next((key for key in data if key not in Settings.model_fields), None)
    if unknown is not None:
        raise ConfigError(f"config: unknown key '{unknown}' in {path}")
    _check_env_keys(env)
    try:
        # Validate the file alone first so its errors name the file, not the environment.
        Settings.model_validate(data)
        sections: dict[str, Any] = data  # Any: each section's TOML, validated by Settings itself
        return Settings(**sections)
    except ValidationError as e:
        raise ConfigError(_describe(e, path if data else None, env)) from e


def setting_sources(home: HomePaths, *, config_file: str | Path | None = None) -> list[tuple[str, str, object, str]]:
    """Every setting as ``(section, key, value, source)``, where ``source`` is ``default``, the
    config file's path, or the ``HOLON_<SECTION>_<KEY>`` variable that set it (``holon config
    show``). Loads the settings first, so a bad configuration is the same ``ConfigError``."""
    settings = load_settings(home, config_file=config_file)
    path = config_path(home, config_file)
    data = _read_toml(path) if path.is_file() else {}
    out: list[tuple[str, str, object, str]] = []
    for section in Settings.model_fields:
        values = getattr(settings, section)
        section_data = data.get(section)
        in_file = section_data if isinstance(section_data, dict) else {}
        for key in type(values).model_fields:
            env = _env_name(section, key)
            source = env if env in os.environ else (str(path) if key in in_file else "default")
            out.append((section, key, getattr(values, key), source))
    return out
