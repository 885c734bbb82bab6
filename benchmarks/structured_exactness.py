"""Which grammar backend enforces each JSON schema exactly, per construct, on the full JSONSchemaBench.

For every schema of a JSONSchemaBench folder (the MaskBench `data/` files: schema, features, test instances)
and every backend: does it compile; does its matcher accept each valid test instance and refuse each
invalid one (fed as tokens of a 320-token byte-level BPE); and do random walks under its token masks -- a
uniformly random "model" at temperature infinity, the harshest sampler -- finish in strings that validate
(strict `json.loads` + `jsonschema`). A schema is *sound* under a backend when it compiled and neither an
invalid instance nor a walk got through; *exact* when it is also accepted every valid instance. Numbers are
reported overall and per feature (the benchmark's `meta.features`). `auto` is measured by its routing rule
(`engine/structured/auto.py`): the result of the first backend in `route(spec)` that compiles the schema.

Each backend runs in a worker process; a schema that takes longer than --timeout seconds (compile and
checks) kills the worker and counts as not compiled.

Usage: python benchmarks/structured_exactness.py --data DIR [--walks 3] [--max-tokens 240] [--limit N]
       [--shard I/N] [--rows OUT.jsonl] [--timeout 60]
       python benchmarks/structured_exactness.py --summarise ROWS.jsonl... [--json results/....json]
Shards (`--shard I/N`: every N-th file, in a fixed shuffled order, from the I-th, so a shard stopped early is
still a sample of every category; each writes its rows as it goes) run side by side; `--summarise` merges their rows into the tables.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

BACKENDS = ("xgrammar", "llguidance")


def _worker(backend_name: str, tokenizer_dir: str, walks: int, max_tokens: int, conn: Any) -> None:
    """Serve schemas from `conn` one at a time: (file, schema, tests) in, a result dict out."""
    import jsonschema
    import torch
    from transformers import AutoTokenizer

    from switchyard.engine.structured.backend import create_backend
    from switchyard.engine.structured.params import StructuredOutputsParams
    from switchyard.errors import InvalidRequestError

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = len(tokenizer)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    backend = create_backend(backend_name, tokenizer, vocab, [eos])
    shifts = torch.arange(32, dtype=torch.int32)
    bitmask = backend.allocate_bitmask(1)
    conn.send("ready")

    def accepts(compiled: Any, text: str) -> bool:
        matcher = backend.new_matcher(compiled)
        ids = tokenizer.encode(text, add_special_tokens=False)
        return all(matcher.accept_token(t) for t in ids) and matcher.accept_token(eos)

    def walk(compiled: Any, rng: random.Random) -> str | None:
        matcher = backend.new_matcher(compiled)
        ids: list[int] = []
        for _ in range(max_tokens):
            backend.fill_bitmask([matcher], bitmask, [0])
            allowed = ((bitmask[0].unsqueeze(1) >> shifts) & 1).flatten()[:vocab].nonzero().flatten().tolist()
            if not allowed:
                return None
            token = eos if eos in allowed and rng.random() < 0.5 else rng.choice(allowed)
            if not matcher.accept_token(token):
                return None
            if token == eos:
                return tokenizer.decode(ids)
            ids.append(token)
        return None

    while True:
        job = conn.recv()
        if job is None:
            return
        name, schema, tests = job
        result: dict[str, Any] = {"file": name, "compiled": False}
        start = time.perf_counter()
        try:
            compiled = backend.compile(StructuredOutputsParams(json=schema))
        except InvalidRequestError as exc:
            result["refusal"] = str(exc)[:160]
            conn.send(result)
            continue
        except Exception as exc:  # a backend crash on a schema counts as a refusal
            result["refusal"] = f"{type(exc).__name__}: {exc}"[:160]
            conn.send(result)
            continue
        result.update(compiled=True, compile_s=time.perf_counter() - start)
        validator = jsonschema.validators.validator_for(schema)(schema)
        valid_rejected = invalid_accepted = 0
        for test in tests:
            text = json.dumps(test["data"], ensure_ascii=False)
            ok = accepts(compiled, text)
            valid_rejected += test["valid"] and not ok
            invalid_accepted += (not test["valid"]) and ok
        rng = random.Random(name)
        finished = bad = 0
        bad_examples = []
        for _ in range(walks):
            text = walk(compiled, rng)
            if text is None:
                continue
            finished += 1
            try:
                instance = json.loads(text)
                error = next(iter(validator.iter_errors(instance)), None)
                problem = None if error is None else f"{error.validator}: {error.message}"
            except ValueError as exc:
                problem = f"json: {exc}"
            if problem is not None:
                bad += 1
                bad_examples.append({"text": text[:200], "problem": problem[:200]})
        result.update(
            valid_rejected=valid_rejected,
            invalid_accepted=invalid_accepted,
            walks_finished=finished,
            walks_invalid=bad,
            bad_examples=bad_examples[:2],
        )
        conn.send(result)


class Worker:
    """One backend's worker process; restarted after a schema times out."""

    def __init__(self, backend: str, tokenizer_dir: str, walks: int, max_tokens: int) -> None:
        self.args = (backend, tokenizer_dir, walks, max_tokens)
        self._start()

    def _start(self) -> None:
        self.conn, child = mp.Pipe()
        self.process = mp.get_context("spawn").Process(target=_worker, args=(*self.args, child), daemon=True)
        self.process.start()
        if self.conn.recv() != "ready":  # start-up (imports, vocabulary indexing) is not a schema's time
            raise RuntimeError("worker failed to start")

    def submit(self, job: tuple[str, Any, list[Any]]) -> None:
        self.job_name = job[0]
        self.sent = time.monotonic()
        self.conn.send(job)

    def result(self, timeout: float) -> dict[str, Any]:
        """The submitted job's result; the workers of one schema run side by side."""
        if self.conn.poll(max(0.0, self.sent + timeout - time.monotonic())):
            return self.conn.recv()
        self.process.kill()
        self.process.join()
        self._start()
        return {"file": self.job_name, "compiled": False, "refusal": f"timeout after {timeout:.0f} s"}

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(timeout=10)


