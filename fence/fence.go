package fence

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgddl"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// TruncateSQLState is the SQLSTATE of a TRUNCATE refused during a move.
const TruncateSQLState = pgerr.CodeTruncateRefused

// NullKeySQLState is the SQLSTATE of a write refused because its key is
// NULL (not_null_violation): a row without a token belongs to no shard, and
// unlike RSF01 no router should retry it elsewhere.
const NullKeySQLState = pgerr.CodeNotNullViolation

// schemaSQL creates the fence registry: one row per fenced table, holding the
// fenced token ranges as an int8multirange, the topology version they were
// derived from (column epoch; the fence error says "since topology version"),
// whether TRUNCATE is refused, and the table's fence identity (the name of
// its functions, see Ident). The functions are generated from the
// row; the registry is the record Fenced, Inspect and the next change read.
//
// The guard column came after the first installs, whose TRUNCATE guard was
// a trigger created and dropped per move: adding the column carries their
// state over (a guard trigger calling reshard.refuse_truncate was on).
const schemaSQL = `
CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.fence (
	tbl    regclass PRIMARY KEY,
	ranges int8multirange NOT NULL DEFAULT '{}',
	epoch  bigint NOT NULL DEFAULT 0
);
ALTER TABLE reshard.fence ADD COLUMN IF NOT EXISTS ident text;
CREATE UNIQUE INDEX IF NOT EXISTS fence_ident ON reshard.fence (ident);
DO $d$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'reshard.fence'::regclass AND attname = 'guard' AND NOT attisdropped) THEN
		ALTER TABLE reshard.fence ADD COLUMN guard boolean NOT NULL DEFAULT false;
		UPDATE reshard.fence f SET guard = true WHERE EXISTS (SELECT 1 FROM pg_trigger g
			WHERE g.tgrelid = f.tbl AND g.tgname = 'reshard_no_truncate' AND g.tgfoid = to_regprocedure('reshard.refuse_truncate()'));
	END IF;
END $d$;
`

// lockTimeout bounds how long DDL on an application table (installing its
// triggers, once) waits for its lock before it gives up and retries later:
// while our lock request waits, every later statement on the table queues
// behind it, and then waits for the DDL itself, so the two together must
// stay well under the 50 ms an application would notice (an e2e run with
// 50 ms here saw one statement wait 62 ms).
const lockTimeout = 20 * time.Millisecond

// registryLockTimeout bounds the waits for the registry's rows (fence
// changes serialize on them) and for our own schema's DDL: no application
// statement waits behind those.
const registryLockTimeout = 2 * time.Second

// EnsureSchema creates the fence registry on a shard, or brings an older
// one up to date; idempotent and safe to run concurrently.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	return withLockRetry(ctx, func() error { return pgddl.Apply(ctx, pool, schemaSQL, registryLockTimeout) })
}

// accelFunc is the C trigger function of the optional extension
// reshard_fence (fence/ext/reshard_fence): it tests a row's token against
// the ranges the table's fence function compiles and calls that function
// only for a token it fences, so a row that passes costs no plpgsql call.
const accelFunc = "reshard.fence_accel"

// ensureAccel creates the extension reshard_fence on the shard when the
// server has it (its files installed: make -C fence/ext/reshard_fence
// install) and the role may (it is trusted: CREATE on the database is
// enough), and reports whether the shard has it. Without it the fence runs
// as plpgsql, correct and slower: managed services (RDS, Cloud SQL) cannot
// load it.
func ensureAccel(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var has, avail bool
	q := `SELECT EXISTS (SELECT 1 FROM pg_proc WHERE ` + accelGenuine + `), EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'reshard_fence')`
	if err := pool.QueryRow(ctx, q).Scan(&has, &avail); err != nil {
		return false, fmt.Errorf("look up the fence accelerator: %w", err)
	}
	if has || !avail {
		return has, nil
	}
	// Not allowed (no CREATE on the database) or a concurrent install:
	// either way, what the shard has afterwards is the answer.
	_, _ = pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS reshard_fence SCHEMA reshard")
	if err := pool.QueryRow(ctx, q).Scan(&has, &avail); err != nil {
		return false, fmt.Errorf("look up the fence accelerator: %w", err)
	}
	return has, nil
}

// accelGenuine is the condition on pg_proc of the accelerator: the
// extension's C function, not one replaced by hand (which would fence what
// it likes). A replaced one counts as no accelerator: the row triggers go
// back to the plpgsql functions.
const accelGenuine = `oid = to_regprocedure('` + accelFunc + `()') AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
	AND prosrc = 'reshard_fence_accel' AND probin = '$libdir/reshard_fence'`

// accelArgs are the arguments of an accelerated fence trigger of t: its
// fence identity (the functions the accelerator reads and calls), key
// column and key type.
func accelArgs(t tableset.Table) []string {
	kt := string(t.KeyType)
	if kt == "" {
		kt = string(ring.KeyInt)
	}
	return []string{Ident(t), t.KeyColumn, kt}
}

