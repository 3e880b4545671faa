package ring

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Algorithms compared by Simulate, in report order.
var Algorithms = []string{"modulo", "ring-hash", "ring-balanced", "rendezvous", "jump", "slots"}

// SlotCount is the number of fixed slots of the "slots" algorithm (as Redis
// Cluster).
const SlotCount = 16384

// SimOptions describes a simulated scale-out: Shards shards, then Add more.
type SimOptions struct {
	Shards int
	Add    int
	VNodes int // vnodes per shard of the ring algorithms
	Keys   int // sample keys "key-<i>", i < Keys
	Algos  []string
}

// SimResult is one algorithm's figures. Tokens is the number of vnodes per
// shard (ring algorithms), of slots (slots), or 0.
type SimResult struct {
	Algo          string  `json:"algo"`
	Tokens        int     `json:"tokens"`
	MovedFraction float64 `json:"moved_fraction"`
	IdealFraction float64 `json:"ideal_fraction"`
	MaxOverMean   float64 `json:"max_over_mean"`
}

// Simulate is measureMigration extended: for each algorithm it maps Keys
// sample keys (tokens of "key-<i>") to shards before and after adding Add
// shards to Shards shards, and reports the fraction of keys that changed
// shard against the ideal Add/(Shards+Add), and the load imbalance after:
// the most loaded shard's keys over the mean.
func Simulate(o SimOptions) ([]SimResult, error) {
	if o.Shards < 1 || o.Add < 1 || o.Keys < 1 || o.VNodes < 1 {
		return nil, fmt.Errorf("simulate: want shards ≥ 1, add ≥ 1, keys ≥ 1 and vnodes ≥ 1 (got %d, %d, %d, %d)", o.Shards, o.Add, o.Keys, o.VNodes)
	}
	algos := o.Algos
	if len(algos) == 0 || slices.Contains(algos, "all") {
		algos = Algorithms
	}
	for _, a := range algos {
		if !slices.Contains(Algorithms, a) {
			return nil, fmt.Errorf("simulate: unknown algorithm %q (want all or some of %s)", a, strings.Join(Algorithms, ", "))
		}
	}
	keys := make([]int64, o.Keys)
	buf := []byte("key-")
	for i := range keys {
		keys[i] = int64(hashBytesExtended(strconv.AppendInt(buf[:4], int64(i), 10)))
	}
	n, m := o.Shards, o.Shards+o.Add
	var out []SimResult
	for _, a := range algos {
		var before, after func(int64) int
		tokens := 0
		switch a {
		case "modulo":
			before = func(t int64) int { return int(uint64(t) % uint64(n)) }
			after = func(t int64) int { return int(uint64(t) % uint64(m)) }
		case "ring-hash", "ring-balanced":
			mode := AllocHash
			if a == "ring-balanced" {
				mode = AllocBalanced
			}
			rb, ra, err := simRings(n, m, Options{VNodes: o.VNodes, Tokens: mode})
			if err != nil {
				return nil, err
			}
			before, after, tokens = rb.shardIndex, ra.shardIndex, o.VNodes
		case "rendezvous":
			seeds := make([]uint64, m)
			for i := range seeds {
				seeds[i] = uint64(TokenText(simName(i)))
			}
			before = func(t int64) int { return rendezvous(uint64(t), seeds[:n]) }
			after = func(t int64) int { return rendezvous(uint64(t), seeds) }
		case "jump":
			before = func(t int64) int { return jump(uint64(t), n) }
			after = func(t int64) int { return jump(uint64(t), m) }
		case "slots":
			sb, sa := slotTables(n, m)
			before = func(t int64) int { return int(sb[uint64(t)%SlotCount]) }
			after = func(t int64) int { return int(sa[uint64(t)%SlotCount]) }
			tokens = SlotCount
		}
		load := make([]int, m)
		moved := 0
		for _, t := range keys {
			b, x := before(t), after(t)
			if b != x {
				moved++
			}
			load[x]++
		}
		out = append(out, SimResult{
			Algo:          a,
			Tokens:        tokens,
			MovedFraction: float64(moved) / float64(len(keys)),
			IdealFraction: float64(o.Add) / float64(m),
			MaxOverMean:   float64(slices.Max(load)) / (float64(len(keys)) / float64(m)),
		})
	}
	return out, nil
}

func simName(i int) string { return "shard-" + strconv.Itoa(i) }

// simRings builds a ring of n shards and adds shards n..m-1 one by one.
func simRings(n, m int, o Options) (*Ring, *Ring, error) {
	shards := make([]Shard, n)
	for i := range shards {
		shards[i] = Shard{Name: simName(i)}
	}
	before, err := Build(shards, o)
	if err != nil {
		return nil, nil, err
	}
	after := before
	for i := n; i < m; i++ {
		if after, _, err = PlanAddNode(after, Shard{Name: simName(i)}, o); err != nil {
			return nil, nil, err
		}
	}
	return before, after, nil
}

// shardIndex is the number i of the owner "shard-<i>" of t.
func (r *Ring) shardIndex(t int64) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(r.Owner(t), "shard-"))
	return i
}

// rendezvous (highest random weight): the shard with the highest score of
// (key, shard) owns the key.
func rendezvous(key uint64, seeds []uint64) int {
	best, bestScore := 0, uint64(0)
	for i, s := range seeds {
		if sc := mix64(key ^ s); i == 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// jump is Lamping and Veach's jump consistent hash: a bucket in [0, n).
func jump(key uint64, n int) int {
	b, j := int64(-1), int64(0)
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// slotTables assigns SlotCount slots to n shards in contiguous blocks, then
// to m shards moving as few slots as possible: each old shard gives up only
// its slots beyond its new quota, and only new shards receive them.
func slotTables(n, m int) (before, after []int32) {
	before = make([]int32, SlotCount)
	for s := range before {
		before[s] = int32(s * n / SlotCount)
	}
	after = slices.Clone(before)
	quota := make([]int, m)
	for i := range quota {
		quota[i] = SlotCount / m
		if i < SlotCount%m { // the remainder stays with old shards, moving less
			quota[i]++
		}
	}
	count := make([]int, m)
	for _, o := range before {
		count[o]++
	}
	var pool []int
	for s := SlotCount - 1; s >= 0; s-- { // give up the ends of the blocks
		if o := before[s]; count[o] > quota[o] {
			count[o]--
			pool = append(pool, s)
		}
	}
	next := n
	for _, s := range pool {
		for count[next] >= quota[next] {
			next++
		}
		after[s] = int32(next)
		count[next]++
	}
	return before, after
}
