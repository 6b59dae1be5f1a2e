"""The routers of ``galleria serve``: one per page, one for the JSON API, one for the gallery's pixels.

=========================  ===================================================================
router                     routes
=========================  ===================================================================
:mod:`.browse`             ``GET /``: the gallery grid; with a query, the search page
:mod:`.search`             ``POST /`` (the search form), ``/upload/{id}.jpg``
:mod:`.evaluation`         ``/eval``, ``/eval/{n}`` (``galleria serve --eval DIR``)
:mod:`.map`                ``/map`` and its data, ``/api/map...``
:mod:`.duplicates`         ``/duplicates``
:mod:`.view`               ``/view/{path}``: one image at full size
:mod:`.api`                ``GET /api/info``, ``POST /api/search``
:mod:`.files`              ``/thumb/{path}``, ``/image/{path}``, ``/favicon.ico``
=========================  ===================================================================

:func:`galleria.web.app.create_app` builds the shared :class:`~galleria.web._site.Site` and wires
them; each router factory takes only what its routes use.
"""

from __future__ import annotations

from galleria.web.routes.api import api_router
from galleria.web.routes.browse import browse_router
from galleria.web.routes.duplicates import duplicates_router
from galleria.web.routes.evaluation import evaluation_router
from galleria.web.routes.files import files_router
from galleria.web.routes.map import map_router
from galleria.web.routes.search import search_router
from galleria.web.routes.view import view_router

__all__ = [
    "api_router",
    "browse_router",
    "duplicates_router",
    "evaluation_router",
    "files_router",
    "map_router",
    "search_router",
    "view_router",
]
