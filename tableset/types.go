package tableset

import (
	"context"
	"errors"
	"fmt"
)

// CheckTypes is the Problem.Check of a column type a server lacks.
const CheckTypes = "types"

// MissingTypes names the types the columns of tables use on from (enums,
// domains, composite and range types, types of extensions; an array's
// element type) that to lacks, each with what to create: the extension, or
// the type (an enum's labels given). Built-in types are not checked. nil
// when to has them all. The names (fromName, toName) are for messages.
func MissingTypes(ctx context.Context, from, to Querier, tables []Table, fromName, toName string) error {
	var errs []error
	seen := map[string]bool{}
	for _, t := range tables {
		rows, err := from.Query(ctx, `
			SELECT a.attname, format('%I.%I', n.nspname, ty.typname), ty.typtype::text,
			       coalesce(e.extname, ''),
			       CASE ty.typtype WHEN 'e' THEN (SELECT string_agg(quote_literal(enumlabel), ', ' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = ty.oid)
			                       WHEN 'd' THEN format_type(ty.typbasetype, ty.typtypmod) ELSE '' END
			FROM pg_attribute a
			JOIN pg_type t0 ON t0.oid = a.atttypid
			JOIN pg_type ty ON ty.oid = CASE WHEN t0.typcategory = 'A' AND t0.typelem <> 0 THEN t0.typelem ELSE t0.oid END
			JOIN pg_namespace n ON n.oid = ty.typnamespace
			LEFT JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = ty.oid AND d.deptype = 'e'
			LEFT JOIN pg_extension e ON e.oid = d.refobjid
			WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
			  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
			ORDER BY a.attnum`, t.Quoted())
		if err != nil {
			return fmt.Errorf("read the column types of %s on %s: %w", t, fromName, err)
		}
		type colType struct{ col, typ, kind, ext, def string }
		var types []colType
		for rows.Next() {
			var c colType
			if err := rows.Scan(&c.col, &c.typ, &c.kind, &c.ext, &c.def); err != nil {
				rows.Close()
				return err
			}
			types = append(types, c)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the column types of %s on %s: %w", t, fromName, err)
		}
		for _, c := range types {
			if seen[c.typ] {
				continue
			}
			var ok bool
			if err := to.QueryRow(ctx, `SELECT to_regtype($1) IS NOT NULL`, c.typ).Scan(&ok); err != nil {
				return fmt.Errorf("look for type %s on %s: %w", c.typ, toName, err)
			}
			if ok {
				continue
			}
			seen[c.typ] = true
			p := &Problem{Check: CheckTypes, Shard: toName, Table: t.String()}
			switch {
			case c.ext != "":
				p.Problem = fmt.Sprintf("column %s.%s is of type %s, of the extension %s, which %s lacks", t, c.col, c.typ, c.ext, toName)
				p.Fix = fmt.Sprintf("install it on %s: CREATE EXTENSION %s (as on %s)", toName, c.ext, fromName)
			case c.kind == "e":
				p.Problem = fmt.Sprintf("column %s.%s is of the enum type %s, which %s lacks", t, c.col, c.typ, toName)
				p.Fix = fmt.Sprintf("create it on %s as on %s: CREATE TYPE %s AS ENUM (%s)", toName, fromName, c.typ, c.def)
			case c.kind == "d":
				p.Problem = fmt.Sprintf("column %s.%s is of the domain %s (over %s), which %s lacks", t, c.col, c.typ, c.def, toName)
				p.Fix = fmt.Sprintf("create it on %s as on %s: CREATE DOMAIN %s AS %s ... (its constraints as on %s)", toName, fromName, c.typ, c.def, fromName)
			default:
				kind := map[string]string{"c": "composite type", "r": "range type", "m": "multirange type"}[c.kind]
				if kind == "" {
					kind = "type"
				}
				p.Problem = fmt.Sprintf("column %s.%s is of the %s %s, which %s lacks", t, c.col, kind, c.typ, toName)
				p.Fix = fmt.Sprintf("create it on %s as it is on %s (CREATE TYPE %s ...)", toName, fromName, c.typ)
			}
			errs = append(errs, p)
		}
	}
	return errors.Join(errs...)
}
