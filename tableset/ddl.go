package tableset

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// DDLKind says in which order the shards of a keyspace get a change.
type DDLKind string

const (
	// DDLAdditive: a column added, a type widened, a default or NOT NULL
	// changed, an index built. The targets of running moves get it first:
	// an applier then never receives a column its target lacks.
	DDLAdditive DDLKind = "additive"
	// DDLDrop: a non-key column dropped. The targets get it last: until
	// then they keep a column the sources no longer send, which the copy
	// and the appliers leave to its default.
	DDLDrop DDLKind = "drop"
)

// DDL is one statement schema apply runs on every shard, as classified by
// ParseDDL.
type DDL struct {
	Table Table   // the registered table it changes
	Kind  DDLKind // the shards' order
	// SQL is the statement as run on each shard: the table schema-qualified,
	// one action per ALTER TABLE, a CREATE INDEX made CONCURRENTLY and IF
	// NOT EXISTS.
	SQL string
	// What describes the change for reports: "add column note".
	What string
	// Column is the column the change adds or drops (empty for an index).
	Column string
	// Index is the name of the index a CREATE INDEX builds (Concurrent).
	Index string
	// Concurrent: CREATE INDEX CONCURRENTLY, which runs outside a
	// transaction and takes a lock that lets the application's writes through.
	Concurrent bool
}

// RefusedDDLError is a statement schema apply will not run, with the reason.
type RefusedDDLError struct {
	Statement string
	Reason    string
}

func (e *RefusedDDLError) Error() string {
	return fmt.Sprintf("refused %q: %s; nothing was changed", e.Statement, e.Reason)
}