// accelCall is the EXECUTE FUNCTION clause of t's accelerated triggers.
func accelCall(t tableset.Table) string {
	a := accelArgs(t)
	for i := range a {
		a[i] = quoteLiteral(a[i])
	}
	return accelFunc + "(" + strings.Join(a, ", ") + ")"
}

// tgargs is pg_trigger.tgargs of a trigger with arguments args.
func tgargs(args []string) []byte {
	var b []byte
	for _, a := range args {
		b = append(append(b, a...), 0)
	}
	return b
}

// Ident is the fence identity of a table: the name of its fence function
// (and, with the suffix _truncate, of its TRUNCATE guard) in the schema
// reshard. It is a hash of the table's quoted schema-qualified name, so two
// tables never share it the way a truncated "<schema>_<table>" did (63
// bytes, and public.a_b vs public_a.b), and it is the same on every shard
// and after a dump and restore or a schema sync (an OID is neither). The
// registry's unique index on ident refuses the one collision a hash leaves
// possible.
func Ident(t tableset.Table) string {
	sum := sha256.Sum256([]byte(t.Quoted()))
	return "fence_" + hex.EncodeToString(sum[:8])
}

// triggerFunc is the fence function of a table: the key column and the
// table's fenced ranges are compiled in, so the trigger does no dynamic SQL
// and reads no table.
func triggerFunc(t tableset.Table) pgx.Identifier { return pgx.Identifier{"reshard", Ident(t)} }

// deleteFunc is the fence function of a table's DELETE trigger: a
// function per event, so that neither asks which event fired it (one
// plpgsql expression less per row, and none at all for an empty fence).
func deleteFunc(t tableset.Table) pgx.Identifier {
	return pgx.Identifier{"reshard", Ident(t) + "_delete"}
}

// guardFunc is the TRUNCATE guard's function of a table: on or off compiled
// in, so the guard trigger is installed once and a move turns it on and off
// without DDL on the table.
func guardFunc(t tableset.Table) pgx.Identifier {
	return pgx.Identifier{"reshard", Ident(t) + "_truncate"}
}

// legacyFunc is the fence function of a table as installs before Ident
// named it (cut at 63 bytes by the server); the upgrade drops it once no
// trigger calls it.
func legacyFunc(t tableset.Table) pgx.Identifier {
	return pgx.Identifier{"reshard", "fence_" + t.Schema + "_" + t.Name}
}

// keyNullable reports whether the table's key column may hold NULL: the
// fence function then refuses a NULL key itself (with NOT NULL, the
// constraint does).
func keyNullable(t tableset.Table) bool {
	for _, c := range t.Columns {
		if c.Name == t.KeyColumn {
			return !c.NotNull
		}
	}
	return true
}

// compiled is what a table's generated functions hold: its registry row.
type compiled struct {
	ranges string // int8multirange text, '{}' when nothing is fenced
	epoch  int64
	guard  bool
}

// fenceRaise is the refusal of a write whose token tok lies in the fenced
// ranges fenced (a multirange expression), fenced since topology version
// version (the registry's epoch column: the version the shard's fence was
// last derived from; a fence changes only when the shard's ranges do, so it
// may be older than the current version). The range is printed as the CLI
// and docs/contract.md print ranges, (lo,hi] as ring.Range.String does
// ([MinToken,hi] from MinToken), not as int8range's canonical [lo+1,hi+1)
// or, unbounded, "(,)".
func fenceRaise(fenced, version string) string {
	return `RAISE EXCEPTION 'reshard fence: % on %.% refused: token % lies in range %, fenced on this shard since topology version %', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, tok,
				(SELECT CASE WHEN lower_inf(x) THEN '[` + strconv.FormatInt(ring.MinToken, 10) + `' ELSE '(' || (lower(x) - 1) END
					|| ',' || CASE WHEN upper_inf(x) THEN '` + strconv.FormatInt(ring.MaxToken, 10) + `' ELSE (upper(x) - 1)::text END || ']'
				FROM unnest(` + fenced + `) x WHERE x @> tok), ` + version + `
				USING ERRCODE = '` + pgerr.CodeFenced + `', HINT = 'this shard no longer owns the range (or does not own it yet): refresh the topology and retry on the owner';`
}

// nullRaise is the refusal of a write of a NULL key.
func nullRaise(t tableset.Table) string {
	return `RAISE EXCEPTION 'reshard fence: % on %.% refused: key column % is NULL, and a row without a token belongs to no shard', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, ` + quoteLiteral(t.KeyColumn) + `
			USING ERRCODE = '` + NullKeySQLState + `', COLUMN = ` + quoteLiteral(t.KeyColumn) + `, HINT = 'give the row a key (and make the column NOT NULL)';`
}

// generatedBy is the head comment of a generated function, naming the table
// (quoted by Go: a table name holds any character but cannot end the comment).
func generatedBy(t tableset.Table, what string) string {
	return "-- Generated by reshard for " + strings.ReplaceAll(strconv.Quote(t.String()), "$", "") + " from its row of reshard.fence (" + what + ");\n-- replaced whenever the fence changes: do not edit.\n"
}

