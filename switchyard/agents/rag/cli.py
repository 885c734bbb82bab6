"""`switchyard rag ingest|query|list`: build and search document collections from the command line; and
`switchyard rag serve-embeddings`: the bundled MiniLM behind OpenAI's /v1/embeddings."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from switchyard.errors import SwitchyardError

if TYPE_CHECKING:
    from switchyard.agents.rag.store import Passage


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard rag",
        description="Document retrieval: ingest .txt/.md/.pdf files into a named collection and query it. "
        "State lives in $SWITCHYARD_HOME/rag.db (default ~/.switchyard).",
    )
    commands = parser.add_subparsers(dest="action", required=True)
    ingest = commands.add_parser("ingest", help="add files or folders to a collection")
    ingest.add_argument("paths", nargs="+", help="files, or folders searched for .txt/.md/.pdf")
    ingest.add_argument("--collection", required=True, help="collection name (letters, digits, _ - .)")
    query = commands.add_parser("query", help="print the passages that best match TEXT, with sources")
    query.add_argument("text", help="question or keywords")
    query.add_argument("--collection", required=True, help="collection to search")
    query.add_argument("-k", "--top-k", type=int, default=5, help="passages to print (default 5)")
    query.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing = commands.add_parser("list", help="list collections and their chunk counts")
    for sub in (ingest, query, listing):
        sub.add_argument("--db", default=None, help="database file (default $SWITCHYARD_HOME/rag.db)")
    serve = commands.add_parser(
        "serve-embeddings",
        help="serve the bundled MiniLM at /v1/embeddings (for the fleet's semantic response cache)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8100)
    serve.add_argument(
        "--api-key", default=None, help="require `Authorization: Bearer KEY` (default: $SWITCHYARD_API_KEY)"
    )
    return parser


def serve_embeddings(args: argparse.Namespace) -> int:
    import os

    import uvicorn

    from switchyard.agents.rag.embeddings import MiniLMEmbedder
    from switchyard.agents.rag.embeddings_server import build_embeddings_app

    embedder = MiniLMEmbedder()
    embedder.embed(["warm up"])  # load the model before the port opens
    api_key = args.api_key or os.environ.get("SWITCHYARD_API_KEY")
    print(f"switchyard: embeddings on http://{args.host}:{args.port}/v1/embeddings", flush=True)
    uvicorn.run(build_embeddings_app(embedder, api_key), host=args.host, port=args.port, log_level="warning")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "serve-embeddings":
        return serve_embeddings(args)
    try:
        from switchyard.agents.rag.embeddings import MiniLMEmbedder
        from switchyard.agents.rag.store import RagStore

        store = RagStore(MiniLMEmbedder(), getattr(args, "db", None))
        if args.action == "list":
            for name, count in sorted(store.collections().items()):
                print(f"{name}\t{count} chunks")
            return 0
        if args.action == "ingest":
            report = store.ingest(args.paths, args.collection, progress=lambda line: print(line, flush=True))
            rate = report.chunks_added / report.seconds if report.seconds > 0 else 0.0
            print(
                f"ingested {report.files} files into {args.collection!r}: {report.chunks_added} chunks added, "
                f"{report.duplicate_chunks} duplicates skipped, {report.unchanged_files} unchanged, "
                f"{len(report.errors)} failed ({rate:.1f} chunks/s)"
            )
            for error in report.errors:
                print(f"error: {error}", file=sys.stderr)
            return 1 if report.errors else 0
        passages = store.query(args.text, args.collection, k=args.top_k)
        if args.json:
            print(json.dumps([_passage_json(p) for p in passages], indent=2, ensure_ascii=False))
            return 0
        if not passages:
            print(f"no passages found in {args.collection!r}")
        for passage in passages:
            print(f"[{passage.n}] {passage.citation()}  (score {passage.score:.4f})")
            print("    " + passage.text.replace("\n", "\n    ") + "\n")
        return 0
    except SwitchyardError as error:
        print(f"switchyard rag: error: {error}", file=sys.stderr)
        return 2


def _passage_json(passage: Passage) -> dict[str, object]:
    return {
        "n": passage.n,
        "source": passage.source,
        "page": passage.page,
        "heading": passage.heading,
        "position": passage.position,
        "score": passage.score,
        "text": passage.text,
    }


if __name__ == "__main__":
    sys.exit(main())
