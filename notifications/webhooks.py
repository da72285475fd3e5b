"""Webhooks per tenant (Standard Webhooks). Placeholder until built."""


def deliver_due() -> int:
    return 0
