"""Ranking measures the benchmarks share: nDCG@10, recall@k, and a paired bootstrap.

Each takes a ranked list of ids and the judged ids of one query (a dict id -> grade; a grade of
0 or a missing id is not relevant); the bootstrap takes two lists of per-query scores.
"""

import math
import random


def ndcg_at_10(ranked, judged):
    """Normalised discounted cumulative gain of the first 10, with the grades as gains."""
    dcg = sum(judged.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:10]))
    ideal = sorted(judged.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(k, ranked, judged):
    """The share of the relevant ids found in the first ``k``."""
    relevant = {doc for doc, grade in judged.items() if grade > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def paired_bootstrap(a, b, samples=10_000, seed=0):
    """Mean of a - b over the queries and its 95 % interval: the 2.5th and 97.5th percentiles
    of the mean difference over ``samples`` resamplings of the queries (with replacement)."""
    if len(a) != len(b) or not a:
        raise ValueError(
            f"paired_bootstrap needs two equal, non-empty lists, not {len(a)}, {len(b)}"
        )
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(samples))
    return sum(diffs) / n, means[int(0.025 * samples)], means[int(0.975 * samples) - 1]
