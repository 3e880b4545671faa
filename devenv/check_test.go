package devenv

import (
	"strings"
	"testing"
)

// Check refuses each bad field naming it, and never prints a password.
func TestCheck(t *testing.T) {
	good := func() WorkerConfig {
		return WorkerConfig{
			Control:  "postgres://postgres@127.0.0.1:5432/reshard?sslmode=disable",
			Shards:   map[string]string{"shard1": "postgres://postgres@127.0.0.1:5433/reshard", "shard2": "host=127.0.0.1 port=5434 dbname=reshard user=postgres"},
			Temporal: TemporalConfig{Address: "127.0.0.1:7233"},
			Capacity: map[string]ShardCapacity{"shard1": {DiskBytes: 1 << 30}},
		}
	}
	if err := good().Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*WorkerConfig)
		want string
	}{
		{func(w *WorkerConfig) { w.Control = "" }, "control: the DSN of the control database is missing"},
		{func(w *WorkerConfig) { w.Control = "postgres://postgres:hunter2@h/db" }, "control: postgres://postgres:xxxxx@h/db holds a password"},
		{func(w *WorkerConfig) { w.Shards["shard1"] = "host=h password=hunter2 dbname=d" }, "shards.shard1: host=h password=xxxxx dbname=d holds a password"},
		{func(w *WorkerConfig) { w.Shards["shard1"] = "postgres://h/db?password=hunter2" }, "holds a password: remove it and put the password in password_file or $RESHARD_PASSWORD"},
		{func(w *WorkerConfig) { w.Shards["shard1"] = "host=h port=notaport" }, "shards.shard1: not a valid"},
		{func(w *WorkerConfig) { w.Shards = nil }, "no shard"},
		{func(w *WorkerConfig) { w.Shards["bad name"] = "host=h" }, `shard name "bad name"`},
		{func(w *WorkerConfig) { w.Temporal.Address = "" }, "temporal.address"},
		{func(w *WorkerConfig) { w.Worker.Listen = "9464" }, "worker.listen"},
		{func(w *WorkerConfig) { w.Standbys = map[string]string{"shard9": "host=s"} }, "shards.shard9.standby: no DSN for the shard itself"},
		{func(w *WorkerConfig) { w.Standbys = map[string]string{"shard1": "host=s password=hunter2"} }, "shards.shard1.standby: host=s password=xxxxx holds a password"},
		{func(w *WorkerConfig) { w.Capacity["shard9"] = ShardCapacity{} }, "capacity.shard9: no such shard"},
		{func(w *WorkerConfig) { w.Capacity["shard2"] = ShardCapacity{WALBudgetBytes: -1} }, "capacity.shard2: disk_bytes and wal_budget_bytes are byte counts"},
	} {
		w := good()
		tc.edit(&w)
		err := w.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one mentioning %q", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error prints the password: %v", err)
		}
	}
}
