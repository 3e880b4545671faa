"""A reshard router for Python applications, written from docs/contract.md only.

    router = Router("host=ctl dbname=control user=app", keyspace="default")
    router.start()                      # LISTEN reshard_topology + polling
    router.write(42, lambda cur: cur.execute(
        "INSERT INTO users (id, name) VALUES (%s, %s)", (42, "alice")))
    name = router.read(42, lambda cur: (cur.execute(
        "SELECT name FROM users WHERE id = %s", (42,)), cur.fetchone())[1],
        strict_table="public.users")
    router.close()

Shards are reached through the registry (reshard.shards: host, port, dbname,
username); the password comes from libpq's environment (PGPASSWORD, ~/.pgpass),
never from the control database. Needs psycopg2 (Debian: python3-psycopg2).
"""

import bisect
import select
import threading
import time
import uuid

import psycopg2
import psycopg2.extensions

FENCE_SQLSTATE = "RSF01"
NOTIFY_CHANNEL = "reshard_topology"
DEFAULT_KEYSPACE = "default"
MIN_TOKEN = -(1 << 63)
MAX_TOKEN = (1 << 63) - 1

# --- tokens (docs/contract.md §2): PostgreSQL's lookup3, seed 0 -------------

_M = 0xFFFFFFFF
_INIT = (0x9E3779B9 + 3923095) & _M


def _rot(x, k):
    return ((x << k) | (x >> (32 - k))) & _M


def _mix(a, b, c):
    a = (a - c) & _M; a ^= _rot(c, 4); c = (c + b) & _M
    b = (b - a) & _M; b ^= _rot(a, 6); a = (a + c) & _M
    c = (c - b) & _M; c ^= _rot(b, 8); b = (b + a) & _M
    a = (a - c) & _M; a ^= _rot(c, 16); c = (c + b) & _M
    b = (b - a) & _M; b ^= _rot(a, 19); a = (a + c) & _M
    c = (c - b) & _M; c ^= _rot(b, 4); b = (b + a) & _M
    return a, b, c


def _final(a, b, c):
    c ^= b; c = (c - _rot(b, 14)) & _M
    a ^= c; a = (a - _rot(c, 11)) & _M
    b ^= a; b = (b - _rot(a, 25)) & _M
    c ^= b; c = (c - _rot(b, 16)) & _M
    a ^= c; a = (a - _rot(c, 4)) & _M
    b ^= a; b = (b - _rot(a, 14)) & _M
    c ^= b; c = (c - _rot(b, 24)) & _M
    return b, c


def _signed(b, c):
    v = (b << 32) | c
    return v - (1 << 64) if v >= (1 << 63) else v


def _hash_bytes(k):
    a = b = c = (_INIT + len(k)) & _M
    while len(k) >= 12:
        a = (a + int.from_bytes(k[0:4], "little")) & _M
        b = (b + int.from_bytes(k[4:8], "little")) & _M
        c = (c + int.from_bytes(k[8:12], "little")) & _M
        a, b, c = _mix(a, b, c)
        k = k[12:]
    # The last 0..11 bytes: little-endian into a, b and the upper three
    # bytes of c.
    a = (a + int.from_bytes(k[0:4], "little")) & _M
    b = (b + int.from_bytes(k[4:8], "little")) & _M
    c = (c + (int.from_bytes(k[8:11], "little") << 8)) & _M
    return _signed(*_final(a, b, c))


def _hash_uint32(k):
    a = b = c = (_INIT + 4) & _M
    a = (a + k) & _M
    return _signed(*_final(a, b, c))


def token_int(k):
    """hashint8extended(k, 0): smallint, integer and bigint keys."""
    k = int(k)
    if not MIN_TOKEN <= k <= MAX_TOKEN:
        raise ValueError("key %d is out of the bigint range" % k)
    lo, hi = k & _M, (k >> 32) & _M
    lo ^= hi if k >= 0 else (~hi & _M)
    return _hash_uint32(lo)


def token_text(s):
    """hashtextextended(s, 0) under a deterministic collation."""
    return _hash_bytes(s.encode("utf-8"))


def token_uuid(u):
    """uuid_hash_extended(u, 0); u is a uuid.UUID or its text form."""
    if not isinstance(u, uuid.UUID):
        u = uuid.UUID(str(u))
    return _hash_bytes(u.bytes)


