package verify

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/tableset"
)

// Direct compares spec's tables between two databases outside any move
// (`reshard verify --source-dsn … --target-dsn …`): both sides are
// introspected (the source's set is the one compared; the target must have
// the same tables and keys), then Run compares opts.Ranges. opts.Set is
// filled from the source.
func Direct(ctx context.Context, src, dst *pgxpool.Pool, spec tableset.Spec, opts Options) (*Report, error) {
	set, err := tableset.Introspect(ctx, src, spec, "source")
	if err != nil {
		return nil, err
	}
	if _, err := tableset.Introspect(ctx, dst, spec, "target"); err != nil {
		return nil, err
	}
	opts.Set = set
	return Run(ctx, src, dst, opts)
}
