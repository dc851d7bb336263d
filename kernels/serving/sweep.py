"""Serving sweep driver: run a benchmark client once per concurrency phase against a running server.

    python sweep.py --label PD --base-url http://127.0.0.1:8000 --client sglang \
        --concurrency 1,8,16 --prompts 6,24,32 --input-len 256 --output-len 256 --out results.jsonl

Prints ``===== PD concurrency=8 (n=24) =====`` before each phase, then the client's own output
(its result block); keeps each phase's raw output (``phase_c<C>.log``) and JSON next to --out,
appends the phase's JSON object (tagged with the label) to --out, and prints the done marker only
after the last phase. A failed phase is reported and the sweep goes on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def client_command(args: argparse.Namespace, concurrency: int, prompts: int, result: Path) -> list[str]:
    common = {"sglang": ["--num-prompts", str(prompts), "--max-concurrency", str(concurrency)]}
    if args.client == "local":
        return [sys.executable, str(HERE / "loadgen.py"), "--base-url", args.base_url, "--num-prompts", str(prompts),
                "--max-concurrency", str(concurrency), "--input-len", str(args.input_len),
                "--output-len", str(args.output_len), "--output-file", str(result),
                "--requests-file", str(result.with_suffix(".requests.jsonl"))]  # fmt: skip
    if args.client == "sglang":
        return [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", args.base_url,
                "--dataset-name", "random", "--random-input-len", str(args.input_len),
                "--random-output-len", str(args.output_len), "--random-range-ratio", "1", *common["sglang"],
                "--output-file", str(result)]  # fmt: skip
    return ["vllm", "bench", "serve", "--base-url", args.base_url, "--dataset-name", "random",
            "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
            "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--save-result",
            "--result-dir", str(result.parent), "--result-filename", result.name]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--client", choices=["local", "sglang", "vllm"], default="local")
    parser.add_argument("--concurrency", type=int_list, default=[1, 8, 16])
    parser.add_argument("--prompts", type=int_list, default=[6, 24, 32])
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("results.jsonl"))
    parser.add_argument("--marker", default="ALL_DONE")
    args = parser.parse_args(argv)
    if len(args.concurrency) != len(args.prompts):
        parser.error("--concurrency and --prompts need the same number of values")
    phases_dir = args.out.parent / f"phases_{args.label}"
    phases_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for concurrency, prompts in zip(args.concurrency, args.prompts, strict=True):
        print(f"===== {args.label} concurrency={concurrency} (n={prompts}) =====", flush=True)
        result = phases_dir / f"phase_c{concurrency}.json"
        result.unlink(missing_ok=True)
        result.with_suffix(".requests.jsonl").unlink(missing_ok=True)
        with (phases_dir / f"phase_c{concurrency}.log").open("w") as raw:
            proc = subprocess.Popen(client_command(args, concurrency, prompts, result), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)  # fmt: skip
            assert proc.stdout is not None
            for line in proc.stdout:
                raw.write(line)
                print(line, end="", flush=True)
            code = proc.wait()
        if code != 0 or not result.exists():
            failed.append(concurrency)
            print(f"phase concurrency={concurrency} failed (client exit {code}); going on", flush=True)
            continue
        with args.out.open("a") as out:
            for line in result.read_text().splitlines():
                if line.strip():
                    out.write(json.dumps({**json.loads(line), "tag": args.label}) + "\n")
        raw = result.with_suffix(".requests.jsonl")
        if raw.exists():  # per-request timings, when the client saves them
            with (args.out.parent / "requests.jsonl").open("a") as out:
                for line in raw.read_text().splitlines():
                    out.write(json.dumps({**json.loads(line), "config": args.label, "concurrency": concurrency}) + "\n")
    if failed:
        print(f"failed phases: concurrency {failed}", flush=True)
    print(args.marker, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
