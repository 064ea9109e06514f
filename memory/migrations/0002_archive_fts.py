"""The FTS5 index of archive documents, on SQLite only.

RunPython rather than a bare RunSQL so the statement runs only when the database is SQLite
(PostgreSQL uses the portable search in memory/stores/sql_archive.py), and so a SQLite built
without FTS5 migrates anyway: the adapter notices the missing table and falls back.
Documents written before the table existed are indexed here.
"""

import logging

from django.db import OperationalError, migrations

FTS_TABLE = "memory_archive_fts"
CREATE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    "body, tokenize = 'unicode61 remove_diacritics 2')"
)
BACKFILL = f"INSERT INTO {FTS_TABLE} (rowid, body) SELECT id, body FROM memory_archiveentry"
DROP = f"DROP TABLE IF EXISTS {FTS_TABLE}"

logger = logging.getLogger("memory")


def create_fts(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    try:
        schema_editor.execute(CREATE)
    except OperationalError as exc:  # "no such module: fts5"
        logger.warning("SQLite has no FTS5 (%s): archive search uses the portable scorer", exc)
        return
    schema_editor.execute(f"DELETE FROM {FTS_TABLE}")
    schema_editor.execute(BACKFILL)


def drop_fts(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunPython(create_fts, drop_fts, elidable=False)]