// fenceBody is the body of the fence function of t compiling c.
//
// The ranges are compiled into the function as a constant instead of being
// read from reshard.fence on every row: that read (an SPI query, a snapshot,
// an index probe) cost a fifth to a third of a CPU-bound single-row update.
// And the test is not in a WHEN clause: PostgreSQL 15 reads a trigger's
// WHEN back from its node text (stringToNode, the multirange constant
// byte by byte) and plans it (ExecPrepareQual) once per statement, so with
// one row per statement it costs more than it saves. Measured on a scratch
// server, a backend's CPU per single-row UPDATE over no trigger (12.8 µs),
// 50,000 updates a run, median of 7 alternated rounds at load 20-45 (spread
// ±3 µs): WHEN with the 16 fenced ranges of a shard of a 4-shard ring
// +13.6 µs against +5.8 µs for this function; with one range +6.2 against
// +3.2 µs; WHEN (false) +2.6 µs, about what any BEFORE ROW UPDATE trigger
// costs (it locks the row first). What does beat the call is not calling plpgsql for a row that
// passes: the C accelerator (see accelFunc), which reads the ranges from
// this function's head comment and calls it only to refuse. reshard.fence
// stays the record; every change to it
// replaces the function in the same transaction (compileTx), serialized by
// the registry row's lock. Replacing a function takes no lock on the
// application's table.
//
// When does a session use the new body? plpgsql checks on every call that
// its compiled function still matches the pg_proc row (xmin and ctid) found
// through the catalog cache, and recompiles when it does not. The catalog
// cache is brought up to date with committed catalog changes when a backend
// processes invalidation messages, which the fence transaction sends at its
// commit, before its client sees the commit. A backend processes them at the
// start of every transaction, when it parses a statement that opens a table,
// and when it acquires a table lock it did not hold yet in its transaction.
// So after the fence commits, a write uses the new body unless it is
// executed from an already prepared statement in a transaction that has held
// ROW EXCLUSIVE on the table since before the fence (an earlier write or a
// write matching no row, in the same transaction). Such a transaction is
// waited for by the cutover: it has an xid or a snapshot older than the
// fence horizon, or, READ COMMITTED with no xid, it holds that lock (see
// HorizonNow). A REPEATABLE READ transaction that only read the table
// before the fence is now refused when it writes a fenced key (it must take
// ROW EXCLUSIVE, so it sees the new body): stricter than a table read under
// its old snapshot, which let it pass.
func fenceBody(t tableset.Table, c compiled) string {
	head := generatedBy(t, "fenced token ranges "+strings.ReplaceAll(c.ranges, "$", "")+" since topology version "+strconv.FormatInt(c.epoch, 10))
	key := "new." + pgx.Identifier{t.KeyColumn}.Sanitize()
	if c.ranges == "{}" {
		// No fenced range: return at once (RETURN NEW/OLD of the
		// unchanged row is plpgsql's cheapest path: no tuple copy).
		nullCheck := ""
		if keyNullable(t) {
			nullCheck = `
	IF ` + key + ` IS NULL THEN
		` + nullRaise(t) + `
	END IF;`
		}
		return head + `BEGIN` + nullCheck + `
	RETURN NEW;
END `
	}
	// plpgsql's NEW and OLD are lower-case names once quoted.
	tokNew := ring.TokenSQL(t.KeyType, "new", t.KeyColumn)
	tokOld := ring.TokenSQL(t.KeyType, "old", t.KeyColumn)
	fenced := quoteLiteral(c.ranges) + "::int8multirange"
	// Each plpgsql expression costs a setup per transaction, so with one
	// write per transaction what counts is how many expressions a call
	// evaluates, not how many tokens: one. It tests both keys (OLD is null
	// for an INSERT: a null token is in no range; an UPDATE keeping its key
	// hashes it twice, cheaper than a test whether it changed), by a binary
	// search in the constant multirange; with a nullable key, a NULL new key
	// (the test is not false) takes the slow path too.
	test := tokNew + ` <@ ` + fenced
	nullCheck := ""
	if keyNullable(t) {
		test = `(` + tokNew + ` <@ ` + fenced + `) IS NOT FALSE`
		nullCheck = `
		IF ` + key + ` IS NULL THEN
			` + nullRaise(t) + `
		END IF;`
	}
	return head + `DECLARE
	tok bigint;
BEGIN
	IF ` + test + ` OR ` + tokOld + ` <@ ` + fenced + ` THEN` + nullCheck + `
		tok := CASE WHEN ` + tokNew + ` <@ ` + fenced + ` THEN ` + tokNew + ` ELSE ` + tokOld + ` END;
		` + fenceRaise(fenced, strconv.FormatInt(c.epoch, 10)) + `
	END IF;
	RETURN NEW;
END `
}

