"""Memory search on a conversation collection: R@5 and nDCG@10, with and without reinforcement.

    python bench/memories.py                        # every mode, reinforcement off and on
    python bench/memories.py --sessions question    # a new session for every question
    python bench/memories.py --extract DIR          # rebuild the collection from RealMem's files

The collection (bench/data/realmem, see its README) is RealMem's ten users: their dialogue
sessions, in order and dated, the memory points an agent extracted from each, and the questions
asked in later sessions with the memory points that answer them. It is replayed as an agent
would live it, user by user: each session opens a MemoryStore session at its date, its
questions are searched (within that user's project, 10 results, recalled into the session),
then its memory points are added. Questions come before the session's own points, so a point
is judged only when an earlier session made it.

One replay with reinforcement off measures every mode at once (searches that only look);
then one replay per mode with reinforcement on (every search reinforcing, as an agent's do),
from the same empty store. RRF fusion ranks by the two lists alone, without salience, so
reinforcement cannot move it. The first run embeds every text once (about 6,500, a few
minutes on 2 cores) into bench/results/realmem-cache.db; later runs read the vectors there.
"""

import argparse
import datetime
import gzip
import json
import os
import shutil
import sys
import time
from dataclasses import replace

from common import RESULTS, remove_db
from measures import ndcg_at_10, paired_bootstrap, recall_at

from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore, Ranking

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "realmem", "realmem.json.gz")
CACHE = os.path.join(RESULTS, "realmem-cache.db")
RUN = os.path.join(RESULTS, f"realmem-run-{os.getpid()}.db")
MODES = {
    "default (hybrid)": {"mode": "hybrid"},
    "keyword": {"mode": "keyword"},
    "semantic": {"mode": "semantic"},
    "RRF fusion": {"mode": "hybrid", "fusion": "rrf"},
}


def extract(folder: str) -> dict:
    """The collection from RealMem's ``*_dialogues_256k.json`` files in ``folder``."""
    people = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith("_dialogues_256k.json"):
            continue
        with open(os.path.join(folder, name)) as f:
            raw = json.load(f)
        # The files list sessions in the order they were made; three list a date out of that
        # order, so sessions are sorted by date (stable: the file's order within a day).
        dialogues = sorted(raw["dialogues"], key=lambda s: s["current_time"][:10])
        place, sessions = {}, []
        for n, s in enumerate(dialogues):
            texts = []
            for m in s.get("extracted_memory") or []:
                content = m["content"]
                if not isinstance(content, str):  # one point holds a JSON itinerary
                    content = json.dumps(content, ensure_ascii=False)
                place[(s["session_uuid"], content)] = (n, len(texts))
                texts.append(content)
            sessions.append({"date": s["current_time"][:10], "memories": texts, "queries": []})
        for n, s in enumerate(dialogues):
            turns = s["dialogue_turns"]
            for i, turn in enumerate(turns):
                if not turn.get("is_query"):
                    continue
                used = turns[i + 1].get("memory_used") or [] if i + 1 < len(turns) else []
                relevant = []
                for m in used:
                    content = m["content"]
                    if not isinstance(content, str):
                        content = json.dumps(content, ensure_ascii=False)
                    where = place.get((m["session_uuid"], content))
                    if where and where[0] < n and list(where) not in relevant:
                        relevant.append(list(where))
                if relevant:
                    sessions[n]["queries"].append(
                        {"id": turn["query_id"], "text": turn["content"], "relevant": relevant}
                    )
        people.append({"name": raw["_metadata"]["person_name"], "sessions": sessions})
    return {"people": people}


def load() -> dict:
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        return json.load(f)


def texts(collection: dict) -> list:
    return [
        t
        for p in collection["people"]
        for s in p["sessions"]
        for t in s["memories"] + [q["text"] for q in s["queries"]]
    ]


def build_cache(collection: dict) -> None:
    """Embeds every memory and question once into CACHE's embedding cache."""
    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    with HybridIndex(CACHE, embedder="local") as idx:
        started = time.monotonic()
        all_texts = texts(collection)
        for i in range(0, len(all_texts), 256):
            idx.embedder.embed(all_texts[i : i + 256])
        print(
            f"{len(all_texts)} texts embedded or cached in {time.monotonic() - started:.0f}s",
            file=sys.stderr,
        )


def day(date: str) -> float:
    """Noon UTC of an ISO date, in unix seconds."""
    d = datetime.datetime.fromisoformat(date).replace(hour=12, tzinfo=datetime.timezone.utc)
    return d.timestamp()


