package docblocks

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	md := "# T\n" +
		"```sh\n" +
		"bin/reshard dev up --shards 5   # start\n" +
		"                                # its comment goes on\n" +
		"\n" +
		"bin/reshard worker &            # in the background\n" +
		"psql -v role=reshard -d <shard database> -f deploy/reshard-role.sql\n" +
		"bin/reshard dev psql shard1 -- -c \"CREATE ROLE app; SELECT 'x'\"\n" +
		"```\n" +
		"text\n" +
		"```\n" +
		"not sh: ignored | at all\n" +
		"```\n" +
		"<!-- doc-test: setup bin/reshard dev up --shards 1 -->\n" +
		"\n" +
		"<!-- doc-test: skip it needs docker -->\n" +
		"```sh\n" +
		"docker compose up\n" +
		"```\n"
	blocks, err := Parse("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("%d blocks, want 2: %+v", len(blocks), blocks)
	}
	b := blocks[0]
	if b.Line != 2 || b.Skip != "" || len(b.Setup) != 0 || len(b.Lines) != 4 {
		t.Fatalf("first block: %+v", b)
	}
	want := []struct {
		line int
		args []string
		bg   bool
		text string
	}{
		{3, []string{"bin/reshard", "dev", "up", "--shards", "5"}, false, "bin/reshard dev up --shards 5"},
		{6, []string{"bin/reshard", "worker"}, true, "bin/reshard worker &"},
		{7, []string{"psql", "-v", "role=reshard", "-d", "<shard database>", "-f", "deploy/reshard-role.sql"}, false, ""},
		{8, []string{"bin/reshard", "dev", "psql", "shard1", "--", "-c", "CREATE ROLE app; SELECT 'x'"}, false, ""},
	}
	for i, w := range want {
		l := b.Lines[i]
		if l.Err != nil || l.Line != w.line || !reflect.DeepEqual(l.Args, w.args) || l.Background != w.bg || (w.text != "" && l.Text != w.text) {
			t.Errorf("line %d: %+v, want %+v", i, l, w)
		}
	}
	if got := b.Lines[2].Placeholders(); !reflect.DeepEqual(got, []string{"<shard database>"}) {
		t.Errorf("placeholders %q", got)
	}
	if b.Lines[0].Program() != "reshard" || !b.Lines[2].Known() {
		t.Errorf("programs: %q %q", b.Lines[0].Program(), b.Lines[2].Program())
	}
	s := blocks[1]
	if s.Skip != "it needs docker" || len(s.Setup) != 1 || s.Setup[0].Line != 14 || s.Lines[0].Known() {
		t.Fatalf("second block: %+v", s)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ md, want string }{
		{"<!-- doc-test: skip -->\n```sh\nx\n```\n", "needs a reason"},
		{"<!-- doc-test: run fast -->\n```sh\nx\n```\n", "neither skip nor setup"},
		{"<!-- doc-test: skip r -->\ntext\n```sh\nx\n```\n", "right before"},
		{"<!-- doc-test: skip r -->\n```go\nx\n```\n", "applies to ```sh blocks only"},
		{"```sh\nx\n", "not closed"},
		{"text\n<!-- doc-test: skip r -->\n", "followed by no block"},
	} {
		if _, err := Parse("x.md", c.md); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.md, err, c.want)
		}
	}
	for _, line := range []string{
		"reshard list | head", "reshard list > out", "reshard list; reshard list", "reshard list && true",
		"reshard status $ID", "reshard status $(x)", "reshard worker & reshard list", `reshard x "unclosed`,
		"reshard < in",
	} {
		blocks, err := Parse("x.md", "```sh\n"+line+"\n```\n")
		if err != nil {
			t.Fatal(err)
		}
		if l := blocks[0].Lines[0]; l.Err == nil {
			t.Errorf("%q parsed as %q: want an error (it needs a shell)", line, l.Args)
		}
	}
}