// deleteBody is the body of the DELETE trigger's fence function of t
// compiling c (see fenceBody).
func deleteBody(t tableset.Table, c compiled) string {
	head := generatedBy(t, "fenced token ranges "+strings.ReplaceAll(c.ranges, "$", "")+" since topology version "+strconv.FormatInt(c.epoch, 10))
	if c.ranges == "{}" {
		return head + `BEGIN
	RETURN OLD;
END `
	}
	tokOld := ring.TokenSQL(t.KeyType, "old", t.KeyColumn)
	fenced := quoteLiteral(c.ranges) + "::int8multirange"
	return head + `DECLARE
	tok bigint;
BEGIN
	IF ` + tokOld + ` <@ ` + fenced + ` THEN
		tok := ` + tokOld + `;
		` + fenceRaise(fenced, strconv.FormatInt(c.epoch, 10)) + `
	END IF;
	RETURN OLD;
END `
}

// guardBody is the body of the TRUNCATE guard's function of t compiling c.
// TRUNCATE takes ACCESS EXCLUSIVE on the table before the guard runs, and
// taking a lock brings the catalog cache up to date: a TRUNCATE that
// started after the guard went on sees it on.
func guardBody(t tableset.Table, c compiled) string {
	if !c.guard {
		return generatedBy(t, "TRUNCATE guard off") + `BEGIN
	RETURN NULL;
END `
	}
	return generatedBy(t, "TRUNCATE guard on: a move of its token ranges runs") + `BEGIN
	RAISE EXCEPTION 'reshard: TRUNCATE of %.% is refused while a move of its token ranges runs', TG_TABLE_SCHEMA, TG_TABLE_NAME
		USING ERRCODE = '` + TruncateSQLState + `', HINT = 'delete the rows instead, or wait until the move is cleaned up or rolled back';
END `
}

// compileSQL replaces the functions of t with ones compiling c: no lock on
// the application's table.
func compileSQL(t tableset.Table, c compiled) string { return compileChangedSQL(t, c, layout{}) }

// compileChangedSQL replaces only the functions of t whose body is not the
// one compiling c already (as read in l): a cutover's fence changes the
// ranges and leaves the guard, and each function replaced is parsed and
// checked by plpgsql's validator inside the write pause.
func compileChangedSQL(t tableset.Table, c compiled, l layout) string {
	var b strings.Builder
	for _, f := range []struct {
		fn        pgx.Identifier
		body, has string
	}{{triggerFunc(t), fenceBody(t, c), l.fnMD5}, {deleteFunc(t), deleteBody(t, c), l.delMD5}, {guardFunc(t), guardBody(t, c), l.guardMD5}} {
		if f.has != "" && f.has == md5hex(f.body) {
			continue
		}
		b.WriteString(`CREATE OR REPLACE FUNCTION ` + f.fn.Sanitize() + `() RETURNS trigger LANGUAGE plpgsql AS $f$` + f.body + "$f$;\n")
	}
	return b.String()
}

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// compileTx replaces the functions of t with ones for the table's current
// row in reshard.fence, locked FOR UPDATE so that concurrent fence changes
// of the table are serialized and each leaves functions matching the
// registry. Run it inside the transaction that changed the row.
func compileTx(ctx context.Context, tx pgx.Tx, t tableset.Table) error {
	var c compiled
	err := tx.QueryRow(ctx, "SELECT ranges::text, epoch, guard FROM reshard.fence WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass FOR UPDATE").Scan(&c.ranges, &c.epoch, &c.guard)
	if err != nil {
		return fmt.Errorf("read the fence of %s: %w", t, err)
	}
	if _, err := tx.Exec(ctx, compileSQL(t, c)); err != nil {
		return fmt.Errorf("compile the fence of %s: %w", t, err)
	}
	return nil
}

// Trigger names and pg_trigger.tgtype values: the fence a BEFORE ROW
// trigger on INSERT and UPDATE (1|2|4|16) and one on DELETE (1|2|8), the
// guard a BEFORE STATEMENT trigger on TRUNCATE (2|32).
const (
	fenceTrigger  = "reshard_fence"
	deleteTrigger = "reshard_fence_delete"
	guardTrigger  = "reshard_no_truncate"
	fenceTgtype   = 23
	deleteTgtype  = 11
	guardTgtype   = 34
)

// InstallTriggers puts the fence trigger and the TRUNCATE guard on every
// table of the set whose triggers are not what this version installs (none,
// or an older version's), and compiles their functions from the registry;
// with truncateGuard the guards are turned on. Idempotent; a table whose
// triggers are right takes no lock. Installing fences nothing by itself:
// ranges are fenced by Reconcile (or Fence).
//
// The triggers are the only DDL on the application's tables, once per
// table: each table in its own transaction (so we never hold one table's
// lock while waiting for another's, the deadlock of two tables written in
// two orders), with a lock_timeout of tens of milliseconds and jittered
// retries, so that no application statement queues behind our lock request
// for longer.
//
// The row triggers call the accelerator (the extension reshard_fence) when
// the shard has it or can create it, and the plpgsql functions otherwise;
// a table installed with plpgsql triggers before the extension came gets
// the accelerator's at its next install.
func InstallTriggers(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, truncateGuard bool) error {
	return installTriggers(ctx, pool, set, truncateGuard, true)
}

// InstallPlpgsqlTriggers is InstallTriggers with row triggers that call
// the plpgsql functions even where the accelerator is there: for the
// benchmarks that measure both and for tests.
func InstallPlpgsqlTriggers(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) error {
	return installTriggers(ctx, pool, set, false, false)
}

