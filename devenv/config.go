package devenv

import (
	"errors"
	"fmt"
	"net"

	"github.com/reshard/reshard/internal/pgsession"
)

// PasswordOverrideEnv names the environment variable whose password wins
// over every other password source of a configuration file.
const PasswordOverrideEnv = "RESHARD_PASSWORD"

// Check validates every field of a configuration file (reshard.yaml),
// before anything runs. Its errors name the field and the fix, and never
// quote a password: a DSN that holds one is refused, shown redacted.
func (wc WorkerConfig) Check() error {
	if l := wc.Worker.Listen; l != "" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			return fmt.Errorf("worker.listen %q: want host:port, e.g. 127.0.0.1:9464", l)
		}
	}
	if wc.Control == "" {
		return errors.New("control: the DSN of the control database is missing")
	}
	if err := checkDSN(wc.Control); err != nil {
		return fmt.Errorf("control: %v", err)
	}
	if len(wc.Shards) == 0 {
		return errors.New("shards: no shard is configured (want name: DSN lines)")
	}
	for name, dsn := range wc.Shards {
		if !ValidShardName(name) {
			return fmt.Errorf("shards: shard name %q: use letters, digits, '-' and '_' (at most 63)", name)
		}
		if err := checkDSN(dsn); err != nil {
			return fmt.Errorf("shards.%s: %v", name, err)
		}
	}
	for name, dsn := range wc.Standbys {
		if _, ok := wc.Shards[name]; !ok {
			return fmt.Errorf("shards.%s.standby: no DSN for the shard itself (want dsn: and standby:)", name)
		}
		if err := checkDSN(dsn); err != nil {
			return fmt.Errorf("shards.%s.standby: %v", name, err)
		}
	}
	for name, sc := range wc.Capacity {
		if _, ok := wc.Shards[name]; !ok {
			return fmt.Errorf("capacity.%s: no such shard under shards", name)
		}
		if sc.DiskBytes < 0 || sc.WALBudgetBytes < 0 {
			return fmt.Errorf("capacity.%s: disk_bytes and wal_budget_bytes are byte counts: want 0 (not configured) or more", name)
		}
	}
	if wc.Temporal.Address == "" {
		return errors.New("temporal.address: the Temporal frontend (host:port) is missing")
	}
	return nil
}

// checkDSN parses a DSN and refuses one that carries a password: the file is
// readable by anyone who runs the CLI, and DSNs get printed. Errors never
// quote the DSN's password.
func checkDSN(dsn string) error {
	if _, err := pgsession.ParseConfig(dsn); err != nil {
		return errors.New("not a valid PostgreSQL connection string (want postgres://user@host:port/db?sslmode=disable or host=... dbname=...)")
	}
	if pgsession.HasPassword(dsn) {
		return fmt.Errorf("%s holds a password: remove it and put the password in password_file or $%s", pgsession.Redact(dsn), PasswordOverrideEnv)
	}
	return nil
}

// ValidShardName: letters, digits, '-' and '_', at most 63.
func ValidShardName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
