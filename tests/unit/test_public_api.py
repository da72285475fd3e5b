"""The public surface is pinned against the ``keelgate.loop`` API reference in shared/seeds."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import keelgate.loop

SEED_SYMBOLS = {
    "AcceptAllVerifier",
    "ActionOutcome",
    "ActionStatus",
    "CallableVerifier",
    "CheckpointStore",
    "ContextSource",
    "Divergence",
    "GroundedAnswerVerifier",
    "HistoryCheckpointStore",
    "InMemoryCheckpointStore",
    "InProcessRunner",
    "LLMPlanner",
    "LLMVerifier",
    "Loop",
    "LoopOutcome",
    "LoopResult",
    "LoopRunner",
    "LoopSpec",
    "LoopState",
    "LoopType",
    "MonitorLoop",
    "MonitorSummary",
    "NotReplayableError",
    "OutcomeConfirmer",
    "Phase",
    "Plan",
    "PlanRequest",
    "PlannedAction",
    "Planner",
    "ProposedAction",
    "RecordedAction",
    "RecordedStep",
    "Recording",
    "ReplayReport",
    "RunExistsError",
    "RunNotFoundError",
    "Schedule",
    "SqliteCheckpointStore",
    "StaleCheckpointError",
    "StopConditions",
    "StopReason",
    "Verdict",
    "VerdictDecision",
    "VerificationLoop",
    "Verifier",
    "VerifyRequest",
    "default_checkpointer",
    "diff",
    "find_run",
    "replay",
}
"""Every symbol of the API reference, by name."""

DEFERRED_TO_INTEGRATIONS: set[str] = set()
"""Left for the integrations issue (LLM planners, monitors, replay); shrink as they land."""


def test_every_seed_symbol_not_deferred_is_exported():
    """keelgate.loop exports each implemented seed symbol, and __all__ names only real objects."""
    exported = set(keelgate.loop.__all__)
    assert exported >= SEED_SYMBOLS - DEFERRED_TO_INTEGRATIONS
    assert not (DEFERRED_TO_INTEGRATIONS & exported) or DEFERRED_TO_INTEGRATIONS & exported <= SEED_SYMBOLS
    for name in exported:
        assert getattr(keelgate.loop, name) is not None


def test_seed_signatures_of_the_loop_methods():
    """run, resume, run_or_resume and reconcile take the documented parameters."""
    import inspect

    from keelgate.loop import Loop

    assert list(inspect.signature(Loop.run).parameters) == [
        "self",
        "goal",
        "tenant_id",
        "agent_id",
        "as_of",
        "run_id",
        "trace_id",
        "stop",
    ]
    assert list(inspect.signature(Loop.resume).parameters) == ["self", "tenant_id", "run_id", "stop"]
    assert list(inspect.signature(Loop.run_or_resume).parameters) == [
        "self",
        "goal",
        "tenant_id",
        "agent_id",
        "as_of",
        "run_id",
        "trace_id",
        "stop",
    ]
    # The documented parameters, then the optional keywords ``result`` (the downstream record)
    # and ``context`` (how the decision came, for its audit event).
    assert list(inspect.signature(Loop.reconcile).parameters) == [
        "self",
        "tenant_id",
        "run_id",
        "action_id",
        "executed",
        "by",
        "note",
        "result",
        "context",
    ]
    for extra in ("result", "context"):
        parameter = inspect.signature(Loop.reconcile).parameters[extra]
        assert parameter.default is None and parameter.kind is inspect.Parameter.KEYWORD_ONLY


def test_the_engine_imports_without_django_or_any_extra():
    """Importing every engine package loads no Django, Channels, ninja, LangGraph, Temporal, openai, OTel."""
    code = textwrap.dedent(
        """
        import sys
        for name in ("django", "channels", "ninja", "langgraph", "temporalio", "openai", "opentelemetry"):
            sys.modules[name] = None  # any import of these now fails
        import keelgate, keelgate.loop, keelgate.gateway, keelgate.audit, keelgate.checkpoint
        import keelgate.idempotency, keelgate.errors, keelgate.tracing
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_every_error_has_a_stable_code_and_fixed_wording():
    """Codes are unique snake_case and every class has its own message."""
    import re

    from keelgate import errors

    classes = [errors.KeelgateError, *errors._all_subclasses(errors.KeelgateError)[1:]]
    codes = [c.code for c in classes]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z_]+", c) for c in codes)
    for cls in classes:
        assert errors.error_from_code(cls.code, "d").__class__ is cls
        assert cls.message.endswith(".")