func installTriggers(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, truncateGuard, accelerate bool) error {
	if err := EnsureSchema(ctx, pool); err != nil {
		return fmt.Errorf("install fence schema: %w", err)
	}
	accel := false
	if accelerate {
		var err error
		if accel, err = ensureAccel(ctx, pool); err != nil {
			return err
		}
	}
	st, err := readLayout(ctx, pool, set)
	if err != nil {
		return err
	}
	for i, t := range set.Tables {
		if err := installTable(ctx, pool, t, st[i], accel); err != nil {
			return fmt.Errorf("install the fence of %s: %w", t, err)
		}
	}
	if truncateGuard {
		err := withLockRetry(ctx, func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, t := range set.Tables {
					if _, err := tx.Exec(ctx, "UPDATE reshard.fence SET guard = true WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass"); err != nil {
						return err
					}
					if err := compileTx(ctx, tx, t); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return fmt.Errorf("turn the TRUNCATE guards of set %s on: %w", set.Name, err)
		}
	}
	return nil
}

// installTable gives t its registry row, its functions and, unless they
// are right already, its triggers.
func installTable(ctx context.Context, pool *pgxpool.Pool, t tableset.Table, l layout, accel bool) error {
	// The registry row and the functions first, in a transaction of their
	// own that takes no lock on the table: the triggers then call
	// functions that fence what the registry says.
	err := withLockRetry(ctx, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.Itoa(int(registryLockTimeout.Milliseconds()))+"ms'"); err != nil {
				return err
			}
			// One install of a fence identity at a time (the moves to a
			// target install its tables' fences together): INSERT ... ON
			// CONFLICT (tbl) arbitrates only on the primary key, and an
			// insert that passed its check before its twin's row reached
			// that index met the row in fence_ident and failed with 23505
			// (TestConcurrentInstallsOfOneTable). The statements after the
			// lock see what the install before it committed.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "reshard.fence "+Ident(t)); err != nil {
				return err
			}
			var other string
			err := tx.QueryRow(ctx, "SELECT tbl::text FROM reshard.fence WHERE ident = $1 AND tbl <> $2::regclass", Ident(t), t.Quoted()).Scan(&other)
			if err == nil {
				return fmt.Errorf("its fence identity %s is already the identity of table %s on this shard (a hash collision of their names): rename one of the two tables", Ident(t), other)
			} else if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO reshard.fence (tbl, ident) VALUES ($1::regclass, $2) ON CONFLICT (tbl) DO UPDATE SET ident = excluded.ident WHERE fence.ident IS DISTINCT FROM excluded.ident", t.Quoted(), Ident(t)); err != nil {
				return err
			}
			return compileTx(ctx, tx, t)
		})
	})
	if err != nil {
		return err
	}
	var stmts []string
	fn, del := triggerFunc(t).Sanitize()+"()", deleteFunc(t).Sanitize()+"()"
	if accel {
		fn, del = accelCall(t), accelCall(t)
	}
	if !l.fenceOK || l.accel != accel {
		stmts = append(stmts, "CREATE OR REPLACE TRIGGER "+fenceTrigger+" BEFORE INSERT OR UPDATE ON "+t.Quoted()+
			" FOR EACH ROW EXECUTE FUNCTION "+fn)
	}
	if !l.deleteOK || l.accel != accel {
		stmts = append(stmts, "CREATE OR REPLACE TRIGGER "+deleteTrigger+" BEFORE DELETE ON "+t.Quoted()+
			" FOR EACH ROW EXECUTE FUNCTION "+del)
	}
	if !l.guardOK {
		stmts = append(stmts, "CREATE OR REPLACE TRIGGER "+guardTrigger+" BEFORE TRUNCATE ON "+t.Quoted()+
			" FOR EACH STATEMENT EXECUTE FUNCTION "+guardFunc(t).Sanitize()+"()")
	}
	if len(stmts) > 0 {
		// CREATE OR REPLACE TRIGGER takes SHARE ROW EXCLUSIVE, which
		// readers pass (DROP TRIGGER would take ACCESS EXCLUSIVE). An
		// older install's disabled trigger is replaced enabled.
		stmts = append([]string{"SET LOCAL lock_timeout = '" + strconv.Itoa(int(lockTimeout.Milliseconds())) + "ms'"}, stmts...)
		if err := withLockRetry(ctx, func() error { return inTx(ctx, pool, stmts) }); err != nil {
			return err
		}
	}
	// An older install's functions, once no trigger calls them.
	for _, fn := range []string{legacyFunc(t).Sanitize() + "()", "reshard.refuse_truncate()"} {
		if _, err := pool.Exec(ctx, `DO $d$
DECLARE f regprocedure := to_regprocedure(`+quoteLiteral(fn)+`);
BEGIN
	IF f IS NOT NULL AND f <> to_regprocedure(`+quoteLiteral(triggerFunc(t).Sanitize()+"()")+`)
		AND NOT EXISTS (SELECT 1 FROM pg_depend WHERE refclassid = 'pg_proc'::regclass AND refobjid = f AND deptype = 'n') THEN
		EXECUTE 'DROP FUNCTION ' || f;
	END IF;
END $d$`); err != nil {
			return fmt.Errorf("drop the older fence function %s: %w", fn, err)
		}
	}
	return nil
}

