package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/ring"
)

// ShardState is a shard's place in the cluster's life cycle.
type ShardState string

const (
	ShardJoining ShardState = "joining" // a move target that owns nothing stable yet
	ShardActive  ShardState = "active"  // owns ranges nothing moves away from it all
	ShardLeaving ShardState = "leaving" // every range it owns is being moved away
	ShardRemoved ShardState = "removed" // owns nothing and no move names it (never joined, or gone)
)

// shardTransitions is the one table of allowed shard state changes.
var shardTransitions = map[ShardState][]ShardState{
	ShardJoining: {ShardActive, ShardRemoved}, // joined; or the add was rolled back
	ShardActive:  {ShardLeaving},              // a remove starts
	ShardLeaving: {ShardActive, ShardRemoved}, // a remove rolled back; or done
	ShardRemoved: {ShardJoining},              // added again
}

// StateIn is a shard's state in one topology version, derived from it alone
// (the one function that says it; the registry's column is a copy of it for
// the current version):
//   - joining: a migrating range moves to it, and it owns nothing else;
//   - leaving: a migrating range moves away from it, and it owns nothing
//     else;
//   - active: it owns ranges nothing moves away from it;
//   - removed: it owns nothing and no migrating range names it.
func StateIn(t Topology, shard string) ShardState {
	var from, to []ring.Range
	for _, m := range t.Migrating() {
		switch shard {
		case m.From:
			from = append(from, m.Range)
		case m.To:
			to = append(to, m.Range)
		}
	}
	stable := false
	for _, r := range t.Ring.Ranges(shard) {
		for _, piece := range ring.Subtract(r, append(from, to...)) {
			if piece.Valid() {
				stable = true
			}
		}
	}
	switch {
	case stable:
		return ShardActive
	case len(to) > 0:
		return ShardJoining
	case len(from) > 0:
		return ShardLeaving
	}
	return ShardRemoved
}

// CanTransition reports whether a shard may go from one state to another.
func CanTransition(from, to ShardState) bool {
	return slices.Contains(shardTransitions[from], to)
}

// ParseShardState reads "active", "joining" or "leaving".
func ParseShardState(s string) (ShardState, error) {
	switch st := ShardState(s); st {
	case ShardActive, ShardJoining, ShardLeaving, ShardRemoved:
		return st, nil
	}
	return "", fmt.Errorf("shard state %q: want active, joining, leaving or removed", s)
}

// ConnRef says where a shard is and as whom to connect, never with which
// password: that comes from the connecting process's environment (PGPASSWORD,
// a passfile, a secret store).
type ConnRef struct {
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Database string `json:"dbname"`
	User     string `json:"user"`
}

// ParseConnRef takes the connection reference out of a DSN (URL or
// keyword/value form), dropping any password in it.
func ParseConnRef(dsn string) (ConnRef, error) {
	cfg, err := pgsession.ParseConfig(dsn)
	if err != nil {
		// pgconn's error may quote the DSN; do not let a password through.
		return ConnRef{}, errors.New("parse shard connection string: invalid DSN (want postgres://user@host:port/db or host=... port=... dbname=... user=...)")
	}
	return ConnRef{Host: cfg.Host, Port: cfg.Port, Database: cfg.Database, User: cfg.User}, nil
}

// DSN renders the reference in keyword/value form, without a password.
func (c ConnRef) DSN() string {
	q := func(v string) string {
		return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `'`, `\'`) + "'"
	}
	return "host=" + q(c.Host) + " port=" + strconv.Itoa(int(c.Port)) + " dbname=" + q(c.Database) + " user=" + q(c.User)
}

func (c ConnRef) String() string {
	return c.User + "@" + c.Host + ":" + strconv.Itoa(int(c.Port)) + "/" + c.Database
}

