"""Telling people that something waits: channels (webhooks, email, Slack) on one delivery engine.

Every channel reads the audit chain, which is the outbox: a cursor per subscriber marks
how far it has read, and moves only with the deliveries for what it passed, so nothing
is lost when the delivering process dies. Top to bottom (import-linter checks):

- ``management``, ``admin``, ``views``: the commands, the admin, the webhooks page.
- the channels ``emails``, ``webhooks`` and ``slack``, which know the engine and not each
  other (``slack`` also hears back: its endpoints record clicks, its pass decides them).
- ``passes``: one pass of a channel (tail, then deliver each recipient's due batch), and
  of every channel registered in ``KEELGATE_NOTIFICATION_CHANNELS``.
- ``cursors`` (the chain past each cursor into deliveries) and ``claims`` (claim under
  a lease, the attempt log, retries with backoff).
- ``channel``: the :class:`~notifications.channel.Channel` protocol every channel satisfies.
- ``models``: cursors, the abstract delivery and attempt, each channel's tables.
"""
