package topology

import (
	"fmt"
	"strings"
	"time"

	"github.com/reshard/reshard/ring"
)

// SkewRequest is `reshard topology skew`'s request as an operator writes
// it: tables as [schema.]table:key, shard connections as name=DSN.
type SkewRequest struct {
	Tables, ShardDSNs []string
	KeyType           string // "": the keyspace's
	Interval          time.Duration
	Top               int
}

// Options checks r: Skew's options and the shard connections it overrides
// (by shard name). Every error is bad input, naming the flag; a malformed
// --shard-dsn is named by its position, never echoed (it may hold a
// password anywhere).
func (r SkewRequest) Options() (SkewOptions, map[string]string, error) {
	var o SkewOptions
	for _, t := range r.Tables {
		name, key, ok := strings.Cut(t, ":")
		if !ok || name == "" || key == "" {
			return o, nil, fmt.Errorf("--table %q: want [schema.]table:key", t)
		}
		o.Tables = append(o.Tables, SkewTable{Name: name, KeyColumn: key})
	}
	if r.KeyType != "" {
		kt, err := ring.ParseKeyType(r.KeyType)
		if err != nil {
			return o, nil, fmt.Errorf("--key-type: %w", err)
		}
		o.KeyType = kt
	}
	if r.Interval < 100*time.Millisecond {
		return o, nil, fmt.Errorf("--interval %s: too short to measure writes; use 1s or more", r.Interval)
	}
	o.Interval = r.Interval
	if r.Top < 1 {
		return o, nil, fmt.Errorf("--top %d: want 1 or more", r.Top)
	}
	o.Top = r.Top
	overrides := map[string]string{}
	for i, s := range r.ShardDSNs {
		name, dsn, ok := strings.Cut(s, "=")
		if !ok || name == "" || dsn == "" {
			return o, nil, fmt.Errorf("--shard-dsn number %d: want name=DSN, e.g. --shard-dsn shard1=postgres://app@db1:5432/app", i+1)
		}
		overrides[name] = dsn
	}
	return o, overrides, nil
}
