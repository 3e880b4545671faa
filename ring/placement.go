package ring

// Replicas returns up to n distinct shards for token: its owner first, then
// the next shards clockwise. When shards carry failure domains (Build,
// WithShards), shards in domains not yet used come first; only when every
// domain is used do further shards of used domains follow, still clockwise.
// Fewer than n shards are returned only when the ring has fewer.
func (r *Ring) Replicas(token int64, n int) []string {
	n = min(n, len(r.shards))
	if n <= 0 {
		return nil
	}
	out := make([]string, 0, n)
	picked := make([]bool, len(r.shards))
	start := r.index(token)
	if r.info == nil || !r.hasDomains() {
		for k := 0; k < len(r.tokens) && len(out) < n; k++ {
			o := r.owners[(start+k)%len(r.tokens)]
			if !picked[o] {
				picked[o] = true
				out = append(out, r.shards[o])
			}
		}
		return out
	}
	usedDomain := map[string]bool{}
	// First pass: one shard per domain; second pass: fill with any shard.
	for pass := 0; pass < 2 && len(out) < n; pass++ {
		for k := 0; k < len(r.tokens) && len(out) < n; k++ {
			o := r.owners[(start+k)%len(r.tokens)]
			if picked[o] {
				continue
			}
			d := r.domain(r.shards[o])
			if pass == 0 && usedDomain[d] {
				continue
			}
			picked[o] = true
			usedDomain[d] = true
			out = append(out, r.shards[o])
		}
	}
	return out
}

func (r *Ring) hasDomains() bool {
	for _, s := range r.info {
		if s.Domain != "" {
			return true
		}
	}
	return false
}

// domain is the shard's failure domain; a shard without one is its own.
func (r *Ring) domain(shard string) string {
	if d := r.info[shard].Domain; d != "" {
		return "d:" + d
	}
	return "s:" + shard
}
