package planview

import "strings"

// NextSteps are a plan's next steps: start, the command that starts the
// planned migration, or, with problems, the plan again once they are fixed.
func NextSteps(start string, problems int) []string {
	if problems > 0 {
		return []string{"reshard plan" + strings.TrimPrefix(start, "reshard")}
	}
	return []string{start}
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
