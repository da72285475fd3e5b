"""One engine under both channels: a shared chain cursor, and deliveries with one set of columns.

Existing rows keep working: every webhook and email cursor becomes a ``ChainCursor`` at
the same place (a webhook endpoint's keyed by its id, email's by its tenant, with the
items it held back), and an email batch's ``finished_at``/``outcome``/claim become the
status every delivery has (sent: delivered, nothing left: skipped, gave up: failed).
"""

from django.db import migrations, models

STATUS_CHOICES = [
    ("pending", "Pending"),
    ("delivering", "Delivering"),
    ("delivered", "Delivered"),
    ("skipped", "Skipped"),
    ("failed", "Failed"),
]

EMAIL_STATUS = {"sent": "delivered", "nothing_left": "skipped", "gave_up": "failed"}


def forwards(apps, schema_editor):
    ChainCursor = apps.get_model("notifications", "ChainCursor")
    WebhookCursor = apps.get_model("notifications", "WebhookCursor")
    EmailCursor = apps.get_model("notifications", "EmailCursor")
    EmailBatch = apps.get_model("notifications", "EmailBatch")
    ChainCursor.objects.bulk_create(
        [
            ChainCursor(channel="webhooks", subscriber=str(c.endpoint_id), tenant_id=c.endpoint.tenant.slug, seq=c.seq)
            for c in WebhookCursor.objects.select_related("endpoint__tenant")
        ]
        + [
            ChainCursor(channel="email", subscriber=c.tenant_id, tenant_id=c.tenant_id, seq=c.seq, held=c.unresolved)
            for c in EmailCursor.objects.all()
        ]
    )
    for outcome, status in EMAIL_STATUS.items():
        EmailBatch.objects.filter(outcome=outcome).update(status=status)
    EmailBatch.objects.filter(outcome="", finished_at=None).exclude(lease_token="").update(status="delivering")


def backwards(apps, schema_editor):
    ChainCursor = apps.get_model("notifications", "ChainCursor")
    WebhookCursor = apps.get_model("notifications", "WebhookCursor")
    EmailCursor = apps.get_model("notifications", "EmailCursor")
    EmailBatch = apps.get_model("notifications", "EmailBatch")
    WebhookEndpoint = apps.get_model("notifications", "WebhookEndpoint")
    endpoints = set(WebhookEndpoint.objects.values_list("pk", flat=True))
    for c in ChainCursor.objects.filter(channel="webhooks"):
        if int(c.subscriber) in endpoints:  # a deleted endpoint's cursor went with it before
            WebhookCursor.objects.create(endpoint_id=int(c.subscriber), seq=c.seq)
    for c in ChainCursor.objects.filter(channel="email"):
        EmailCursor.objects.create(tenant_id=c.subscriber, seq=c.seq, unresolved=c.held)
    for outcome, status in EMAIL_STATUS.items():
        EmailBatch.objects.filter(status=status).update(outcome=outcome)


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0002_email"),
    ]

    operations = [
        migrations.CreateModel(
            name="ChainCursor",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("channel", models.CharField(max_length=32)),
                ("subscriber", models.CharField(max_length=100)),
                ("tenant_id", models.CharField(max_length=63)),
                ("seq", models.BigIntegerField(default=0)),
                ("held", models.JSONField(blank=True, default=list)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("channel", "subscriber"), name="chain_cursor_per_subscriber")
                ],
            },
        ),
        # Email batches take the columns every delivery has.
        migrations.RemoveIndex(model_name="emailbatch", name="email_batch_due"),
        migrations.RenameField(model_name="emailbatch", old_name="due_at", new_name="next_attempt_at"),
        migrations.RenameField(model_name="emailbatch", old_name="claim_token", new_name="lease_token"),
        migrations.RenameField(model_name="emailbatch", old_name="claimed_until", new_name="lease_until"),
        migrations.AddField(
            model_name="emailbatch",
            name="status",
            field=models.CharField(choices=STATUS_CHOICES, default="pending", max_length=16),
        ),
        migrations.AddField(model_name="emailbatch", name="item", field=models.CharField(blank=True, max_length=200)),
        migrations.AddField(
            model_name="emailbatch", name="receipt", field=models.CharField(blank=True, max_length=200)
        ),
        migrations.AddField(
            model_name="emailbatch", name="last_status_code", field=models.IntegerField(blank=True, null=True)
        ),
        migrations.AlterField(
            model_name="emailbatch", name="last_error", field=models.CharField(blank=True, max_length=500)
        ),
        # Webhook deliveries likewise: one finish time whatever the ending, and the item and receipt.
        migrations.RenameField(model_name="webhookdelivery", old_name="delivered_at", new_name="finished_at"),
        migrations.AddField(
            model_name="webhookdelivery", name="item", field=models.CharField(blank=True, max_length=200)
        ),
        migrations.AddField(
            model_name="webhookdelivery", name="receipt", field=models.CharField(blank=True, max_length=200)
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="status",
            field=models.CharField(choices=STATUS_CHOICES, default="pending", max_length=16),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveField(model_name="emailbatch", name="outcome"),
        migrations.AddIndex(
            model_name="emailbatch",
            index=models.Index(fields=["status", "next_attempt_at"], name="email_batch_due"),
        ),
        migrations.DeleteModel(name="WebhookCursor"),
        migrations.DeleteModel(name="EmailCursor"),
    ]
