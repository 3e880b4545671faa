package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
)

// A key change that leaves a TOASTed column unchanged goes through the
// partial-update path (partial.go's immediate one). A duplicate there on a
// unique constraint other than the primary key is that constraint's
// collision, named with its key and value: on 8875036 it was reported as a
// "primary-key collision" of the row's new id.
func TestPartialUpdateUniqueCollisionNamesTheConstraint(t *testing.T) {
	e := newEnv(t, "partialuniq", usersOnly...)
	e.createSlot(t)
	outside := outsideUsers(1, 1)[0]
	e.dst.Exec(t, "CREATE UNIQUE INDEX users_email_key ON users (email)")
	e.dst.Exec(t, "INSERT INTO users VALUES ($1, 'taken@example.com', 0, 'mine')", outside)
	var inside, moved int64 = 1, 0
	for !inTestRanges(inside) {
		inside++
	}
	for moved = inside + 1; !inTestRanges(moved); moved++ {
	}
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// A payload stored out of line (TOAST), so that an update that leaves
	// it alone does not send it.
	e.src.Exec(t, "INSERT INTO users SELECT $1, 'free@example.com', 0, string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 1000) g", inside)
	drain(t, e, s)
	e.src.Exec(t, "UPDATE users SET id = $2, email = 'taken@example.com' WHERE id = $1", inside, moved)
	err = <-done
	var ue *pgerr.UniqueError
	var ce *CollisionError
	if !errors.As(err, &ue) || errors.As(err, &ce) || pgerr.Retryable(err) {
		t.Fatalf("Run = %v, want a non-retryable collision on users_email_key, not a primary-key collision", err)
	}
	if want := `unique constraint "users_email_key" of public.users: Key (email)=(taken@example.com) already exists on the target`; !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %q\nlacks %q", err, want)
	}
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1 AND payload = 'mine'", outside); n != 1 {
		t.Fatal("the target's own row changed")
	}
}

func TestOnPrimaryKey(t *testing.T) {
	p := &tablePlan{cols: []tableset.Column{{Name: "id"}, {Name: "Tenant"}, {Name: "email"}}, pk: []int{1, 0}}
	for detail, want := range map[string]bool{
		`Key ("Tenant", id)=(7, 42) already exists.`:           true,
		`Key (email)=(a@example.com) already exists.`:          false,
		`Key ("Tenant", id, email)=(7, 42, a) already exists.`: false,
		``: false,
	} {
		if got := p.onPrimaryKey(detail); got != want {
			t.Errorf("onPrimaryKey(%q) = %v, want %v", detail, got, want)
		}
	}
}
