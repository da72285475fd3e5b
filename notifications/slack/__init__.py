"""Slack: approvals posted where people are, decided there by the person linked to the clicker.

One concept per module, each using only those listed after it (import-linter checks):

- ``endpoints``: Slack's two doors (clicks, the slash command) and the console's link page.
- ``channel``: :class:`SlackChannel` on the seam: each waiting item posted once, updated
  in place when settled; it decides recorded clicks at the start of each pass.
- ``interactions``: a click recorded at once, decided afterwards as the linked person.
- ``modals``: the forms a click opens (Deny… asks why; a high-impact call's Approve… asks
  for "approve" typed); a submission is a click too.
- ``links``: who a Slack user is in Keelgate (one-time codes, an admin's link), audited.
- ``signing``: Slack's request signature and age.
- ``blocks``: what a message says (Block Kit, untrusted words escaped); ``replies``:
  messages only the clicker sees.
- ``transport``: Slack's Web API through ``slack_sdk`` (the ``slack`` extra).
- ``workspaces``: a tenant's workspace, registered and audited; its token and secret read
  from the environment, never stored.
"""

from notifications.slack.channel import SlackChannel

__all__ = ["SlackChannel"]
