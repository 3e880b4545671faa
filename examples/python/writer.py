"""A writer through the Python router, for checking that no acknowledged write
is lost while reshard moves ranges (the Go test e2e/python_router_test.go runs
it through an add-node).

Each worker thread owns the keys i, i+workers, ... of --keys and writes them
one at a time: an upsert of a new value, or now and then a delete. Every
outcome is appended to --acked as one JSON line, in write order:

    {"k": 2000001, "v": "p-w0-17", "ok": true}    acknowledged (v null: deleted)
    {"k": 2000001, "v": null, "ok": false}        outcome unknown (an error)

After an acknowledged upsert, one write in --read-every is read back strictly
(docs/contract.md §6) and must equal it. On SIGTERM or SIGINT the workers
finish their write in flight and the writer prints one line
"summary {...}" with its counts, then exits 0.

    python3 writer.py --control "host=... dbname=... user=..." --table users \
        --key id --val name --keys 2000001-2000400 --acked /tmp/acked.jsonl
"""

import argparse
import json
import random
import signal
import sys
import threading
import time

import psycopg2
from psycopg2 import sql

import reshard_router as rr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--control", required=True, help="libpq DSN of the control database")
    ap.add_argument("--keyspace", default=rr.DEFAULT_KEYSPACE)
    ap.add_argument("--key-type", default=None, help="when the keyspace is not registered")
    ap.add_argument("--table", required=True, help="schema.table or table (public)")
    ap.add_argument("--key", required=True, help="bigint key column")
    ap.add_argument("--val", required=True, help="text value column")
    ap.add_argument("--keys", required=True, help="lo-hi, inclusive")
    ap.add_argument("--acked", required=True, help="file the outcomes are appended to")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pause", type=float, default=0.005, help="seconds between two writes of a worker")
    ap.add_argument("--delete-every", type=int, default=10)
    ap.add_argument("--read-every", type=int, default=5)
    ap.add_argument("--prefix", default="p-")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    lo, _, hi = a.keys.partition("-")
    keys = list(range(int(lo), int(hi) + 1))
    schema, _, table = a.table.rpartition(".")
    schema = schema or "public"
    tbl = sql.Identifier(schema, table)
    key, val = sql.Identifier(a.key), sql.Identifier(a.val)
    upsert = sql.SQL("INSERT INTO {t} ({k}, {v}) VALUES (%s, %s) ON CONFLICT ({k}) DO UPDATE SET {v} = EXCLUDED.{v}").format(t=tbl, k=key, v=val)
    delete = sql.SQL("DELETE FROM {t} WHERE {k} = %s").format(t=tbl, k=key)
    select_ = sql.SQL("SELECT {v} FROM {t} WHERE {k} = %s").format(t=tbl, k=key, v=val)

    router = rr.Router(a.control, keyspace=a.keyspace, key_type=a.key_type, poll_interval=0.5)
    router.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    out = open(a.acked, "a", buffering=1)
    out_lock = threading.Lock()
    counts = {"acked": 0, "unknown": 0, "reads": 0, "stale_reads": 0, "errors": []}
    versions = set()

    def record(k, v, ok):
        with out_lock:
            out.write(json.dumps({"k": k, "v": v, "ok": ok}) + "\n")
            counts["acked" if ok else "unknown"] += 1

    def worker(w):
        rnd = random.Random(a.seed * 1000 + w)
        mine = keys[w::a.workers]
        seq = 0
        while not stop.is_set():
            k = rnd.choice(mine)
            v = None if a.delete_every > 0 and rnd.randrange(a.delete_every) == 0 else "%sw%d-%d" % (a.prefix, w, seq)
            seq += 1
            try:
                if v is None:
                    router.write(k, lambda cur: cur.execute(delete, (k,)))
                else:
                    router.write(k, lambda cur: cur.execute(upsert, (k, v)))
            except (psycopg2.Error, rr.FencedError) as e:
                record(k, v, False)
                with out_lock:
                    counts["errors"].append(str(e)[:300])
                stop.wait(0.05)
                continue
            record(k, v, True)
            versions.add(router.version)
            if v is not None and a.read_every > 0 and rnd.randrange(a.read_every) == 0:
                def read(cur):
                    cur.execute(select_, (k,))
                    row = cur.fetchone()
                    return row[0] if row else None
                try:
                    got = router.read(k, read, strict_table="%s.%s" % (schema, table))
                except (psycopg2.Error, rr.FencedError) as e:
                    with out_lock:
                        counts["errors"].append("read: " + str(e)[:300])
                    continue
                with out_lock:
                    counts["reads"] += 1
                    if got != v:
                        counts["stale_reads"] += 1
                        counts["errors"].append("strict read of %d: %r, acknowledged %r" % (k, got, v))
            stop.wait(a.pause)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(a.workers)]
    for t in threads:
        t.start()
    while not stop.is_set():
        stop.wait(0.2)
    for t in threads:
        t.join()
    router.close()
    out.close()
    counts["errors"] = counts["errors"][:20]
    counts["fence_retries"] = router.fence_retries
    counts["versions"] = sorted(versions)
    print("summary " + json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
