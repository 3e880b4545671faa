"""The Python token functions against the vectors PostgreSQL 15 wrote
(ring/testdata/tokens.json) and the topology lookup at the edges.

    python3 examples/python/test_tokens.py
"""

import json
import os
import unittest

import reshard_router as rr

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ring", "testdata", "tokens.json")


class TokenVectors(unittest.TestCase):
    def test_vectors(self):
        with open(VECTORS) as f:
            vectors = json.load(f)["vectors"]
        n = 0
        for key_type in ("bigint", "text", "uuid"):
            self.assertGreaterEqual(len(vectors[key_type]), 5, key_type)
            for v in vectors[key_type]:
                key = int(v["key"]) if key_type == "bigint" else v["key"]
                self.assertEqual(rr.token(key_type, key), v["token"], "%s %r" % (key_type, v["key"][:40]))
                n += 1
        print("%d vectors equal" % n)

    def test_unknown_key_type(self):
        with self.assertRaises(ValueError):
            rr.token("numeric", 1)
        with self.assertRaises(ValueError):
            rr.token_int(1 << 63)


class TopologyEdges(unittest.TestCase):
    def topo(self):
        ranges = [
            {"range": {"lo": rr.MIN_TOKEN, "hi": -10}, "owner": "a", "state": "stable"},
            {"range": {"lo": -10, "hi": 10}, "owner": "b", "state": "migrating", "from": "b", "to": "c"},
            {"range": {"lo": 10, "hi": rr.MAX_TOKEN}, "owner": "a", "state": "stable"},
        ]
        return rr.Topology(7, list(reversed(ranges)))

    def test_bounds(self):
        t = self.topo()
        for tok, want in [(rr.MIN_TOKEN, "a"), (rr.MIN_TOKEN + 1, "a"), (-10, "a"), (-9, "b"),
                          (10, "b"), (11, "a"), (rr.MAX_TOKEN, "a")]:
            self.assertEqual(t.owner(tok), want, tok)

    def test_gap_refused(self):
        with self.assertRaises(ValueError):
            rr.Topology(1, [{"range": {"lo": rr.MIN_TOKEN, "hi": 0}, "owner": "a", "state": "stable"}])


if __name__ == "__main__":
    unittest.main()