TOKEN_FUNCS = {"bigint": token_int, "text": token_text, "uuid": token_uuid}


def token(key_type, key):
    try:
        return TOKEN_FUNCS[key_type](key)
    except KeyError:
        raise ValueError("key type %r: want bigint, text or uuid" % key_type) from None


# --- topology (docs/contract.md §3) ----------------------------------------


class Topology:
    """One version of a keyspace: its ranges (lo, hi] sorted by lo."""

    def __init__(self, version, ranges):
        self.version = version
        rs = sorted(ranges, key=lambda r: int(r["range"]["lo"]))
        self.los = [int(r["range"]["lo"]) for r in rs]
        self.his = [int(r["range"]["hi"]) for r in rs]
        self.states = rs
        if not rs or self.los[0] != MIN_TOKEN or self.his[-1] != MAX_TOKEN:
            raise ValueError("topology v%d: ranges do not cover the token space" % version)
        for i in range(1, len(rs)):
            if self.los[i] != self.his[i - 1]:
                raise ValueError("topology v%d: a gap or an overlap at token %d" % (version, self.los[i]))

    def range_of(self, tok):
        i = bisect.bisect_left(self.his, tok)  # the first range with hi >= tok
        lo = self.los[i]
        if not (tok > lo or lo == MIN_TOKEN):  # (lo, hi]; [MinInt64, hi] for the first
            raise AssertionError("token %d not in range (%d, %d]" % (tok, lo, self.his[i]))
        return self.states[i]

    def owner(self, tok):
        return self.range_of(tok)["owner"]


class FencedError(Exception):
    """A shard kept refusing a key (RSF01) past the retry bound."""


