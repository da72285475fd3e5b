"""The core never imports openai: LLMPlanner and LLMVerifier exist without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    """Run ``code`` in a fresh interpreter and return its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_importing_keelgate_loop_does_not_import_openai():
    """With openai installed, import keelgate.loop leaves openai and the contrib package unimported."""
    out = run(
        """
        import sys
        import keelgate.loop
        from keelgate.loop import LLMPlanner, LLMVerifier
        print("openai" in sys.modules, "keelgate.contrib.openai" in sys.modules)
        """
    )
    assert out == "False False"


def test_without_openai_the_classes_import_and_instantiating_them_is_a_configuration_error():
    """openai absent: the import works; instantiating either is a ConfigurationError naming the extra."""
    out = run(
        """
        import sys
        sys.modules["openai"] = None  # as if the extra were not installed
        from keelgate.errors import ConfigurationError
        from keelgate.loop import LLMPlanner, LLMVerifier
        for cls in (LLMPlanner, LLMVerifier):
            try:
                cls(model="m", api_key="k")
            except ConfigurationError as exc:
                print(exc.code, exc.detail)
        """
    )
    assert out.splitlines() == ["configuration_invalid install keelgate[openai]"] * 2
