package cdc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// tablePlan is one table's statements on the target. Every one carries the
// moving-range predicate on the target row (alias t), so the applier can
// never touch a row the target owns (DESIGN.md §4.4).
type tablePlan struct {
	// base is the table as the target has it (all its columns); t is base
	// with the columns the source's last Relation message did not send left
	// out (see runner.rebind).
	base   tableset.Table
	n      int // numbers the staging table
	ranges []ring.Range
	t      tableset.Table
	kt     ring.KeyType
	cols   []tableset.Column // written columns, in target attribute order
	byName map[string]int
	pk     []int // indexes into cols
	key    int   // index of the shard key in cols
	pred   string

	upsertSQL    string // $1..$n text[] of every column
	deleteSQL    string // $1..$k text[] of the primary key
	collisionSQL string // same parameters as deleteSQL
	fetchSQL     string // on the source: $1..$k text of the primary key; the snapshot, found, the columns
	pkWhere      []string

	stage     stageSQL // the staged path (stage.go)
	updatable bool     // some column is outside the primary key
}

func cast(v string, c tableset.Column) string { return v + "::" + c.Type }

// newTablePlan prepares table t's statements; n numbers its staging table.
func newTablePlan(t tableset.Table, ranges []ring.Range, n int) (*tablePlan, error) {
	p := &tablePlan{base: t, n: n, ranges: ranges, t: t, kt: t.KeyType, cols: t.WritableColumns(), byName: map[string]int{}, key: -1}
	for i, c := range p.cols {
		p.byName[c.Name] = i
	}
	for _, name := range t.PK {
		i, ok := p.byName[name]
		if !ok {
			return nil, fmt.Errorf("table %s: primary-key column %s is generated: reshard cannot apply changes to it", t, name)
		}
		p.pk = append(p.pk, i)
	}
	if len(p.pk) == 0 {
		return nil, fmt.Errorf("table %s has no primary key: reshard needs one to apply changes", t)
	}
	var ok bool
	if p.key, ok = p.byName[t.KeyColumn]; !ok {
		return nil, fmt.Errorf("table %s: shard key %s is missing or generated", t, t.KeyColumn)
	}
	// UPDATE and DELETE messages identify the old row by the replica
	// identity; the applier finds the target row by primary key, so the
	// identity must contain it (default and FULL do).
	for _, name := range t.PK {
		if t.ReplicaIdentity != "f" && !slices.Contains(t.IdentityColumns, name) {
			return nil, fmt.Errorf("table %s: replica identity (%s) does not contain primary-key column %s: use REPLICA IDENTITY DEFAULT or FULL", t, strings.Join(t.IdentityColumns, ", "), name)
		}
	}
	p.pred = ring.Predicate(t.TokenSQL("t"), ranges)
	p.buildSQL()
	p.buildStageSQL(n)
	return p, nil
}

