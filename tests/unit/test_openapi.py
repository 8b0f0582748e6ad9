"""Every service's OpenAPI document describes exactly the routes it serves.

The services declare each route once (``nodes.common.Route``) and generate both the
router and the document from that table; this test holds them to it: a route added to
the router directly, or a document entry without a route, fails here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodes.common import OPENAPI_KEY, OPENAPI_PATH, Address
from nodes.config import parse_argv
from tests.secured import AUTH, secured
from tests.unit.test_service_config import PROGRAMS, command_line

#: The programs that serve a document: every service, the Captain's task programs
#: included (the harness's background load, ``cpu_load``, serves no HTTP).
DOCUMENTED = ("tier_server", "armada.app_manager", "armada.beacon", "armada.captain", "armada.cargo",
              "armada.cargo_manager", "armada.detect_task", "armada.echo_task",
              "armada.face_task", "armada.spinner", "person_search.coordinator",
              "person_search.edge_server")
SERVICES = sorted(set(PROGRAMS) - {"cpu_load"})


def build(name: str, tmp_path: Path, argv: list[str] | None = None) -> web.Application:
    """The app of ``PROGRAMS[name]`` built as its ``main`` builds it (not started)."""
    program = PROGRAMS[name]
    words = command_line(name, tmp_path) if argv is None else argv
    params = parse_argv(program.config_cls, words, name, name)
    return importlib.import_module(program.module).app_from_params(
        params, Address("127.0.0.1", 9))


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route of the router; aiohttp's automatic HEAD of a GET
    is not a route of its own."""
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}


def documented(document: dict) -> set[tuple[str, str]]:
    """(method, path) of every operation of an OpenAPI document."""
    return {(method.upper(), path) for path, item in document["paths"].items()
            for method in item if method != "parameters"}


@pytest.mark.parametrize("name", SERVICES)
def test_the_document_lists_exactly_the_routes_served(name: str, tmp_path: Path) -> None:
    app = build(name, tmp_path)
    if name not in DOCUMENTED:
        assert OPENAPI_KEY not in app and ("GET", OPENAPI_PATH) not in served(app)
        return
    document = app[OPENAPI_KEY]
    assert documented(document) == served(app)
    assert ("GET", OPENAPI_PATH) in served(app) and ("GET", "/health") in served(app)
    assert document["openapi"].startswith("3.") and document["info"]["title"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            assert operation["summary"], (method, path)
            assert any(code.startswith("2") for code in operation["responses"]), (method, path)


def test_the_beacon_documents_the_storage_routes_only_with_a_cargo_manager(
        tmp_path: Path) -> None:
    argv = ["--app-manager", "http://a:1", "--spinner", "http://s:2"]
    without = build("armada.beacon", tmp_path, argv)
    with_storage = build("armada.beacon", tmp_path, [*argv, "--cargo-manager", "http://c:3"])
    assert documented(without[OPENAPI_KEY]) == served(without)
    assert documented(with_storage[OPENAPI_KEY]) == served(with_storage)
    assert served(with_storage) - served(without) == {
        ("POST", "/cargos"), ("GET", "/cargos"), ("DELETE", "/cargos/{cargo_id}")}


async def test_the_served_document_is_the_generated_one(tmp_path: Path) -> None:
    app = build("armada.spinner", tmp_path)
    async with TestClient(TestServer(secured(app)), headers=AUTH) as client:
        resp = await client.get(OPENAPI_PATH)
        assert resp.status == 200
        assert await resp.json() == app[OPENAPI_KEY]


@pytest.mark.parametrize("name", DOCUMENTED)
def test_the_document_is_valid_openapi_3_0(name: str, tmp_path: Path) -> None:
    """A standard validator (and so a standard fuzzer) accepts every document: 3.0
    schemas (a boolean ``exclusiveMinimum``), every path parameter declared."""
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.validators import OpenAPIV30SpecValidator

    document = build(name, tmp_path)[OPENAPI_KEY]
    assert document["openapi"].startswith("3.0.")
    validate(document, cls=OpenAPIV30SpecValidator)


def test_a_path_parameter_is_declared_once_per_path() -> None:
    from nodes.common import Route, openapi_document

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    document = openapi_document({"title": "t", "version": "1"}, [
        Route("GET", "/a/{x}/b/{y}", handler, "one"),
        Route("DELETE", "/a/{x}/b/{y}", handler, "two")])
    parameters = document["paths"]["/a/{x}/b/{y}"]["parameters"]
    assert [(p["name"], p["in"], p["required"]) for p in parameters] == [
        ("x", "path", True), ("y", "path", True)]


def test_the_beacon_documents_its_refusal_of_encoded_path_segments(tmp_path: Path) -> None:
    """Every Beacon route with a path parameter may answer 400 (an encoded separator or
    ``%`` in a segment, ``confined_path``), so its document declares it."""
    document = build("armada.beacon", tmp_path)[OPENAPI_KEY]
    for path, item in document["paths"].items():
        if "{" in path:
            for method, operation in item.items():
                if method != "parameters":
                    assert "400" in operation["responses"], (method, path)
