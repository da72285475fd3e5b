"""The console's one wording of each error (``sitekit.console_errors``) and the decision forms."""

from __future__ import annotations

import string

import pytest
from django.http import QueryDict

from approvals.edit_form import EditField
from approvals.forms import NOTE_MAX, DecisionForm, ReconcileForm
from keelgate.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalEscalatedError,
    ApprovalStaleError,
    CallMayBeRunningError,
    ConfirmationRequiredError,
    EditInvalidError,
    InvalidResultError,
    KeelgateError,
    NoteRequiredError,
    OutcomeAlreadySettledError,
    RunExistsError,
    StoreError,
    error_from_code,
)
from sitekit.console_errors import WORDING, refusal, refusal_line
from sitekit.errors import (
    ApprovalWithdrawnError,
    ForbiddenError,
    GoalNotUnderstoodError,
    InvalidCursorError,
    NotFoundError,
    NotResumableError,
)


def _subclasses(cls: type[KeelgateError]) -> list[type[KeelgateError]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def test_every_refusal_of_an_approval_is_told_on_its_card_with_the_errors_own_status():
    """Each ApprovalError class has a card refusal; its status is http_status, 422 told as 400."""
    for cls in _subclasses(ApprovalError):
        told = refusal(cls("someone"))
        assert told is not None, cls
        assert told.status == (400 if cls.http_status == 422 else cls.http_status), cls


@pytest.mark.parametrize(
    "error",
    [NoteRequiredError(), EditInvalidError("quantity"), ConfirmationRequiredError(), InvalidResultError("x")],
)
def test_what_the_person_must_correct_is_a_400_that_keeps_the_card(error):
    """The API's 422 is the console's 400 (htmx swaps it into the card's form), and the card stays."""
    told = refusal(error)
    assert told is not None and told.status == 400 and told.keep and told.level == "error"


@pytest.mark.parametrize("error", [ApprovalStaleError(), CallMayBeRunningError("14:02:10")])
def test_an_item_that_changed_under_the_person_is_a_409_warning_that_keeps_the_card(error):
    """The call changed, or may still be running: look again or wait, with the form still there."""
    told = refusal(error)
    assert told is not None and (told.status, told.level, told.keep) == (409, "warning", True)


def test_a_subclass_without_its_own_entry_is_worded_as_its_nearest_ancestor():
    """OutcomeAlreadySettledError has no entry: it reads as AlreadyDecidedError, naming who."""
    assert OutcomeAlreadySettledError not in WORDING
    told = refusal(OutcomeAlreadySettledError("rita"))
    assert told is not None
    assert (told.status, told.level, told.text, told.keep) == (
        409,
        "warning",
        "Already settled by rita.",
        False,
    )
    assert told.keep_typed  # whatever the loser of the race typed is shown to them again


def test_a_withdrawn_approval_says_who_cancelled_the_run_not_who_settled_it():
    """ApprovalWithdrawnError is an AlreadyDecidedError worded as a cancelled run, named or not."""
    told = refusal(ApprovalWithdrawnError("op"))
    assert told is not None
    assert (told.status, told.level, told.text, told.keep, told.keep_typed) == (
        409,
        "warning",
        "Withdrawn: op cancelled the run while this waited, so nobody decides it.",
        False,
        True,
    )
    unnamed = refusal(ApprovalWithdrawnError())
    assert unnamed is not None and unnamed.text.startswith("Withdrawn: someone cancelled the run")


def test_an_error_that_names_nobody_reads_its_fallback():
    """Without a detail: 'someone else' settled it, the 'admin' role decides an escalated approval."""
    settled = refusal(AlreadyDecidedError())
    assert settled is not None and settled.text == "Already settled by someone else."
    escalated = refusal(ApprovalEscalatedError())
    assert escalated is not None and escalated.status == 403 and "takes the admin role" in escalated.text


def test_not_found_forbidden_and_bugs_are_left_to_the_page():
    """404 and 403 are console_page's (a guessed URL learns nothing); no http_status is a bug (500)."""
    assert refusal(NotFoundError()) is None
    assert refusal(ForbiddenError()) is None
    assert refusal(StoreError()) is None


def test_an_error_without_an_entry_on_its_path_says_its_fixed_wording():
    """A 4xx error the mapping does not name is told with its own message; its card stays as it was."""
    assert not set(InvalidCursorError.__mro__) & set(WORDING)
    told = refusal(InvalidCursorError("zz"))
    assert told is not None
    assert (told.status, told.level, told.text, told.keep) == (
        400,
        "error",
        InvalidCursorError.message,
        True,
    )


def test_the_start_forms_and_resumes_refusals_are_worded_here():
    """The run pages keep no wording of their own: the goal's detail, the run's status, the clash."""
    goal = refusal(GoalNotUnderstoodError("expected a goal like 'buy 5 ACME'"))
    assert (
        goal is not None
        and goal.text == "The agent cannot read that goal: expected a goal like 'buy 5 ACME'."
    )
    assert (goal.status, goal.keep) == (400, True)
    resume = refusal(NotResumableError("done"))
    assert resume is not None and (resume.status, resume.level) == (409, "warning")
    assert resume.text == "Not resumed: the run is done, and only a stopped run can be resumed."
    clash = refusal(RunExistsError("form-1"))
    assert clash is not None and clash.status == 409 and clash.text.startswith("This form already started")


def test_the_wording_uses_only_the_errors_trusted_fields():
    """Every text and line formats with the error's detail, message and code, nothing else."""
    for cls, wording in WORDING.items():
        for template in (wording.text, wording.line):
            fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
            assert fields <= {"detail", "message", "code"}, (cls, template)


def test_a_bulk_line_is_rebuilt_from_the_code_and_detail_the_service_reports():
    """A bulk result carries a code and a detail: the line words the error of that code."""
    assert (
        refusal_line(error_from_code("approval_already_decided", "op"))
        == "not decided: already settled by op"
    )
    assert refusal_line(error_from_code("not_found")) == "not decided: not found"
    assert (
        refusal_line(error_from_code("approval_expired", "7"))
        == "not decided: it expired (denied, fail closed)"
    )
    assert (
        refusal_line(error_from_code("approval_withdrawn", "op"))
        == "not decided: withdrawn, the run was cancelled"
    )
    assert refusal_line(error_from_code("call_may_be_running")) == "not decided: call_may_be_running"


FIELDS = (EditField("quantity", "integer", "4", required=True),)


def _post(**data: str) -> QueryDict:
    query = QueryDict(mutable=True)
    query.update(data)
    return query


def test_an_edit_keeps_its_fields_its_note_and_that_it_was_an_edit():
    """The edit's note is kept for the edit form's box, and ``edit`` opens the form again."""
    form = DecisionForm.read(
        _post(**{"edit": "1", "arg.quantity": "7", "note": "fewer", "confirm": " Approve "}),
        decision="approve",
        fields=FIELDS,
    )
    assert form.problem == "" and form.arguments == {"quantity": 7} and form.confirmed
    assert form.typed == {"arg.quantity": "7", "edit": "1", "note_edit": "fewer"}


def test_a_plain_decision_keeps_its_note_under_its_own_box_and_takes_no_arguments():
    """A deny's note is kept as note_deny; edit fields posted with a deny are never read as an edit."""
    form = DecisionForm.read(_post(**{"note": "no", "edit": "1"}), decision="deny", fields=FIELDS)
    assert form.arguments is None and form.typed == {"note_deny": "no"} and form.seen is None


def test_a_decision_form_says_what_is_wrong_with_it():
    """A note over the limit, or an edit that cannot be read, is a problem; nothing else is checked here."""
    long = DecisionForm.read(_post(note="x" * (NOTE_MAX + 1)), decision="approve", fields=FIELDS)
    assert long.problem == f"The note is longer than {NOTE_MAX} characters."
    bad = DecisionForm.read(_post(**{"edit": "1", "arg.quantity": "many"}), decision="approve", fields=FIELDS)
    assert bad.problem.startswith("The edit cannot be read: quantity") and bad.arguments is None
    assert bad.typed["arg.quantity"] == "many"
    empty = DecisionForm.read(_post(note=""), decision="deny", fields=FIELDS)
    assert empty.problem == ""  # a deny's reason is the service's rule (NoteRequiredError)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"note": "checked"}, "Say whether the call was executed."),
        ({"executed": "yes", "note": "x" * (NOTE_MAX + 1)}, "The note is longer than"),
        ({"executed": "yes", "note": "n", "result": "[1]"}, "The result must be a JSON object"),
        ({"executed": "yes", "note": "n", "result": "{"}, "The result is not JSON"),
        ({"executed": "no", "note": "n", "result": '{"a": 1}'}, "A result is only recorded for a call"),
    ],
)
def test_a_reconcile_form_says_the_first_thing_wrong_and_keeps_what_was_typed(data, problem):
    """The verdict first, then the note, then the result; what was typed is kept as typed."""
    form = ReconcileForm.read(_post(**data))
    assert form.problem.startswith(problem)
    assert form.typed["note"] == data["note"] and form.typed["executed"] == data.get("executed", "")


def test_a_reconcile_form_reads_the_result_as_a_json_object():
    """An executed call with a JSON object: no problem, the object is the result."""
    form = ReconcileForm.read(_post(executed="yes", note="found", result=' {"order_id": "PB-1"} '))
    assert form.problem == "" and form.executed and form.result == {"order_id": "PB-1"}
