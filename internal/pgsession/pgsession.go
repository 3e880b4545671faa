// Package pgsession is the one definition of the session every reshard
// connection runs in. A value travels between shards as text in the
// catch-up, the reverse stream and verify's row hashes: the session that
// writes the text (a walsender, an SQL peek, a fetch) and the one that parses
// it (an applier) must agree on every setting that shapes a type's text form,
// whatever the servers, databases or roles set as their defaults (a
// DateStyle 'SQL, DMY' on one side swaps day and month on the other). And a
// reshard session must see every row or fail: row_security = off makes a
// query that a row-level security policy would filter raise an error instead
// of returning fewer rows.
//
// Every connection configuration reshard builds comes from Parse* (or has
// Pin applied), so the settings travel in the startup packet: they hold from
// the first statement of a session, in replication connections too, and
// survive DISCARD ALL and RESET ALL. internal/layering fails when production
// code connects another way.
package pgsession

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Setting is one pinned session setting.
type Setting struct{ Name, Value string }

// Settings are the pinned settings, in the order SetLocal sets them.
//
//   - DateStyle, IntervalStyle, TimeZone: the text of date, time, timestamp,
//     timestamptz and interval values (and their input's field order).
//   - extra_float_digits 3: float4 and float8 printed shortest-exact (0 and
//     below round, and 1.7976931348623157e308 printed with 15 digits no longer
//     parses).
//   - bytea_output hex: the text of bytea.
//   - lc_monetary C: the text of money (symbol, separators, decimals).
//   - xmloption content, xmlbinary base64: xml parses as a fragment (a
//     DOCUMENT default refuses content), and xmlelement encodes bytea alike.
//   - standard_conforming_strings on, array_nulls on: how a literal's
//     backslashes and an array's NULL parse.
//   - row_security off: see every row or fail (a policy never hides rows
//     from a copy, a catch-up, verify or a cleanup).
var Settings = []Setting{
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"TimeZone", "UTC"},
	{"extra_float_digits", "3"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
	{"xmloption", "content"},
	{"xmlbinary", "base64"},
	{"standard_conforming_strings", "on"},
	{"array_nulls", "on"},
	{"row_security", "off"},
}

// Pin sets Settings in a connection's startup parameters (RuntimeParams of
// a pgconn.Config), replacing whatever the DSN gave for them.
func Pin(params map[string]string) {
	for _, s := range Settings {
		for k := range params { // a DSN's datestyle=... is the same setting
			if strings.EqualFold(k, s.Name) {
				delete(params, k)
			}
		}
		params[s.Name] = s.Value
	}
}

// Pinned reports whether params carry every pinned setting.
func Pinned(params map[string]string) bool {
	for _, s := range Settings {
		if params[s.Name] != s.Value {
			return false
		}
	}
	return true
}

// ParseConfig is pgconn.ParseConfig with Settings pinned (replication
// connections included: a walsender formats pgoutput's values under them)
// and checked once connected.
func ParseConfig(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	PinConfig(cfg)
	return cfg, nil
}

// PinConfig pins Settings in cfg and checks them once connected (Check).
func PinConfig(cfg *pgconn.Config) {
	Pin(cfg.RuntimeParams)
	cfg.AfterConnect = Check
}

// checkSQL reads every pinned setting in one statement, which a
// replication connection (replication=database) answers too.
var checkSQL = func() string {
	parts := make([]string, len(Settings))
	for i, s := range Settings {
		parts[i] = "current_setting('" + s.Name + "')"
	}
	return "SELECT " + strings.Join(parts, ", ")
}()

// Check fails unless the session runs under Settings: a server refuses an
// unknown startup parameter, but something in between (a connection pooler
// told to ignore some) may drop one, and the session would then format or
// parse values under the server's defaults. It is every config's
// AfterConnect: one round trip per connection.
func Check(ctx context.Context, conn *pgconn.PgConn) error {
	res, err := conn.Exec(ctx, checkSQL).ReadAll()
	if err != nil {
		return fmt.Errorf("read the session's settings: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != len(Settings) {
		return fmt.Errorf("read the session's settings: unexpected result")
	}
	for i, s := range Settings {
		if got := string(res[0].Rows[0][i]); got != s.Value {
			return fmt.Errorf("the session runs with %s = %q, not %q as reshard asked in its startup parameters: connect to the server directly, or have whatever is in between (a connection pooler) pass the parameter on", s.Name, got, s.Value)
		}
	}
	return nil
}

// ParseConnConfig is pgx.ParseConfig with Settings pinned.
func ParseConnConfig(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	PinConfig(&cfg.Config)
	return cfg, nil
}

// ParsePoolConfig is pgxpool.ParseConfig with Settings pinned.
func ParsePoolConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	PinConfig(&cfg.ConnConfig.Config)
	return cfg, nil
}
