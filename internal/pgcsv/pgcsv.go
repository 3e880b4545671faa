// Package pgcsv reads a CSV file record by record as PostgreSQL's own
// COPY ... FROM (FORMAT csv, HEADER) of the file would: each record's raw
// bytes, to be passed to a COPY unchanged, and its fields' values with the
// difference COPY makes between an unquoted empty field (NULL) and a quoted
// one ("": an empty string). Go's encoding/csv cannot be used for this: it
// reads ,"", and ,, alike and turns CR LF inside a quoted field into LF.
//
// As COPY does (PostgreSQL 15): the line ending is the header line's (LF,
// CR LF or CR) and every record must end alike; a carriage return or a line
// feed that is not a line ending must be inside quotes; a quote opens a
// quoted stretch anywhere in a field, and "" inside one is a quote; a line
// that is \. alone ends the data. A UTF-8 byte order mark before the header
// is dropped (COPY's HEADER skips the whole first line; the header names
// the columns here).
package pgcsv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Field is one field's value.
type Field struct {
	Value  string
	Quoted bool // some of it was quoted: never NULL
}

// Null says whether COPY stores the field as NULL: unquoted and empty.
func (f Field) Null() bool { return !f.Quoted && f.Value == "" }

// Record is one record of the file.
type Record struct {
	// Raw is the record as written in the file, without its line ending.
	Raw []byte
	// Fields are its fields' values.
	Fields []Field
	// Line is the file's line number where the record starts (1 is the
	// header); a quoted line break makes a record span lines.
	Line int
}

// Reader reads the records of a CSV file.
type Reader struct {
	r    *bufio.Reader
	eol  string // "" until the header is read
	line int    // lines read
	done bool
}

// NewReader reads r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 1<<16)} }

// ErrSyntax is wrapped by the errors of a file COPY would refuse.
var ErrSyntax = errors.New("CSV syntax")

// Header reads the first record, which names the columns; it must be the
// first call.
func (r *Reader) Header() (Record, error) {
	if r.line != 0 {
		return Record{}, errors.New("pgcsv: Header after the first record")
	}
	if b, err := r.r.Peek(3); err == nil && bytes.Equal(b, []byte{0xEF, 0xBB, 0xBF}) {
		_, _ = r.r.Discard(3)
	}
	rec, err := r.Read()
	if errors.Is(err, io.EOF) {
		return Record{}, fmt.Errorf("%w: the file is empty; its first line must name the columns", ErrSyntax)
	}
	return rec, err
}

// Read returns the next record, or io.EOF after the last one (or a line
// that is \. alone).
func (r *Reader) Read() (Record, error) {
	if r.done {
		return Record{}, io.EOF
	}
	start := r.line + 1
	var raw []byte
	inQuote := false
	for {
		c, err := r.r.ReadByte()
		if errors.Is(err, io.EOF) {
			if inQuote {
				return Record{}, fmt.Errorf("%w: line %d: unterminated quoted field (a \" opened on line %d or after is never closed)", ErrSyntax, r.line+1, start)
			}
			r.done = true
			if len(raw) == 0 || string(raw) == `\.` {
				return Record{}, io.EOF
			}
			r.line++
			return r.record(raw, start)
		}
		if err != nil {
			return Record{}, err
		}
		if c == '"' {
			inQuote = !inQuote // "" inside quotes closes and reopens: the same for splitting lines
		}
		if inQuote || (c != '\r' && c != '\n') {
			if c == '\n' {
				r.line++
			}
			raw = append(raw, c)
			continue
		}
		// A line ending outside quotes.
		eol := string(c)
		if c == '\r' {
			if b, err := r.r.Peek(1); err == nil && b[0] == '\n' {
				_, _ = r.r.Discard(1)
				eol = "\r\n"
			}
		}
		r.line++
		if r.eol == "" {
			r.eol = eol
		} else if eol != r.eol {
			return Record{}, fmt.Errorf("%w: line %d ends in %s but the header line in %s: COPY refuses a file that mixes line endings (a carriage return or line feed inside a value must be quoted)",
				ErrSyntax, r.line, eolName(eol), eolName(r.eol))
		}
		if string(raw) == `\.` {
			r.done = true
			return Record{}, io.EOF
		}
		return r.record(raw, start)
	}
}

func eolName(s string) string {
	switch s {
	case "\r\n":
		return "CR LF"
	case "\r":
		return "CR"
	}
	return "LF"
}

// record splits raw into fields as COPY's CSV mode does.
func (r *Reader) record(raw []byte, line int) (Record, error) {
	rec := Record{Raw: raw, Line: line}
	var val []byte
	quoted, inQuote := false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inQuote && c == '"' && i+1 < len(raw) && raw[i+1] == '"':
			val = append(val, '"')
			i++
		case c == '"':
			inQuote, quoted = !inQuote, true
		case !inQuote && c == ',':
			rec.Fields = append(rec.Fields, Field{Value: string(val), Quoted: quoted})
			val, quoted = val[:0], false
		default:
			val = append(val, c)
		}
	}
	rec.Fields = append(rec.Fields, Field{Value: string(val), Quoted: quoted})
	return rec, nil
}

// EOL is the line ending of the file (the header's): "\n", "\r\n" or "\r".
func (r *Reader) EOL() string {
	if r.eol == "" {
		return "\n"
	}
	return r.eol
}
