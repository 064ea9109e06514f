"""Archive retrieval: documents counted per scope, vectors beside the documents, and on
PostgreSQL a full-text index of the search words.

``ArchiveHead.count`` lets a reader learn in one read whether documents were added or removed
(memory.retrieval keeps its in-memory index in step that way); existing heads are counted here.
On PostgreSQL, ``body`` (the document's folded search words) gets a generated ``tsvector``
column with a GIN index, which the archive search uses instead of scanning with LIKE; SQLite
keeps its FTS5 table (0002).
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Count


def count_documents(apps, schema_editor):
    alias = schema_editor.connection.alias
    heads = apps.get_model("memory", "ArchiveHead").objects.using(alias)
    entries = apps.get_model("memory", "ArchiveEntry").objects.using(alias)
    counts = dict(entries.values_list("scope_key").annotate(n=Count("pk")).values_list("scope_key", "n"))
    for head in heads.iterator():
        n = counts.get(head.scope_key, 0)
        if n != head.count:
            heads.filter(pk=head.pk).update(count=n)


def add_postgres_search(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE memory_archiveentry ADD COLUMN IF NOT EXISTS search tsvector "
        "GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED"
    )
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS memory_archive_search ON memory_archiveentry USING gin (search)"
    )


def drop_postgres_search(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS memory_archive_search")
    schema_editor.execute("ALTER TABLE memory_archiveentry DROP COLUMN IF EXISTS search")


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0003_archive_listing"),
    ]

    operations = [
        migrations.AddField(
            model_name="archivehead",
            name="count",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(count_documents, migrations.RunPython.noop),
        migrations.CreateModel(
            name="ArchiveVectors",
            fields=[
                (
                    "entry",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="vectors",
                        serialize=False,
                        to="memory.archiveentry",
                    ),
                ),
                ("model", models.CharField(max_length=200)),
                ("data", models.BinaryField()),
            ],
            options={
                "verbose_name": "archive vectors",
                "verbose_name_plural": "archive vectors",
            },
        ),
        migrations.RunPython(add_postgres_search, drop_postgres_search),
    ]