func (p *tablePlan) buildSQL() {
	tq := p.t.Quoted() + " AS t"
	var names, sel, arrs, us, set []string
	for i, c := range p.cols {
		q := pgx.Identifier{c.Name}.Sanitize()
		u := "v" + strconv.Itoa(i)
		names = append(names, q)
		sel = append(sel, cast("u."+u, c))
		arrs = append(arrs, "$"+strconv.Itoa(i+1)+"::text[]")
		us = append(us, u)
		if !slices.Contains(p.pk, i) {
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	var pkNames, pkJoin, pkArrs, pkUs, pkText, pkWhere []string
	for j, i := range p.pk {
		c := p.cols[i]
		q := pgx.Identifier{c.Name}.Sanitize()
		u := "k" + strconv.Itoa(j)
		pkNames = append(pkNames, q)
		pkJoin = append(pkJoin, "t."+q+" = "+cast("u."+u, c))
		pkArrs = append(pkArrs, "$"+strconv.Itoa(j+1)+"::text[]")
		pkUs = append(pkUs, u)
		pkText = append(pkText, "t."+q+"::text")
		pkWhere = append(pkWhere, "t."+q+" = "+cast("$"+strconv.Itoa(j+1)+"::text", c))
	}
	if len(set) == 0 { // every column is in the key: a no-op update still reports the row
		set = append(set, pkNames[0]+" = EXCLUDED."+pkNames[0])
	}
	p.upsertSQL = "INSERT INTO " + tq + " (" + strings.Join(names, ", ") + ") OVERRIDING SYSTEM VALUE SELECT " + strings.Join(sel, ", ") +
		" FROM unnest(" + strings.Join(arrs, ", ") + ") AS u(" + strings.Join(us, ", ") + ")" +
		" ON CONFLICT (" + strings.Join(pkNames, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ") + " WHERE " + p.pred
	p.deleteSQL = "DELETE FROM " + tq + " USING unnest(" + strings.Join(pkArrs, ", ") + ") AS u(" + strings.Join(pkUs, ", ") + ")" +
		" WHERE " + strings.Join(pkJoin, " AND ") + " AND " + p.pred
	p.collisionSQL = "SELECT " + strings.Join(pkText, ", ") + " FROM " + tq + " JOIN unnest(" + strings.Join(pkArrs, ", ") + ") AS u(" + strings.Join(pkUs, ", ") + ")" +
		" ON " + strings.Join(pkJoin, " AND ") + " WHERE (" + p.pred + ") IS NOT TRUE LIMIT 1"
	p.pkWhere = pkWhere
	p.buildFetchSQL(nil)
}

// buildFetchSQL builds the source's read of a row; a column in gone (no
// longer on the source: dropped there after the change being applied was
// written) reads as NULL.
func (p *tablePlan) buildFetchSQL(gone map[string]bool) {
	// One statement, so one snapshot: the snapshot it reports is the one its
	// read of the row used (see runner.fetch).
	all := []string{"pg_current_snapshot()::text", "t." + pgx.Identifier{p.cols[p.pk[0]].Name}.Sanitize() + " IS NOT NULL"}
	for _, c := range p.cols {
		if gone[c.Name] {
			all = append(all, "NULL::text")
			continue
		}
		all = append(all, "t."+pgx.Identifier{c.Name}.Sanitize()+"::text")
	}
	p.fetchSQL = "SELECT " + strings.Join(all, ", ") + " FROM (VALUES (1)) AS one LEFT JOIN " + p.t.Quoted() + " AS t ON " + strings.Join(p.pkWhere, " AND ")
}

// partialUpdateSQL sets only the sent columns of the row whose primary key
// is $1..$k (unchanged TOAST columns are not sent and must not be touched).
func (p *tablePlan) partialUpdateSQL(row []Col) string {
	var set, where []string
	n := len(p.pk)
	for i, c := range p.cols {
		if row[i].Kind == ColUnchanged {
			continue
		}
		n++
		set = append(set, pgx.Identifier{c.Name}.Sanitize()+" = "+cast("$"+strconv.Itoa(n)+"::text", c))
	}
	for j, i := range p.pk {
		c := p.cols[i]
		where = append(where, "t."+pgx.Identifier{c.Name}.Sanitize()+" = "+cast("$"+strconv.Itoa(j+1)+"::text", c))
	}
	return "UPDATE " + p.t.Quoted() + " AS t SET " + strings.Join(set, ", ") + " WHERE " + strings.Join(where, " AND ") + " AND " + p.pred
}

// binding maps one Relation message's columns onto a table plan.
type binding struct {
	rel  *Relation
	plan *tablePlan
	cols []int // relation column i -> plan column
	// same: cols is i -> i (the source's column order is the target's)
	same bool
}

// bind checks a Relation message against the plan's shape: a difference
// means DDL happened on the source or the target during the move (the
// applier then reshapes the plan, see runner.rebind).
func bind(rel *Relation, p *tablePlan) (*binding, *SchemaChangeError) {
	b, e := bindLoose(rel, p)
	if e != nil {
		return nil, e
	}
	return b, nil
}

// bindLoose maps the Relation's columns onto the plan by name and reports
// every difference; the binding is usable when only types differ.
func bindLoose(rel *Relation, p *tablePlan) (*binding, *SchemaChangeError) {
	b := &binding{rel: rel, plan: p, cols: make([]int, len(rel.Columns))}
	e := &SchemaChangeError{Table: p.t.String()}
	seen := make([]bool, len(p.cols))
	for i, rc := range rel.Columns {
		j, ok := p.byName[rc.Name]
		if !ok {
			b.cols[i] = -1 // not written (see runner.rebind)
			e.OnlySource = append(e.OnlySource, rc.Name)
			continue
		}
		b.cols[i] = j
		seen[j] = true
		// Built-in types have the same OID everywhere; user types do not.
		if tc := p.cols[j]; rc.TypeOID < 16384 && tc.TypeOID < 16384 && rc.TypeOID != tc.TypeOID {
			e.TypeChanged = append(e.TypeChanged, fmt.Sprintf("%s: source type oid %d, target %s (oid %d)", rc.Name, rc.TypeOID, tc.Type, tc.TypeOID))
		}
	}
	for j, ok := range seen {
		if !ok {
			e.OnlyTarget = append(e.OnlyTarget, p.cols[j].Name)
		}
	}
	b.same = len(rel.Columns) == len(p.cols)
	for i, j := range b.cols {
		b.same = b.same && i == j
	}
	if len(e.OnlySource)+len(e.OnlyTarget)+len(e.TypeChanged) > 0 {
		return b, e
	}
	return b, nil
}

// row maps a tuple to plan column order. In a key-only old tuple (kind 'K')
// the columns outside the replica identity come as NULL placeholders: they
// are marked unknown (ColUnchanged), never taken for real NULLs.
func (b *binding) row(t Tuple, kind byte) []Col {
	if t == nil {
		return nil
	}
	if b.same && kind != 'K' {
		return t // the decoder's tuple, used once
	}
	r := make([]Col, len(b.plan.cols))
	for i := range r {
		r[i] = Col{Kind: ColUnchanged}
	}
	for i, c := range t {
		if kind == 'K' && !b.rel.Columns[i].Key || b.cols[i] < 0 {
			continue
		}
		r[b.cols[i]] = c
	}
	return r
}

// inRanges computes whether a row's key lies in the moving ranges; known is
// false when the key was not sent.
func (p *tablePlan) inRanges(row []Col, ranges []ring.Range) (in, known bool, err error) {
	if row == nil {
		return false, false, nil
	}
	k := row[p.key]
	switch k.Kind {
	case ColNull: // a NULL key hashes to NULL: in no range
		return false, true, nil
	case ColText:
		tok, err := ring.TokenOf(p.kt, string(k.Data))
		if err != nil {
			return false, false, fmt.Errorf("token of %s.%s: %w", p.t, p.t.KeyColumn, err)
		}
		return ring.ContainsAny(ranges, tok), true, nil
	case ColBinary:
		return false, false, fmt.Errorf("%s: binary pgoutput values are not supported: stream in text mode", p.t)
	}
	return false, false, nil
}

// pkOf returns the row's primary key as text values, or ok=false when a key
// column was not sent.
func (p *tablePlan) pkOf(row []Col) ([]string, bool) {
	if row == nil {
		return nil, false
	}
	out := make([]string, len(p.pk))
	for j, i := range p.pk {
		if row[i].Kind != ColText {
			return nil, false
		}
		out[j] = string(row[i].Data)
	}
	return out, true
}

func hasUnchanged(row []Col) bool {
	for _, c := range row {
		if c.Kind == ColUnchanged {
			return true
		}
	}
	return false
}

// fillUnchanged is row with its unchanged TOAST columns taken from from (an
// earlier image of the key, or its row read from the source).
func fillUnchanged(row, from []Col) []Col {
	out := make([]Col, len(row))
	for i, c := range row {
		if c.Kind == ColUnchanged {
			c = from[i]
		}
		out[i] = c
	}
	return out
}

// onPrimaryKey says whether a unique violation's detail ("Key (id)=(42)
// already exists.") is on the primary key's columns; a violation of another
// unique constraint is a *pgerr.UniqueError (wrapOp), which names the
// constraint, the key and the value. An empty detail (the role may not read
// the columns) is not taken as the primary key: the UniqueError then names
// the constraint, whichever it is.
func (p *tablePlan) onPrimaryKey(detail string) bool {
	asServer := make([]string, len(p.pk)) // quote_identifier's choice, keywords aside
	quoted := make([]string, len(p.pk))
	for j, i := range p.pk {
		n := p.cols[i].Name
		quoted[j] = pgx.Identifier{n}.Sanitize()
		asServer[j] = n
		if !plainIdent.MatchString(n) {
			asServer[j] = quoted[j]
		}
	}
	return strings.HasPrefix(detail, "Key ("+strings.Join(asServer, ", ")+")=(") ||
		strings.HasPrefix(detail, "Key ("+strings.Join(quoted, ", ")+")=(")
}

// plainIdent is an identifier PostgreSQL prints without quotes.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

func (p *tablePlan) describeKey(pk []string) string {
	parts := make([]string, len(pk))
	for j, i := range p.pk {
		parts[j] = p.cols[i].Name + "=" + pk[j]
	}
	return strings.Join(parts, ", ")
}

// pendingOp is the last full-row operation on one primary key in the open
// target transaction: later operations on the same key replace earlier ones,
// which is exact because each is a full-row upsert or a delete (the last
// image wins; a delete after an upsert wins over it).
type pendingOp struct {
	pk     []string
	row    []Col // nil: delete
	upsert bool
	// update: the row comes from a source UPDATE that kept its key, with no
	// other operation on the key pending before it, so the target row is
	// expected to exist and the staged path writes it by UPDATE.
	update bool
	// partial: an update of the key's row that did not send its unchanged
	// TOAST columns (ColUnchanged in row), which only sets the columns
	// sent (partial.go).
	partial bool
	// fetched: values of row were read from the source's current row of
	// the key (runner.fetch), not carried from an image the stream sent.
	// Right for this key, whose later changes the stream replays over them,
	// but the row there may be a later one than the change's (the key
	// moved on and was taken again): never an image to carry over a key
	// change, where nothing later would mend them.
	fetched bool
}

// pendingTable collects a table's full-row operations until they are flushed
// as one set-based DELETE and one set-based upsert.
type pendingTable struct {
	ops   map[string]*pendingOp
	order []string
}

func pkMapKey(pk []string) string { return strings.Join(pk, "\x00") }

// target is the applier's session on the target and its open transaction.
type target struct {
	conn    *pgx.Conn
	tx      pgx.Tx
	plans   []*tablePlan
	pending map[*tablePlan]*pendingTable
	npend   int
	// stageMin: a table's flush of at least this many operations takes the
	// staged path (stage.go), a smaller one the text[] path.
	stageMin int
	// staged: the tables whose stage exists in the open transaction, and
	// the rows it received (a stage is dropped at the commit, and a rollback
	// undoes it).
	staged   map[*tablePlan]int
	copyBuf  copyBuf
	mFlushes [2]prometheus.Counter // array, staged
	fetch    func(ctx context.Context, p *tablePlan, pk []string) ([]Col, bool, error)
	// inflight is the last flush, sent but not yet answered: the target
	// executes it while the stream receives and decodes what follows.
	inflight *inflight
	// written: the rows sent in the open transaction (deletes, updates
	// and upserts, one per key and flush).
	written int
}

// batchRows is the rows the open batch writes: sent, and pending.
func (tg *target) batchRows() int { return tg.written + tg.npend }

// inflight is one flush of one table in pipeline mode: its statements
// (deletes, then updates, then upserts) followed by a Sync.
type inflight struct {
	pl     *pgconn.Pipeline
	plan   *tablePlan
	nDel   int
	nUpd   int // staged path only: rows written by UPDATE
	nUp    int
	pkArgs [][]byte // text[] path: the upserts' primary-key arrays, to name a collision
	staged bool
}

func (tg *target) begin(ctx context.Context) error {
	if tg.tx != nil {
		return nil
	}
	if err := tg.await(ctx); err != nil {
		return err
	}
	tx, err := tg.conn.Begin(ctx)
	if err != nil {
		return wrapOp("begin target transaction", err)
	}
	tg.tx = tx
	return nil
}

func (tg *target) add(p *tablePlan, op *pendingOp) {
	pt := tg.pending[p]
	if pt == nil {
		pt = &pendingTable{ops: map[string]*pendingOp{}}
		tg.pending[p] = pt
	}
	k := pkMapKey(op.pk)
	if prev, ok := pt.ops[k]; !ok {
		pt.order = append(pt.order, k)
		tg.npend++
	} else if !prev.update {
		// After a pending insert or delete of the key, the target row may
		// not exist: upsert it.
		op.update = false
	}
	pt.ops[k] = op
}

// pendingRow is the full row pending for pk in the open batch, if any (the
// image that unchanged TOAST columns of a later change of the key carry
// over), and whether its values were read from the source (pendingOp.fetched).
func (tg *target) pendingRow(p *tablePlan, pk []string) ([]Col, bool) {
	pt := tg.pending[p]
	if pt == nil {
		return nil, false
	}
	if op := pt.ops[pkMapKey(pk)]; op != nil && (op.upsert || op.partial) {
		return op.row, op.fetched
	}
	return nil, false
}

// flush sends every pending operation into the open target transaction;
// the last table's statements may still be executing when it returns (see
// sync).
func (tg *target) flush(ctx context.Context) error {
	for _, p := range tg.plans {
		if err := tg.flushTable(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// sync flushes and waits until the target has executed everything sent.
func (tg *target) sync(ctx context.Context) error {
	if err := tg.flush(ctx); err != nil {
		return err
	}
	return tg.await(ctx)
}

// textArray appends the text form of a text[] value holding vals.
type textArray struct {
	buf []byte
	n   int
}

func (a *textArray) add(v []byte, null bool) {
	if a.n == 0 {
		a.buf = append(a.buf[:0], '{')
	} else {
		a.buf = append(a.buf, ',')
	}
	a.n++
	if null {
		a.buf = append(a.buf, "NULL"...)
		return
	}
	a.buf = append(a.buf, '"')
	for _, c := range v {
		if c == '"' || c == '\\' {
			a.buf = append(a.buf, '\\')
		}
		a.buf = append(a.buf, c)
	}
	a.buf = append(a.buf, '"')
}

func (a *textArray) bytes() []byte {
	if a.n == 0 {
		return []byte("{}")
	}
	return append(a.buf, '}')
}

const textArrayOID = 1009

func textArrayParams(arrs []textArray) (vals [][]byte, oids []uint32) {
	vals = make([][]byte, len(arrs))
	oids = make([]uint32, len(arrs))
	for i := range arrs {
		vals[i] = arrs[i].bytes()
		oids[i] = textArrayOID
	}
	return vals, oids
}

// flushTable sends a table's pending operations as one set-based DELETE and
// one set-based upsert, each parameter a text[] encoded here (no reflection),
// in pipeline mode: it waits for the previous flush's answer, not for this
// one's.
func (tg *target) flushTable(ctx context.Context, p *tablePlan) error {
	pt := tg.pending[p]
	if pt == nil || len(pt.order) == 0 {
		return nil
	}
	if err := tg.flushPartials(ctx, p, pt); err != nil {
		return err
	}
	if len(pt.order) == 0 {
		return nil
	}
	if err := tg.begin(ctx); err != nil {
		return err
	}
	if len(pt.order) >= tg.stageMin {
		tg.mFlushes[1].Inc()
		return tg.flushStaged(ctx, p, pt)
	}
	tg.mFlushes[0].Inc()
	dels := make([]textArray, len(p.pk))
	ups := make([]textArray, len(p.cols))
	nDel, nUp := 0, 0
	for _, k := range pt.order {
		op := pt.ops[k]
		if !op.upsert {
			for j := range p.pk {
				dels[j].add([]byte(op.pk[j]), false)
			}
			nDel++
			continue
		}
		for i, c := range op.row {
			ups[i].add(c.Data, c.Kind != ColText)
		}
		nUp++
	}
	tg.npend -= len(pt.order)
	pt.order = pt.order[:0]
	clear(pt.ops)
	if err := tg.await(ctx); err != nil {
		return err
	}
	pl := tg.conn.PgConn().StartPipeline(ctx)
	// Deletes first: a key that left the ranges frees its unique values
	// before another row takes them.
	if nDel > 0 {
		vals, oids := textArrayParams(dels)
		pl.SendQueryParams(p.deleteSQL, vals, oids, nil, nil)
	}
	f := &inflight{pl: pl, plan: p, nDel: nDel, nUp: nUp}
	if nUp > 0 {
		vals, oids := textArrayParams(ups)
		pl.SendQueryParams(p.upsertSQL, vals, oids, nil, nil)
		for _, i := range p.pk {
			f.pkArgs = append(f.pkArgs, vals[i])
		}
	}
	if err := pl.Sync(); err != nil {
		_ = pl.Close()
		return wrapOp(fmt.Sprintf("send %d deletes and %d upserts to %s", nDel, nUp, p.t), err)
	}
	tg.inflight = f
	tg.written += nDel + nUp
	return nil
}

// await waits for the in-flight flush and checks its outcome.
func (tg *target) await(ctx context.Context) error {
	f := tg.inflight
	if f == nil {
		return nil
	}
	tg.inflight = nil
	result := func(what string, n int) (int64, error) {
		res, err := f.pl.GetResults()
		if err == nil {
			rr, ok := res.(*pgconn.ResultReader)
			if !ok {
				err = fmt.Errorf("unexpected pipeline result %T", res)
			} else {
				var tag pgconn.CommandTag
				tag, err = rr.Close()
				if err == nil {
					return tag.RowsAffected(), nil
				}
			}
		}
		return 0, wrapOp(fmt.Sprintf("apply %d %s to %s", n, what, f.plan.t), err)
	}
	var err error
	collided := false
	missing := 0
	if f.nDel > 0 {
		_, err = result("deletes", f.nDel)
	}
	if err == nil && f.nUpd > 0 {
		var wrote int64
		wrote, err = result("updates", f.nUpd)
		missing = f.nUpd - int(wrote)
	}
	if err == nil && f.nUp > 0 {
		var wrote int64
		wrote, err = result("upserts", f.nUp)
		collided = err == nil && int(wrote) != f.nUp
	}
	if cerr := f.pl.Close(); err == nil && cerr != nil {
		err = wrapOp("apply changes to "+f.plan.t.String(), cerr)
	}
	if err != nil {
		return err
	}
	switch {
	case collided && f.staged:
		return tg.stagedCollision(ctx, f.plan)
	case collided:
		return tg.collision(ctx, f.plan, f.pkArgs)
	case missing > 0:
		return tg.stagedMissing(ctx, f.plan, missing)
	}
	return nil
}

// collision names a key whose upsert found a target row outside the moving
// ranges (the upsert's WHERE left it untouched).
func (tg *target) collision(ctx context.Context, p *tablePlan, pkArgs [][]byte) error {
	oids := make([]uint32, len(pkArgs))
	for i := range oids {
		oids[i] = textArrayOID
	}
	res := tg.conn.PgConn().ExecParams(ctx, p.collisionSQL, pkArgs, oids, nil, nil).Read()
	return collisionFrom(p, res)
}

// partial applies an UPDATE (or a row-filter INSERT) that left unchanged
// TOAST columns out: only the sent columns are set, on the target's row of
// the new primary key (and a changed key's old row is dropped). If that row
// is not on the target (the key just entered the ranges, or the copy has
// not reached it), the unsent values are read from the source's row of the
// new key and the whole row upserted; later changes of that key in the
// stream correct anything newer than this point, so the result converges.
// A changed key's old row on the target is never moved to the new key: it
// may be a later row of the old key than the one the change moved (the
// copy read the old key after it was taken again), whose values nothing
// would mend under the new key.
func (tg *target) partial(ctx context.Context, p *tablePlan, oldPK []string, row []Col) error {
	if err := tg.flushTable(ctx, p); err != nil {
		return err
	}
	if err := tg.await(ctx); err != nil {
		return err
	}
	if err := tg.begin(ctx); err != nil {
		return err
	}
	newPK, ok := p.pkOf(row)
	if !ok {
		return fmt.Errorf("apply update of %s: primary key not sent", p.t)
	}
	moved := pkMapKey(oldPK) != pkMapKey(newPK)
	args := make([]any, 0, len(p.pk)+len(row))
	for _, v := range newPK {
		args = append(args, v)
	}
	for _, c := range row {
		switch c.Kind {
		case ColText:
			args = append(args, string(c.Data))
		case ColNull:
			args = append(args, nil)
		}
	}
	tag, err := tg.tx.Exec(ctx, p.partialUpdateSQL(row), args...)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeUniqueViolation && p.onPrimaryKey(pgErr.Detail) {
			return &CollisionError{Table: p.t.String(), Key: p.describeKey(newPK), Detail: pgErr.Detail}
		}
		return wrapOp("apply update of "+p.t.String()+" (unchanged TOAST columns kept)", err)
	}
	if moved {
		tg.add(p, &pendingOp{pk: oldPK})
	}
	if tag.RowsAffected() == 1 {
		tg.written++
		return nil
	}
	cur, found, err := tg.fetch(ctx, p, newPK)
	if err != nil {
		return err
	}
	if !found {
		return nil // gone on the source since: a later change in the stream deletes or moves it
	}
	tg.add(p, &pendingOp{pk: newPK, row: fillUnchanged(row, cur), upsert: true, fetched: true})
	return nil
}

func (tg *target) rollback(ctx context.Context) {
	if tg.inflight != nil {
		_ = tg.inflight.pl.Close()
		tg.inflight = nil
	}
	if tg.tx != nil {
		_ = tg.tx.Rollback(ctx)
		tg.tx = nil
	}
	for _, pt := range tg.pending {
		pt.order = pt.order[:0]
		clear(pt.ops)
	}
	clear(tg.staged)
	tg.npend = 0
	tg.written = 0
}
