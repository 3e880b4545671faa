package tableset

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A trigger that preflight passed (ENABLE, origin mode) and that a deploy
// switches to ENABLE ALWAYS after PLAN, or one enabled REPLICA: CheckFiring,
// run by the phases that write rows, names it with its fix before it can
// fire for a row reshard writes.
func TestCheckFiringFindsTriggersEnabledAfterPlan(t *testing.T) {
	ctx := context.Background()
	src, dst := preflightPair(t)
	for _, db := range []string{"src", "dst"} {
		d := src
		if db == "dst" {
			d = dst
		}
		d.Exec(t, `CREATE TABLE audit (id bigint);
			CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO audit VALUES (NEW.id); RETURN NEW; END$$;
			CREATE TRIGGER audit AFTER INSERT OR UPDATE ON users FOR EACH ROW EXECUTE FUNCTION audit()`)
	}
	if rep, err := runPreflight(t, src, dst, nil, nil, PreflightOptions{}); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("preflight with an origin-mode trigger: %v %+v", err, rep.Problems)
	}
	set, err := Introspect(ctx, dst.Pool, preflightSpec, "target")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFiring(ctx, dst.Pool, "shard2", set); err != nil {
		t.Fatalf("origin-mode trigger: %v", err)
	}

	dst.Exec(t, `ALTER TABLE users ENABLE ALWAYS TRIGGER audit`)
	err = CheckFiring(ctx, dst.Pool, "shard2", set)
	var fe *FiringError
	if !errors.As(err, &fe) || len(fe.Problems) != 1 {
		t.Fatalf("ALWAYS after PLAN: %v", err)
	}
	for _, want := range []string{
		`trigger "audit" on shard2 of public.users is ENABLE ALWAYS`,
		`fix: ALTER TABLE "public"."users" ENABLE TRIGGER "audit"`,
		`then resume the move`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q\nlacks %q", err, want)
		}
	}

	dst.Exec(t, `ALTER TABLE users ENABLE REPLICA TRIGGER audit`)
	if err := CheckFiring(ctx, dst.Pool, "shard2", set); !errors.As(err, &fe) || !strings.Contains(err.Error(), `trigger "audit" on shard2 of public.users is ENABLE REPLICA`) ||
		!strings.Contains(err.Error(), `ALTER TABLE "public"."users" DISABLE TRIGGER "audit" for the move`) {
		t.Fatalf("REPLICA after PLAN: %v", err)
	}
	dst.Exec(t, `ALTER TABLE users ENABLE TRIGGER audit`)
	if err := CheckFiring(ctx, dst.Pool, "shard2", set); err != nil {
		t.Fatalf("back in origin mode: %v", err)
	}
}
