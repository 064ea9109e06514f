"""Django models behind memory/stores/sql.py. Persistence only: no behaviour lives here.

Every row belongs to one scope by ``scope_key`` (``Scope.key()``, or a digest for keys longer
than SCOPE_KEY_LENGTH). Message and archive bodies are stored as the JSON text of their record:
json escapes control characters, so text holding NUL survives even in PostgreSQL.
"""

from django.db import models
from django.utils import timezone

SCOPE_KEY_LENGTH = 512
ID_LENGTH = 128


class SessionHead(models.Model):
    """One per session: the version compare-and-set guards, and the running totals."""

    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH, unique=True)
    version = models.BigIntegerField(default=0)
    last_seq = models.BigIntegerField(default=0)
    count = models.BigIntegerField(default=0)  # live messages
    tokens = models.BigIntegerField(default=0)  # of the live messages
    pruned = models.BigIntegerField(default=0)  # rows in PrunedMessageId for this scope
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "session head"

    def __str__(self) -> str:
        return f"{self.scope_key} v{self.version}"


class StoredMessage(models.Model):
    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH)
    seq = models.BigIntegerField()
    message_id = models.CharField(max_length=ID_LENGTH)
    role = models.CharField(max_length=16)
    kind = models.CharField(max_length=64)
    deleted = models.BooleanField(default=False)
    tokens = models.IntegerField(default=0)
    created_at = models.DateTimeField()
    data = models.TextField()  # JSON of Message.to_record()

    class Meta:
        verbose_name = "session message"
        constraints = [
            models.UniqueConstraint(fields=["scope_key", "seq"], name="memory_message_scope_seq"),
            models.UniqueConstraint(fields=["scope_key", "message_id"], name="memory_message_scope_id"),
        ]
        indexes = [models.Index(fields=["scope_key", "deleted", "seq"], name="memory_message_tail")]

    def __str__(self) -> str:
        return f"{self.scope_key} [{self.seq}] {self.role}"


class PrunedMessageId(models.Model):
    """The id of a message pruned from a session, so that id is never appended again."""

    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH)
    message_id = models.CharField(max_length=ID_LENGTH)
    seq = models.BigIntegerField()
    pruned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "pruned message id"
        constraints = [
            models.UniqueConstraint(fields=["scope_key", "message_id"], name="memory_pruned_scope_id"),
        ]


class KVEntry(models.Model):
    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH)
    key = models.CharField(max_length=ID_LENGTH)
    value = models.TextField()
    version = models.BigIntegerField(default=1)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "KV entry"
        verbose_name_plural = "KV entries"
        constraints = [models.UniqueConstraint(fields=["scope_key", "key"], name="memory_kv_scope_key")]

    def __str__(self) -> str:
        return f"{self.scope_key} {self.key} v{self.version}"


class ConsumerCursor(models.Model):
    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH)
    consumer = models.CharField(max_length=ID_LENGTH)
    position = models.BigIntegerField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "consumer cursor"
        constraints = [
            models.UniqueConstraint(fields=["scope_key", "consumer"], name="memory_cursor_scope_consumer"),
        ]


class ArchiveHead(models.Model):
    """Per scope: the last archive seq handed out (seqs are never reused, even after a delete)
    and how many documents exist, so a reader learns both in one indexed read."""

    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH, unique=True)
    last_seq = models.BigIntegerField(default=0)
    count = models.BigIntegerField(default=0)


class ArchiveEntry(models.Model):
    scope_key = models.CharField(max_length=SCOPE_KEY_LENGTH)
    seq = models.BigIntegerField()
    doc_id = models.CharField(max_length=ID_LENGTH)
    session = models.CharField(max_length=SCOPE_KEY_LENGTH, blank=True)
    title = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    body = models.TextField(blank=True)  # the search words (memory.stores.textsearch), space-separated
    words = models.IntegerField(default=0)  # len(body words), for BM25 length normalisation
    data = models.TextField()  # JSON of the whole document
    created_at = models.DateTimeField()

    class Meta:
        verbose_name = "archive document"
        constraints = [
            models.UniqueConstraint(fields=["scope_key", "seq"], name="memory_archive_scope_seq"),
            models.UniqueConstraint(fields=["scope_key", "doc_id"], name="memory_archive_scope_doc"),
        ]

    def __str__(self) -> str:
        return f"{self.scope_key} #{self.seq} {self.title}"


class ArchiveListing(models.Model):
    """Per archive document: its JSON up to the "messages" list (always the last key), which
    is all that listing summaries reads, every turn. A row of its own, not a column: SQLite
    stores a row's columns one after another, and reaching a column behind ``body`` or
    ``data`` walks the overflow pages of the whole document."""

    entry = models.OneToOneField(ArchiveEntry, on_delete=models.CASCADE, primary_key=True, related_name="listing")
    head = models.TextField()

    class Meta:
        verbose_name = "archive listing"


class ArchiveVectors(models.Model):
    """Per archive document: the embedding vectors of its messages (one float16 row each, in the
    document's order) and the model that made them. A row of its own, like the listing: search
    reads vectors without the documents' text, and a change of model rewrites only these."""

    entry = models.OneToOneField(ArchiveEntry, on_delete=models.CASCADE, primary_key=True, related_name="vectors")
    model = models.CharField(max_length=200)
    data = models.BinaryField()

    class Meta:
        verbose_name = "archive vectors"
        verbose_name_plural = "archive vectors"
