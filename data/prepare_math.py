"""Convert a math dataset already on disk into our JSONL (``{"prompt": [chat messages], "label"}``).

Nothing is downloaded. Formats:

* ``gsm8k``: records with ``question`` and ``answer``; the label is the text after the last ``####``
  of the answer (thousands separators removed);
* ``math`` (Hendrycks MATH): records with ``problem`` and ``solution``; the label is the content of
  the last ``\\boxed{...}`` of the solution (nested braces matched);
* ``jsonl``: any records; ``--prompt-key`` and ``--answer-key`` name the fields (default ``prompt``
  and ``label``).

``--prompt-key`` / ``--answer-key`` override the field names of every format. An answer field holding
a list (OlympiadBench's ``"final_answer": ["$5$"]``) gives its first element. Inputs: ``.jsonl``,
``.json`` (a list of records, or one record as in MATH's one-problem-per-file layout), and
``.parquet`` when pandas is importable. Records without a usable answer are
skipped and counted. Example::

    python data/prepare_math.py --input ~/datasets/gsm8k/train.jsonl --format gsm8k --out data/math/train.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempo_plugin.tasks import Problem, jsonl_record  # noqa: E402
from tempo_plugin.tasks.math import last_boxed, user_prompt  # noqa: E402

DEFAULT_KEYS = {"gsm8k": ("question", "answer"), "math": ("problem", "solution"), "jsonl": ("prompt", "label")}


class PrepareError(Exception):
    """A one-line user error (missing file, key, unreadable input)."""


def gsm8k_answer(answer: str) -> str | None:
    """The final answer of a GSM8K solution: the text after the last ``####`` (commas removed)."""
    if "####" not in answer:
        return None
    final = answer.rsplit("####", 1)[1].strip().replace(",", "")
    return final or None


def first_answer(answer: Any) -> Any:
    """A list of answers (OlympiadBench's ``"final_answer": ["$5$"]``) counts as its first element;
    an empty list as no answer. Other values are returned as they are."""
    if hasattr(answer, "tolist") and not isinstance(answer, (str, bytes)):
        answer = answer.tolist()  # a numpy array (or scalar) from a parquet file
    if isinstance(answer, (list, tuple)):
        return answer[0] if answer else None
    return answer


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a ``.jsonl``, ``.json`` or ``.parquet`` file."""
    if not path.is_file():
        raise PrepareError(f"input file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pandas
        except ImportError:
            raise PrepareError(f"reading {path} needs pandas (pip install pandas pyarrow), or convert it to .jsonl") from None
        yield from pandas.read_parquet(path).to_dict(orient="records")
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise PrepareError(f"{path}: invalid JSON ({error})") from None
        if isinstance(data, dict):
            data = [data]  # one MATH problem per file
        if not isinstance(data, list):
            raise PrepareError(f"{path}: expected a JSON list of records or one record")
        yield from data
    elif suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            for line_number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as error:
                        raise PrepareError(f"{path}:{line_number}: invalid JSON ({error})") from None
    else:
        raise PrepareError(f"unsupported input type {suffix or '(none)'}: use .jsonl, .json or .parquet")


def convert(records: Iterator[dict[str, Any]], fmt: str, prompt_key: str, answer_key: str) -> tuple[list[Problem], int]:
    """``(problems, skipped)``: a missing key in the first record is an error, later ones are skipped."""
    problems: list[Problem] = []
    skipped = 0
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            skipped += 1
            continue
        missing = [k for k in (prompt_key, answer_key) if k not in record]
        if missing and index == 0:
            raise PrepareError(f"key {missing[0]!r} not in the first record (keys: {', '.join(map(str, record))}); use --prompt-key/--answer-key")
        prompt, answer = record.get(prompt_key), first_answer(record.get(answer_key))
        if not isinstance(prompt, str) or not prompt.strip() or answer is None:
            skipped += 1
            continue
        answer = str(answer)
        if fmt == "gsm8k":
            label = gsm8k_answer(answer)
        elif fmt == "math":
            label = last_boxed(answer)
        else:
            label = answer.strip() or None
        if not label:
            skipped += 1
            continue
        problems.append(Problem(prompt=user_prompt(prompt), label=label))
    return problems, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Convert a local math dataset into {prompt, label} JSONL.")
    parser.add_argument("--input", required=True, type=Path, help=".jsonl, .json or .parquet file")
    parser.add_argument("--format", required=True, choices=sorted(DEFAULT_KEYS))
    parser.add_argument("--out", required=True, type=Path, help="output .jsonl (parent directories are created)")
    parser.add_argument("--prompt-key", help="field holding the problem text (default by format)")
    parser.add_argument("--answer-key", help="field holding the answer/solution (default by format)")
    args = parser.parse_args(argv)
    prompt_key = args.prompt_key or DEFAULT_KEYS[args.format][0]
    answer_key = args.answer_key or DEFAULT_KEYS[args.format][1]
    try:
        problems, skipped = convert(read_records(args.input), args.format, prompt_key, answer_key)
    except PrepareError as error:
        print(f"prepare_math: error: {error}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for problem in problems:
            f.write(json.dumps(jsonl_record(problem)) + "\n")
    print(f"prepare_math: wrote {len(problems)} problems to {args.out}, skipped {skipped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
