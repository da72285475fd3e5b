"""``Run.outcome``: what happened in a run that ended (``runs.outcomes``), and its index.

A list filtered by outcome reads the tenant's runs of that outcome, newest first, from the
index. The outcomes of the runs that ended before this are computed by ``0008``.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_apiidempotencykey"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="outcome",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["tenant_id", "outcome", "-created_at"], name="run_outcome"),
        ),
    ]
