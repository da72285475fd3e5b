"""``ApiIdempotencyKey`` joins ``runs``: its table was renamed by ``tenants/0003``.

State only: the table, its rows, its constraint and its indexes are already there. The
model's content type follows it, so nothing that points at it (permissions, admin log
entries) is orphaned.
"""

from collections.abc import Callable

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def _content_type_to(app_label: str, other: str) -> Callable[[StateApps, BaseDatabaseSchemaEditor], None]:
    """The model's content type, from ``other`` to ``app_label`` (unless one is there already)."""

    def move(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        content_type = apps.get_model("contenttypes", "ContentType")
        rows = content_type.objects.using(schema_editor.connection.alias)
        if not rows.filter(app_label=app_label, model="apiidempotencykey").exists():
            rows.filter(app_label=other, model="apiidempotencykey").update(app_label=app_label)

    return move


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("runs", "0005_checkpoint_encoding"),
        ("tenants", "0003_apiidempotencykey_to_runs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiIdempotencyKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("key", models.CharField(max_length=255)),
                        ("fingerprint", models.CharField(max_length=64)),
                        ("run_id", models.CharField(blank=True, max_length=128)),
                        ("created_at", models.DateTimeField()),
                        ("completed_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="tenants.tenant",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "user", "key"), name="api_idempotency_key_unique"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(_content_type_to("runs", "tenants"), _content_type_to("tenants", "runs")),
    ]
