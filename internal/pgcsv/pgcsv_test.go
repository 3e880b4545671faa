package pgcsv

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func readAll(t *testing.T, file string) (Record, []Record, error) {
	t.Helper()
	r := NewReader(strings.NewReader(file))
	h, err := r.Header()
	if err != nil {
		return h, nil, err
	}
	var out []Record
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return h, out, nil
		}
		if err != nil {
			return h, out, err
		}
		out = append(out, rec)
	}
}

func fields(rec Record) string {
	var b strings.Builder
	for i, f := range rec.Fields {
		if i > 0 {
			b.WriteByte('|')
		}
		if f.Null() {
			b.WriteString("NULL")
		} else {
			b.WriteString("<" + f.Value + ">")
		}
	}
	return b.String()
}

// The values are those PostgreSQL's COPY (FORMAT csv) stores for the same
// bytes (checked against COPY by TestLoadStoresWhatCopyStores in
// cmd/reshard): "" is an empty string, an unquoted empty field NULL, a
// quoted CR LF kept; the raw record is the file's bytes.
func TestRead(t *testing.T) {
	for _, c := range []struct {
		name, file string
		header     string
		want       []string // fields of each record
		raw        []string
		lines      []int
	}{
		{name: "empty string and NULL", file: "id,a,b\n1,\"\",\n2,,\"\"\n", header: "<id>|<a>|<b>",
			want: []string{"<1>|<>|NULL", "<2>|NULL|<>"}, raw: []string{`1,"",`, `2,,""`}, lines: []int{2, 3}},
		{name: "quoted CR LF kept, CR LF endings", file: "id,a\r\n1,\"x\r\ny\"\r\n2,\"q\"\"r\"\r\n", header: "<id>|<a>",
			want: []string{"<1>|<x\r\ny>", "<2>|<q\"r>"}, raw: []string{"1,\"x\r\ny\"", `2,"q""r"`}, lines: []int{2, 4}},
		{name: "quote inside a field", file: "a,b\nab\"c,d\"e,f\n", header: "<a>|<b>", want: []string{"<abc,de>|<f>"}},
		{name: "BOM dropped", file: "\xEF\xBB\xBFid,name\n1,x", header: "<id>|<name>", want: []string{"<1>|<x>"}},
		{name: "end marker", file: "id\n1\n\\.\n2\n", header: "<id>", want: []string{"<1>"}},
		{name: "quoted end marker is data", file: "id\n\"\\.\"\n", header: "<id>", want: []string{`<\.>`}},
		{name: "CR endings", file: "id,a\r1,\"x\ny\"\r", header: "<id>|<a>", want: []string{"<1>|<x\ny>"}},
		{name: "empty text key", file: "k\n\"\"\n", header: "<k>", want: []string{"<>"}},
	} {
		h, recs, err := readAll(t, c.file)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := fields(h); got != c.header {
			t.Errorf("%s: header %s, want %s", c.name, got, c.header)
		}
		if len(recs) != len(c.want) {
			t.Errorf("%s: %d records, want %d", c.name, len(recs), len(c.want))
			continue
		}
		for i, rec := range recs {
			if got := fields(rec); got != c.want[i] {
				t.Errorf("%s: record %d is %q, want %q", c.name, i, got, c.want[i])
			}
			if c.raw != nil && string(rec.Raw) != c.raw[i] {
				t.Errorf("%s: raw %d is %q, want %q", c.name, i, rec.Raw, c.raw[i])
			}
			if c.lines != nil && rec.Line != c.lines[i] {
				t.Errorf("%s: record %d on line %d, want %d", c.name, i, rec.Line, c.lines[i])
			}
		}
	}
}

func TestReadRefuses(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"unterminated quote", "id,a\n1,\"x\n", "unterminated quoted field"},
		{"mixed endings", "id\r\n1\n2\r\n", "line 2 ends in LF but the header line in CR LF"},
		{"unquoted CR", "id,a\n1,x\ry\n", "ends in CR but the header line in LF"},
		{"empty file", "", "the file is empty"},
	} {
		_, _, err := readAll(t, c.file)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want a syntax error mentioning %q", c.name, err, c.want)
		}
	}
}

// The records of a file the reader accepts are the file: their raw bytes
// joined by its line ending give it back (without the BOM, and without a
// final line ending), and a record's raw bytes read alone give its fields.
func FuzzRead(f *testing.F) {
	for _, s := range []string{"id,a\n1,\"\"\n2,,x\n", "k\r\n\"a\r\nb\"\r\n", "a,b\r1,2\r", "\xEF\xBB\xBFid\n1", "a\n\"x\"\"y\",\n", "a\n\"unterminated\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		if strings.Contains(file, `\.`) {
			return // an end marker may end the data early
		}
		r := NewReader(strings.NewReader(file))
		h, err := r.Header()
		if err != nil {
			return
		}
		raws := []string{string(h.Raw)}
		for {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return
			}
			raws = append(raws, string(rec.Raw))
			if len(rec.Raw) == 0 {
				continue // an empty line: one NULL field, an empty file alone
			}
			alone := NewReader(strings.NewReader(string(rec.Raw)))
			again, err := alone.Header()
			if err != nil || fields(again) != fields(rec) {
				if !(len(rec.Raw) >= 3 && string(rec.Raw[:3]) == "\xEF\xBB\xBF") { // read alone, a leading BOM is dropped
					t.Fatalf("record %q read alone: %q %v, in the file: %q", rec.Raw, fields(again), err, fields(rec))
				}
			}
		}
		body := strings.TrimPrefix(file, "\xEF\xBB\xBF")
		eol := r.EOL()
		if got := strings.Join(raws, eol); got != strings.TrimSuffix(body, eol) {
			t.Fatalf("records joined by %q: %q, the file %q", eol, got, body)
		}
	})
}
