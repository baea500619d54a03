"""The HTTP service: a durable model of any family (:class:`~forgetting.store.DurableModel`)
behind FastAPI.

``create_app(model, config)`` builds the app (``create_app({"crm": a, "billing": b},
config)`` serves several models: :mod:`.fleet`); ``ServiceConfig`` holds the bearer tokens
(never shown) and their operators' names, whether reads and receipt lookups are open, and the
batch limit. FastAPI is an
optional dependency, imported only when this package is. :mod:`.app` says which module does
what.
"""

from .app import create_app
from .config import ConfigError, ServiceConfig

__all__ = ["ConfigError", "ServiceConfig", "create_app"]
