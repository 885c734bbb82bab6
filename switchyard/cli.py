"""`switchyard` command line: serve, generate, and the operator tools as they land."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from switchyard.engine.grammar_limits import DEFAULT_GRAMMAR_COMPILE_TIMEOUT, DEFAULT_MAX_GRAMMAR_BYTES
from switchyard.engine_args import add_engine_args, engine_config_from_args

TOOL_CALL_FORMATS = ("hermes", "llama3_json", "mistral")
"""switchyard.tool_calling's registered formats (listed here so `--help` need not import the engine; tested)."""
REASONING_PARSERS = ("think", "qwen3", "deepseek_r1")
"""switchyard.reasoning's parser names (here for the same reason; tested)."""
DEFAULT_MAX_REQUEST_BYTES = 16 << 20
"""`ServerSettings.max_request_bytes`' default, for `serve --max-request-bytes` (here for the same reason; tested)."""
API_KEY_ENV = "SWITCHYARD_API_KEY"
"""Where `serve` reads its API key when `--api-key` is not given."""


def cmd_generate(args: argparse.Namespace) -> int:
    from switchyard.engine.sampling_params import SamplingParams
    from switchyard.llm import LLM

    llm = LLM(config=engine_config_from_args(args))
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.sampling_seed
    )
    prompts = args.prompt or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if args.chat:
        outputs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params)
    else:
        outputs = llm.generate(prompts, params)
    for prompt, output in zip(prompts, outputs, strict=True):
        print(f"### {prompt}\n{output.outputs[0].text}\n")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from switchyard.engine.grammar_limits import GrammarLimits
    from switchyard.models.registry import resolve_model
    from switchyard.server.cors import CorsPolicy
    from switchyard.server.launch import build_server
    from switchyard.server.state import ServerSettings
    from switchyard.server.tenants import TenantsConfig, load_tenants
    from switchyard.server.tls import TlsFiles

    resolve_model(args.model)  # a missing or unbuilt model is a clear error before anything loads
    if args.ssl_keyfile is not None and args.ssl_certfile is None:
        raise ValueError("--ssl-keyfile needs --ssl-certfile")
    if args.ssl_certfile is None and (args.ssl_ca_certs is not None or args.ssl_cert_reqs is not None):
        raise ValueError(
            "--ssl-ca-certs and --ssl-cert-reqs need --ssl-certfile (client certificates need HTTPS)"
        )
    tls = None
    if args.ssl_certfile is not None:
        tls = TlsFiles(args.ssl_certfile, args.ssl_keyfile, args.ssl_ca_certs, args.ssl_cert_reqs)
    cors = None
    if args.allowed_origins is not None:
        cors = CorsPolicy(
            allowed_origins=tuple(args.allowed_origins),
            allowed_methods=tuple(args.allowed_methods),
            allowed_headers=tuple(args.allowed_headers),
            allow_credentials=args.allow_credentials,
        )
    elif args.allow_credentials:
        raise ValueError("--allow-credentials needs --allowed-origins")
    tenants = load_tenants(args.tenants) if args.tenants else TenantsConfig()
    args.tenant_weights = tenants.weights
    settings = ServerSettings(
        served_model_names=tuple(args.served_model_name or [args.model]),
        api_key=args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None,
        tenant_keys=tenants.keys,
        request_timeout=args.request_timeout,
        shutdown_grace=args.shutdown_grace,
        tool_call_parser=args.tool_call_parser,
        max_request_bytes=None if args.max_request_bytes == 0 else args.max_request_bytes,
        max_tenant_labels=args.max_tenant_labels,
        reasoning_parser=args.reasoning_parser,
        return_tokens_as_token_ids=args.return_tokens_as_token_ids,
        cors=cors,
        root_path=args.root_path,
    )
    server = build_server(
        engine_config_from_args(args),
        settings,
        host=args.host,
        port=args.port,
        max_waiting=args.max_waiting,
        step_timeout=args.step_timeout,
        grammar_limits=GrammarLimits(args.max_grammar_bytes, args.grammar_compile_timeout),
        log_level="info" if args.verbose else "warning",
        tls=tls,
    )
    scheme = "http" if tls is None else "https"
    print(
        f"switchyard: serving {settings.served_model_names[0]!r} on {scheme}://{args.host}:{args.port}/v1",
        flush=True,
    )
    server.run()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard", description="LLM inference serving with an agent runtime."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log engine details (KV budget, ...)")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate completions for prompts offline")
    generate.add_argument("prompt", nargs="*", help="prompts (read from stdin, one per line, when omitted)")
    generate.add_argument("--model", default="switchyard-chat", help="bundled model name or HF model folder")
    generate.add_argument("--chat", action="store_true", help="wrap each prompt as a user chat message")
    generate.add_argument("--max-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--sampling-seed", type=int, default=None, help="per-request sampling seed")
    add_engine_args(generate)
    generate.set_defaults(func=cmd_generate)
    for name, (_, summary) in DELEGATED_COMMANDS.items():
        commands.add_parser(name, help=f"{summary} (see `switchyard {name} --help`)", add_help=False)

    serve = commands.add_parser(
        "serve",
        help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve MODEL at /v1/chat/completions and /v1/completions (plus /v1/models, /health, "
        "/metrics, /version). SIGTERM drains: new requests get 503, running ones get --shutdown-grace seconds.",
    )
    serve.add_argument(
        "model",
        nargs="?",
        default="switchyard-chat",
        help="bundled model name or HF model folder (default: switchyard-chat)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for all)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (8000)")
    serve.add_argument(
        "--api-key",
        default=None,
        help=f"require `Authorization: Bearer KEY` on /v1 routes (default: ${API_KEY_ENV}, which, unlike a flag, "
        "other users of the machine cannot read in the process list)",
    )
    serve.add_argument(
        "--tenants",
        default=None,
        help="TOML file of tenants ([tenants.NAME] weight = W, api_key = K) for weighted fair share",
    )
    serve.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="name(s) clients use in `model` (default: MODEL as given); the first is reported",
    )
    serve.add_argument(
        "--step-timeout",
        type=float,
        default=None,
        help="watchdog: seconds one engine step may take before it counts as hung; the engine is then "
        "rebuilt and its requests recomputed (default: off)",
    )
    serve.add_argument(
        "--max-tenant-labels",
        type=int,
        default=64,
        help="tenants besides those of --tenants that metrics label by name (the first seen; with API keys off "
        "a tenant is the request's `user`); the rest are labelled `other`",
    )
    serve.add_argument(
        "--max-grammar-bytes",
        type=int,
        default=DEFAULT_MAX_GRAMMAR_BYTES,
        help="largest output constraint (JSON schema, regex, grammar, tool schemas) a request may give, in bytes; "
        "larger ones get a 400 before any compile",
    )
    serve.add_argument(
        "--grammar-compile-timeout",
        type=float,
        default=DEFAULT_GRAMMAR_COMPILE_TIMEOUT,
        help="seconds a request waits for its output constraint to compile before a 400",
    )
    serve.add_argument(
        "--max-waiting",
        type=int,
        default=512,
        help="requests allowed to wait for a batch slot; beyond it clients get 429 with Retry-After",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        help="seconds a request may take, queueing included, before it is aborted (504); default: none",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        help="seconds in-flight requests get to finish after SIGTERM before they are aborted",
    )
    serve.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help="largest request body accepted; larger ones get 413 before they are parsed "
        f"(default {DEFAULT_MAX_REQUEST_BYTES >> 20} MiB; 0: no limit)",
    )
    serve.add_argument(
        "--reasoning-parser",
        choices=REASONING_PARSERS,
        default=None,
        help="return <think> text as message.reasoning (and reasoning_content), not content: for Qwen3, QwQ "
        "and DeepSeek-R1 models (default: replies stay whole)",
    )
    serve.add_argument(
        "--return-tokens-as-token-ids",
        action="store_true",
        help='logprob entries name tokens as "token_id:N" (a request\'s return_tokens_as_token_ids overrides it)',
    )
    serve.add_argument(
        "--tool-call-parser",
        choices=TOOL_CALL_FORMATS,
        default=None,
        help="how the model writes tool calls (default: detected from its chat template, else hermes)",
    )
    serve.add_argument(
        "--allowed-origins",
        nargs="+",
        default=None,
        metavar="ORIGIN",
        help="origins (https://app.example.com, or '*') whose browser pages may call the API (CORS); "
        "default: none",
    )
    serve.add_argument(
        "--allowed-methods", nargs="+", default=["*"], help="HTTP methods allowed cross-origin (default: all)"
    )
    serve.add_argument(
        "--allowed-headers",
        nargs="+",
        default=["*"],
        help="request headers allowed cross-origin (default: all)",
    )
    serve.add_argument(
        "--allow-credentials",
        action="store_true",
        help="let cross-origin pages send cookies and HTTP authentication (origins must be named)",
    )
    serve.add_argument("--ssl-certfile", type=Path, default=None, help="PEM certificate chain: serve HTTPS")
    serve.add_argument(
        "--ssl-keyfile", type=Path, default=None, help="PEM private key, when not in --ssl-certfile"
    )
    serve.add_argument(
        "--ssl-ca-certs",
        type=Path,
        default=None,
        help="PEM certificates of the authorities that sign client certificates (mutual TLS)",
    )
    serve.add_argument(
        "--ssl-cert-reqs",
        choices=("none", "optional", "required"),
        default=None,
        help="whether clients must present a certificate (default: required with --ssl-ca-certs, else none)",
    )
    serve.add_argument(
        "--root-path",
        default="",
        help="path prefix a reverse proxy serves the API under and strips before forwarding (e.g. /llm)",
    )
    add_engine_args(serve)
    serve.set_defaults(func=cmd_serve)
    return parser


