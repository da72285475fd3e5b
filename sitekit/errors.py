"""The site's errors: one tree beside the engine's (``keelgate.errors``).

Every class has a stable ``code``, fixed wording and the HTTP status the API and the
console answer with (``http_status``, in brackets; inherited along the tree), so the
API's one exception handler reads the status off the error and needs no table. What the
console says of an error to a person at a card is :mod:`sitekit.console_errors`.

::

    keelgate.errors.KeelgateError
    ├── NotFoundError                  not_found [404]  also another tenant's object
    ├── ForbiddenError                 forbidden [403]
    ├── CsrfFailedError                csrf_failed [403]
    ├── RateLimitedError               rate_limited [429]
    │   └── AuthRateLimitedError       auth_rate_limited  failed API logins per address
    ├── TenantRequiredError            tenant_required [422]
    ├── InvalidCursorError             invalid_cursor [422]
    ├── NotAMemberError                not_a_member [422]
    ├── IdempotencyKeyReusedError      idempotency_key_reused [422]
    ├── IdempotencyKeyInProgressError  idempotency_key_in_progress [409]
    ├── DigestError                    digest_invalid [422]
    │   ├── DigestKeyMismatchError     digest_key_mismatch
    │   ├── DigestSignatureError       digest_signature_invalid
    │   └── EmptyChainError            audit_chain_empty [404]
    ├── ProofRangeError                proof_out_of_range [422]  names the parameter
    ├── AuditRetiredError              audit_retired [410]  below the log's retention cut
    ├── AuditEntryTooLargeError        audit_entry_too_large [409]  a leaf no entry bundle can carry
    ├── RetirementRefusedError         audit_retirement_refused [409]  nothing was deleted
    ├── WebhookUrlRefusedError         webhook_url_refused [422]
    ├── WebhookDeliveryUnfinishedError webhook_delivery_unfinished [409]  still due or being sent
    ├── BulkNotAllowedError            bulk_not_allowed [409]
    ├── NotAnUnknownOutcomeError       not_an_unknown_outcome [409]  the call's outcome is known
    ├── LastAdminError                 last_admin [409]  the tenant would be left without an admin
    ├── AlreadyAMemberError            already_a_member [409]
    ├── InvitationInvalidError         invitation_invalid [410]  used, expired or never made
    ├── StandingRuleInvalidError       standing_rule_invalid [422]  names the field
    ├── StandingRuleEndedError         standing_rule_ended [409]  revoked or expired
    ├── keelgate.errors.ConfigurationError
    │   ├── UnknownAgentError          unknown_agent [422]
    │   └── GoalNotUnderstoodError     goal_not_understood [422]
    └── keelgate.errors.RunError [409]
        ├── NotResumableError          not_resumable
        └── keelgate.errors.AlreadyDecidedError
            └── ApprovalWithdrawnError approval_withdrawn  the run was cancelled while it waited
"""

from __future__ import annotations

from keelgate.errors import AlreadyDecidedError, ConfigurationError, KeelgateError, RunError

__all__ = [
    "AlreadyAMemberError",
    "ApprovalWithdrawnError",
    "AuditEntryTooLargeError",
    "AuditRetiredError",
    "AuthRateLimitedError",
    "BulkNotAllowedError",
    "CsrfFailedError",
    "DigestError",
    "DigestKeyMismatchError",
    "DigestSignatureError",
    "EmptyChainError",
    "ForbiddenError",
    "GoalNotUnderstoodError",
    "IdempotencyKeyInProgressError",
    "IdempotencyKeyReusedError",
    "InvalidCursorError",
    "InvitationInvalidError",
    "LastAdminError",
    "NotAMemberError",
    "NotAnUnknownOutcomeError",
    "NotFoundError",
    "NotResumableError",
    "ProofRangeError",
    "RateLimitedError",
    "RetirementRefusedError",
    "StandingRuleEndedError",
    "StandingRuleInvalidError",
    "TenantRequiredError",
    "UnknownAgentError",
    "WebhookDeliveryUnfinishedError",
    "WebhookUrlRefusedError",
]


