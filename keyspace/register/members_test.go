package register

import (
	"errors"
	"strings"
	"testing"

	"github.com/reshard/reshard/internal/pgerr"
)

// init's --shards against the configuration, without the CLI.
func TestMembers(t *testing.T) {
	conf := map[string]string{"shard2": "b", "shard1": "a", "shard3": "c"}
	if got, err := Members(conf, "r.yaml", nil); err != nil || strings.Join(got, ",") != "shard1,shard2,shard3" {
		t.Errorf("none given: %v %v, want every configured shard, sorted", got, err)
	}
	if got, err := Members(conf, "r.yaml", []string{"shard3", " shard1"}); err != nil || strings.Join(got, ",") != "shard1,shard3" {
		t.Errorf("two given: %v %v", got, err)
	}
	for _, tc := range []struct {
		given []string
		want  string
	}{
		{[]string{"shard9"}, "--shards shard9: not in the configuration r.yaml (shards: shard1, shard2, shard3)"},
		{[]string{"shard1", "shard1"}, "--shards lists shard1 twice"},
	} {
		_, err := Members(conf, "r.yaml", tc.given)
		if !errors.As(err, new(*pgerr.InputError)) || err.Error() != tc.want {
			t.Errorf("%v: got %v, want the input error %q", tc.given, err, tc.want)
		}
	}
}
