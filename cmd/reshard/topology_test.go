package main

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactDSN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://app:s3cret@db1:5432/orders?sslmode=disable", "postgres://app:xxxxx@db1:5432/orders?sslmode=disable"},
		{"postgresql://app@db1/orders?password=s3cret", "postgresql://app@db1/orders?password=xxxxx"},
		{"postgres://app@db1/orders", "postgres://app@db1/orders"},
		{"host=db1 user=app password=s3cret dbname=orders", "host=db1 user=app password=xxxxx dbname=orders"},
		{"host=db1 password = 's3 cr\\'et' dbname=orders", "host=db1 password = xxxxx dbname=orders"},
		{"host=db1 PASSWORD=s3cret", "host=db1 PASSWORD=xxxxx"},
		{"host=db1 dbname=orders", "host=db1 dbname=orders"},
		{"postgres://app:s3cret@[bad", "(unparsable connection URL)"},
	}
	for _, tt := range tests {
		got := redactDSN(tt.in)
		if got != tt.want || strings.Contains(got, "s3") {
			t.Errorf("redactDSN(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTopologyBadInputIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"topology", "show", "--control-dsn", ""},
		{"topology", "show", "--control-dsn", "postgres://u:s3cret@[bad"},
		{"topology", "show", "--version", "-1", "--control-dsn", "host=x"},
		{"topology", "history", "--limit", "-2", "--control-dsn", "host=x"},
		{"topology", "show", "extra-arg"},
		{"topology", "show", "--no-such-flag"},
		{"topology", "skew", "--table", "orders", "--control-dsn", "host=x"},
		{"topology", "skew", "--table", "orders:user_id", "--key-type", "float", "--control-dsn", "host=x"},
		{"topology", "skew", "--table", "orders:user_id", "--interval", "1ms", "--control-dsn", "host=x"},
		{"topology", "skew", "--table", "orders:user_id", "--shard-dsn", "postgres://u:s3cret@h/db", "--control-dsn", "host=x"},
	} {
		root := newRootCmd()
		root.SetArgs(args)
		var out strings.Builder
		root.SetOut(&out)
		root.SetErr(&out)
		err := root.Execute()
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != 2 {
			t.Errorf("%v: err %v, want a usage error", args, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(out.String(), "s3cret") {
			t.Errorf("%v: password in the message: %v", args, err)
		}
	}
}

// topology skew reaches the shards with the configuration's password (main
// used the registry's reference with the environment's only: "failed SASL
// auth" under a password file).
func TestSkewPoolTakesTheConfigPassword(t *testing.T) {
	cfg := &clusterConfig{password: "from-file"}
	p, err := skewPoolConfig("shard1", "postgres://reshard@127.0.0.1:5433/app", cfg)
	if err != nil || p.ConnConfig.Password != "from-file" {
		t.Fatalf("password %q, %v; want the configuration's", p.ConnConfig.Password, err)
	}
	if p, _ = skewPoolConfig("shard1", "postgres://reshard@127.0.0.1:5433/app", nil); p.ConnConfig.Password != "" {
		t.Errorf("no configuration: password %q", p.ConnConfig.Password)
	}
}

func TestRingShowBadInputIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"--control-dsn", ""},
		{"--version", "-3", "--control-dsn", "host=x"},
		{"--bogus"},
	} {
		cmd := newRingShowCmd(&globalOptions{})
		cmd.SetArgs(args)
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		if err := cmd.Execute(); exitCode(err) != 2 {
			t.Errorf("ring show %v: err %v, want a usage error", args, err)
		}
	}
}
