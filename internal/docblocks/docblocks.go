// Package docblocks reads the ```sh blocks of the repository's Markdown
// (README.md, docs/operations.md) as the command lines the doc test runs:
// e2e's TestDocs runs every line of every block against a fresh local
// cluster, and cmd/reshard's TestDocBlocksParse checks, without running
// anything, that each line is one TestDocs knows how to run and that each
// reshard line names commands and flags the CLI has.
//
// A block's lines are simple commands: words, '…' and "…" quoting, a
// placeholder in angle brackets (<id>), a trailing & (run in the
// background), a trailing # comment, and lines that hold only a comment
// (the continuation of the line above's). Pipes, redirections, ';', '&&',
// variables and substitutions are refused: the test runs each line without
// a shell, exactly as its words say.
//
// An HTML comment right before a block's fence (blank lines and other
// such comments between them allowed) tells the test more:
//
//	<!-- doc-test: skip <reason> -->     the block is not run (checked only)
//	<!-- doc-test: setup <command> -->   run first, in the block's directory
//
// The setup lines of a block written for the reader's own servers bring
// the local cluster to the state the block assumes.
package docblocks

import (
	"fmt"
	"os"
	"path"
	"strings"
)

// Files are the Markdown files whose blocks are run, relative to the
// repository's root.
var Files = []string{"README.md", "docs/operations.md"}

// Programs are those TestDocs runs: reshard (as "reshard" or "bin/reshard",
// the binary built from the tree) and psql (PostgreSQL's, next to the
// servers).
var Programs = []string{"reshard", "psql"}

// Placeholders are the words TestDocs replaces in a line before running it.
var Placeholders = map[string]string{
	"<id>":               "the id of the migration the block started last",
	"<shard database>":   "the URI of shard1's database in the local cluster (the password in PGPASSWORD)",
	"<control database>": "the URI of the control database in the local cluster (the password in PGPASSWORD)",
}

// Block is one ```sh block.
type Block struct {
	File  string // as in Files
	Line  int    // of its opening fence, from 1
	Skip  string // the reason given by doc-test: skip; "" when it runs
	Setup []Line // from doc-test: setup comments, in order
	Lines []Line
}

func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Line is one command line.
type Line struct {
	File string
	Line int    // in the file, from 1
	Text string // as written, without its comment
	Args []string
	// Background: the line ends with &.
	Background bool
	// Err says why the line cannot be run without a shell; Args is then
	// nil.
	Err error
}

func (l Line) String() string { return fmt.Sprintf("%s:%d: %s", l.File, l.Line, l.Text) }

// Program is the program the line runs: "reshard" for reshard and
// bin/reshard, else its first word.
func (l Line) Program() string {
	if len(l.Args) == 0 {
		return ""
	}
	if l.Args[0] == "reshard" || l.Args[0] == "bin/reshard" {
		return "reshard"
	}
	return l.Args[0]
}

// Known says whether TestDocs can run the line's program.
func (l Line) Known() bool {
	for _, p := range Programs {
		if l.Program() == p {
			return true
		}
	}
	return false
}

// Placeholders are the line's words in angle brackets.
func (l Line) Placeholders() []string {
	var ps []string
	for _, a := range l.Args {
		for rest := a; ; {
			i := strings.Index(rest, "<")
			if i < 0 {
				break
			}
			j := strings.Index(rest[i:], ">")
			if j < 0 {
				break
			}
			ps = append(ps, rest[i:i+j+1])
			rest = rest[i+j+1:]
		}
	}
	return ps
}

// ReadFile reads the blocks of the file name (as in Files) under root.
func ReadFile(root, name string) ([]Block, error) {
	b, err := os.ReadFile(path.Join(root, name))
	if err != nil {
		return nil, err
	}
	return Parse(name, string(b))
}

const marker = "<!-- doc-test:"