# Commands with parsers of their own: everything after the command name is theirs.
DELEGATED_COMMANDS = {
    "train-default": (
        "switchyard_training.train",
        "train the bundled models from scratch (about 90 minutes)",
    ),
    "eval-default": ("switchyard_training.quality", "run the bundled model's quality gate"),
    "eval": (
        "switchyard.evals.cli",
        "evaluate an endpoint on suites: `eval run`, `eval compare`, `eval ab`, `eval list`",
    ),
    "train-speculator": (
        "switchyard_training.train_speculator",
        "train look-ahead heads for speculative decoding on a main model (about 20 minutes)",
    ),
    "demo": ("switchyard.demo", "offline generation demo on a small random-initialised model"),
    "bench": (
        "switchyard.bench.cli",
        "benchmark a served endpoint (`bench serve`) or the engine (`bench offline`)",
    ),
    "plan": ("switchyard.plan.cli", "capacity plan: what fits on a device and a decode-step bound"),
    "quantize": (
        "switchyard.models.quantization.cli",
        "write an int8 or w8a8 (SmoothQuant) checkpoint of a model folder",
    ),
    "fleet": (
        "switchyard.fleet.cli",
        "route and balance across many replicas behind one OpenAI-compatible gateway (`fleet serve`)",
    ),
    "cluster": (
        "switchyard.platform.cli",
        "share a Ray cluster's GPUs between teams: job queue, quotas, gang placement, health (`cluster start`)",
    ),
    "credits": (
        "switchyard.fleet.ledger.cli",
        "the gateway's credits ledger: grant credit to tenants, read balances and history (`--at TIME`)",
    ),
    "tenants": (
        "switchyard.fleet.tenancy.cli",
        "the fleet gateway's tenants: API keys, rate limits, models, priority and weight",
    ),
    "agent": ("switchyard.agents.cli", "agent runtime: `switchyard agent demo` runs a tool-using assistant"),
    "rag": ("switchyard.agents.rag.cli", "ingest documents into collections and query them with sources"),
}
TRAINING_PACKAGE = "switchyard_training"
"""The separate training distribution (`training/` in a checkout) that the training commands live in."""


def run_delegated(command: str, argv: list[str]) -> int:
    """Run a delegated command's own `main`; exit 2 with how to install it when the training package is absent."""
    import importlib

    module_name = DELEGATED_COMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] != TRAINING_PACKAGE:
            raise  # a dependency missing, not the package
        print(
            f"switchyard {command}: error: the training package is not installed; from a checkout run "
            "`pip install -e ./training` (or `make test`, which installs it)",
            file=sys.stderr,
        )
        return 2
    return int(module.main(argv) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED_COMMANDS:
        return run_delegated(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from switchyard.errors import SwitchyardError

    try:
        return int(args.func(args) or 0)
    except (SwitchyardError, ValueError) as exc:
        print(f"switchyard: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