class NotFoundError(KeelgateError):
    """The object does not exist, or belongs to a tenant the caller cannot see."""

    code = "not_found"
    message = "Not found."
    http_status = 404


class ForbiddenError(KeelgateError):
    """The caller's role in this tenant does not allow that."""

    code = "forbidden"
    message = "Your role in this tenant does not allow that."
    http_status = 403


class CsrfFailedError(KeelgateError):
    """A session-authenticated unsafe request without a valid CSRF token."""

    code = "csrf_failed"
    message = "The CSRF check failed: send the csrftoken cookie's value in X-CSRFToken."
    http_status = 403


class RateLimitedError(KeelgateError):
    """The key made too many requests in the current window; ``retry_after`` says when to retry."""

    code = "rate_limited"
    message = "Too many requests with this API key."
    http_status = 429

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"retry after {retry_after} s")


class AuthRateLimitedError(RateLimitedError):
    """This client address failed API authentication too often; refused until the window ends."""

    code = "auth_rate_limited"
    message = "Too many failed authentications from this address."


class TenantRequiredError(KeelgateError):
    """A session user of several tenants must say which one with ``?tenant=``."""

    code = "tenant_required"
    message = "You belong to several tenants: name one with the tenant query parameter."
    http_status = 422


class InvalidCursorError(KeelgateError):
    """A ``cursor`` that this API did not hand out (or was cut or edited)."""

    code = "invalid_cursor"
    message = "The cursor is not valid; start again without one."
    http_status = 422


class NotAMemberError(KeelgateError):
    """A key can only be made for a user who belongs to the tenant."""

    code = "not_a_member"
    message = "The user does not belong to that tenant."
    http_status = 422


class IdempotencyKeyReusedError(KeelgateError):
    """The Idempotency-Key was used before with a different request body."""

    code = "idempotency_key_reused"
    message = "This Idempotency-Key was already used with a different request."
    http_status = 422


class IdempotencyKeyInProgressError(KeelgateError):
    """The first request with this Idempotency-Key has not finished yet."""

    code = "idempotency_key_in_progress"
    message = "A request with this Idempotency-Key is still in progress; retry shortly."
    http_status = 409


class DigestError(KeelgateError):
    """A chain digest that cannot be trusted: missing or malformed fields."""

    code = "digest_invalid"
    message = "The chain digest is malformed."
    http_status = 422


class DigestKeyMismatchError(DigestError):
    """The digest names a public key other than this site's: another site signed it."""

    code = "digest_key_mismatch"
    message = "The chain digest was signed with a key other than this site's."


class DigestSignatureError(DigestError):
    """The signature does not verify: the digest was edited or forged."""

    code = "digest_signature_invalid"
    message = "The chain digest's signature does not verify with this site's key."


class EmptyChainError(DigestError):
    """Nothing to digest: a digest of no history would prove nothing (likely a typo)."""

    code = "audit_chain_empty"
    message = "The tenant has no audit events to digest."
    http_status = 404


class ProofRangeError(KeelgateError):
    """A proof asked for a leaf or a tree size the tenant's log does not have."""

    code = "proof_out_of_range"
    message = "A proof parameter is out of range."
    http_status = 422

    def __init__(self, field: str = "", bound: str = "in range") -> None:
        super().__init__(f"query.{field}: must be {bound}" if field else "")
        self.field = field


class AuditRetiredError(KeelgateError):
    """The audit events asked for were retired: archived to a bundle, then removed from the live log.

    Stable rather than 404: the event existed, its hash is still in the tree and in every
    checkpoint since, and the archive made when it was retired holds it (``detail`` names
    the cut). ``first_kept`` is the lowest number the live log still serves.
    """

    code = "audit_retired"
    message = "Retired: those audit events were archived and removed from the live log."
    http_status = 410

    def __init__(self, field: str = "", first_kept: int = 0) -> None:
        where = f"query.{field}: " if field else ""
        super().__init__(f"{where}events below {first_kept} were retired" if first_kept else "")
        self.field = field
        self.first_kept = first_kept


