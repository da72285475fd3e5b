"""``keelgate_refuse(code, detail)``: a write sent ahead of its answer refuses itself on the server.

A grouped transaction (``sitekit.postgresql.commits``) sends writes whose answer it does not
wait for. A check the server makes itself (the lease epoch is still the worker's) needs
no answer before the commit, so the commit travels in the same message: a failed check
raises here, the rest of the message (its ``COMMIT`` included) is skipped, and the
client turns the error back into the engine's error of that code. PostgreSQL only;
SQLite runs every statement at once and checks on the client.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION keelgate_refuse(code text, detail text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'keelgate:' || code, DETAIL = detail;
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS keelgate_refuse(text, text)"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_graph_checkpoints")]
    operations = [migrations.RunPython(create, drop, elidable=False)]