def test_control_signals_are_not_exceptions():
    """A crash failpoint escapes ``except Exception`` in a tool."""
    from keelgate.errors import CrashFailpoint

    assert not issubclass(CrashFailpoint, Exception)


# -- every public package, pinned ------------------------------------------------------

PUBLIC_ALL: dict[str, list[str]] = {
    "keelgate": [
        "__version__",
    ],
    "keelgate.audit": [
        "BUNDLE_FORMAT",
        "EMPTY_ROOT",
        "GENESIS_HASH",
        "LEAF_FIELDS",
        "MAX_SAFE_INTEGER",
        "AuditEvent",
        "AuditLog",
        "BundleError",
        "BundleReport",
        "ChainReport",
        "Checkpoint",
        "Cosignature",
        "CosignerKey",
        "HashReader",
        "InMemoryAuditLog",
        "NoteError",
        "ProofError",
        "RecordingAuditLog",
        "SqliteAuditLog",
        "StoredRow",
        "TreeBuilder",
        "VerifierKey",
        "build_bundle",
        "check_consistency",
        "check_inclusion",
        "compute_hash",
        "consistency_proof",
        "cosign",
        "cosigner_key",
        "encode_body",
        "fast_canonical",
        "format_at",
        "format_checkpoint",
        "i_json",
        "in_stored_form",
        "inclusion_proof",
        "leaf_bytes",
        "leaf_hash",
        "leaf_object",
        "linked_parts",
        "new_nodes",
        "node_hash",
        "note_cosignatures",
        "object_leaf_hash",
        "open_note",
        "page_in_stored_form",
        "parse_checkpoint",
        "range_nodes",
        "range_proof",
        "root_from_nodes",
        "root_from_range",
        "sign_note",
        "stored_event",
        "tree_root",
        "verifier_key",
        "verify",
        "verify_bundle",
        "verify_chain",
        "verify_cosignatures",
        "verify_rows",
    ],
    "keelgate.canonical": [
        "canonical_bytes",
        "canonical_json",
        "canonical_sha256",
    ],
    "keelgate.checkpoint": [
        "CheckpointCodec",
        "CheckpointStore",
        "EncodedCheckpoint",
        "HistoryCheckpointStore",
        "InMemoryCheckpointStore",
        "SqliteCheckpointStore",
        "StoredCheckpoint",
        "default_checkpointer",
    ],
    "keelgate.clock": [
        "Clock",
        "SystemClock",
    ],
    "keelgate.commits": [
        "NO_GROUP",
        "CommitGroup",
        "GroupedStore",
        "shared_group",
    ],
    "keelgate.contrib": [],
    "keelgate.contrib.langgraph": [
        "AsyncKeelgateSaver",
        "GateDecision",
        "GatedToolNode",
        "KeelgateSaver",
        "LangGraphCheckpointStore",
        "SaverDatabase",
        "Sql",
        "ThreadLease",
        "tool_schemas",
    ],
    "keelgate.contrib.langgraph.testing": [
        "ScriptedChatModel",
        "buy",
        "order_graph",
    ],
    "keelgate.contrib.mcp": [
        "FAIL_CLOSED",
        "IDEMPOTENCY_HEADER",
        "IDEMPOTENCY_KEY_META",
        "REPLAYED_META",
        "RUN_ID_HEADER",
        "RUN_ID_META",
        "SEPARATOR",
        "ApprovalRule",
        "CallArguments",
        "CallIdentity",
        "CallPlanner",
        "IdentityError",
        "Policy",
        "PolicyError",
        "SchemaViolation",
        "ToolPolicy",
        "UpstreamError",
        "UpstreamSpec",
        "call_goal",
        "call_identity",
        "call_tool",
        "canonical_arguments",
        "check_arguments",
        "check_upstream_name",
        "gateway_name",
        "list_tools",
        "load_policy",
        "offered_schema",
        "parse_goal",
        "split_name",
        "upstream_tool",
    ],
    "keelgate.contrib.openai": [
        "DEFAULT_PLANNER_PROMPT",
        "DEFAULT_VERIFIER_PROMPT",
        "UNPARSED_ARGUMENTS",
        "OpenAIPlanner",
        "OpenAIVerifier",
        "parse_verdict",
    ],
    "keelgate.contrib.temporal": [
        "KeelgateLoopWorkflow",
        "LoopActivity",
        "RetryOptions",
        "TemporalRunner",
        "temporal_worker",
    ],
    "keelgate.errors": [
        "ActionNotFoundError",
        "AlreadyDecidedError",
        "ApprovalDeniedError",
        "ApprovalError",
        "ApprovalEscalatedError",
        "ApprovalExpiredError",
        "ApprovalStaleError",
        "ApproverRoleError",
        "CallMayBeRunningError",
        "ChainBrokenError",
        "CheckpointUnreadableError",
        "ConfigurationError",
        "ConfirmationRequiredError",
        "ControlSignal",
        "CostUnknownError",
        "CrashFailpoint",
        "DecisionInvalidError",
        "DuplicateApproverError",
        "EditInvalidError",
        "GatewayError",
        "InvalidArgumentsError",
        "InvalidResultError",
        "KeelgateError",
        "KeyNotOwnedError",
        "LeaseLostError",
        "NotReconcilableError",
        "NotReplayableError",
        "NoteRequiredError",
        "OutcomeAlreadySettledError",
        "OutcomeUnknownError",
        "PlannerError",
        "RunCancelledError",
        "RunError",
        "RunExistsError",
        "RunFinishedError",
        "RunNotFoundError",
        "SideEffectNotPermittedError",
        "StaleCheckpointError",
        "StaleOwnerError",
        "StoreError",
        "ToolFailedError",
        "ToolNotGrantedError",
        "ToolOutputNotJsonError",
        "ToolRejectedError",
        "ToolTimeoutError",
        "UnknownToolError",
        "VerifierError",
        "error_from_code",
        "message_for",
    ],
    "keelgate.gateway": [
        "ALL_SIDE_EFFECTS",
        "READ_ONLY",
        "ApprovalPolicy",
        "ApprovalRequirement",
        "ApprovalRules",
        "CallContext",
        "Gateway",
        "GatewayResult",
        "Grants",
        "NoApproval",
        "OnExpiry",
        "RequireApproval",
        "SideEffect",
        "Tool",
        "ToolCall",
        "ToolFn",
        "ToolSpec",
        "tool",
    ],
    "keelgate.idempotency": [
        "ClaimStatus",
        "IdempotencyRecord",
        "IdempotencyStore",
        "InMemoryIdempotencyStore",
        "KeyStatus",
        "SqliteIdempotencyStore",
        "derive_key",
    ],
    "keelgate.loop": [
        "EXPIRY_WINDOWS",
        "WINDOWS",
        "AcceptAllVerifier",
        "ActionOutcome",
        "ActionStatus",
        "ApprovalState",
        "ApprovalVote",
        "CallableVerifier",
        "CheckpointStore",
        "ContextItem",
        "ContextMessage",
        "ContextSource",
        "DecisionContext",
        "Divergence",
        "ErrorInfo",
        "Failpoints",
        "GroundedAnswerVerifier",
        "HistoryCheckpointStore",
        "InMemoryCheckpointStore",
        "InProcessRunner",
        "LLMPlanner",
        "LLMVerifier",
        "Loop",
        "LoopLimits",
        "LoopOutcome",
        "LoopResult",
        "LoopRunner",
        "LoopSpec",
        "LoopState",
        "LoopType",
        "ModelPrice",
        "ModelUsage",
        "MonitorLoop",
        "MonitorSummary",
        "NotReplayableError",
        "OutcomeConfirmer",
        "Phase",
        "Plan",
        "PlanRequest",
        "PlannedAction",
        "Planner",
        "ProposedAction",
        "RecordedAction",
        "RecordedStep",
        "Recording",
        "ReplayReport",
        "RunExistsError",
        "RunNotFoundError",
        "Schedule",
        "SqliteCheckpointStore",
        "StaleCheckpointError",
        "StopConditions",
        "StopReason",
        "Usage",
        "Verdict",
        "VerdictDecision",
        "VerdictRecord",
        "VerificationLoop",
        "Verifier",
        "VerifyRequest",
        "default_checkpointer",
        "diff",
        "find_run",
        "replay",
    ],
    "keelgate.sqlite": [
        "SqliteDatabase",
        "SqliteStores",
    ],
    "keelgate.testing": [
        "FrozenClock",
        "Ledger",
        "Quote",
        "ScriptedPlanner",
        "TradeOrder",
        "trading_tools",
    ],
    "keelgate.testing.contract": [],
    "keelgate.testing.contract.audit": [
        "AuditLogContract",
        "ChainedAuditLogContract",
        "LogFactory",
    ],
    "keelgate.testing.contract.checkpoint": [
        "CheckpointStoreContract",
        "CheckpointStoreFactory",
        "HistoryCheckpointStoreContract",
        "HistoryStoreFactory",
    ],
    "keelgate.testing.contract.idempotency": [
        "IdempotencyStoreContract",
        "KeyStoreFactory",
    ],
    "keelgate.tracing": [
        "SPAN_NAMES",
        "TRACER_NAME",
        "otel_trace_id",
        "run_context",
    ],
}
"""Each public module's ``__all__``, exactly: a name added or dropped is a decision, made here."""

