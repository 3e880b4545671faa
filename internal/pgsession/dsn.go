package pgsession

import (
	"net/url"
	"regexp"
	"strings"
)

var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// Redact returns dsn with any password replaced, for messages and logs.
// It handles both URL (postgres://user:pw@host/db?password=pw) and
// keyword/value (host=... password=...) forms.
func Redact(dsn string) string {
	const mask = "xxxxx"
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparsable connection URL)" // might hold a password anywhere
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), mask)
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", mask)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "${1}"+mask)
}

// HasPassword says whether dsn carries a password (an unparsable URL is
// taken to).
func HasPassword(dsn string) bool {
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return true // cannot tell; be safe
		}
		_, ok := u.User.Password()
		return ok || u.Query().Has("password")
	}
	return kvPassword.MatchString(dsn)
}

func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}
