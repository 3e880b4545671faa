package cdc

import (
	"fmt"
	"regexp"
)

// Names are the objects of one stream: the slot and publication on its
// source, the replication origin on its target.
type Names struct {
	Slot        string
	Publication string
	Origin      string
}

var (
	moveIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_]{0,39}$`)
	objectRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// NamesFor derives the forward stream's names from a move id (lower-case
// letters, digits and underscores, at most 40): reshard_<move>.
func NamesFor(move string) (Names, error) { return names(move, "reshard_") }

// ReverseNamesFor derives the GRACE reverse stream's names (new owner back
// to old owner): reshard_r_<move>.
func ReverseNamesFor(move string) (Names, error) { return names(move, "reshard_r_") }

func names(move, prefix string) (Names, error) {
	if !moveIDRe.MatchString(move) {
		return Names{}, fmt.Errorf("move id %q cannot name a slot: use 1 to 40 lower-case letters, digits or underscores, starting with a letter or digit", move)
	}
	n := prefix + move
	return Names{Slot: n, Publication: n, Origin: n}, nil
}

// validName checks a slot, publication or origin name before it is used in a
// replication command (which cannot take parameters).
func validName(kind, name string) error {
	if !objectRe.MatchString(name) {
		return fmt.Errorf("%s name %q is invalid: use lower-case letters, digits and underscores, at most 63, not starting with a digit", kind, name)
	}
	return nil
}
