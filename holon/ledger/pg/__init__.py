"""The PostgreSQL engine of the ledger (RFC 0008): psycopg 3 and its pool, used directly.

The only package of holon that imports ``psycopg`` (an import-linter contract), so a SQLite home
never loads it. Importing this package itself loads nothing: ``connect`` (URLs, connections, the
pool, the start-up probe), ``migrations`` (the frozen DDL, triggers and functions, and their
runner) and ``append`` (the ledger lock, the head, one pipeline per append) each import psycopg
when they are imported. ``conn`` (``PgConn``: ``holon.ledger.sql.Conn`` over psycopg, ``?`` as
``%s``) and ``engine`` (``PgEngine``, the ``holon.ledger.engine.Engine`` behind ``Ledger``) are
built on these.
"""
