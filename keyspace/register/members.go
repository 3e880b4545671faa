package register

import (
	"maps"
	"slices"
	"strings"
)

// Members are the shards of init's first ring: given (its --shards, each
// trimmed) checked against the configured shards (of the configuration at
// path), each once, sorted; none given, every configured shard. A shard not
// configured, or given twice, is an *pgerr.InputError.
func Members(configured map[string]string, path string, given []string) ([]string, error) {
	names := slices.Sorted(maps.Keys(configured))
	if len(given) == 0 {
		return names, nil
	}
	var out []string
	for _, s := range given {
		s = strings.TrimSpace(s)
		if _, ok := configured[s]; !ok {
			return nil, badInput("--shards %s: not in the configuration %s (shards: %s)", s, path, strings.Join(names, ", "))
		}
		if slices.Contains(out, s) {
			return nil, badInput("--shards lists %s twice", s)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}