class AuditEntryTooLargeError(KeelgateError):
    """An entry bundle (C2SP ``tlog-tiles``, :mod:`audit.tiles`) holds a leaf longer than
    the 65,535 bytes its uint16 length can count, so it cannot be written.

    The event is in the log all the same: its hash is in the tiles, and ``GET
    /audit/events`` returns its leaf object (``detail`` names its number).
    """

    code = "audit_entry_too_large"
    message = "An entry of this bundle is longer than an entry bundle can carry; read it from the events."
    http_status = 409

    def __init__(self, seq: int = 0, size: int = 0) -> None:
        super().__init__(f"event {seq}'s leaf is {size} bytes" if seq else "")
        self.seq = seq


class RetirementRefusedError(KeelgateError):
    """A retirement of old audit events that will not be done as asked (a cut past the head,
    an archive that exists, failed or did not verify, another retirement meanwhile).

    Raised before anything is deleted, or from inside the transaction that deletes, which
    it rolls back: a refused retirement leaves the live log as it was. ``detail`` says why.
    """

    code = "audit_retirement_refused"
    message = "The audit events were not retired; nothing was deleted."
    http_status = 409


class WebhookUrlRefusedError(KeelgateError):
    """A webhook URL that is not http(s), or reaches an address the settings do not allow (SSRF)."""

    code = "webhook_url_refused"
    message = "That webhook URL is refused."
    http_status = 422


class WebhookDeliveryUnfinishedError(KeelgateError):
    """Only a finished delivery is sent again: a due one goes anyway, one being sent may still succeed."""

    code = "webhook_delivery_unfinished"
    message = "This message is still due or being sent: redeliver it once it has finished."
    http_status = 409


class BulkNotAllowedError(KeelgateError):
    """High-impact and four-eyes calls are decided one at a time, never in a bulk decision."""

    code = "bulk_not_allowed"
    message = "This call must be decided on its own, not in bulk."
    http_status = 409


class NotAnUnknownOutcomeError(KeelgateError):
    """Reconciling a call whose outcome is known (done, denied, waiting...): nothing to settle;
    ``detail`` says where the call stands."""

    code = "not_an_unknown_outcome"
    message = "This call's outcome is known: there is nothing to reconcile."
    http_status = 409


class LastAdminError(KeelgateError):
    """The change would leave the tenant with no active admin, so nobody could manage it."""

    code = "last_admin"
    message = "This is the tenant's last admin: make someone else admin first."
    http_status = 409


class AlreadyAMemberError(KeelgateError):
    """The person is already an active member of the tenant: change their role instead."""

    code = "already_a_member"
    message = "That person is already a member of this tenant: change their role instead."
    http_status = 409


class StandingRuleInvalidError(KeelgateError):
    """A standing approval rule that could never work as written (an unknown field, min above
    max, no expiry or one past the maximum, a widening edit); ``detail`` names the field."""

    code = "standing_rule_invalid"
    message = "The standing approval rule is not valid."
    http_status = 422


class StandingRuleEndedError(KeelgateError):
    """The standing approval rule was revoked or has expired: it can no longer change."""

    code = "standing_rule_ended"
    message = "This standing approval rule was revoked or has expired."
    http_status = 409


class InvitationInvalidError(KeelgateError):
    """An invitation link that was used, has expired, or was never made (not told apart)."""

    code = "invitation_invalid"
    message = "This invitation link has been used or has expired: ask an admin for a new one."
    http_status = 410


class UnknownAgentError(ConfigurationError):
    """No agent of that name is registered in ``KEELGATE_AGENTS``."""

    code = "unknown_agent"
    message = "No agent with that name is registered."
    http_status = 422


class GoalNotUnderstoodError(ConfigurationError):
    """The agent cannot work with that goal."""

    code = "goal_not_understood"
    message = "The agent cannot read that goal."
    http_status = 422


class NotResumableError(RunError):
    """Only a stopped run (a budget stop or an error) can be resumed by hand."""

    code = "not_resumable"
    message = "Only a stopped run can be resumed."


class ApprovalWithdrawnError(AlreadyDecidedError):
    """The run was cancelled while the approval waited: nobody decides it; ``detail`` names who cancelled."""

    code = "approval_withdrawn"
    message = "The run was cancelled while this approval waited: it was withdrawn."
