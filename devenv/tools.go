package devenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// FindPGDump finds pg_dump beside the server binaries reshard uses (the
// directory pg_ctl resolves to, when it is a link), else on PATH, else in
// the newest /usr/lib/postgresql/*/bin.
func FindPGDump() (string, error) {
	var dirs []string
	if d, err := FindPGBin(); err == nil {
		dirs = append(dirs, d)
		if real, err := filepath.EvalSymlinks(filepath.Join(d, "pg_ctl")); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	globbed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.Reverse(globbed) // newest first
	for _, d := range dirs {
		if p := filepath.Join(d, "pg_dump"); isExec(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pg_dump"); err == nil {
		return p, nil
	}
	for _, d := range globbed {
		if p := filepath.Join(d, "pg_dump"); isExec(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pg_dump not found (beside pg_ctl, on PATH or in /usr/lib/postgresql/*/bin): %s", InstallHint)
}

// findPsql prefers the psql next to the servers' binaries.
func findPsql() (string, error) {
	if bin, err := FindPGBin(); err == nil {
		if p := filepath.Join(bin, "psql"); isExec(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("psql"); err == nil {
		return p, nil
	}
	return "", errors.New("psql not found: " + InstallHint)
}

// ErrNoServer is wrapped by the error of a server name the cluster lacks.
var ErrNoServer = errors.New("no such server")

type noServerError struct{ msg string }

func (e noServerError) Error() string        { return e.msg }
func (e noServerError) Is(target error) bool { return target == ErrNoServer }

// PsqlCommand is the psql invocation for server name (control, shard1, ...)
// on its reshard database: the password is in PGPASSWORD of env, never in
// argv. A name the cluster lacks is ErrNoServer.
func (c *Cluster) PsqlCommand(name string, extra []string) (path string, argv, env []string, err error) {
	n, ok := c.Node(name)
	if !ok {
		return "", nil, nil, noServerError{fmt.Sprintf("no server %q in %s: use one of %s", name, c.StateDir, strings.Join(c.Names(), ", "))}
	}
	path, err = findPsql()
	if err != nil {
		return "", nil, nil, err
	}
	argv = append([]string{"psql", "-h", "127.0.0.1", "-p", fmt.Sprint(n.Port), "-U", "postgres", "-d", Database}, extra...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGPASSWORD=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PGPASSWORD="+string(n.Password))
	return path, argv, env, nil
}
