"""Archive documents get a listing row: their JSON up to the "messages" list.

Listing summaries (every turn's archive section) reads only these rows; it used to cut
``data`` in SQL, which still made the database load each listed document whole. Documents
stored before this migration get their row here, cut the way the store cuts it.
"""

import django.db.models.deletion
from django.db import migrations, models

MESSAGES_KEY = ',"messages":['  # as memory.stores.sql_archive cuts it; frozen here


def fill_listings(apps, schema_editor):
    alias = schema_editor.connection.alias
    entries = apps.get_model("memory", "ArchiveEntry").objects.using(alias)
    listing = apps.get_model("memory", "ArchiveListing")
    batch = []
    # One pass over the documents, a few dozen in memory at a time (a document can be large).
    for pk, data in entries.order_by("pk").values_list("pk", "data").iterator(chunk_size=50):
        at = data.find(MESSAGES_KEY)
        batch.append(listing(entry_id=pk, head=data[:at] if at >= 0 else ""))
        if len(batch) == 50:
            listing.objects.using(alias).bulk_create(batch)
            batch = []
    listing.objects.using(alias).bulk_create(batch)


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0002_archive_fts"),
    ]

    operations = [
        migrations.CreateModel(
            name="ArchiveListing",
            fields=[
                (
                    "entry",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="listing",
                        serialize=False,
                        to="memory.archiveentry",
                    ),
                ),
                ("head", models.TextField()),
            ],
            options={
                "verbose_name": "archive listing",
            },
        ),
        migrations.RunPython(fill_listings, migrations.RunPython.noop),
    ]
