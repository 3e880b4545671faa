package shardschema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Resolve is what a schema sync onto target reads from the control
// database (store in any keyspace): the keyspace (the only one when name is
// "") and the source shard, from unless "" (then Source of the keyspace's
// current topology). A keyspace that does not resolve, or no other shard
// to copy from, is an *pgerr.InputError; other errors are the control
// database's.
func Resolve(ctx context.Context, store *topology.Store, name, from, target string) (topology.Keyspace, string, error) {
	k, err := store.ResolveKeyspace(ctx, name)
	if err != nil {
		return k, "", &pgerr.InputError{Err: err}
	}
	if from != "" {
		return k, from, nil
	}
	cur, err := store.In(k.Name).Current(ctx)
	if err != nil {
		return k, "", err
	}
	if from = Source(cur, target); from == "" {
		return k, "", pgerr.BadInput("keyspace %s has no shard but %s to copy the schema from: pass --from", k.Name, target)
	}
	return k, from, nil
}

// SyncReport is what a schema sync did (with DryRun, would do).
type SyncReport struct {
	Keyspace string  `json:"keyspace"`
	From     string  `json:"from"`
	Target   string  `json:"target"`
	DryRun   bool    `json:"dry_run"`
	Tables   []Table `json:"tables"`
}

// Print renders the report: JSON, or a line per table.
func (r SyncReport) Print(out io.Writer, asJSON bool) error {
	if asJSON {
		return writeJSON(out, r)
	}
	verb := map[bool]string{true: "would create", false: "created"}[r.DryRun]
	for _, p := range r.Tables {
		switch p.Action {
		case "create":
			fmt.Fprintf(out, "%s %s on %s (from %s), token index %s\n", verb, p.Table, r.Target, r.From, p.TokenIndex)
		default:
			fmt.Fprintf(out, "%s on %s matches %s; token index %s\n", p.Table, r.Target, r.From, p.TokenIndex)
		}
	}
	return nil
}

// PrintApply renders schema apply's results: JSON, or a line per shard and
// statement (its attempts when more than one, its reason).
func PrintApply(out io.Writer, keyspace string, res []tableset.DDLResult, asJSON bool) error {
	if asJSON {
		return writeJSON(out, struct {
			Keyspace string               `json:"keyspace"`
			Results  []tableset.DDLResult `json:"results"`
		}{keyspace, res})
	}
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
	return nil
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Script is schema apply's statements: the argument (args holds at most
// one), or the file (- for stdin). Every error is bad input.
func Script(args []string, file string, stdin io.Reader) (string, error) {
	switch {
	case len(args) == 1 && file != "":
		return "", errors.New("give the statements as the argument or with --file, not both")
	case len(args) == 1:
		return args[0], nil
	case file == "-":
		b, err := io.ReadAll(stdin)
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
