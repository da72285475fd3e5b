"""``ApiIdempotencyKey`` moves to ``runs``, rows and all (the other half is ``runs/0006``).

The table is renamed here, to ``runs_apiidempotencykey``, and the model leaves this app's
state; ``runs/0006`` adds it to that app's state without touching the database. No row
is copied, so none can be lost, and every database renames a table in one statement.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0002_apikey"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable(name="ApiIdempotencyKey", table="runs_apiidempotencykey"),
            ],
            state_operations=[
                migrations.DeleteModel(name="ApiIdempotencyKey"),
            ],
        ),
    ]
