// Package ledger checks that a move loses no acknowledged write: writers go
// through the topology router, and the ledger keeps, for every key, its last
// acknowledged value (or that it was deleted), plus the values of writes
// whose outcome is unknown (an error after the statement may have
// committed). At the end, every key's row on its owner must hold the last
// acknowledged value, or one of the unknown writes made after it.
//
// Each key has exactly one writer, writing sequentially, so "last
// acknowledged" is well defined. Tests and the demo share it.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/reshard/reshard/router"
)

// Value is a key's state: a value, or absent.
type Value struct {
	V       string
	Deleted bool
}

func (v Value) String() string {
	if v.Deleted {
		return "<deleted>"
	}
	return strconv.Quote(v.V)
}

type entry struct {
	acked   Value
	unknown []Value // writes after acked whose outcome is unknown
}

// Ledger is safe for concurrent use.
type Ledger struct {
	mu   sync.Mutex
	keys map[int64]*entry
}

// New returns an empty ledger.
func New() *Ledger { return &Ledger{keys: map[int64]*entry{}} }

// Ack records an acknowledged write: the key's state is now v.
func (l *Ledger) Ack(k int64, v Value) {
	l.mu.Lock()
	l.keys[k] = &entry{acked: v}
	l.mu.Unlock()
}

// Unknown records a write whose outcome is unknown.
func (l *Ledger) Unknown(k int64, v Value) {
	l.mu.Lock()
	e := l.keys[k]
	if e == nil {
		e = &entry{acked: Value{Deleted: true}}
		l.keys[k] = e
	}
	e.unknown = append(e.unknown, v)
	l.mu.Unlock()
}

// Keys returns the keys of the ledger, sorted.
func (l *Ledger) Keys() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int64, 0, len(l.keys))
	for k := range l.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Acked returns the last acknowledged state of k.
func (l *Ledger) Acked(k int64) Value {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[k]; e != nil {
		return e.acked
	}
	return Value{Deleted: true}
}

// Mismatch is a key whose row disagrees with the ledger.
type Mismatch struct {
	Key     int64
	Shard   string
	Got     Value
	Want    Value
	Unknown []Value
}

func (m Mismatch) String() string {
	return fmt.Sprintf("key %d on %s: %s, want %s (or one of %d unknown writes)", m.Key, m.Shard, m.Got, m.Want, len(m.Unknown))
}

// Table says where the writers write: a table with a bigint key column and
// a text value column.
type Table struct {
	Name     string // quoted-ready name, e.g. "kv"
	Key, Val string
}

func (t Table) ident() string { return pgx.Identifier{t.Name}.Sanitize() }

// Read returns the state of keys on one shard.
func Read(ctx context.Context, pool *pgxpool.Pool, t Table, keys []int64) (map[int64]Value, error) {
	rows, err := pool.Query(ctx, "SELECT "+pgx.Identifier{t.Key}.Sanitize()+", "+pgx.Identifier{t.Val}.Sanitize()+
		" FROM "+t.ident()+" WHERE "+pgx.Identifier{t.Key}.Sanitize()+" = ANY($1)", keys)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]Value, len(keys))
	for _, k := range keys {
		out[k] = Value{Deleted: true}
	}
	for rows.Next() {
		var k int64
		var v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = Value{V: v}
	}
	return out, rows.Err()
}

// Check compares every key of the ledger with its row on the shard owner
// names (the owner of the key under the final topology, or the old owner
// kept current by reverse CDC). Keys for which owner returns "" are skipped.
func (l *Ledger) Check(ctx context.Context, t Table, pools map[string]*pgxpool.Pool, owner func(k int64) string) ([]Mismatch, error) {
	byShard := map[string][]int64{}
	for _, k := range l.Keys() {
		if s := owner(k); s != "" {
			byShard[s] = append(byShard[s], k)
		}
	}
	var out []Mismatch
	for s, keys := range byShard {
		p := pools[s]
		if p == nil {
			return nil, fmt.Errorf("ledger check: no pool for shard %q", s)
		}
		got, err := Read(ctx, p, t, keys)
		if err != nil {
			return nil, fmt.Errorf("ledger check: read %s: %w", s, err)
		}
		l.mu.Lock()
		for _, k := range keys {
			e := l.keys[k]
			g := got[k]
			if g == e.acked || slices.Contains(e.unknown, g) {
				continue
			}
			out = append(out, Mismatch{Key: k, Shard: s, Got: g, Want: e.acked, Unknown: slices.Clone(e.unknown)})
		}
		l.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// WriterOptions configure Write.
type WriterOptions struct {
	Table   Table
	Keys    []int64
	Workers int // default 4; worker i writes keys i, i+Workers, ...
	// DeleteEvery: one write in DeleteEvery is a delete (default 10; <0 never).
	DeleteEvery int
	// Pause between two writes of one worker (default 1ms).
	Pause time.Duration
	// Interval, when set, starts a worker's writes Interval apart instead
	// (Pause is not used): a fixed rate, as an application's demand comes,
	// where a Pause after each write makes the rate fall as the writes
	// slow. A write that outlasts its interval delays the next ones, which
	// then start one after the other until the schedule is caught up.
	Interval time.Duration
	Seed     uint64
	// Prefix starts every value written, so that writers started again on
	// the same ledger write values none wrote before.
	Prefix string
	// OnWrite, if set, hears of every write attempted, acknowledged or
	// not, with when it was sent and when its outcome came back (a failed
	// write may have committed): a test counts the keys written in a
	// window with it. Called from the writers' goroutines.
	OnWrite func(k int64, sent, done time.Time)
}

// Stats count the writers' outcomes.
type Stats struct {
	Acked, Failed atomic.Int64
	// FenceErrors counts writes that failed with the fence error even after
	// the router's retries (the router retries them first).
	FenceErrors atomic.Int64
	LastErr     atomic.Pointer[error]
	wg          sync.WaitGroup

	mu     sync.Mutex
	byCode map[string]int64  // failed writes by SQLSTATE; "" for an error without one
	sample map[string]string // the first failure of each SQLSTATE
}

// FailureSamples returns the first failed write's error of each SQLSTATE,
// one "code: error" line each, in FailedByCode's order.
func (s *Stats) FailureSamples() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.codesLocked() {
		out = append(out, codeName(c)+": "+s.sample[c])
	}
	return out
}

// FailedByCode returns the failed writes counted by SQLSTATE, e.g.
// "57P01=12 08006=3 none=2" ("none": no server error, such as a refused
// connection), most frequent first.
func (s *Stats) FailedByCode() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, c := range s.codesLocked() {
		parts = append(parts, fmt.Sprintf("%s=%d", codeName(c), s.byCode[c]))
	}
	return strings.Join(parts, " ")
}