// Shard is one registered shard.
type Shard struct {
	Name          string     `json:"name"`
	Conn          ConnRef    `json:"conn"`
	FailureDomain string     `json:"failure_domain,omitempty"`
	Weight        float64    `json:"weight"`
	State         ShardState `json:"state"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// RegisterShard adds a shard. Registering the same shard again with the same
// settings is a no-op (so a retried step is harmless); with different
// settings it is an error naming them. A zero Weight means 1.
func (s *Store) RegisterShard(ctx context.Context, sh Shard) error {
	if sh.Name == "" {
		return errors.New("register shard: a name is required")
	}
	if sh.Weight == 0 {
		sh.Weight = 1
	}
	if sh.Weight < 0 {
		return fmt.Errorf("register shard %s: weight %g must be positive", sh.Name, sh.Weight)
	}
	if _, err := ParseShardState(string(sh.State)); err != nil {
		return fmt.Errorf("register shard %s: %w", sh.Name, err)
	}
	if sh.Conn.Host == "" || sh.Conn.Port == 0 || sh.Conn.Database == "" || sh.Conn.User == "" {
		return fmt.Errorf("register shard %s: the connection reference needs host, port, dbname and user (have %s)", sh.Name, sh.Conn)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO reshard.shards (name, host, port, dbname, username, failure_domain, weight, state)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING`,
		sh.Name, sh.Conn.Host, int32(sh.Conn.Port), sh.Conn.Database, sh.Conn.User, sh.FailureDomain, sh.Weight, string(sh.State))
	if err != nil {
		return fmt.Errorf("register shard %s: %w", sh.Name, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	have, err := s.Shard(ctx, sh.Name)
	if err != nil {
		return fmt.Errorf("register shard %s: %w", sh.Name, err)
	}
	if have.Conn != sh.Conn || have.FailureDomain != sh.FailureDomain || have.Weight != sh.Weight || have.State != sh.State {
		return fmt.Errorf("register shard %s: already registered as %s (domain %q, weight %g, %s); pick another name or change it explicitly",
			sh.Name, have.Conn, have.FailureDomain, have.Weight, have.State)
	}
	return nil
}

const selectShard = `SELECT name, host, port, dbname, username, failure_domain, weight, state, created_at, updated_at FROM reshard.shards`

func scanShard(r pgx.CollectableRow) (Shard, error) {
	var (
		sh    Shard
		port  int32
		state string
	)
	err := r.Scan(&sh.Name, &sh.Conn.Host, &port, &sh.Conn.Database, &sh.Conn.User, &sh.FailureDomain, &sh.Weight, &state, &sh.CreatedAt, &sh.UpdatedAt)
	sh.Conn.Port = uint16(port)
	sh.State = ShardState(state)
	return sh, err
}

// Shard returns one registered shard.
func (s *Store) Shard(ctx context.Context, name string) (Shard, error) {
	rows, err := s.pool.Query(ctx, selectShard+` WHERE name = $1`, name)
	if err != nil {
		return Shard{}, fmt.Errorf("shard %s: %w", name, err)
	}
	sh, err := pgx.CollectExactlyOneRow(rows, scanShard)
	if errors.Is(err, pgx.ErrNoRows) {
		return Shard{}, fmt.Errorf("shard %s is not registered", name)
	}
	if err != nil {
		return Shard{}, fmt.Errorf("shard %s: %w", name, err)
	}
	return sh, nil
}

// Shards returns every registered shard, by name.
func (s *Store) Shards(ctx context.Context) ([]Shard, error) {
	rows, err := s.pool.Query(ctx, selectShard+` ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list shards: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanShard)
	if err != nil {
		return nil, fmt.Errorf("list shards: %w", err)
	}
	return out, nil
}

// SetShardState moves a shard to another state along the transition table
// (CanTransition). Setting the state it already has is a no-op.
func (s *Store) SetShardState(ctx context.Context, name string, to ShardState) error {
	if _, err := ParseShardState(string(to)); err != nil {
		return fmt.Errorf("set state of shard %s: %w", name, err)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var from string
		err := tx.QueryRow(ctx, `SELECT state FROM reshard.shards WHERE name = $1 FOR UPDATE`, name).Scan(&from)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("set state of shard %s: not registered", name)
		}
		if err != nil {
			return fmt.Errorf("set state of shard %s: %w", name, err)
		}
		if ShardState(from) == to {
			return nil
		}
		if !CanTransition(ShardState(from), to) {
			return fmt.Errorf("set state of shard %s: %s -> %s is not allowed (allowed from %s: %v)", name, from, to, from, shardTransitions[ShardState(from)])
		}
		if _, err := tx.Exec(ctx, `UPDATE reshard.shards SET state = $2, updated_at = now() WHERE name = $1`, name, string(to)); err != nil {
			return fmt.Errorf("set state of shard %s: %w", name, err)
		}
		return nil
	})
}

// SyncShardStates sets the registry's state of every registered shard to
// its state in the current versions of every keyspace (StateIn; a shard
// serving one keyspace and leaving another is active: the most alive state
// wins).
func (s *Store) SyncShardStates(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT keyspace FROM reshard.topology_versions ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("sync shard states: %w", err)
	}
	keyspaces, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("sync shard states: %w", err)
	}
	var tops []Topology
	for _, ks := range keyspaces {
		t, err := s.In(ks).Current(ctx)
		if err != nil {
			return fmt.Errorf("sync shard states: %w", err)
		}
		tops = append(tops, t)
	}
	shards, err := s.Shards(ctx)
	if err != nil {
		return err
	}
	rank := map[ShardState]int{ShardRemoved: 0, ShardLeaving: 1, ShardJoining: 2, ShardActive: 3}
	for _, sh := range shards {
		want := ShardRemoved
		for _, t := range tops {
			if st := StateIn(t, sh.Name); rank[st] > rank[want] {
				want = st
			}
		}
		if sh.State == want {
			continue
		}
		if _, err := s.pool.Exec(ctx, `UPDATE reshard.shards SET state = $2, updated_at = now() WHERE name = $1`, sh.Name, string(want)); err != nil {
			return fmt.Errorf("set state of shard %s to %s: %w", sh.Name, want, err)
		}
	}
	return nil
}

// ShardRow is a shard as a topology version shows it: its registration,
// its state in that version, its vnodes and its share of the token space.
type ShardRow struct {
	Shard
	VNodes int     `json:"vnodes"`
	Space  float64 `json:"space"`
}

// ShardRows joins t's ring with the registry reg: every shard of the ring,
// then registered shards the ring gives nothing (joining, or gone), each
// with its state in t (StateIn), not today's.
func ShardRows(t Topology, reg []Shard) []ShardRow {
	vn := map[string]int{}
	for _, v := range t.Ring.VNodes() {
		vn[v.Shard]++
	}
	share := t.Ring.Share()
	byName := map[string]Shard{}
	for _, s := range reg {
		byName[s.Name] = s
	}
	var out []ShardRow
	for _, name := range t.Ring.Shards() {
		s, ok := byName[name]
		if !ok {
			s = Shard{Name: name}
		}
		s.State = StateIn(t, name)
		out = append(out, ShardRow{Shard: s, VNodes: vn[name], Space: share[name]})
	}
	for _, s := range reg {
		if !t.Ring.HasShard(s.Name) {
			s.State = StateIn(t, s.Name)
			out = append(out, ShardRow{Shard: s})
		}
	}
	return out
}
