package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
)

type composeService struct {
	Image       string `yaml:"image"`
	Build       any    `yaml:"build"`
	Command     any    `yaml:"command"`
	Volumes     []string
	Restart     string
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

func (s composeService) commandLine() string {
	switch c := s.Command.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			parts = append(parts, fmt.Sprint(p))
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// A pinned tag names a release (1.2, v1.2.3, 15.10-bookworm) or a digest.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./_-]+(:v?\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$`)

// docker-compose.yml, parsed: Temporal keeps its history on a volume, every
// long-running service has a health check and every dependency a condition,
// one-shot steps create the demo schema and register it, images are pinned,
// and a .dockerignore keeps the build context small. No Docker runs here;
// this is what can be checked without one.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml (depends_on must use the long form with a condition): %v", err)
	}
	svc := func(name string) composeService {
		s, ok := f.Services[name]
		if !ok {
			t.Fatalf("docker-compose.yml has no service %s", name)
		}
		return s
	}

	for name, s := range f.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s: neither image nor build", name)
		}
		if s.Image != "" && !pinnedImage.MatchString(s.Image) {
			t.Errorf("service %s: image %s is not pinned to a release tag or digest", name, s.Image)
		}
		oneShot := s.Restart == "no"
		if !oneShot && (s.Healthcheck == nil || len(s.Healthcheck.Test) == 0) {
			t.Errorf("service %s runs for good but has no healthcheck", name)
		}
		if !oneShot && s.Restart == "" {
			t.Errorf("service %s: no restart policy", name)
		}
		for dep, c := range s.DependsOn {
			d, ok := f.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
			case c.Condition == "service_healthy" && d.Healthcheck == nil:
				t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			case c.Condition == "service_completed_successfully" && d.Restart != "no":
				t.Errorf("service %s waits for %s to complete, which is not a one-shot (restart: \"no\")", name, dep)
			case c.Condition != "service_healthy" && c.Condition != "service_completed_successfully":
				t.Errorf("service %s depends on %s with condition %q; want service_healthy or service_completed_successfully", name, dep, c.Condition)
			}
		}
	}

	// Temporal: durable history on a named volume and a healthcheck the
	// worker waits for (its search attributes: devenv's compose test).
	tmp := svc("temporal")
	args := strings.Fields(tmp.commandLine())
	i := slices.Index(args, "--db-filename")
	if i < 0 || i+1 >= len(args) {
		t.Errorf("temporal runs in memory (no --db-filename): a restart orphans running migrations")
	} else {
		db, onVolume := args[i+1], false
		for _, v := range tmp.Volumes {
			name, dir, _ := strings.Cut(v, ":")
			dir, _, _ = strings.Cut(dir, ":")
			if _, named := f.Volumes[name]; named && strings.HasPrefix(db, strings.TrimRight(dir, "/")+"/") {
				onVolume = true
			}
		}
		if !onVolume {
			t.Errorf("temporal --db-filename %s is not on a named volume (volumes: %v)", db, tmp.Volumes)
		}
	}
	if c := svc("worker").DependsOn["temporal"].Condition; c != "service_healthy" {
		t.Errorf("worker depends on temporal with %q; want service_healthy", c)
	}

	// The demo schema: created on every shard of deploy/reshard.yaml, then
	// registered by reshard init, which the worker waits for.
	sql, err := os.ReadFile("../../deploy/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, m := range regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?(\w+)`).FindAllStringSubmatch(string(sql), -1) {
		tables = append(tables, m[1])
	}
	if len(tables) == 0 {
		t.Fatal("deploy/schema.sql creates no table")
	}
	// deploy/compose-setup.sh applies deploy/schema.sql and makes the role
	// reshard connects as (TestComposeSetupMakesALeastPrivilegedRole runs it).
	var schema string
	for name, s := range f.Services {
		for _, v := range s.Volumes {
			if strings.HasPrefix(v, "./deploy:") && strings.Contains(s.commandLine(), "compose-setup.sh") {
				schema = name
			}
		}
	}
	if schema == "" {
		t.Fatal("no service runs deploy/compose-setup.sh (the schema and the reshard role)")
	}
	cfgBytes, err := os.ReadFile("../../deploy/reshard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wc devenv.WorkerConfig
	if err := yaml.Unmarshal(cfgBytes, &wc); err != nil {
		t.Fatal(err)
	}
	for shard, dsn := range wc.Shards {
		if !strings.Contains(svc(schema).commandLine(), "host="+shard+" ") {
			t.Errorf("the %s service does not create the schema on %s", schema, shard)
		}
		// Not the superuser: the role compose-setup.sh makes.
		if !strings.HasPrefix(dsn, "postgres://reshard@") {
			t.Errorf("deploy/reshard.yaml: %s connects as %s; want the role reshard", shard, dsn)
		}
		// Ready over TCP, not the unix socket the image's init server
		// listens on alone.
		if hc := svc(shard).Healthcheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "-h 127.0.0.1") {
			t.Errorf("%s: healthcheck %v does not check TCP (pg_isready -h 127.0.0.1)", shard, hc)
		}
	}
	if !strings.HasPrefix(wc.Control, "postgres://reshard@") {
		t.Errorf("deploy/reshard.yaml: control connects as %s; want the role reshard", wc.Control)
	}
	// The host's view of the same cluster: every shard through the port
	// compose publishes for it.
	hb, err := os.ReadFile("../../deploy/reshard.host.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var host devenv.WorkerConfig
	if err := yaml.Unmarshal(hb, &host); err != nil {
		t.Fatal(err)
	}
	var ports struct {
		Services map[string]struct {
			Ports []string `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &ports); err != nil {
		t.Fatal(err)
	}
	for name := range wc.Shards {
		hp := ports.Services[name].Ports
		if len(hp) != 1 || host.Shards[name] == "" {
			t.Errorf("deploy/reshard.host.yaml: shard %s is %q; compose publishes %v", name, host.Shards[name], hp)
			continue
		}
		published := strings.TrimSuffix(hp[0], ":5432") // 127.0.0.1:55433
		if !strings.Contains(host.Shards[name], "@"+published+"/") {
			t.Errorf("deploy/reshard.host.yaml: shard %s is %s; compose publishes it on %s", name, host.Shards[name], published)
		}
	}
	if len(host.Shards) != len(wc.Shards) {
		t.Errorf("deploy/reshard.host.yaml has %d shards, deploy/reshard.yaml %d", len(host.Shards), len(wc.Shards))
	}
	init := svc("init")
	if init.DependsOn[schema].Condition != "service_completed_successfully" {
		t.Errorf("init does not wait for %s to complete", schema)
	}
	initArgs := strings.Fields(init.commandLine())
	for _, tbl := range tables {
		registered := false
		for j, a := range initArgs {
			if a == "--table" && j+1 < len(initArgs) && strings.HasPrefix(initArgs[j+1], tbl+":") {
				registered = true
			}
		}
		if !registered {
			t.Errorf("init does not register table %s (--table %s:key)", tbl, tbl)
		}
	}
	if svc("worker").DependsOn["init"].Condition != "service_completed_successfully" {
		t.Errorf("the worker does not wait for init")
	}

	// The Dockerfile's base images are pinned too, and the build context
	// leaves out the repository's history and local clusters.
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(df), -1) {
		if !pinnedImage.MatchString(m[1]) {
			t.Errorf("Dockerfile: FROM %s is not pinned to a release tag or digest", m[1])
		}
	}
	di, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	lines := strings.Split(string(di), "\n")
	for _, want := range []string{".git", ".reshard", "bin"} {
		if !slices.Contains(lines, want) && !slices.Contains(lines, "/"+want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}