class Router:
    """Routes keys of one keyspace to their owners and retries on RSF01.

    Thread-safe: the topology is an immutable value swapped under a lock;
    each thread has its own connection per shard."""

    def __init__(self, control_dsn, keyspace=DEFAULT_KEYSPACE, key_type=None,
                 poll_interval=2.0, retry_budget=10.0, first_backoff=0.01, max_backoff=0.5):
        self.control_dsn = control_dsn
        self.keyspace = keyspace
        self.poll_interval = poll_interval
        self.retry_budget = retry_budget
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.fence_retries = 0
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._topo = None
        self._shards = {}
        self._local = threading.local()
        self._stop = threading.Event()
        self._thread = None
        self._ctl = None
        self.refresh()
        if key_type is None:
            key_type = self._query_control(
                "SELECT key_type FROM reshard.keyspaces WHERE name = %s", (keyspace,))
            key_type = key_type[0][0] if key_type else None
        if key_type is None:
            raise ValueError("keyspace %s is not registered: pass key_type" % keyspace)
        if key_type not in TOKEN_FUNCS:
            raise ValueError("key type %r: want bigint, text or uuid" % key_type)
        self.key_type = key_type

    # -- topology --------------------------------------------------------

    @property
    def topology(self):
        return self._topo

    @property
    def version(self):
        return self._topo.version

    def _query_control(self, sql, args):
        for attempt in (0, 1):  # one reconnect after a lost connection
            try:
                if self._ctl is None or self._ctl.closed:
                    self._ctl = psycopg2.connect(self.control_dsn)
                    self._ctl.autocommit = True
                with self._ctl.cursor() as cur:
                    cur.execute(sql, args)
                    return cur.fetchall()
            except psycopg2.OperationalError:
                if self._ctl is not None:
                    self._ctl.close()
                self._ctl = None
                if attempt:
                    raise

    def refresh(self):
        """Load the newest version and adopt it if newer (never go back)."""
        with self._refresh_lock:
            rows = self._query_control(
                "SELECT version, ranges FROM reshard.current_topology(%s)", (self.keyspace,))
            topo = Topology(rows[0][0], rows[0][1])
            shards = {}
            for name, host, port, dbname, user in self._query_control(
                    "SELECT name, host, port, dbname, username FROM reshard.shards", ()):
                shards[name] = psycopg2.extensions.make_dsn(host=host, port=port, dbname=dbname, user=user)
        with self._lock:
            self._shards.update(shards)
            if self._topo is None or topo.version > self._topo.version:
                self._topo = topo
                return True
        return False

    def start(self):
        """Follow changes: LISTEN on NOTIFY_CHANNEL and poll, in a thread."""
        self._thread = threading.Thread(target=self._listen, name="reshard-topology", daemon=True)
        self._thread.start()

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for conn in getattr(self._local, "conns", {}).values():
            conn.close()
        if self._ctl is not None:
            self._ctl.close()

    def _listen(self):
        backoff = 0.1
        while not self._stop.is_set():
            conn = None
            try:
                conn = psycopg2.connect(self.control_dsn)
                conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("LISTEN " + NOTIFY_CHANNEL)
                self.refresh()  # whatever was published before LISTEN took effect
                backoff = 0.1
                while not self._stop.is_set():
                    ready, _, _ = select.select([conn], [], [], self.poll_interval)
                    if not ready:
                        self.refresh()  # poll: notifications can be lost
                        continue
                    conn.poll()
                    newer = False
                    while conn.notifies:
                        n = conn.notifies.pop(0)
                        ks, _, v = n.payload.rpartition(":")
                        ks = ks or DEFAULT_KEYSPACE
                        try:
                            newer = newer or (ks == self.keyspace and int(v) > self.version)
                        except ValueError:
                            newer = True
                    if newer:
                        self.refresh()
            except psycopg2.Error:
                self._stop.wait(backoff)
                backoff = min(2 * backoff, 30.0)
            finally:
                if conn is not None:
                    conn.close()

    # -- routing ---------------------------------------------------------

    def token(self, key):
        return token(self.key_type, key)

    def route(self, key):
        """(shard, version) for key under the current topology."""
        topo = self._topo
        return topo.owner(self.token(key)), topo.version

    def _conn(self, shard):
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(shard)
        if conn is None or conn.closed:
            with self._lock:
                dsn = self._shards.get(shard)
            if dsn is None:
                self.refresh()
                dsn = self._shards.get(shard)
            if dsn is None:
                raise LookupError("shard %s is not in reshard.shards" % shard)
            conn = conns[shard] = psycopg2.connect(dsn)
        return conn

    def _drop_conn(self, shard):
        conn = getattr(self._local, "conns", {}).pop(shard, None)
        if conn is not None:
            conn.close()

    def _run(self, key, fn, strict_table=None):
        tok = self.token(key)
        deadline = time.monotonic() + self.retry_budget
        backoff = self.first_backoff
        while True:
            topo = self._topo
            shard = topo.owner(tok)
            conn = self._conn(shard)
            try:
                with conn:  # one transaction: commit, or roll back on error
                    with conn.cursor() as cur:
                        if strict_table is not None:
                            self._check_fence(cur, strict_table, tok)
                        return fn(cur)
            except _StrictFenced as e:
                err = e
            except psycopg2.Error as e:
                if e.pgcode != FENCE_SQLSTATE:
                    if conn.closed:
                        self._drop_conn(shard)
                    raise
                err = e
            # RSF01: reload; retry at once on a newer version, else back off.
            self.fence_retries += 1
            if time.monotonic() >= deadline:
                raise FencedError("shard %s still refuses token %d after %.1fs (topology v%d): is a cutover stuck? %s"
                                  % (shard, tok, self.retry_budget, topo.version, err))
            if self._topo.version == topo.version:
                self.refresh()
            if self._topo.version == topo.version:
                time.sleep(backoff)
                backoff = min(2 * backoff, self.max_backoff)

    def write(self, key, fn):
        """Run fn(cursor) in one transaction on the owner of key; retried on RSF01,
        so fn must be safe to run again (the refused transaction wrote nothing)."""
        return self._run(key, fn)

    def read(self, key, fn, strict_table=None):
        """Run fn(cursor) on the owner of key. With strict_table (schema.table, a
        registered table), the read runs in one REPEATABLE READ snapshot that also
        checks the shard's fence for the key's token (docs/contract.md §6): a
        fenced token is retried like RSF01, so the answer is never stale."""
        return self._run(key, fn, strict_table)

    @staticmethod
    def _check_fence(cur, table, tok):
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute("SELECT to_regclass('reshard.fence') IS NOT NULL")
        if not cur.fetchone()[0]:
            return  # never fenced: the shard has taken part in no move
        cur.execute("SELECT coalesce((SELECT f.ranges @> %s::bigint FROM reshard.fence f"
                    " WHERE f.tbl = to_regclass(%s)), false)", (tok, table))
        if cur.fetchone()[0]:
            raise _StrictFenced("token %d is fenced on this shard" % tok)


class _StrictFenced(Exception):
    """A strict read found its token fenced: handled like RSF01."""