def replay(collection, searches, reinforce: bool, sessions="dialogue", ranking=None) -> dict:
    """Replays the collection into a fresh store; ``searches`` maps a label to the search
    options of each question; ``sessions`` is what a reinforcing search recalls into: the
    dialogue's session, a new session for each question, or none (the store's own).
    Returns label -> [(R@5, nDCG@10) per question, in order]."""
    remove_db(RUN)  # a WAL left over would corrupt the copy
    shutil.copy(CACHE, RUN)
    now = [0.0]
    scores = {label: [] for label in searches}
    with HybridIndex(RUN, embedder="local") as idx:
        stores = {
            label: MemoryStore(
                idx,
                ranking=Ranking(**(ranking or {})),
                options=replace(MemoryStore(idx).options, **fusion),
                clock=lambda: now[0],
            )
            for label, (fusion, _) in searches.items()
        }
        for person in collection["people"]:
            ids = []  # memory ids, per session, in order
            for s in person["sessions"]:
                now[0] = day(s["date"])
                any_store = next(iter(stores.values()))
                session = any_store.start_session(person["name"]).id
                for q in s["queries"]:
                    now[0] += 1
                    judged = {ids[n][i]: 1 for n, i in q["relevant"]}
                    recalled_in = {
                        "dialogue": session,
                        "question": any_store.start_session(person["name"]).id,
                        "none": None,
                    }[sessions if reinforce else "none"]
                    for label, (_, options) in searches.items():
                        found = stores[label].search(
                            q["text"],
                            project=person["name"],
                            limit=10,
                            reinforce=reinforce,
                            recalled_in=recalled_in,
                            **options,
                        )
                        ranked = [h.memory.id for h in found]
                        scores[label].append(
                            (recall_at(5, ranked, judged), ndcg_at_10(ranked, judged))
                        )
                added = []
                for text in s["memories"]:
                    now[0] += 1
                    added.append(any_store.add(text, person["name"], session_id=session).id)
                ids.append(added)
    remove_db(RUN)
    return scores


def mean(values):
    return sum(values) / len(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--extract", metavar="DIR", help="write the collection from RealMem's files"
    )
    parser.add_argument(
        "--sessions",
        default="dialogue",
        choices=["dialogue", "question", "none"],
        help="what reinforcing searches recall into: the dialogue's session (default), a new"
        " session for each question, or none named (the store's own)",
    )
    parser.add_argument(
        "--modes",
        default="default (hybrid),keyword,semantic",
        help="comma-separated modes for the reinforcing replays",
    )
    parser.add_argument(
        "--ranking",
        action="append",
        default=[],
        metavar="NAME=NUMBER",
        help="a Ranking field for the reinforcing replays (repeat)",
    )
    args = parser.parse_args()
    ranking = {k: float(v) for k, v in (r.split("=", 1) for r in args.ranking)}
    if args.extract:
        collection = extract(args.extract)
        os.makedirs(os.path.dirname(DATA), exist_ok=True)
        with gzip.GzipFile(DATA, "wb", mtime=0) as f:
            f.write(json.dumps(collection, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        print(f"wrote {DATA}")
        return
    collection = load()
    questions = sum(len(s["queries"]) for p in collection["people"] for s in p["sessions"])
    memories = sum(len(s["memories"]) for p in collection["people"] for s in p["sessions"])
    print(
        f"RealMem: {len(collection['people'])} users, {memories} memories, {questions} questions\n"
    )
    build_cache(collection)
    searches = {
        label: ({"fusion": o["fusion"]} if "fusion" in o else {}, {"mode": o["mode"]})
        for label, o in MODES.items()
    }
    started = time.monotonic()
    off = replay(collection, searches, reinforce=False)
    print(f"(replay without reinforcement: {time.monotonic() - started:.0f}s)", file=sys.stderr)
    on = {}
    for label in args.modes.split(","):
        started = time.monotonic()
        on.update(replay(collection, {label: searches[label]}, True, args.sessions, ranking))
        print(
            f"(replay of {label} reinforcing: {time.monotonic() - started:.0f}s)", file=sys.stderr
        )
    print("| mode | R@5 | nDCG@10 | R@5 reinforcing | nDCG@10 reinforcing | R@5 cost |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label in MODES:
        r, n = zip(*off[label], strict=True)
        row = f"| {label} | {mean(r):.3f} | {mean(n):.3f} |"
        if label in on:
            r2, n2 = zip(*on[label], strict=True)
            row += f" {mean(r2):.3f} | {mean(n2):.3f} | {mean(r) - mean(r2):+.3f} |"
        else:
            row += " | | |"
        print(row)
    for k, name in ((0, "R@5"), (1, "nDCG@10")):
        d, lo, hi = paired_bootstrap(
            [x[k] for x in off["default (hybrid)"]], [x[k] for x in off["RRF fusion"]]
        )
        print(f"\ndefault minus RRF, {name}: {d:+.4f} (95 % CI {lo:+.4f} to {hi:+.4f})")


if __name__ == "__main__":
    main()
