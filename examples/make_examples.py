"""Writes the sample files in this directory (deterministic: run it again, get the
same bytes). ``python examples/make_examples.py``

- ``golden.jsonl``: 12 judged questions with facets (type, popularity, dynamism);
- ``qrels.txt``: the same judgments as TREC qrels;
- ``results.jsonl``: two retrievers' results as retrieval-result events, with a
  total miss (empty ``ranked``), a result with its own ``k`` and facets, and a
  result for a question nobody judged;
- ``run.txt``: the same two retrievers as a TREC run with two tags.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
TYPES = ("factoid", "multi-hop", "comparison")
POPULARITY = ("head", "torso", "tail")
DYNAMISM = ("static", "slow-changing", "fast-changing")
RUNS = {"bm25-v1": 0.45, "hybrid-v2": 0.7}
"""Run id -> how likely a relevant chunk is pulled into the top of its ranking."""


def main() -> None:
    rng = random.Random(20240611)
    golden = []
    for number in range(1, 13):
        query_id = f"q-{number:03d}"
        docs = rng.sample(range(100, 1000), 6)
        grades = [3, 2, 2, 1, 0, 0]
        if number == 12:
            grades = [0, 0, 0, 0, 0, 0]  # judged, but nothing relevant was found
        qrels = {
            f"doc-{doc}#c{rng.randrange(1, 4)}": grade
            for doc, grade in zip(docs, grades, strict=True)
        }
        facets = {
            "type": TYPES[number % 3],
            "popularity": POPULARITY[(number // 3) % 3],
            "dynamism": DYNAMISM[(number // 2) % 3],
        }
        golden.append({"queryId": query_id, "qrels": qrels, "facets": facets})

    results = []
    for run_id, skill in RUNS.items():
        for query in golden:
            relevant = [doc for doc, grade in query["qrels"].items() if grade > 0]
            judged_other = [doc for doc, grade in query["qrels"].items() if grade <= 0]
            noise = [f"doc-{rng.randrange(1000, 9999)}#c1" for _ in range(12)]
            pulled = [doc for doc in relevant if rng.random() < skill]
            pool = list(
                dict.fromkeys(noise + judged_other + [d for d in relevant if d not in pulled])
            )
            rng.shuffle(pool)
            ranked = pulled + pool
            rng.shuffle(ranked[: 4 if skill < 0.5 else 2])
            results.append({"runId": run_id, "queryId": query["queryId"], "ranked": ranked[:10]})
    results[3]["ranked"] = []  # a total miss is a valid result
    results[15]["k"] = 5
    results[15]["facets"] = {"dynamism": "fast-changing"}  # the result's facets win
    results.append({"runId": "hybrid-v2", "queryId": "q-999", "ranked": ["doc-1#c1", "doc-2#c1"]})
    for index, result in enumerate(results, 1):
        result["resultId"] = f"r-{index:04d}"

    with (HERE / "golden.jsonl").open("w") as out:
        for query in golden:
            out.write(json.dumps(query) + "\n")
    with (HERE / "qrels.txt").open("w") as out:
        for query in golden:
            for doc, grade in query["qrels"].items():
                out.write(f"{query['queryId']} 0 {doc} {grade}\n")
    with (HERE / "results.jsonl").open("w") as out:
        for result in results:
            ordered = {
                key: result[key]
                for key in ("resultId", "runId", "queryId", "ranked", "k", "facets")
                if key in result
            }
            out.write(json.dumps(ordered) + "\n")
    with (HERE / "run.txt").open("w") as out:
        for result in results:
            for rank, doc in enumerate(result["ranked"], 1):
                score = round(20.0 - rank * 1.25 + rng.random(), 4)
                out.write(f"{result['queryId']} Q0 {doc} {rank} {score} {result['runId']}\n")


if __name__ == "__main__":
    main()
