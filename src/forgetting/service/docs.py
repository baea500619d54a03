"""The API's documentation page, served with no request to another host.

Why: FastAPI's default ``/docs`` loads Swagger UI from a CDN, so on a machine without
internet (where an operator answering deletion requests may well be) it is a blank page.
Swagger UI's files are bundled in this package (``static/``, with their licence and where
they came from) and served here; the page's favicon is inline and the validator badge, which
would call swagger.io, is off. ReDoc is not served (one documentation page is enough).
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

#: Where the bundled assets are served.
ASSETS = "/docs/assets"
#: The bundled files and their media types.
FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}


def asset(name: str) -> bytes:
    """A bundled file's bytes (KeyError for a name not bundled)."""
    if name not in FILES:
        raise KeyError(name)
    return resources.files(__package__).joinpath("static", name).read_bytes()


def add_docs(app: FastAPI, docs_url: str = "/docs") -> set[str]:
    """Serve ``docs_url`` (Swagger UI on the app's OpenAPI) and its assets from the package;
    returns the paths added, which need no token and answer while the model reloads."""

    @app.get(docs_url, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url="data:,",
            swagger_ui_parameters={"validatorUrl": None},
        )

    paths = {docs_url}
    for name, media in FILES.items():
        body = asset(name)

        def serve(body: bytes = body, media: str = media) -> Response:
            return Response(body, media_type=media, headers={"Cache-Control": "max-age=86400"})

        app.add_api_route(f"{ASSETS}/{name}", serve, methods=["GET"], include_in_schema=False)
        paths.add(f"{ASSETS}/{name}")
    return paths
