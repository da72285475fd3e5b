"""The OpenAPI document: valid, and every operation documented with its errors."""

from __future__ import annotations

from openapi_spec_validator import validate

from tests.site.api.conftest import Api

ERROR_REF = "#/components/schemas/ErrorOut"
SERVED = {
    "/api/v1/audit/checkpoint": "text/plain",
    "/api/v1/audit/tlog/{tenant}/checkpoint": "text/plain",
    "/api/v1/audit/tlog/{tenant}/tile/entries/{tile}": "application/octet-stream",
    "/api/v1/audit/tlog/{tenant}/tile/{tile}": "application/octet-stream",
}
"""The operations whose success is not JSON, and what they serve."""


def spec() -> dict:
    """The live document, as clients and schemathesis read it."""
    response = Api(None).get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def operations(document: dict):
    """(method, path, operation) for every operation."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def test_the_document_validates(transactional_db):
    """openapi-spec-validator accepts the document served at /api/v1/openapi.json."""
    document = spec()
    validate(document)
    assert document["info"]["title"] == "Keelgate API"
    assert document["components"]["securitySchemes"]


def test_every_operation_has_a_summary_a_success_schema_and_error_responses(transactional_db):
    """Each operation: a summary, a 2xx JSON schema (the signed checkpoint: text/plain, a tlog
    tile or bundle: application/octet-stream, as they are served), ErrorOut for 401, 404, 422,
    429, and security."""
    document = spec()
    # 25, the tlog-tiles read path (checkpoint, tile, entries) and the standing approvals
    # (list, create, endorse, revoke)
    assert len(list(operations(document))) == 32
    for method, path, operation in operations(document):
        where = f"{method.upper()} {path}"
        assert operation.get("summary"), where
        responses = operation["responses"]
        ok = [s for s in responses if s.startswith("2")]
        served = SERVED.get(path, "application/json")
        assert ok and all(list(responses[s]["content"]) == [served] for s in ok), where
        assert all(responses[s]["content"][served]["schema"] for s in ok), where
        for status in ("401", "404", "422", "429"):
            assert responses[status]["content"]["application/json"]["schema"]["$ref"] == ERROR_REF, where
        if method == "post":
            for status in ("400", "403", "409", "413"):
                assert status in responses, where
        assert operation.get("security"), where


def test_every_input_schema_forbids_unknown_fields(transactional_db):
    """Request bodies are objects with additionalProperties false (extra="forbid")."""
    document = spec()
    schemas = document["components"]["schemas"]
    inputs = [name for name in schemas if name.endswith("In")]
    assert {
        "RunStartIn",
        "RunResumeIn",
        "StopIn",
        "ApproveIn",
        "DenyIn",
        "ReconcileIn",
        "ChainDigestIn",
    } <= set(inputs)
    for name in inputs:
        assert schemas[name].get("additionalProperties") is False, name


def test_the_interactive_docs_are_served(transactional_db):
    """/api/v1/docs renders the Swagger UI."""
    response = Api(None).http.get("/api/v1/docs")
    assert response.status_code == 200 and b"swagger" in response.content.lower()


def test_the_document_uses_json_schema_bounds_not_pydantic_ones(transactional_db):
    """minimum/maximum, never pydantic's ge/le/gt/lt: a validator must not hide a bound from clients."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            found.extend(f"{where}.{k}" for k in ("ge", "le", "gt", "lt") if k in node)
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(spec(), "$")
    assert found == []