// codesLocked returns the SQLSTATEs of the failed writes, most frequent
// first, then by code; s.mu is held.
func (s *Stats) codesLocked() []string {
	codes := make([]string, 0, len(s.byCode))
	for c := range s.byCode {
		codes = append(codes, c)
	}
	sort.Slice(codes, func(i, j int) bool {
		if s.byCode[codes[i]] != s.byCode[codes[j]] {
			return s.byCode[codes[i]] > s.byCode[codes[j]]
		}
		return codes[i] < codes[j]
	})
	return codes
}

// codeName is how FailedByCode names a SQLSTATE: "none" for no code.
func codeName(code string) string {
	if code == "" {
		return "none"
	}
	return code
}

func (s *Stats) countFailure(err error) {
	var code string
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
		code = pgErr.Code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCode == nil {
		s.byCode, s.sample = make(map[string]int64), make(map[string]string)
	}
	if s.byCode[code] == 0 {
		s.sample[code] = err.Error()
	}
	s.byCode[code]++
}

// Wait returns once every writer has stopped (after ctx ended).
func (s *Stats) Wait() { s.wg.Wait() }

// Write starts writers through the router; they run until ctx ends (then
// call Stats.Wait). Each write is one
// statement (its own transaction), so a fence error rolls it back and the
// router may retry it on the new owner.
func Write(ctx context.Context, r *router.Router, l *Ledger, o WriterOptions) *Stats {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.DeleteEvery == 0 {
		o.DeleteEvery = 10
	}
	if o.Pause == 0 {
		o.Pause = time.Millisecond
	}
	st := &Stats{}
	for w := 0; w < o.Workers; w++ {
		var mine []int64
		for i := w; i < len(o.Keys); i += o.Workers {
			mine = append(mine, o.Keys[i])
		}
		if len(mine) == 0 {
			continue
		}
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			writer(ctx, r, l, o, w, mine, st)
		}()
	}
	return st
}

func writer(ctx context.Context, r *router.Router, l *Ledger, o WriterOptions, w int, keys []int64, st *Stats) {
	rnd := rand.New(rand.NewPCG(o.Seed, uint64(w)))
	upsert := "INSERT INTO " + o.Table.ident() + " (" + pgx.Identifier{o.Table.Key}.Sanitize() + ", " + pgx.Identifier{o.Table.Val}.Sanitize() +
		") VALUES ($1, $2) ON CONFLICT (" + pgx.Identifier{o.Table.Key}.Sanitize() + ") DO UPDATE SET " + pgx.Identifier{o.Table.Val}.Sanitize() + " = EXCLUDED." + pgx.Identifier{o.Table.Val}.Sanitize()
	del := "DELETE FROM " + o.Table.ident() + " WHERE " + pgx.Identifier{o.Table.Key}.Sanitize() + " = $1"
	next := time.Now()
	for seq := 0; ctx.Err() == nil; seq++ {
		k := keys[rnd.IntN(len(keys))]
		v := Value{V: fmt.Sprintf("%sw%d-%d", o.Prefix, w, seq)}
		if o.DeleteEvery > 0 && rnd.IntN(o.DeleteEvery) == 0 {
			v = Value{Deleted: true}
		}
		sent := time.Now()
		err := r.Do(ctx, k, func(ctx context.Context, p *pgxpool.Pool) error {
			var err error
			if v.Deleted {
				_, err = p.Exec(ctx, del, k)
			} else {
				_, err = p.Exec(ctx, upsert, k, v.V)
			}
			return err
		})
		if o.OnWrite != nil {
			o.OnWrite(k, sent, time.Now())
		}
		switch {
		case err == nil:
			l.Ack(k, v)
			st.Acked.Add(1)
		default:
			// A cancelled context may still have committed the write.
			l.Unknown(k, v)
			if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
				st.Failed.Add(1)
				st.countFailure(err)
				if router.IsFenceError(err) {
					st.FenceErrors.Add(1)
				}
				st.LastErr.Store(&err)
			}
		}
		wait := o.Pause
		if o.Interval > 0 {
			next = next.Add(o.Interval)
			wait = time.Until(next)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}
