"""Telling people that something waits: webhooks (Standard Webhooks) and email.

Both read the audit chain, which is the outbox: a delivery cursor per receiver marks
how far it has read, so nothing is lost when the delivering process dies.
"""
