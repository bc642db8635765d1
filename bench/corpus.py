"""Indexing the real corpus: speed against the raw model, CPU use, memory, file size, resume,
watch latency and the progress bar's time left.

    python bench/corpus.py --corpus ../shared/data/markdown --files 100
    python bench/corpus.py --files 965 --repeat 2 --watch-chunks 2000
    python bench/corpus.py --files 965 --copies 5 --fake-model --only memory
    python bench/corpus.py --files 30 --repeat 2 --only speed \
        --model all-MiniLM-L6-v2 --model multilingual-e5-small   # the models, interleaved

Copies the first --files markdown files of the corpus (sorted by path; --copies K makes K
copies, each line of copy k ending in " vk" so that no chunk is found in the embedding cache)
into a temporary folder, then, each in a new process:
- indexes it with the local model (``HybridIndex.index_folder``, what ``hybridsql index`` runs),
  recording wall time, CPU-seconds, peak RSS and every time left the bar (terminal.Eta) says;
- embeds the same chunk texts (read back from the index) with the raw model: one
  ``LocalProvider.embed`` of them all, on every core, nothing read, cut or written;
  the two alternate --repeat times, and the ratio of their wall times is taken pair by pair;
- with --model given (repeatable; default the default model), each model in turn within each
  repeat, so that the models see the same load: its chunks per CPU-second, and per file and per
  MB of text (a model cuts its own chunks: multilingual-e5-small's window is 510 tokens,
  MiniLM's 256, so the same folder is fewer chunks with e5), and the ratio of the first model's
  CPU-seconds for the folder to each other's (2026-11-29, 50 files: MiniLM 19.8 to 20.4 chunks per
  CPU-second, multilingual-e5-small 6.2, the folder 2.22 to 2.28 x MiniLM's CPU-seconds:
  docs/benchmarks.md, "The multilingual model's cost (issue 41)");
- with --fake-model, the model's vectors are replaced by hashes (the same tokenizer cuts the
  same chunks): memory of everything but the model, at sizes the model is too slow for;
then reports the file size and ``hybridsql stats``, resumes after SIGINT and SIGKILL (an
embedding server in this process counts the texts it embeds: chunks embedded twice), and
runs bench/watch.py for the save-to-searchable latency.
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "shared", "data", "markdown")
sys.path.insert(0, HERE)
from watch import corpus_files  # noqa: E402  (bench/watch.py: the same files, the same order)

HYBRIDSQL = os.path.join(os.path.dirname(sys.executable), "hybridsql")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fake_model():
    """The local provider with hashes for vectors: the same tokenizer, the same chunks."""
    import numpy as np

    from hybridsql.embedding.embedder import LocalProvider

    class Hashed(LocalProvider):
        model_id = "hashed"

        def embed(self, texts):
            out = np.zeros((len(texts), self.dims), dtype=np.float32)
            for i, text in enumerate(texts):
                digest = hashlib.sha256(text.encode()).digest()
                out[i] = np.frombuffer(digest * 48, dtype=np.uint8)[: self.dims] / 255.0
            return out

    return Hashed()


def child_index(folder: str, db: str, fake: bool, model: str | None) -> dict:
    from hybridsql.files.discovery import Progress
    from hybridsql.indexing.index import HybridIndex
    from hybridsql.terminal import Eta

    class Recording(Progress):
        def __init__(self):
            self.eta, self.seen = Eta(), []

        def work(self, done, total):
            self.eta.work(done, total)
            if 0 < done < total:
                self.seen.append((time.monotonic(), done / total, self.eta.left()))

    progress = Recording()
    with HybridIndex(db, embedder=fake_model() if fake else "local", model=model) as idx:
        started, cpu = time.monotonic(), cpu_seconds()
        report = idx.index_folder(folder, progress=progress)
        wall, cpu = time.monotonic() - started, cpu_seconds() - cpu
        chunks = idx.conn.execute("select count(*) from chunks").fetchone()[0]
    finished = started + wall
    return {
        "wall": wall,
        "cpu": cpu,
        "rss": peak_rss_mb(),
        "chunks": chunks,
        "embedded": report.chunks_embedded,
        "eta": [(finished - t, share, left) for t, share, left in progress.seen],
    }


def child_raw(texts_file: str, model: str | None) -> dict:
    from hybridsql.embedding.embedder import LocalProvider

    with open(texts_file) as f:
        texts = json.load(f)
    started, cpu = time.monotonic(), cpu_seconds()
    LocalProvider(model=model).embed(texts)
    return {"wall": time.monotonic() - started, "cpu": cpu_seconds() - cpu, "rss": peak_rss_mb()}


def in_child(*args) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def copy_corpus(corpus: str, files: int, copies: int, folder: str) -> int:
    size = 0
    chosen = corpus_files(corpus)[:files]
    if not chosen:
        raise SystemExit(f"no markdown in {corpus}: give --corpus")
    for k in range(copies):
        for path in chosen:
            rel = os.path.relpath(path, corpus)
            target = os.path.join(folder, f"copy{k}" if copies > 1 else "", rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if k:
                text = "\n".join(
                    f"{line} v{k}" if line.strip() else line for line in text.split("\n")
                )
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
            size += os.path.getsize(target)
    return size


def eta_errors(samples: list) -> tuple:
    """Over the samples from 10 % to 90 % done: the largest and the median error of the time
    left against the time that was left, relative to it."""
    errors = [abs(left - truly) / truly for truly, share, left in samples
              if 0.1 <= share <= 0.9 and left is not None and truly > 0]  # fmt: skip
    if not errors:
        return None, None
    return max(errors), statistics.median(errors)


class Counting(BaseHTTPRequestHandler):
    """POST /embeddings answered with hashes after DELAY seconds (so that a run lasts long
    enough to be stopped half way); the texts of every answer sent to a client still there
    are counted (a request whose client was killed while it waited was never embedded)."""

    texts = []
    DELAY = 0.2

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.DELAY)
        try:
            if self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                return  # the client is gone
        except BlockingIOError:
            pass
        Counting.texts += body["input"]
        data = [
            {"index": i, "embedding": list(hashlib.sha256(t.encode()).digest()[:16])}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps({"data": data}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


def resume(folder: str, work: str, files: int, sig: int) -> str:
    """Stops ``hybridsql index`` with ``sig`` once a third of the files are in the index, runs
    it again, and counts the chunks embedded more than once over both runs."""
    import apsw

    server = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Counting.texts = []
    db = os.path.join(work, f"resume-{sig}.db")
    env = {
        **os.environ,
        "HYBRIDSQL_OPENAI_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}/v1",
        "HYBRIDSQL_OPENAI_MODEL": "hashes",
    }
    command = [HYBRIDSQL, "index", folder, "--db", db, "--embedder", "openai", "--json"]
    run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = 0
    while run.poll() is None and done < files // 3:
        time.sleep(0.05)
        if os.path.exists(db):
            try:
                conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
                done = conn.execute("select count(*) from files").fetchone()[0]
                conn.close()
            except apsw.Error:
                pass
    run.send_signal(sig)
    code = run.wait(600)
    again = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    report = json.loads(again.stdout)
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    texts = {t for (t,) in conn.execute("select text from chunks")}
    conn.close()
    server.shutdown()
    counts = {}
    for t in Counting.texts:
        if t in texts:
            counts[t] = counts.get(t, 0) + 1
    twice = sum(1 for n in counts.values() if n > 1)
    name = signal.Signals(sig).name
    return (
        f"{name} after {done} files (exit {code}), then again: {report['files_unchanged']}"
        f" unchanged, {report['files_indexed']} indexed; chunks embedded twice: {twice} of"
        f" {len(texts)} (never embedded: {len(texts - set(counts))})"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--files", type=int, default=965, help="the first N files (by path)")
    parser.add_argument("--copies", type=int, default=1, help="copies of them, each distinct")
    parser.add_argument("--repeat", type=int, default=1, help="index and raw runs, alternated")
    parser.add_argument("--fake-model", action="store_true", help="hashes for vectors")
    parser.add_argument("--watch-chunks", type=int, default=1000, help="bench/watch.py's index")
    parser.add_argument("--only", choices=["speed", "memory", "resume"], help="that part alone")
    parser.add_argument(
        "--model", action="append", help="the local model (repeatable: each in turn); default one"
    )
    args = parser.parse_args()
    models = args.model or [""]  # "": LocalProvider's default, $HYBRIDSQL_MODEL or MiniLM
    # A shell starts a background job with SIGINT ignored, which its children inherit (and
    # Python then never raises KeyboardInterrupt); a handler is reset to the default by exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    work = tempfile.mkdtemp(prefix="hybridsql-corpus-")
    folder = os.path.join(work, "notes")
    size = copy_corpus(args.corpus, args.files, args.copies, folder)
    files = args.files * args.copies
    texts_file = os.path.join(work, "texts.json")
    print(f"corpus: {files} files, {size / 1e6:.1f} MB, from {os.path.abspath(args.corpus)}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    if args.only == "resume":
        for sig in (signal.SIGINT, signal.SIGKILL):
            print("resume: " + resume(folder, work, files, sig))
        shutil.rmtree(work)
        return
    ratios, db, folder_cpu = [], None, {model: [] for model in models}
    for n, model in ((n, m) for n in range(args.repeat) for m in models):
        db = os.path.join(work, f"index{n}{models.index(model)}.db")
        flags = ["--fake-model"] if args.fake_model else []
        index = in_child("--child-index", folder, db, model, *flags)
        folder_cpu[model].append(index["cpu"])
        print(
            f"index{f' [{model}]' if model else ''}: {index['chunks']} chunks in"
            f" {index['wall']:.1f} s, {index['chunks'] / index['wall']:.1f} chunks/s, CPU"
            f" {index['cpu']:.1f} s ({index['cpu'] / index['wall']:.2f} cores):"
            f" {index['chunks'] / index['cpu']:.2f} chunks, {files / index['cpu']:.2f} files,"
            f" {size / 1e6 / index['cpu']:.3f} MB of text per CPU-second; peak RSS"
            f" {index['rss']:.0f} MB; load average {os.getloadavg()[0]:.1f}"
        )
        worst, median = eta_errors(index["eta"])
        if worst is not None:
            print(
                f"time left (from 10 % to 90 % done, {len(index['eta'])} readings): error"
                f" median {100 * median:.0f} %, largest {100 * worst:.0f} %"
            )
        if args.fake_model:
            continue
        import apsw

        conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
        with open(texts_file, "w") as f:
            json.dump([t for (t,) in conn.execute("select text from chunks order by id")], f)
        conn.close()
        raw = in_child("--child-raw", texts_file, model)
        ratios.append(index["wall"] / raw["wall"])
        print(
            f"raw model: the same {index['chunks']} chunks in {raw['wall']:.1f} s,"
            f" {index['chunks'] / raw['wall']:.1f} chunks/s, CPU {raw['cpu']:.1f} s"
            f" ({raw['cpu'] / raw['wall']:.2f} cores), peak RSS {raw['rss']:.0f} MB;"
            f" indexing/raw: wall {ratios[-1]:.3f}, peak RSS {index['rss'] / raw['rss']:.2f}"
        )
    if ratios:
        print(f"indexing/raw wall, pair by pair: {', '.join(f'{r:.3f}' for r in ratios)}")
    for model in models[1:]:
        pairs = zip(folder_cpu[models[0]], folder_cpu[model], strict=True)
        print(
            f"the folder's CPU-seconds, {model} / {models[0]}, repeat by repeat:"
            f" {', '.join(f'{b / a:.2f}' for a, b in pairs)}"
        )
    if args.only:
        shutil.rmtree(work)
        return
    db_size = os.path.getsize(db)
    print(f"file: {db_size / 1e6:.1f} MB, {db_size / size:.2f} x the text")
    stats = subprocess.run(
        [HYBRIDSQL, "stats", "--db", db], check=False, capture_output=True, text=True
    )
    if stats.returncode == 0:
        print(stats.stdout.rstrip())
    else:
        print(f"hybridsql stats: not available ({stats.stderr.strip().splitlines()[-1:]})")
    for sig in (signal.SIGINT, signal.SIGKILL):
        print("resume: " + resume(folder, work, files, sig))
    watch = [
        sys.executable,
        os.path.join(HERE, "watch.py"),
        "--corpus",
        args.corpus,
        "--embedder",
        "local",
        "--chunks",
        str(args.watch_chunks),
        "--saves",
        "20",
        "--idle",
        "10",
    ]
    print("watch: " + " ".join(watch[1:]))
    subprocess.run(watch, check=False)
    shutil.rmtree(work)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-index"]:
        fake = "--fake-model" in sys.argv
        print(json.dumps(child_index(sys.argv[2], sys.argv[3], fake, sys.argv[4] or None)))
    elif sys.argv[1:2] == ["--child-raw"]:
        print(json.dumps(child_raw(sys.argv[2], sys.argv[3] or None)))
    else:
        main()
