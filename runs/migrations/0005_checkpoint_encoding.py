"""Checkpoints are stored deflated (``keelgate.checkpoint.CheckpointCodec``): two columns more.

Existing rows keep their plain JSON in ``state`` and read as they are (keyframes); no
row is rewritten, so nothing can be lost by the migration.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0004_refusals"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="base_seq",
            field=models.IntegerField(null=True),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="data",
            field=models.BinaryField(null=True),
        ),
        migrations.AlterField(
            model_name="checkpoint",
            name="state",
            field=models.TextField(blank=True),
        ),
    ]
