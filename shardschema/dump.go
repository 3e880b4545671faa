package shardschema

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/tableset"
)

// dump is pg_dump --schema-only of tables on the server of cc (the source
// shard from), without reshard's own triggers (the fence: the target gets
// its own at JOINING). The password reaches pg_dump through its
// environment only.
func dump(ctx context.Context, findPGDump func() (string, error), cc *pgconn.Config, from string, tables []tableset.Table) (string, error) {
	pgDump, err := findPGDump()
	if err != nil {
		return "", err
	}
	args := []string{"--schema-only", "--no-owner", "--no-privileges", "--no-publications", "--no-subscriptions"}
	for _, t := range tables {
		// A pattern quoted as an identifier matches exactly that table.
		args = append(args, "--table="+t.Quoted())
	}
	c := exec.CommandContext(ctx, pgDump, args...)
	c.Env = append(os.Environ(), "PGHOST="+cc.Host, "PGPORT="+strconv.Itoa(int(cc.Port)), "PGUSER="+cc.User, "PGDATABASE="+cc.Database)
	if cc.Password != "" {
		c.Env = append(c.Env, "PGPASSWORD="+cc.Password)
	}
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("pg_dump --schema-only of %d table(s) on %s: %v: %s", len(tables), from, err, strings.TrimSpace(stderr.String()))
	}
	return WithoutReshardTriggers(out.String()), nil
}

// WithoutReshardTriggers drops the statements of a pg_dump script that
// create reshard's own triggers (those that execute a function of schema
// reshard, where the fence keeps its functions, whatever the trigger's
// name: an application's trigger named reshard_... is kept) and those that
// set such a trigger's firing mode, and its psql meta-commands (recent
// pg_dump releases open and close the script with \restrict lines, which
// only psql understands).
func WithoutReshardTriggers(script string) string {
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
