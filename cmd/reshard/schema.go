package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

func newSchemaCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Give a shard the keyspace's tables (schema sync), change every shard's (schema apply)",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newSchemaSyncCmd(opts), newSchemaApplyCmd(opts))
	return cmd
}

// schemaTable is what schema sync does with one table on the target.
type schemaTable struct {
	Table  string `json:"table"`
	Action string `json:"action"` // create, in-sync
	// TokenIndex: the token index the target gets (or has).
	TokenIndex string `json:"token_index"`
}

func newSchemaSyncCmd(opts *globalOptions) *cobra.Command {
	var (
		cf             configFlags
		keyspace, from string
		dryRun, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "sync <target-shard> [--from <shard>] [--keyspace <k>] [--dry-run]",
		Short: "Create the keyspace's tables, indexes, constraints, sequences and token indexes on a shard",
		Long: `Gives a shard (a new one, before add-node or split) the tables of a keyspace as they
are on a source shard: each table the target lacks is created from the source's
catalog (pg_dump --schema-only of those tables: columns, defaults, constraints,
indexes, the sequences they own, the application's triggers; reshard's own
triggers, which run functions of schema reshard, left out) as the role that owns
it on the source, and every table gets its token index. A table the target
already has must match the source's (columns, types, primary key): a difference
is refused, naming it, with nothing changed (exit 2); so is a type the tables use
that the target lacks (an enum, a domain, an extension's type: the message says
what to create) and a partitioned table. --dry-run lists what would be created.

The source defaults to the first shard (by name) of the keyspace's ring.
pg_dump comes from the PostgreSQL binaries reshard finds ($PG_BIN, beside pg_ctl
on PATH, PATH, /usr/lib/postgresql/*/bin).

Exit codes: 0 done (or nothing to do), 1 failure, 2 bad input or a conflicting
definition on the target (nothing changed).`,
		Example: `  reshard schema sync shard5 --dry-run
  reshard schema sync shard5 --from shard1 --keyspace default`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := args[0]
			return withControl(cmd, opts, &cf, 30*time.Minute, func(ctx context.Context, cfg *clusterConfig, store *topology.Store, pool *pgxpool.Pool) error {
				k, err := store.ResolveKeyspace(ctx, keyspace)
				if err != nil {
					return usageError{err}
				}
				if from == "" {
					cur, err := store.In(k.Name).Current(ctx)
					if err != nil {
						return controlErr(err)
					}
					for _, s := range cur.Ring.Shards() {
						if s != target && (from == "" || s < from) {
							from = s
						}
					}
					if from == "" {
						return usageError{fmt.Errorf("keyspace %s has no shard but %s to copy the schema from: pass --from", k.Name, target)}
					}
				}
				for _, s := range []string{from, target} {
					if _, ok := cfg.Shards[s]; !ok {
						return usageError{fmt.Errorf("shard %s is not in the configuration %s: add it (name: DSN) first", s, cfg.Path)}
					}
				}
				if from == target {
					return usageError{fmt.Errorf("--from %s is the target itself", from)}
				}
				src, err := cfg.connect(ctx, "shard "+from, cfg.Shards[from])
				if err != nil {
					return err
				}
				defer src.Close()
				dst, err := cfg.connect(ctx, "shard "+target, cfg.Shards[target])
				if err != nil {
					return err
				}
				defer dst.Close()
				plan, missing, err := planSchemaSync(ctx, src, dst, k.Spec(), from, target)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if !dryRun && len(missing) > 0 {
					ddl, err := dumpSchema(ctx, cfg, from, missing)
					if err != nil {
						return err
					}
					owners, err := tableOwners(ctx, src, missing)
					if err != nil {
						return fmt.Errorf("read the owners of the tables on %s: %w", from, err)
					}
					if err := applySchema(ctx, dst, missing, owners, ddl); err != nil {
						return fmt.Errorf("create the tables of keyspace %s on %s: %w (nothing was created)", k.Name, target, ownerHint(ctx, dst, err, owners, from, target))
					}
				}
				if !dryRun {
					srcSet, err := tableset.Introspect(ctx, src, k.Spec(), "source "+from)
					if err != nil {
						return err
					}
					for _, t := range srcSet.Tables {
						if err := tableset.CreateTokenIndex(ctx, dst, t); err != nil {
							return fmt.Errorf("token index of %s on %s: %w", t, target, err)
						}
					}
				}
				if asJSON {
					return topoWriteJSON(out, struct {
						Keyspace string        `json:"keyspace"`
						From     string        `json:"from"`
						Target   string        `json:"target"`
						DryRun   bool          `json:"dry_run"`
						Tables   []schemaTable `json:"tables"`
					}{k.Name, from, target, dryRun, plan})
				}
				verb := map[bool]string{true: "would create", false: "created"}[dryRun]
				for _, p := range plan {
					switch p.Action {
					case "create":
						fmt.Fprintf(out, "%s %s on %s (from %s), token index %s\n", verb, p.Table, target, from, p.TokenIndex)
					default:
						fmt.Fprintf(out, "%s on %s matches %s; token index %s\n", p.Table, target, from, p.TokenIndex)
					}
				}
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().StringVar(&keyspace, "keyspace", "", "keyspace whose tables to sync (default: the only one)")
	cmd.Flags().StringVar(&from, "from", "", "shard to copy the definitions from (default: the first of the keyspace's ring)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be created; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// planSchemaSync compares the keyspace's tables on the source and the
// target: the tables to create (missing) and the plan to print. A table
// that exists on both and differs is bad input naming the difference.
func planSchemaSync(ctx context.Context, src, dst *pgxpool.Pool, spec tableset.Spec, from, target string) ([]schemaTable, []tableset.Table, error) {
	srcSet, err := tableset.Introspect(ctx, src, spec, "source "+from)
	if err != nil {
		return nil, nil, usageError{err}
	}
	for _, t := range srcSet.Tables {
		for _, p := range tableset.Shardable(t, "source "+from) {
			if p.Check == tableset.CheckPartitioned {
				return nil, nil, usageError{fmt.Errorf("%w; nothing was changed", p)}
			}
		}
	}
	var plan []schemaTable
	var missing []tableset.Table
	var conflicts []string
	for i, t := range srcSet.Tables {
		var reg *string
		if err := dst.QueryRow(ctx, `SELECT to_regclass($1)::text`, t.Quoted()).Scan(&reg); err != nil {
			return nil, nil, fmt.Errorf("look for %s on %s: %w", t, target, err)
		}
		p := schemaTable{Table: t.String(), TokenIndex: tableset.TokenIndexName(t)}
		if reg == nil {
			p.Action = "create"
			missing = append(missing, t)
			plan = append(plan, p)
			continue
		}
		one := tableset.Spec{Name: spec.Name, Tables: []tableset.TableSpec{spec.Tables[i]}}
		dstSet, err := tableset.Introspect(ctx, dst, one, "target "+target)
		if err != nil {
			conflicts = append(conflicts, err.Error())
			continue
		}
		if d := tableset.ColumnDiff(t, dstSet.Tables[0], from, target); d != "" {
			conflicts = append(conflicts, fmt.Sprintf("%s: %s", t, d))
			continue
		}
		if !slices.Equal(t.PK, dstSet.Tables[0].PK) {
			conflicts = append(conflicts, fmt.Sprintf("%s: primary key (%s) on %s, (%s) on %s", t, strings.Join(t.PK, ", "), from, strings.Join(dstSet.Tables[0].PK, ", "), target))
			continue
		}
		p.Action = "in-sync"
		plan = append(plan, p)
	}
	if len(conflicts) > 0 {
		return nil, nil, usageError{fmt.Errorf("%s has %d table(s) defined unlike on %s; make them alike (or drop the empty table on %s and run schema sync again), nothing was changed:\n  %s",
			target, len(conflicts), from, target, strings.Join(conflicts, "\n  "))}
	}
	if err := tableset.MissingTypes(ctx, src, dst, missing, from, target); err != nil {
		var p *tableset.Problem
		if errors.As(err, &p) {
			return nil, nil, usageError{fmt.Errorf("the tables to create on %s use types it lacks; create them there first, nothing was changed:\n%w", target, err)}
		}
		return nil, nil, err
	}
	return plan, missing, nil
}

// dumpSchema is pg_dump --schema-only of tables on shard from, without
// reshard's own triggers (the fence: the target gets its own at JOINING).
// The password reaches pg_dump through its environment only.
func dumpSchema(ctx context.Context, cfg *clusterConfig, from string, tables []tableset.Table) (string, error) {
	pgDump, err := findPGDump()
	if err != nil {
		return "", err
	}
	cc, err := pgsession.ParseConfig(cfg.Shards[from])
	if err != nil {
		return "", usageError{fmt.Errorf("the DSN of shard %s does not parse", from)}
	}
	args := []string{"--schema-only", "--no-owner", "--no-privileges", "--no-publications", "--no-subscriptions"}
	for _, t := range tables {
		// A pattern quoted as an identifier matches exactly that table.
		args = append(args, "--table="+t.Quoted())
	}
	c := exec.CommandContext(ctx, pgDump, args...)
	c.Env = append(os.Environ(), "PGHOST="+cc.Host, "PGPORT="+strconv.Itoa(int(cc.Port)), "PGUSER="+cc.User, "PGDATABASE="+cc.Database)
	if pw := cfg.password; pw != "" {
		c.Env = append(c.Env, "PGPASSWORD="+pw)
	} else if cc.Password != "" {
		c.Env = append(c.Env, "PGPASSWORD="+cc.Password)
	}
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("pg_dump --schema-only of %d table(s) on %s: %v: %s", len(tables), from, err, strings.TrimSpace(stderr.String()))
	}
	return withoutReshardTriggers(out.String()), nil
}

// findPGDump finds pg_dump beside the server binaries reshard uses (the
// directory pg_ctl resolves to, when it is a link), else on PATH.
func findPGDump() (string, error) {
	var dirs []string
	if d, err := devenv.FindPGBin(); err == nil {
		dirs = append(dirs, d)
		if real, err := filepath.EvalSymlinks(filepath.Join(d, "pg_ctl")); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Reverse(globbed) // newest first
	for _, d := range dirs {
		if p := filepath.Join(d, "pg_dump"); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p, nil
	}
	for _, d := range globbed {
		if p := filepath.Join(d, "pg_dump"); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pg_dump not found (beside pg_ctl, on PATH or in /usr/lib/postgresql/*/bin): %s", devenv.InstallHint)
}

// withoutReshardTriggers drops the statements of a pg_dump script that
// create reshard's own triggers (those that execute a function of schema
// reshard, where the fence keeps its functions, whatever the trigger's
// name: an application's trigger named reshard_... is kept) and those that
// set such a trigger's firing mode, and its psql meta-commands (recent
// pg_dump releases open and close the script with \restrict lines, which
// only psql understands).
func withoutReshardTriggers(script string) string {
	var lines []string
	for _, l := range strings.SplitAfter(script, "\n") {
		if !strings.HasPrefix(l, "\\") {
			lines = append(lines, l)
		}
	}
	stmts := strings.SplitAfter(strings.Join(lines, ""), ";\n")
	ours := map[string]bool{}
	for _, s := range stmts {
		if m := reshardTrigger.FindStringSubmatch(s); m != nil {
			ours[m[1]] = true
		}
	}
	var b strings.Builder
	for _, s := range stmts {
		if reshardTrigger.MatchString(s) {
			continue
		}
		if m := triggerMode.FindStringSubmatch(s); m != nil && ours[m[1]] {
			continue
		}
		b.WriteString(s)
	}
	return b.String()
}

var (
	// reshardTrigger is pg_dump's CREATE TRIGGER of a trigger that executes
	// a function of schema reshard; the group is the trigger's name as dumped.
	reshardTrigger = regexp.MustCompile(`(?m)^CREATE (?:CONSTRAINT )?TRIGGER ("(?:[^"]|"")+"|\S+) [^;]*\bEXECUTE (?:FUNCTION|PROCEDURE) (?:reshard|"reshard")\.`)
	// triggerMode is pg_dump's ALTER TABLE ... ENABLE ALWAYS/REPLICA or
	// DISABLE TRIGGER of a trigger (the group).
	triggerMode = regexp.MustCompile(`(?m)^ALTER TABLE [^;]* (?:ENABLE ALWAYS|ENABLE REPLICA|DISABLE) TRIGGER ("(?:[^"]|"")+"|\S+);`)
)

// tableOwners returns the role owning each table on the source, in the
// order of tables.
func tableOwners(ctx context.Context, src *pgxpool.Pool, tables []tableset.Table) ([]string, error) {
	owners := make([]string, len(tables))
	for i, t := range tables {
		err := src.QueryRow(ctx, `
			SELECT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&owners[i])
		if err != nil {
			return nil, fmt.Errorf("owner of %s: %w", t, err)
		}
	}
	return owners, nil
}

// ownerHint adds the fix to an error of a role that cannot create the
// tables as their owners (docs/operations.md, "Privileges").
func ownerHint(ctx context.Context, dst *pgxpool.Pool, err error, owners []string, from, target string) error {
	// A missing role is 42704 too, as is a missing type: only the former
	// is the owners' business (MissingTypes names the latter first).
	var pe *pgconn.PgError
	if !pgerr.Privilege(err) && !(pgerr.UndefinedObject(err) && errors.As(err, &pe) && strings.HasPrefix(pe.Message, "role ")) {
		return err
	}
	var role string
	if dst.QueryRow(ctx, `SELECT current_user`).Scan(&role) != nil {
		return err
	}
	var quoted []string
	for _, o := range owners {
		q := pgx.Identifier{o}.Sanitize()
		if o != role && !slices.Contains(quoted, q) {
			quoted = append(quoted, q)
		}
	}
	if len(quoted) == 0 {
		return err // reshard's role owns the tables: a GRANT would change nothing
	}
	return fmt.Errorf("%w; the tables are created as their owners on %s (%s): those roles must exist on %s with CREATE on the tables' schemas, and %s must be a member of them (GRANT %s TO %s, as deploy/reshard-role.sql -v owners= does)",
		err, from, strings.Join(quoted, ", "), target, role, strings.Join(quoted, ", "), pgx.Identifier{role}.Sanitize())
}

// applySchema runs the script on the target in one transaction, creating
// the tables' schemas first. The tables are created as the role that owns
// them on the source, as the source's (the script has no owners: the role
// reshard connects as may not be a superuser), so that the application
// reaches them on the new shard as on the others.
func applySchema(ctx context.Context, dst *pgxpool.Pool, tables []tableset.Table, owners []string, script string) error {
	return pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		for i, t := range tables {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{t.Schema}.Sanitize()+" AUTHORIZATION "+pgx.Identifier{owners[i]}.Sanitize()); err != nil {
				return err
			}
		}
		// One script, run as the first table's owner; a table another role
		// owns on the source is given to it afterwards.
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{owners[0]}.Sanitize()); err != nil {
			return err
		}
		// The script sets search_path to '' for its own statements; the
		// transaction's end restores it (SET LOCAL semantics do not apply:
		// reset it explicitly).
		if _, err := tx.Exec(ctx, script); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "RESET ROLE"); err != nil {
			return err
		}
		for i, t := range tables {
			if owners[i] != owners[0] {
				if _, err := tx.Exec(ctx, "ALTER TABLE "+t.Quoted()+" OWNER TO "+pgx.Identifier{owners[i]}.Sanitize()); err != nil {
					return err
				}
			}
		}
		_, err := tx.Exec(ctx, "RESET search_path")
		return err
	})
}

func newSchemaApplyCmd(opts *globalOptions) *cobra.Command {
	var (
		cf             configFlags
		keyspace, file string
		lockTimeout    time.Duration
		budget         time.Duration
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   `apply [--keyspace <k>] ("ALTER TABLE ..." | --file <f>)`,
		Short: "Apply a schema change to every shard of a keyspace, the targets of running moves included",
		Long: `Runs ALTER TABLE and CREATE INDEX statements on every shard of a keyspace: the
shards of its current ring and the sources and targets of its running moves.
A running move adapts to the change (the copy, the appliers and verify match
columns by name), so it need not be stopped.

Order: an additive change (a column added, a type changed, a default or NOT
NULL changed, an index) reaches the targets of running moves first, so an
applier never receives a column its target lacks; a dropped column reaches
them last. Each shard runs each statement (one ALTER TABLE action at a time)
with a short lock_timeout (--lock-timeout, default 50ms), so the application
never queues behind a change waiting for a long transaction, and retries with a
jittered backoff for up to --budget. CREATE INDEX runs CONCURRENTLY (and IF NOT
EXISTS): its lock lets writes through, so it does not use the short timeout; an
invalid index left by a failed build is dropped and built again.

Refused, with the reason and nothing changed (exit 2): a change of a shard-key
or primary-key column (drop, type, DROP NOT NULL), a primary key or any
constraint, a rename, SET SCHEMA, REPLICA IDENTITY, a new column whose existing
rows would get each shard's own values (serial, identity, a default that is not
a constant), a unique index, an unnamed index, a table outside the keyspace,
and any statement other than ALTER TABLE and CREATE INDEX.

The report says, per shard and statement: applied, already there, failed (with
the reason; the shards after it are not attempted), or not attempted. Running
the same change again is safe.

Exit codes: 0 applied everywhere (or already there), 1 a shard failed, 2
refused or bad input (nothing changed).`,
		Example: `  reshard schema apply --keyspace default "ALTER TABLE users ADD COLUMN nickname text"
  reshard schema apply "CREATE INDEX orders_created ON orders (created_at)"
  reshard schema apply --keyspace default --file migrations/0042.sql --json`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			script, err := schemaScript(args, file)
			if err != nil {
				return usageError{err}
			}
			return withControl(cmd, opts, &cf, budget*4+10*time.Minute, func(ctx context.Context, cfg *clusterConfig, store *topology.Store, pool *pgxpool.Pool) error {
				k, err := store.ResolveKeyspace(ctx, keyspace)
				if err != nil {
					return usageError{err}
				}
				names, targets, err := schemaApplyShards(ctx, store, k.Name)
				if err != nil {
					return err
				}
				var shards []tableset.DDLShard
				for _, n := range names {
					dsn, ok := cfg.Shards[n]
					if !ok {
						return usageError{fmt.Errorf("shard %s of keyspace %s is not in the configuration %s: add it (name: DSN) first; nothing was changed", n, k.Name, cfg.Path)}
					}
					p, err := cfg.connect(ctx, "shard "+n, dsn)
					if err != nil {
						return err
					}
					defer p.Close()
					shards = append(shards, tableset.DDLShard{Name: n, Pool: p, Target: targets[n]})
				}
				if len(shards) == 0 {
					return usageError{fmt.Errorf("keyspace %s has no shard", k.Name)}
				}
				set, err := tableset.Introspect(ctx, shards[0].Pool, k.Spec(), "shard "+shards[0].Name)
				if err != nil {
					return err
				}
				stmts, err := tableset.ParseDDL(script, set.Tables)
				if err != nil {
					return usageError{err}
				}
				res, applyErr := tableset.ApplyDDL(ctx, stmts, shards, tableset.DDLOptions{LockTimeout: lockTimeout, Budget: budget})
				out := cmd.OutOrStdout()
				if asJSON {
					if err := topoWriteJSON(out, struct {
						Keyspace string               `json:"keyspace"`
						Results  []tableset.DDLResult `json:"results"`
					}{k.Name, res}); err != nil {
						return err
					}
				} else {
					for _, r := range res {
						line := fmt.Sprintf("%s: %s: %s", r.Shard, r.What, r.Outcome)
						if r.Attempts > 1 {
							line += fmt.Sprintf(" (%d attempts)", r.Attempts)
						}
						if r.Reason != "" {
							line += ": " + r.Reason
						}
						fmt.Fprintln(out, line)
					}
				}
				if applyErr != nil {
					return fmt.Errorf("schema apply stopped: %w; the shards before it have the change: fix the cause and run the same command again", applyErr)
				}
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().StringVar(&keyspace, "keyspace", "", "keyspace whose shards to change (default: the only one)")
	cmd.Flags().StringVar(&file, "file", "", "read the statements from this file (- for standard input) instead of the argument")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", 50*time.Millisecond, "how long one attempt waits for a table's lock")
	cmd.Flags().DurationVar(&budget, "budget", time.Minute, "how long a shard keeps retrying a statement whose lock it cannot get")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// schemaScript is the statements of schema apply: the argument or the file.
func schemaScript(args []string, file string) (string, error) {
	switch {
	case len(args) == 1 && file != "":
		return "", errors.New("give the statements as the argument or with --file, not both")
	case len(args) == 1:
		return args[0], nil
	case file == "-":
		b, err := io.ReadAll(os.Stdin)
		return string(b), err
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read --file: %w", err)
		}
		return string(b), nil
	}
	return "", errors.New(`give the statements: reshard schema apply "ALTER TABLE ..." or --file <f>`)
}

// schemaApplyShards are the shards of keyspace ks that schema apply changes:
// those of its current ring and both ends of its running moves, by name;
// targets says which are the target of a running move.
func schemaApplyShards(ctx context.Context, store *topology.Store, ks string) ([]string, map[string]bool, error) {
	in := store.In(ks)
	cur, err := in.Current(ctx)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	running, err := in.RunningMoves(ctx)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	names := cur.Ring.Shards()
	targets := map[string]bool{}
	for _, m := range running {
		names = append(names, m.From, m.To)
		targets[m.To] = true
	}
	slices.Sort(names)
	return slices.Compact(names), targets, nil
}
