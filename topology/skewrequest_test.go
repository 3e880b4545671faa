package topology

import (
	"strings"
	"testing"
	"time"
)

func TestSkewRequest(t *testing.T) {
	o, over, err := SkewRequest{Tables: []string{"public.orders:user_id", "users:id"}, ShardDSNs: []string{"s1=host=h1 dbname=d"}, KeyType: "int", Interval: 2 * time.Second, Top: 3}.Options()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Tables) != 2 || o.Tables[0].Name != "public.orders" || o.Tables[0].KeyColumn != "user_id" || o.KeyType != "bigint" || o.Top != 3 || over["s1"] != "host=h1 dbname=d" {
		t.Fatalf("%+v %v", o, over)
	}
	ok := SkewRequest{Interval: time.Second, Top: 1}
	for _, tc := range []struct {
		r    func(SkewRequest) SkewRequest
		want string
	}{
		{func(r SkewRequest) SkewRequest { r.Tables = []string{"users"}; return r }, `--table "users"`},
		{func(r SkewRequest) SkewRequest { r.KeyType = "float"; return r }, "--key-type"},
		{func(r SkewRequest) SkewRequest { r.Interval = time.Millisecond; return r }, "--interval 1ms"},
		{func(r SkewRequest) SkewRequest { r.Top = 0; return r }, "--top 0"},
		{func(r SkewRequest) SkewRequest { r.ShardDSNs = []string{"s1=x", "postgres://u:secret@h/d"}; return r }, "--shard-dsn number 2"},
	} {
		_, _, err := tc.r(ok).Options()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("got %v, want an error naming %s (and no password)", err, tc.want)
		}
	}
}