SEED_REEXPORTS = {
    "CheckpointStore",
    "HistoryCheckpointStore",
    "InMemoryCheckpointStore",
    "SqliteCheckpointStore",
    "default_checkpointer",
    "NotReplayableError",
    "RunExistsError",
    "RunNotFoundError",
    "StaleCheckpointError",
}
"""Names the seed's API reference puts in ``keelgate.loop`` that live in another package too."""


COMMAND_MODULES = {"keelgate.audit.verify", "keelgate.contrib.mcp.stdio"}
"""Commands run with ``python -m``, never imported: no ``__all__``. Importing
``keelgate.audit.verify`` would put the module where the function of that name is."""


def _engine_modules(*, private: bool) -> list[str]:
    """The engine's public modules, or its private ones (``_name`` inside a public package)."""
    import pkgutil

    import keelgate

    found = [] if private else ["keelgate"]
    for info in pkgutil.walk_packages(keelgate.__path__, "keelgate."):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts[:-1]) or info.name in COMMAND_MODULES:
            continue
        if parts[-1].startswith("_") is private:
            found.append(info.name)
    return sorted(found)


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then functions."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


def test_every_public_module_pins_its_exports_exactly():
    """Each public module's ``__all__`` is sorted and equals the list pinned here; none is unlisted."""
    import importlib

    assert sorted(PUBLIC_ALL) == _engine_modules(private=False)
    for name, expected in PUBLIC_ALL.items():
        exported = importlib.import_module(name).__all__
        assert exported == expected, name
        assert exported == sorted(exported, key=_isort_key), name