// Parse reads the ```sh blocks of Markdown text; name is the file's, for
// positions. A doc-test comment that is not right before a ```sh fence,
// or that says neither skip nor setup, is an error.
func Parse(name, text string) ([]Block, error) {
	var (
		blocks  []Block
		pending *Block // markers read, fence not yet
		cur     *Block // inside a ```sh block
		inOther bool   // inside another fenced block
	)
	lines := strings.Split(text, "\n")
	for i, raw := range lines {
		n := i + 1
		trimmed := strings.TrimSpace(raw)
		switch {
		case cur != nil:
			if strings.HasPrefix(trimmed, "```") {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			if l, ok := parseLine(name, n, raw); ok {
				cur.Lines = append(cur.Lines, l)
			}
			continue
		case inOther:
			if strings.HasPrefix(trimmed, "```") {
				inOther = false
			}
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, marker):
			body, ok := strings.CutSuffix(strings.TrimPrefix(trimmed, marker), "-->")
			if !ok {
				return nil, fmt.Errorf("%s:%d: a doc-test comment must end on its own line with -->", name, n)
			}
			if pending == nil {
				pending = &Block{File: name}
			}
			verb, arg, _ := strings.Cut(strings.TrimSpace(body), " ")
			arg = strings.TrimSpace(arg)
			switch verb {
			case "skip":
				if arg == "" {
					return nil, fmt.Errorf("%s:%d: doc-test: skip needs a reason (<!-- doc-test: skip why it cannot run here -->)", name, n)
				}
				pending.Skip = arg
			case "setup":
				l, ok := parseLine(name, n, arg)
				if !ok {
					return nil, fmt.Errorf("%s:%d: doc-test: setup needs a command", name, n)
				}
				pending.Setup = append(pending.Setup, l)
			default:
				return nil, fmt.Errorf("%s:%d: doc-test: %q is neither skip nor setup", name, n, verb)
			}
		case trimmed == "```sh":
			cur = &Block{File: name, Line: n}
			if pending != nil {
				cur.Skip, cur.Setup = pending.Skip, pending.Setup
				pending = nil
			}
		case strings.HasPrefix(trimmed, "```"):
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: a doc-test comment is followed by a %s block: it applies to ```sh blocks only", name, n, trimmed)
			}
			inOther = true
		case trimmed == "":
		default:
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: a doc-test comment must come right before the ```sh fence of its block", name, n)
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the ```sh block is not closed", name, cur.Line)
	}
	if pending != nil {
		return nil, fmt.Errorf("%s: a doc-test comment at the end is followed by no block", name)
	}
	return blocks, nil
}

// parseLine reads one line of a block; ok is false for a blank line or a
// comment.
func parseLine(name string, n int, raw string) (Line, bool) {
	l := Line{File: name, Line: n}
	var (
		words []string
		w     strings.Builder
		inW   bool
		end   = len(raw)
	)
	flush := func() {
		if inW {
			words = append(words, w.String())
			w.Reset()
			inW = false
		}
	}
	fail := func(format string, args ...any) (Line, bool) {
		l.Text = strings.TrimSpace(raw[:end])
		l.Err = fmt.Errorf(format, args...)
		return l, true
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inW:
			end = i
			i = len(raw)
		case c == '\'' || c == '"':
			j := strings.IndexByte(raw[i+1:], c)
			if j < 0 {
				return fail("unclosed %c quote", c)
			}
			q := raw[i+1 : i+1+j]
			if c == '"' && strings.ContainsAny(q, "$`\\") {
				return fail("a $, ` or \\ inside double quotes needs a shell")
			}
			w.WriteString(q)
			inW = true
			i += j + 1
		case c == '<':
			j := strings.IndexByte(raw[i:], '>')
			if j < 0 {
				return fail("a < without > is a redirection, which needs a shell")
			}
			w.WriteString(raw[i : i+j+1])
			inW = true
			i += j
		case strings.IndexByte("|;>$`()\\{}*?", c) >= 0:
			return fail("%q needs a shell: write the line as a plain command", c)
		case c == '&':
			rest := strings.TrimSpace(raw[i+1:])
			if rest != "" && !strings.HasPrefix(rest, "#") {
				return fail("& is only understood at the end of a line (run in the background)")
			}
			flush()
			l.Background = true
			end = i + 1
			i = len(raw)
		default:
			w.WriteByte(c)
			inW = true
		}
	}
	flush()
	l.Text = strings.TrimSpace(raw[:end])
	if len(words) == 0 {
		return Line{}, false
	}
	l.Args = words
	return l, true
}