// layout is what one table has of the objects this version installs.
type layout struct {
	registry bool // a registry row, with this version's identity
	fenceOK  bool // reshard_fence: enabled, calling the table's fence function
	deleteOK bool // reshard_fence_delete likewise, calling its DELETE function
	guardOK  bool // reshard_no_truncate likewise, calling its guard function
	// accel: both row triggers call the accelerator (fenceOK and deleteOK
	// accept either it or the plpgsql functions); accelAvail: the shard
	// has the extension.
	accel, accelAvail bool
	problems          []string
	c                 compiled // the registry row, when there is one
	fnMD5             string   // md5 of the fence function's body ("" without one)
	delMD5            string   // md5 of the DELETE function's body
	guardMD5          string   // md5 of the guard function's body
}

// installed reports whether the table has every trigger of this version.
func (l layout) installed() bool { return l.registry && l.fenceOK && l.deleteOK && l.guardOK }

// readLayout reads, for every table of the set in order, its registry row,
// its triggers and its functions' bodies, in one query. Trigger identity is
// compared by OID (tgfoid against the function the table's identity names),
// never by a deparsed definition, which depends on the search path.
func readLayout(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, set tableset.Set) ([]layout, error) {
	sql, args := layoutQuery(set)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read the fence objects: %w", err)
	}
	return scanLayout(rows, set)
}

// layoutQuery is readLayout's query, for a batch.
func layoutQuery(set tableset.Set) (string, []any) {
	n := len(set.Tables)
	names, fns, dels, guards := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	args := make([][]byte, n)
	for i, t := range set.Tables {
		names[i], fns[i], dels[i], guards[i] = t.Quoted(), triggerFunc(t).Sanitize()+"()", deleteFunc(t).Sanitize()+"()", guardFunc(t).Sanitize()+"()"
		args[i] = tgargs(accelArgs(t))
	}
	return `
SELECT f.tbl IS NOT NULL AND f.ident IS NOT DISTINCT FROM ($4::text[])[s.i],
	coalesce(f.ranges::text, '{}'), coalesce(f.epoch, 0), coalesce(f.guard, false),
	coalesce(md5(pf.prosrc), ''), coalesce(md5(pd.prosrc), ''), coalesce(md5(pg.prosrc), ''),
	tf.tgfoid::regprocedure::text, tf.tgenabled::text, tf.tgtype, tf.tgqual IS NULL AND tf.tgattr = '',
	(tf.tgfoid = pf.oid AND tf.tgnargs = 0) OR (tf.tgfoid = acc.oid AND tf.tgargs = ($6::bytea[])[s.i]), tf.tgfoid = acc.oid,
	td.tgfoid::regprocedure::text, td.tgenabled::text, td.tgtype, td.tgqual IS NULL AND td.tgattr = '',
	(td.tgfoid = pd.oid AND td.tgnargs = 0) OR (td.tgfoid = acc.oid AND td.tgargs = ($6::bytea[])[s.i]), td.tgfoid = acc.oid,
	tg.tgfoid::regprocedure::text, tg.tgenabled::text, tg.tgtype, tg.tgfoid = pg.oid, acc.oid IS NOT NULL
FROM generate_subscripts($1::text[], 1) AS s(i)
CROSS JOIN LATERAL (SELECT ($1::text[])[s.i]::regclass AS rel) r
LEFT JOIN reshard.fence f ON f.tbl = r.rel
LEFT JOIN pg_proc pf ON pf.oid = to_regprocedure(($2::text[])[s.i])
LEFT JOIN pg_proc pg ON pg.oid = to_regprocedure(($3::text[])[s.i])
LEFT JOIN pg_proc pd ON pd.oid = to_regprocedure(($5::text[])[s.i])
LEFT JOIN pg_trigger tf ON tf.tgrelid = r.rel AND tf.tgname = '` + fenceTrigger + `'
LEFT JOIN pg_trigger td ON td.tgrelid = r.rel AND td.tgname = '` + deleteTrigger + `'
LEFT JOIN pg_trigger tg ON tg.tgrelid = r.rel AND tg.tgname = '` + guardTrigger + `'
LEFT JOIN (SELECT oid FROM pg_proc WHERE ` + accelGenuine + `) acc ON true
ORDER BY s.i`, []any{names, fns, guards, identsOf(set), dels, args}
}