def test_each_public_name_has_one_import_path():
    """A name is exported by one public module, except the seed's re-exports in ``keelgate.loop``."""
    import importlib

    homes: dict[str, list[str]] = {}
    for module in PUBLIC_ALL:
        for name in importlib.import_module(module).__all__:
            homes.setdefault(name, []).append(module)
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert set(twice) == SEED_REEXPORTS
    assert all("keelgate.loop" in where and len(where) == 2 for where in twice.values())
    assert SEED_REEXPORTS <= SEED_SYMBOLS


def test_the_private_module_contract_lists_every_private_engine_module():
    """``make lint`` forbids importing each private engine module; its list in pyproject is whole."""
    import tomllib
    from pathlib import Path

    private = set(_engine_modules(private=True))
    config = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "forbidden" and "private engine module" in c["name"]]
    assert set(contract["forbidden_modules"]) == private
    assert len(private) > 40


def test_a_command_module_only_runs_main_from_a_private_module():
    """Each command module only imports its ``main`` from a private module and runs it as __main__."""
    import ast
    import importlib.util
    from pathlib import Path

    for name in COMMAND_MODULES:
        spec = importlib.util.find_spec(name)  # finds the file without importing the module
        assert spec is not None and spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        body = [node for node in tree.body if not isinstance(node, ast.Expr)]  # the docstring aside
        assert [type(node) for node in body] == [ast.ImportFrom, ast.If], name
        (imported,) = body[0].names
        assert imported.name == "main"
        assert body[0].module is not None and body[0].module.rsplit(".", 1)[-1].startswith("_")
