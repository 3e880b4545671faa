package pgcsv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// randomField writes one field as a CSV writer might, or might not: plain,
// empty, quoted (with quotes, commas, CR LF, LF, backslashes inside), or
// quoted in the middle.
func randomField(r *rand.Rand) string {
	piece := func(quoted bool) string {
		alphabet := []string{"a", "b", " ", `\`, "'", "é", "N"}
		if quoted {
			alphabet = append(alphabet, ",", `""`, "\r\n", "\n", "\r", `\.`)
		}
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	switch r.IntN(5) {
	case 0:
		return ""
	case 1:
		return `"` + piece(true) + `"`
	case 2:
		return piece(false) + `"` + piece(true) + `"` + piece(false)
	default:
		return piece(false)
	}
}

// Every value the reader gives is the value PostgreSQL's COPY (FORMAT
// csv, HEADER) stores from the same file, NULL where COPY stores NULL:
// random files of 300 records, each with LF, CR LF and CR line endings.
func TestReadAgreesWithCopy(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE t (n int PRIMARY KEY, a text, b text, c text)`)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(35, 3))
	for round := range 6 {
		eol := []string{"\n", "\r\n", "\r"}[round%3]
		var b strings.Builder
		b.WriteString("n,a,b,c" + eol)
		for n := range 300 {
			fmt.Fprintf(&b, "%d,%s,%s,%s%s", n, randomField(r), randomField(r), randomField(r), eol)
		}
		file := b.String()
		// A line ending inside quotes other than the file's is data for
		// both; an unquoted one cannot occur (randomField quotes them).
		db.Exec(t, `TRUNCATE t`)
		conn := db.Conn(t)
		if _, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(file), "COPY t FROM STDIN WITH (FORMAT csv, HEADER)"); err != nil {
			t.Fatalf("round %d: COPY refused the file: %v", round, err)
		}
		stored := map[int]Record{}
		rows, err := conn.Query(ctx, `SELECT n, a, b, c FROM t`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n int
			var vals [3]*string
			if err := rows.Scan(&n, &vals[0], &vals[1], &vals[2]); err != nil {
				t.Fatal(err)
			}
			rec := Record{Fields: []Field{{Value: fmt.Sprint(n)}}}
			for _, v := range vals {
				if v == nil {
					rec.Fields = append(rec.Fields, Field{})
				} else {
					rec.Fields = append(rec.Fields, Field{Value: *v, Quoted: true})
				}
			}
			stored[n] = rec
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rd := NewReader(strings.NewReader(file))
		if _, err := rd.Header(); err != nil {
			t.Fatal(err)
		}
		read := 0
		for {
			rec, err := rd.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			var n int
			fmt.Sscan(rec.Fields[0].Value, &n)
			want, ok := stored[n]
			if !ok || fields(rec) != fields(want) {
				t.Fatalf("round %d, record %q: read %s, COPY stored %s", round, rec.Raw, fields(rec), fields(want))
			}
			read++
		}
		if read != len(stored) {
			t.Fatalf("round %d: read %d records, COPY stored %d", round, read, len(stored))
		}
	}
}
