"""Email about waiting items. Placeholder until built."""


def send_due() -> int:
    return 0