// ParseDDL classifies a script of SQL statements against the keyspace's
// tables (their shapes as one shard has them). It accepts only what a running
// move adapts to, and refuses the whole script, naming the statement and the
// reason, at the first statement it refuses or cannot classify: it parses
// conservatively, and a statement it does not understand is never run.
//
// Accepted: ALTER TABLE of a registered table with ADD [COLUMN] (no
// constraint, identity, serial type, or default other than a constant: a
// default computed at ALTER time gives each shard its own values for the
// existing rows), DROP [COLUMN] of a column outside the shard key and the
// primary key, ALTER [COLUMN] ... [SET DATA] TYPE, SET/DROP DEFAULT, SET/DROP
// NOT NULL of such a column (SET DEFAULT and SET NOT NULL on the key too);
// CREATE INDEX (not UNIQUE, named), run CONCURRENTLY. Refused: renames, SET
// SCHEMA, REPLICA IDENTITY, constraints (the primary key among them), any
// change of the key or primary-key columns' type or nullability, and every
// other statement.
func ParseDDL(script string, tables []Table) ([]DDL, error) {
	stmts, err := splitStatements(script)
	if err != nil {
		return nil, err
	}
	if len(stmts) == 0 {
		return nil, &RefusedDDLError{Statement: strings.TrimSpace(script), Reason: "no statement found"}
	}
	var out []DDL
	for _, s := range stmts {
		ds, err := classify(s, tables)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// token is one lexical token of a statement: a word (unquoted identifiers
// and keywords, folded to lower case), a quoted identifier (as written,
// unquoted), a string or number literal, or a punctuation character.
type token struct {
	kind       byte // 'w' word, 'q' quoted identifier, 's' string, 'n' number, 'p' punctuation
	text       string
	start, end int // byte span in the statement
}

func (t token) is(words ...string) bool {
	return t.kind == 'w' && slices.Contains(words, t.text)
}

// ident is the token's identifier (case-folded unless quoted), ok false
// when it is not one.
func (t token) ident() (string, bool) {
	switch t.kind {
	case 'w', 'q':
		return t.text, true
	}
	return "", false
}

type statement struct {
	text   string
	tokens []token
}

// splitStatements splits a script at top-level semicolons and tokenizes
// each statement. Comments are dropped; dollar-quoted strings, which only
// function bodies need, are refused.
func splitStatements(script string) ([]statement, error) {
	var out []statement
	var cur []token
	start := -1
	flush := func(end int) {
		if len(cur) > 0 {
			text := script[start:end]
			for i := range cur {
				cur[i].start -= start
				cur[i].end -= start
			}
			out = append(out, statement{text: strings.TrimSpace(text), tokens: cur})
		}
		cur, start = nil, -1
	}
	add := func(t token) {
		if start < 0 {
			start = t.start
		}
		cur = append(cur, t)
	}
	for i := 0; i < len(script); {
		c := script[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && strings.HasPrefix(script[i:], "--"):
			for i < len(script) && script[i] != '\n' {
				i++
			}
		case c == '/' && strings.HasPrefix(script[i:], "/*"):
			end := strings.Index(script[i+2:], "*/")
			if end < 0 {
				return nil, &RefusedDDLError{Statement: strings.TrimSpace(script[i:]), Reason: "unterminated comment"}
			}
			i += end + 4
		case c == ';':
			flush(i)
			i++
		case c == '"':
			j := i + 1
			var b strings.Builder
			for {
				if j >= len(script) {
					return nil, &RefusedDDLError{Statement: strings.TrimSpace(script[i:]), Reason: "unterminated quoted identifier"}
				}
				if script[j] == '"' {
					if j+1 < len(script) && script[j+1] == '"' {
						b.WriteByte('"')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(script[j])
				j++
			}
			add(token{kind: 'q', text: b.String(), start: i, end: j + 1})
			i = j + 1
		case c == '\'' || ((c == 'E' || c == 'e') && i+1 < len(script) && script[i+1] == '\''):
			j := i + 1
			if c != '\'' {
				j++
			}
			for {
				if j >= len(script) {
					return nil, &RefusedDDLError{Statement: strings.TrimSpace(script[i:]), Reason: "unterminated string"}
				}
				if script[j] == '\\' && c != '\'' {
					j += 2
					continue
				}
				if script[j] == '\'' {
					if j+1 < len(script) && script[j+1] == '\'' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			add(token{kind: 's', text: script[i : j+1], start: i, end: j + 1})
			i = j + 1
		case c == '$':
			return nil, &RefusedDDLError{Statement: strings.TrimSpace(script[i:]), Reason: "dollar quoting is not accepted (schema apply takes ALTER TABLE and CREATE INDEX only)"}
		case c == '_' || unicode.IsLetter(rune(c)) || c >= 0x80:
			j := i
			for j < len(script) && (script[j] == '_' || script[j] == '$' || script[j] >= 0x80 || unicode.IsLetter(rune(script[j])) || unicode.IsDigit(rune(script[j]))) {
				j++
			}
			add(token{kind: 'w', text: strings.ToLower(script[i:j]), start: i, end: j})
			i = j
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(script) && script[i+1] >= '0' && script[i+1] <= '9'):
			j := i
			for j < len(script) && (script[j] == '.' || script[j] == '_' || (script[j] >= '0' && script[j] <= '9') || script[j] == 'e' || script[j] == 'E') {
				j++
			}
			add(token{kind: 'n', text: script[i:j], start: i, end: j})
			i = j
		case c == ':' && strings.HasPrefix(script[i:], "::"):
			add(token{kind: 'p', text: "::", start: i, end: i + 2})
			i += 2
		default:
			add(token{kind: 'p', text: string(c), start: i, end: i + 1})
			i++
		}
	}
	flush(len(script))
	return out, nil
}

// parser walks one statement's tokens.
type parser struct {
	s   statement
	pos int
}

func (p *parser) peek() token {
	if p.pos < len(p.s.tokens) {
		return p.s.tokens[p.pos]
	}
	return token{kind: 0}
}

func (p *parser) next() token {
	t := p.peek()
	if p.pos < len(p.s.tokens) {
		p.pos++
	}
	return t
}

// accept consumes the words in sequence if they all come next.
func (p *parser) accept(words ...string) bool {
	for i, w := range words {
		if p.pos+i >= len(p.s.tokens) || !p.s.tokens[p.pos+i].is(w) {
			return false
		}
	}
	p.pos += len(words)
	return true
}

func (p *parser) refuse(reason string, args ...any) error {
	return &RefusedDDLError{Statement: p.s.text, Reason: fmt.Sprintf(reason, args...)}
}

// qualifiedName reads [schema.]name and returns its parts and span.
func (p *parser) qualifiedName() (schema, name string, start, end int, ok bool) {
	t := p.next()
	n, ok := t.ident()
	if !ok {
		return "", "", 0, 0, false
	}
	start, end = t.start, t.end
	if p.peek().kind == 'p' && p.peek().text == "." {
		p.next()
		t2 := p.next()
		n2, ok := t2.ident()
		if !ok {
			return "", "", 0, 0, false
		}
		return n, n2, start, t2.end, true
	}
	return "", n, start, end, true
}

// findTable resolves a possibly unqualified name among the registered
// tables.
func (p *parser) findTable(tables []Table, schema, name string) (Table, error) {
	var found []Table
	for _, t := range tables {
		if t.Name == name && (schema == "" || t.Schema == schema) {
			found = append(found, t)
		}
	}
	shown := name
	if schema != "" {
		shown = schema + "." + name
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		var names []string
		for _, t := range tables {
			names = append(names, t.String())
		}
		return Table{}, p.refuse("%s is not a table of the keyspace (%s): schema apply changes the keyspace's tables only", shown, strings.Join(names, ", "))
	}
	return Table{}, p.refuse("%s names several tables of the keyspace: qualify it with its schema", shown)
}

func classify(s statement, tables []Table) ([]DDL, error) {
	p := &parser{s: s}
	switch {
	case p.accept("alter", "table"):
		return p.alterTable(tables)
	case p.peek().is("create"):
		return p.createIndex(tables)
	}
	return nil, p.refuse("schema apply runs ALTER TABLE and CREATE INDEX only")
}

func (p *parser) alterTable(tables []Table) ([]DDL, error) {
	p.accept("if", "exists")
	p.accept("only")
	schema, name, _, nameEnd, ok := p.qualifiedName()
	if !ok {
		return nil, p.refuse("cannot read the table's name")
	}
	if p.peek().kind == 'p' && p.peek().text == "*" {
		p.next()
	}
	t, err := p.findTable(tables, schema, name)
	if err != nil {
		return nil, err
	}
	_ = nameEnd
	// One action per statement, so that each shard says of each whether it
	// was applied or already there.
	var actions [][]token
	depth, from := 0, p.pos
	for i := p.pos; i < len(p.s.tokens); i++ {
		tk := p.s.tokens[i]
		if tk.kind != 'p' {
			continue
		}
		switch tk.text {
		case "(":
			depth++
		case ")":
			depth--
		case ",":
			if depth == 0 {
				actions = append(actions, p.s.tokens[from:i])
				from = i + 1
			}
		}
	}
	actions = append(actions, p.s.tokens[from:])
	var out []DDL
	for _, a := range actions {
		if len(a) == 0 {
			return nil, p.refuse("an empty action")
		}
		d, err := p.alterAction(t, a)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// keyRole says why a column may not change: "the shard key", "a
// primary-key column", or "".
func keyRole(t Table, col string) string {
	if col == t.KeyColumn {
		return "the shard key of " + t.String()
	}
	if slices.Contains(t.PK, col) {
		return "a primary-key column of " + t.String()
	}
	return ""
}

func (p *parser) alterAction(t Table, a []token) (DDL, error) {
	sub := &parser{s: statement{text: p.s.text, tokens: a}}
	body := strings.TrimSpace(p.s.text[a[0].start:a[len(a)-1].end])
	d := DDL{Table: t, Kind: DDLAdditive, SQL: "ALTER TABLE " + t.Quoted() + " " + body}
	switch {
	case sub.accept("rename"):
		return d, p.refuse("a rename is refused: the copy and the appliers match columns by name and the registry names the table (add a new column and drop the old one instead)")
	case sub.accept("set", "schema"):
		return d, p.refuse("moving %s to another schema changes a registered table's identity", t)
	case sub.accept("replica", "identity"):
		return d, p.refuse("the replica identity of %s is what the appliers find rows by", t)
	case sub.accept("add"):
		if sub.peek().is("constraint", "primary", "unique", "check", "foreign", "exclude") {
			if sub.peek().is("primary") || containsWords(a, "primary", "key") {
				return d, p.refuse("a primary-key change of %s is refused: the copy, the appliers and verify find rows by it", t)
			}
			return d, p.refuse("a constraint is not among the changes a running move adapts to (one shard's constraint can refuse rows moving in from another); add it between moves")
		}
		sub.accept("column")
		sub.accept("if", "not", "exists")
		col, ok := sub.next().ident()
		if !ok {
			return d, p.refuse("cannot read the new column's name")
		}
		rest := a[sub.pos:]
		if err := p.checkNewColumn(col, rest); err != nil {
			return d, err
		}
		d.What, d.Column = "add column "+col, col
		return d, nil
	case sub.accept("drop"):
		if sub.peek().is("constraint") {
			return d, p.refuse("dropping a constraint is refused (the primary key's among them: the copy, the appliers and verify find rows by it); drop it between moves")
		}
		sub.accept("column")
		sub.accept("if", "exists")
		col, ok := sub.next().ident()
		if !ok {
			return d, p.refuse("cannot read the dropped column's name")
		}
		if r := keyRole(t, col); r != "" {
			return d, p.refuse("%s is %s: dropping it is refused", col, r)
		}
		if sub.pos < len(a) && !(sub.peek().is("restrict", "cascade") && sub.pos == len(a)-1) {
			return d, p.refuse("cannot classify the words after DROP COLUMN %s", col)
		}
		d.Kind, d.What, d.Column = DDLDrop, "drop column "+col, col
		return d, nil
	case sub.accept("alter"):
		sub.accept("column")
		col, ok := sub.next().ident()
		if !ok {
			return d, p.refuse("cannot read the altered column's name")
		}
		role := keyRole(t, col)
		switch {
		case sub.accept("set", "data", "type"), sub.accept("type"):
			if role != "" {
				return d, p.refuse("%s is %s: changing its type is refused (tokens and fences hash it by type)", col, role)
			}
			d.What = "change the type of " + col
		case sub.accept("set", "default"), sub.accept("drop", "default"):
			d.What = "change the default of " + col
		case sub.accept("set", "not", "null"):
			d.What = "set " + col + " NOT NULL"
		case sub.accept("drop", "not", "null"):
			if role != "" {
				return d, p.refuse("%s is %s: it must stay NOT NULL", col, role)
			}
			d.What = "drop NOT NULL of " + col
		default:
			return d, p.refuse("cannot classify this ALTER COLUMN %s (schema apply takes TYPE, SET/DROP DEFAULT and SET/DROP NOT NULL)", col)
		}
		return d, nil
	}
	return d, p.refuse("cannot classify this ALTER TABLE action (schema apply takes ADD COLUMN, DROP COLUMN and ALTER COLUMN)")
}

func containsWords(a []token, words ...string) bool {
	for i := range a {
		if i+len(words) > len(a) {
			return false
		}
		ok := true
		for j, w := range words {
			ok = ok && a[i+j].is(w)
		}
		if ok {
			return true
		}
	}
	return false
}

// checkNewColumn refuses a new column whose existing rows would get values
// of their shard's own (a sequence, an identity, a default computed at ALTER
// time), or that carries a constraint.
func (p *parser) checkNewColumn(col string, rest []token) error {
	if len(rest) == 0 {
		return p.refuse("the new column %s has no type", col)
	}
	if rest[0].is("serial", "serial2", "serial4", "serial8", "smallserial", "bigserial") {
		return p.refuse("a serial column fills the existing rows from each shard's own sequence, so a moved row would differ between shards; use a plain type")
	}
	for i, tk := range rest {
		switch {
		case tk.is("primary"), tk.is("unique"), tk.is("references"), tk.is("check"), tk.is("constraint"), tk.is("exclude"):
			return p.refuse("the new column %s carries a constraint (%s), which is not among the changes a running move adapts to: add the column, and the constraint between moves", col, strings.ToUpper(tk.text))
		case tk.is("generated") && containsWords(rest[i:], "identity"):
			return p.refuse("an identity column fills the existing rows from each shard's own sequence, so a moved row would differ between shards")
		case tk.is("default"):
			if !constantDefault(rest[i+1:]) {
				return p.refuse("the default of new column %s is not a constant: computed at ALTER time (now(), random(), a sequence) it gives the existing rows of each shard their own values; add the column without a default, or with a constant, and set the default afterwards", col)
			}
		}
	}
	return nil
}

// constantDefault reports whether the tokens after DEFAULT start with a
// constant (a literal, TRUE/FALSE/NULL, optionally signed and cast) that
// ends the expression (the end, or NOT NULL / NULL / COLLATE follow).
func constantDefault(ts []token) bool {
	i := 0
	if i < len(ts) && ts[i].kind == 'p' && (ts[i].text == "-" || ts[i].text == "+") {
		i++
	}
	if i >= len(ts) {
		return false
	}
	switch {
	case ts[i].kind == 's', ts[i].kind == 'n', ts[i].is("true", "false", "null"):
		i++
	default:
		return false
	}
	for i+1 < len(ts) && ts[i].kind == 'p' && ts[i].text == "::" {
		i += 2 // a cast to a type name
		for i < len(ts) && ts[i].kind == 'p' && ts[i].text == "(" {
			for i < len(ts) && !(ts[i].kind == 'p' && ts[i].text == ")") {
				i++
			}
			i++
		}
	}
	return i >= len(ts) || ts[i].is("not", "null", "collate")
}

func (p *parser) createIndex(tables []Table) ([]DDL, error) {
	p.accept("create")
	if p.peek().is("unique") {
		return nil, p.refuse("a unique index can refuse rows moving in from another shard; create it between moves")
	}
	if !p.accept("index") {
		return nil, p.refuse("schema apply runs ALTER TABLE and CREATE INDEX only")
	}
	p.accept("concurrently")
	p.accept("if", "not", "exists")
	if p.peek().is("on") {
		return nil, p.refuse("name the index, so that a retry finds it instead of building a second one")
	}
	nameTok := p.next()
	idx, ok := nameTok.ident()
	if !ok {
		return nil, p.refuse("cannot read the index's name")
	}
	if !p.accept("on") {
		return nil, p.refuse("cannot read the index's name (a schema-qualified index name is not accepted: the index lives in its table's schema)")
	}
	if p.peek().is("only") {
		return nil, p.refuse("ON ONLY is for partitioned tables, which reshard does not move")
	}
	schema, name, _, nameEnd, ok := p.qualifiedName()
	if !ok {
		return nil, p.refuse("cannot read the table's name")
	}
	t, err := p.findTable(tables, schema, name)
	if err != nil {
		return nil, err
	}
	rest := strings.TrimSpace(p.s.text[nameEnd:])
	return []DDL{{
		Table: t, Kind: DDLAdditive, What: "create index " + idx, Index: idx, Concurrent: true,
		SQL: "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + quoteIdent(idx) + " ON " + t.Quoted() + " " + rest,
	}}, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