def sound(result: dict[str, Any]) -> bool:
    return bool(result["compiled"]) and result["invalid_accepted"] == 0 and result["walks_invalid"] == 0


def exact(result: dict[str, Any]) -> bool:
    return sound(result) and result["valid_rejected"] == 0


def auto_result(schema: Any, per_backend: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the auto backend does with `schema`: the first routed backend that compiled it."""
    from switchyard.engine.structured.auto import route
    from switchyard.engine.structured.params import StructuredOutputsParams

    order = route(StructuredOutputsParams(json=schema))
    for name in order:
        if per_backend[name]["compiled"]:
            return per_backend[name] | {"routed_to": name}
    return per_backend[order[0]] | {"routed_to": order[0]}


def summarise(rows: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any]:
    """Overall and per-feature counts of schemas compiled, sound and exact, per backend."""
    table: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    for row in rows:
        for feature in ["(all)", *row["features"]]:
            for name in names:
                result = row[name]
                cell = table[feature][name]
                cell["schemas"] += 1
                cell["compiled"] += bool(result["compiled"])
                cell["sound"] += sound(result)
                cell["exact"] += exact(result)
                cell["unsound"] += bool(result["compiled"]) and not sound(result)
                cell["walks_finished"] += result.get("walks_finished", 0)
    return {feature: {name: dict(cells) for name, cells in by.items()} for feature, by in table.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="JSONSchemaBench MaskBench data folder")
    parser.add_argument("--walks", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=240)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--limit", type=int, default=None, help="every n-th file so that about N are used")
    parser.add_argument("--shard", default=None, help="I/N: every N-th of the sorted files from the I-th")
    parser.add_argument("--rows", type=Path, default=None, help="append each schema's results here (JSONL)")
    parser.add_argument("--summarise", type=Path, nargs="+", default=None, help="merge rows files and report")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.summarise:
        merged = [json.loads(line) for path in args.summarise for line in path.read_text().splitlines()]
        rows = list({row["file"]: row for row in merged}.values())  # a file once
        if args.data:  # route again: the auto column follows the current routing rule
            for row in rows:
                schema = json.loads((args.data / row["file"]).read_text())["schema"]
                row["auto"] = auto_result(schema, {n: row[n] for n in BACKENDS})
        report(rows, args.json)
        return
    if args.data is None:
        parser.error("--data is required unless --summarise is given")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tokenizer_factory import build_tokenizer

    files = sorted(args.data.glob("*.json"))
    random.Random(0).shuffle(files)  # a shard stopped early is still a sample of every category
    if args.shard:
        index, count = (int(x) for x in args.shard.split("/"))
        files = files[index::count]
    if args.limit:
        files = files[:: max(1, len(files) // args.limit)][: args.limit]
    rows: list[dict[str, Any]] = []
    if args.rows and args.rows.exists():  # resume a shard: keep what it measured, retry its timeouts
        kept = [json.loads(line) for line in args.rows.read_text().splitlines()]
        kept = [r for r in kept if not any("timeout" in str(r[n].get("refusal", "")) for n in BACKENDS)]
        args.rows.write_text("".join(json.dumps(r, default=str) + "\n" for r in kept))
        done = {r["file"] for r in kept}
        files = [f for f in files if f.name not in done]
        rows.extend(kept)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tokenizer_dir:
        build_tokenizer(Path(tokenizer_dir), vocab_size=320)
        workers = {name: Worker(name, tokenizer_dir, args.walks, args.max_tokens) for name in BACKENDS}
        for index, path in enumerate(files, 1):
            case = json.loads(path.read_text())
            job = (path.name, case["schema"], case.get("tests", []))
            row: dict[str, Any] = {"file": path.name, "features": case.get("meta", {}).get("features", [])}
            for worker in workers.values():
                worker.submit(job)
            for name, worker in workers.items():
                row[name] = worker.result(args.timeout)
            row["auto"] = auto_result(case["schema"], {n: row[n] for n in BACKENDS})
            rows.append(row)
            if args.rows:
                with args.rows.open("a") as out:
                    out.write(json.dumps(row, default=str) + "\n")
            if index % 250 == 0:
                print(f"{index}/{len(files)} schemas, {time.perf_counter() - start:.0f} s", flush=True)
        for worker in workers.values():
            worker.close()
    report(rows, args.json)


def report(rows: list[dict[str, Any]], json_path: Path | None) -> None:
    names = (*BACKENDS, "auto")
    summary = summarise(rows, names)
    overall = summary["(all)"]
    for name in names:
        cell = overall[name]
        n = cell["schemas"]
        print(
            f"{name:10s} compiled {cell['compiled'] / n:6.1%}  sound {cell['sound'] / n:6.1%}  "
            f"exact {cell['exact'] / n:6.1%}  compiled but unsound {cell['unsound']}  "
            f"walks finished {cell['walks_finished']}"
        )
    if json_path:
        unsound = [
            {
                "file": r["file"],
                "backend": n,
                **{k: r[n].get(k) for k in ("invalid_accepted", "bad_examples")},
            }
            for r in rows
            for n in BACKENDS
            if r[n]["compiled"] and not sound(r[n])
        ]
        timeouts = {n: sum("timeout" in str(r[n].get("refusal", "")) for r in rows) for n in BACKENDS}
        json_path.write_text(
            json.dumps(
                {"schemas": len(rows), "timeouts": timeouts, "summary": summary, "unsound": unsound},
                indent=1,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
