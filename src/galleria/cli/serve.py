"""``galleria serve``: browse and query a store in a web browser (extra ``galleria[web]``)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from galleria.cli._common import CliError, add_command
from galleria.cli._embedder_options import say
from galleria.cli._parse import check_existing_file, check_existing_folder, parse_float, parse_int
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria serve photos.safetensors                 # then open http://127.0.0.1:8000
  galleria serve photos.safetensors --port 8080 --max-upload-mb 50
  galleria serve photos.safetensors --settings tuned.json   # the method and settings `galleria tune` chose
  galleria serve photos.safetensors --eval report/   # the queries of `galleria evaluate --report report/`
  galleria serve photos.safetensors --host 0.0.0.0 --allow-host gallery.lan   # reached by that name too
  galleria serve moved.safetensors --root /data/photos      # the gallery's folder (also the only one served)
  galleria serve photos.safetensors --request-timeout 20    # a search taking longer is answered 503
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria serve``."""
    parser = add_command(
        subparsers,
        "serve",
        help="browse and query a store in a web browser",
        description=(
            "Serve a page on which to query the store by uploading an image, by clicking a result, or by "
            "text (clip stores), with plain and re-ranked results side by side; and a JSON API "
            "(POST /api/search, GET /api/info, schema at /openapi.json). The store and its model are "
            "loaded once. Only the pixels of images under the gallery root are served: --root, else "
            "the folder the store's images share (a store whose images share none needs --root). "
            "Requests whose Host is not the bound host, localhost, an IP address or an --allow-host "
            "name are refused (DNS rebinding). Needs the web extra (pip install -e '.[web]')."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument("--port", default="8000", metavar="N", help="port to bind (default: %(default)s)")
    parser.add_argument(
        "--max-upload-mb",
        default="20",
        metavar="MB",
        help="largest accepted upload, in megabytes (default: %(default)s)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (repeatable); the bound host, localhost and IP "
        "addresses always are",
    )
    parser.add_argument(
        "--request-timeout",
        default="60",
        metavar="SECONDS",
        help="answer 503 to a search whose work takes longer than this (default: %(default)s); its "
        "worker stops at the work's next deadline check",
    )
    add_load_options(parser)
    parser.add_argument(
        "--settings",
        default=None,
        metavar="FILE",
        help="start from the settings in FILE (written by `galleria tune`): αQE, method, parameters; "
        "they are also the API's defaults",
    )
    parser.add_argument(
        "--eval",
        default=None,
        metavar="DIR",
        help="list the queries of an evaluation (the --report folder of `galleria evaluate` or `demo`) at "
        "/eval, those whose AP re-ranking lowered most first",
    )
    parser.set_defaults(run=run)


def _check_bind(host: str, port: int) -> None:
    """CliError (one line) if ``host:port`` cannot be bound, before the store is loaded."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        raise CliError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


def run(args: argparse.Namespace) -> int:
    """Load the store and serve it until interrupted."""
    port = parse_int("--port", args.port, minimum=0)
    if port > 65535:
        raise ValueError(f"--port must be at most 65535, got {port}")
    max_upload_mb = parse_float("--max-upload-mb", args.max_upload_mb)
    if max_upload_mb <= 0:
        raise ValueError(f"--max-upload-mb must be positive, got {args.max_upload_mb!r}")
    request_timeout = parse_float("--request-timeout", args.request_timeout, maximum=86_400.0)
    if request_timeout <= 0:
        raise ValueError(f"--request-timeout must be positive, got {args.request_timeout!r}")
    from galleria.web import create_app, serve  # ImportError names the extra

    defaults = None
    if args.settings is not None:
        from galleria.tune.settings import read_settings

        defaults = read_settings(check_existing_file("settings file", args.settings))
    evaluation = evaluation_labels = None
    if args.eval is not None:
        from galleria.evaluation import FILE_NAME, read_query_results

        folder = check_existing_folder("--eval", args.eval)
        if not os.path.lexists(os.path.join(folder, FILE_NAME)):
            raise CliError(
                f"--eval {args.eval!r} has no {FILE_NAME}; give the --report folder of "
                "`galleria evaluate` or `galleria demo` (run it again to write one)"
            )
        evaluation = read_query_results(folder)
        from galleria.evaluation.per_label import read_label_summary

        try:
            evaluation_labels = read_label_summary(folder)
        except (ValueError, OSError) as error:
            print(f"galleria serve: warning: the label summary is not shown: {error}", file=sys.stderr)
    _check_bind(args.host, port)
    from galleria.web import normalise_hosts

    hosts = normalise_hosts([args.host, *args.allow_host])  # ValueError names a bad --allow-host
    say(f"loading the store {args.store} ...")
    store = load_store(args, args.store)
    try:
        app = create_app(
            store,
            store_name=args.store,
            max_upload_bytes=int(max_upload_mb * 1024 * 1024),
            defaults=defaults,
            root=args.root,
            allowed_hosts=hosts,
            evaluation=evaluation,
            evaluation_labels=evaluation_labels,
            request_timeout=request_timeout,
        )
    except ValueError as error:
        raise CliError(str(error)) from None
    root = app.state.gallery_root
    print(
        f"serving {len(store)} images of {args.store} on http://{args.host}:{port} (Ctrl-C stops); "
        f"gallery root {root}",
        file=sys.stderr,
    )

    def stopping() -> None:
        print("galleria serve: stopping (finishing open requests) ...", file=sys.stderr, flush=True)

    try:
        serve(app, host=args.host, port=port, on_stop=stopping)
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down: the normal way to stop
        pass
    print("galleria serve: stopped", file=sys.stderr)
    return 0
