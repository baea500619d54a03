"""``forgetting serve``: the store over HTTP (:mod:`forgetting.service`), with uvicorn.

Its own module because it is the one command with optional dependencies of its own (FastAPI,
uvicorn), imported only when it runs: every other command works without them. How uvicorn
runs (a cap on connections under the open-file limit, slow clients closed, repeated log
lines collapsed) is :mod:`forgetting.service.server`'s.
"""

from __future__ import annotations

import argparse
import sys

from .errors import CLIError, redact, usage
from .inputs import open_store
from .render import note


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
    try:
        with open_store(args, read_only=False) as model:
            try:
                app = create_app(model, config)
                # after the store opened: the files it holds count against the cap
                options = server_options(args.max_connections)
            except ConfigError as err:
                raise usage(str(err)) from None
            if args.host not in ("127.0.0.1", "localhost", "::1"):
                note(f"listening on {args.host}, beyond this machine; put TLS in front of it")
            cap = options["http"].guard.cap
            print(
                f"serving {redact(args.store)} on http://{args.host}:{args.port} "
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