// scanLayout reads layoutQuery's rows.
func scanLayout(rows pgx.Rows, set tableset.Set) ([]layout, error) {
	defer rows.Close()
	var out []layout
	for rows.Next() {
		var l layout
		var fCalls, fEnabled, dCalls, dEnabled, gCalls, gEnabled *string
		var fType, dType, gType *int16
		var fPlain, fRight, fAccel, dPlain, dRight, dAccel, gRight *bool
		if err := rows.Scan(&l.registry, &l.c.ranges, &l.c.epoch, &l.c.guard, &l.fnMD5, &l.delMD5, &l.guardMD5,
			&fCalls, &fEnabled, &fType, &fPlain, &fRight, &fAccel, &dCalls, &dEnabled, &dType, &dPlain, &dRight, &dAccel,
			&gCalls, &gEnabled, &gType, &gRight, &l.accelAvail); err != nil {
			return nil, fmt.Errorf("read the fence objects: %w", err)
		}
		t := set.Tables[len(out)]
		rowTrigger := func(name, events string, fn pgx.Identifier, tgtype int16, calls, enabled *string, typ *int16, plain, right *bool) bool {
			switch {
			case calls == nil:
				l.problems = append(l.problems, "no fence trigger "+name)
			case (right == nil || !*right) && *calls == accelFunc+"()":
				l.problems = append(l.problems, fmt.Sprintf("fence trigger %s calls %s, which is not the extension reshard_fence's C function (replaced?) or not with the arguments (%s)",
					name, *calls, strings.Join(accelArgs(t), ", ")))
			case right == nil || !*right:
				l.problems = append(l.problems, fmt.Sprintf("fence trigger %s calls %s, not %s (or %s)", name, *calls, fn.Sanitize()+"()", accelCall(t)))
			case *enabled != "O":
				l.problems = append(l.problems, fmt.Sprintf("fence trigger %s is not enabled as installed (tgenabled %s, not O)", name, *enabled))
			case *typ != tgtype || !*plain:
				l.problems = append(l.problems, fmt.Sprintf("fence trigger %s is not the one reshard installs (BEFORE %s FOR EACH ROW, no WHEN, no column list)", name, events))
			default:
				return true
			}
			return false
		}
		l.fenceOK = rowTrigger(fenceTrigger, "INSERT OR UPDATE", triggerFunc(t), fenceTgtype, fCalls, fEnabled, fType, fPlain, fRight)
		l.deleteOK = rowTrigger(deleteTrigger, "DELETE", deleteFunc(t), deleteTgtype, dCalls, dEnabled, dType, dPlain, dRight)
		l.accel = l.fenceOK && l.deleteOK && fAccel != nil && *fAccel && dAccel != nil && *dAccel
		switch {
		case gCalls == nil:
			l.problems = append(l.problems, "no TRUNCATE guard trigger")
		case gRight == nil || !*gRight:
			l.problems = append(l.problems, fmt.Sprintf("TRUNCATE guard trigger %s calls %s, not %s", guardTrigger, *gCalls, guardFunc(t).Sanitize()+"()"))
		case *gEnabled != "O" || *gType != guardTgtype:
			l.problems = append(l.problems, fmt.Sprintf("TRUNCATE guard trigger %s is not the one reshard installs (enabled, BEFORE TRUNCATE FOR EACH STATEMENT)", guardTrigger))
		default:
			l.guardOK = true
		}
		if !l.registry {
			l.c = compiled{ranges: "{}"}
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the fence objects: %w", err)
	}
	return out, nil
}

func identsOf(set tableset.Set) []string {
	out := make([]string, len(set.Tables))
	for i, t := range set.Tables {
		out[i] = Ident(t)
	}
	return out
}

// bodiesMatch reports whether t's functions compile what its registry row
// says; otherwise they were replaced (by hand, an old dump) and fence
// something else.
func (l layout) bodiesMatch(t tableset.Table) bool {
	return l.fnMD5 == md5hex(fenceBody(t, l.c)) && l.delMD5 == md5hex(deleteBody(t, l.c)) && l.guardMD5 == md5hex(guardBody(t, l.c))
}

// RemoveTriggers drops the fence triggers, TRUNCATE guards, their functions
// and registry rows of the set's tables: a shard leaving reshard's care for
// good (and the benchmarks' baseline). Migrations never call it: Reconcile
// keeps every shard of a keyspace fenced where it owns nothing.
func RemoveTriggers(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) error {
	var registry bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('reshard.fence') IS NOT NULL`).Scan(&registry); err != nil {
		return fmt.Errorf("look up the fence registry: %w", err)
	}
	for _, t := range set.Tables {
		stmts := []string{
			"SET LOCAL lock_timeout = '" + strconv.Itoa(int(lockTimeout.Milliseconds())) + "ms'",
			"DROP TRIGGER IF EXISTS " + fenceTrigger + " ON " + t.Quoted(),
			"DROP TRIGGER IF EXISTS " + deleteTrigger + " ON " + t.Quoted(),
			"DROP TRIGGER IF EXISTS " + guardTrigger + " ON " + t.Quoted(),
			"DROP FUNCTION IF EXISTS " + triggerFunc(t).Sanitize() + "()",
			"DROP FUNCTION IF EXISTS " + deleteFunc(t).Sanitize() + "()",
			"DROP FUNCTION IF EXISTS " + guardFunc(t).Sanitize() + "()",
		}
		if registry { // never installed: nothing to forget
			stmts = append(stmts, "DELETE FROM reshard.fence WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass")
		}
		if err := withLockRetry(ctx, func() error { return inTx(ctx, pool, stmts) }); err != nil {
			return fmt.Errorf("remove fence trigger of %s: %w", t, err)
		}
	}
	return nil
}

// multirange renders ranges as an int8multirange literal expression. A range
// reaching MaxToken gets an unbounded upper end (int8range cannot hold
// MaxToken+1), and one from MinToken an unbounded lower end, which includes
// MinToken as the Range convention says.
func multirange(rs []ring.Range) string {
	rs = ring.Normalize(rs)
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		lo, hi := strconv.FormatInt(r.Lo, 10), strconv.FormatInt(r.Hi, 10)
		if r.Lo == ring.MinToken {
			lo = "NULL"
		}
		if r.Hi == ring.MaxToken {
			hi = "NULL"
		}
		parts = append(parts, "int8range("+lo+", "+hi+", '(]')")
	}
	return "int8multirange(" + strings.Join(parts, ", ") + ")"
}

// Fence adds ranges to the fenced set of every table of the set on this
// shard, derived from topology version epoch, in one transaction: from its
// commit on, an application write of a key in those ranges is refused, except a prepared
// statement's in a transaction that held a write lock on the table since
// before the commit (HorizonNow and WaitInFlight wait those out).
// Idempotent.
//
// Fence only adds: lifting a fence is Reconcile's alone.
func Fence(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, ranges []ring.Range, epoch int64) error {
	err := withLockRetry(ctx, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.Itoa(int(registryLockTimeout.Milliseconds()))+"ms'"); err != nil {
				return err
			}
			for _, t := range set.Tables {
				tag, err := tx.Exec(ctx, "UPDATE reshard.fence SET ranges = ranges + "+multirange(ranges)+
					", epoch = greatest(epoch, "+strconv.FormatInt(epoch, 10)+") WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass")
				if err != nil {
					return err
				}
				// A fence on a table without its trigger would fence nothing:
				// say so instead of succeeding.
				if tag.RowsAffected() == 0 {
					return fmt.Errorf("table %s has no fence trigger on this shard: install it (InstallTriggers) first", t)
				}
				// The new fence compiled into the trigger, committed with
				// the registry row (see fenceBody for when other
				// sessions use it).
				if err := compileTx(ctx, tx, t); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("fence %d ranges of set %s: %w", len(ranges), set.Name, err)
	}
	return nil
}

// Clear empties the fences of the set's tables on one shard, keeping the
// triggers: for tests and the benchmarks' baselines only. A migration never
// calls it (Reconcile is the only code that lifts a fence in one).
func Clear(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) error {
	err := withLockRetry(ctx, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.Itoa(int(registryLockTimeout.Milliseconds()))+"ms'"); err != nil {
				return err
			}
			for _, t := range set.Tables {
				if _, err := tx.Exec(ctx, "UPDATE reshard.fence SET ranges = '{}' WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass"); err != nil {
					return err
				}
				if err := compileTx(ctx, tx, t); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("clear the fences of set %s: %w", set.Name, err)
	}
	return nil
}

// Fenced returns the fenced ranges of a table on this shard.
func Fenced(ctx context.Context, pool *pgxpool.Pool, t tableset.Table) ([]ring.Range, int64, error) {
	rows, err := pool.Query(ctx, `
		SELECT coalesce(lower(x), -9223372036854775808), coalesce(upper(x), 9223372036854775807), lower_inf(x), upper_inf(x), f.epoch
		FROM reshard.fence f CROSS JOIN LATERAL unnest(f.ranges) x
		WHERE f.tbl = $1::regclass ORDER BY 1`, t.Quoted())
	if err != nil {
		return nil, 0, fmt.Errorf("read fences of %s: %w", t, err)
	}
	defer rows.Close()
	var out []ring.Range
	var epoch int64
	for rows.Next() {
		var lo, hi int64
		var loInf, hiInf bool
		if err := rows.Scan(&lo, &hi, &loInf, &hiInf, &epoch); err != nil {
			return nil, 0, err
		}
		// int8range is canonical [lo, hi): back to (lo-1, hi-1].
		r := ring.Range{Lo: ring.MinToken, Hi: ring.MaxToken}
		if !loInf {
			r.Lo = lo - 1
		}
		if !hiInf {
			r.Hi = hi - 1
		}
		out = append(out, r)
	}
	return out, epoch, rows.Err()
}

func inTx(ctx context.Context, pool *pgxpool.Pool, stmts []string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// withLockRetry retries f while it fails on lock_timeout (55P03) or a
// deadlock (40P01), after a pause that grows to about 2 s and is jittered
// (half to all of it), so that retries of several shards' reconciles and the
// application's own traffic do not fall into step, until ctx ends.
func withLockRetry(ctx context.Context, f func() error) error {
	delay := 50 * time.Millisecond
	for {
		err := f()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || (pe.Code != pgerr.CodeLockNotAvailable && pe.Code != pgerr.CodeDeadlockDetected) {
			return err
		}
		pause := delay/2 + time.Duration(rand.Int64N(int64(delay/2)+1))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up waiting for a lock: %v)", ctx.Err(), err)
		case <-time.After(pause):
		}
		if delay < 2*time.Second {
			delay *= 2
		}
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
