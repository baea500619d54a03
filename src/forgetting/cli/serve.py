"""``forgetting serve``: the store over HTTP (:mod:`forgetting.service`), with uvicorn.

Its own module because it is the one command with optional dependencies of its own (FastAPI,
uvicorn), imported only when it runs: every other command works without them. How uvicorn
runs (a cap on connections under the open-file limit, slow clients closed, repeated log
lines collapsed) is :mod:`forgetting.service.server`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from urllib.parse import urlparse

from .errors import CLIError, is_dsn, redact, usage
from .inputs import open_store
from .render import note


def model_name(location: str) -> str:
    """The name a served store's model goes by: its file's stem, or a PostgreSQL DSN's
    database name."""
    if is_dsn(location):
        return urlparse(location).path.strip("/") or "postgres"
    return Path(location).stem


def served_stores(args: argparse.Namespace) -> list[tuple[str, argparse.Namespace]]:
    """(name, the options that open it) of each ``--store``, in order; a usage error for two
    with one name, or a number of ``--secret-key-file`` other than none, one or one each."""
    stores = list(args.stores)
    keys = list(args.secret_key_file or [])
    if len(keys) not in (0, 1, len(stores)):
        raise usage(
            f"{len(keys)} --secret-key-file for {len(stores)} --store: give one for every "
            "store, or one per store in the same order"
        )
    named: dict[str, argparse.Namespace] = {}
    for position, location in enumerate(stores):
        name = model_name(location)
        if name in named:
            raise usage(
                f"two stores are named {name!r} (a model's name is its store's file stem): "
                "rename one"
            )
        key = keys[0] if len(keys) == 1 else (keys[position] if keys else None)
        named[name] = argparse.Namespace(store=location, secret_key_file=key)
    return list(named.items())


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..service import ConfigError, ServiceConfig, create_app
        from ..service.server import log_filters, server_options
    except ImportError as err:
        raise CLIError(
            f"`serve` needs FastAPI and uvicorn ({err}); install them: "
            "pip install 'forgetting[service]'"
        ) from None
    try:
        config = ServiceConfig.load(
            token_file=args.token_file,
            open_reads=args.open_reads,
            max_batch=args.max_batch,
            open_receipts=args.open_receipts,
        )
    except ConfigError as err:
        raise usage(str(err)) from None
    if not config.tokens:
        raise usage(
            "no bearer token configured: pass --token-file FILE or set FORGETTING_TOKENS "
            "(comma separated); without one nobody could forget anything"
        )
    warming = None
    if args.warmup:
        from ..warmup import warm_up

        # its own process: compiles what the first forget needs while the store loads
        warming = warm_up(wait=False, quiet=True)
        print("compiling kernels in the background (--no-warmup skips)", file=sys.stderr)
    stores = served_stores(args)
    try:
        with contextlib.ExitStack() as opened:
            models = {
                name: opened.enter_context(open_store(options, read_only=False))
                for name, options in stores
            }
            try:
                app = create_app(models, config)
                # after the store opened: the files it holds count against the cap
                options = server_options(args.max_connections)
            except ConfigError as err:
                raise usage(str(err)) from None
            if args.host not in ("127.0.0.1", "localhost", "::1"):
                note(f"listening on {args.host}, beyond this machine; put TLS in front of it")
            cap = options["http"].guard.cap
            where = ", ".join(
                redact(o.store) + (f" as {n}" if len(stores) > 1 else "") for n, o in stores
            )
            print(
                f"serving {where} on http://{args.host}:{args.port} "
                f"(docs at /docs; {config!r}; at most {cap} connections)",
                file=sys.stderr,
            )
            with log_filters():
                uvicorn.run(
                    app, host=args.host, port=args.port, log_level=args.log_level, **options
                )
    finally:
        if warming is not None and warming.poll() is None:
            warming.terminate()
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    """``forgetting warmup``: :func:`forgetting.warmup.warm_up`, waiting for it."""
    from ..warmup import warm_up

    code = warm_up(wait=True, quiet=args.quiet)
    if code != 0:
        raise CLIError(f"the warm-up failed (exit status {code}); see its output above")
    return 0
