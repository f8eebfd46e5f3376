package streamq_test

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// modulePath is this module's path.
const modulePath = "github.com/streamq/streamq"

// Modules a public package may import directly.
var (
	// coreModules are what the root package builds on: Redis, errgroup and
	// semaphores, and the OpenTelemetry API (not its SDK: the application
	// picks and configures that).
	coreModules = []string{
		"github.com/redis/go-redis/v9",
		"golang.org/x/sync",
		"go.opentelemetry.io/otel",
		"go.opentelemetry.io/otel/metric",
		"go.opentelemetry.io/otel/trace",
	}

	// forbiddenModules must not be linked by any public package, even
	// through another module, unless its rule allows it directly: OTel SDKs
	// and exporters, Prometheus, SQL drivers, and test tooling.
	forbiddenModules = []string{
		"go.opentelemetry.io/otel/sdk",
		"go.opentelemetry.io/otel/exporters/",
		"github.com/prometheus/",
		"modernc.org/sqlite",
		"github.com/jackc/pgx/",
		"github.com/lib/pq",
		"github.com/mattn/go-sqlite3",
		"github.com/testcontainers/",
		"github.com/docker/",
		"go.uber.org/goleak",
		"github.com/stretchr/testify",
	}
)

// depRules lists, per public package (relative to the module; "" is the
// root), the modules its code (with the internal packages it uses) may
// import directly. A new public package needs an entry here.
func depRules() map[string][]string {
	with := func(extra ...string) []string { return append(slices.Clip(coreModules), extra...) }
	return map[string][]string{
		"":                     coreModules,
		"inspect":              coreModules,
		"dashboard":            coreModules,
		"middleware":           coreModules,
		"periodic":             with("github.com/robfig/cron/v3"),
		"priority":             coreModules,
		"writebehind":          coreModules,
		"workflow":             coreModules,
		"writebehind/sqlite":   with("modernc.org/sqlite"),
		"writebehind/postgres": with("github.com/jackc/pgx/v5"),
		// outbox links no SQL driver; outbox/sqlite neither (the caller
		// opens the database); outbox/postgres needs pgx for pgx
		// transactions and LISTEN.
		"outbox":          coreModules,
		"outbox/sqlite":   coreModules,
		"outbox/postgres": with("github.com/jackc/pgx/v5"),
		// streamqtype is a leaf: the standard library only.
		"streamqtype": nil,
		// streamqtest is imported by tests only: it finds a Redis as the
		// project's tests do (REDIS_ADDR, or a private redis-server), and
		// links no Docker client: testcontainers-go is forbidden for it.
		"streamqtest": with("go.uber.org/goleak"),
		// streamqtest/containers is its Docker fallback, which users import
		// explicitly: testcontainers-go and what it links.
		"streamqtest/containers": with("github.com/testcontainers/testcontainers-go",
			"github.com/testcontainers/testcontainers-go/modules/redis", "go.uber.org/goleak",
			// linked by testcontainers-go
			"github.com/docker/go-connections", "github.com/docker/go-units", "github.com/stretchr/testify"),
	}
}

// listedPackage is one package as go list describes it.
type listedPackage struct {
	path, module, name string
	standard           bool
	imports, deps      []string
}

// goList runs go list -deps on the module's packages (tests excluded, as a
// user's build sees them) and returns every package of the build by import
// path.
func goList(t *testing.T) map[string]*listedPackage {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v (put it in PATH)", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const format = "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{.Name}}\t{{.Standard}}\t" +
		"{{join .Imports \" \"}}\t{{join .Deps \" \"}}"
	cmd := exec.CommandContext(ctx, goBin, "list", "-deps", "-f", format, "./...")
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, stderr.Bytes())
	}
	pkgs := make(map[string]*listedPackage)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			t.Fatalf("go list printed %q, want 6 tab-separated fields", sc.Text())
		}
		pkgs[f[0]] = &listedPackage{
			path: f[0], module: f[1], name: f[2], standard: f[3] == "true",
			imports: strings.Fields(f[4]), deps: strings.Fields(f[5]),
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// isPublic reports whether p is a library package users import: in this
// module, not a program, not internal, not the integration tests.
func isPublic(p *listedPackage) bool {
	if p.module != modulePath || p.name == "main" {
		return false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p.path, modulePath), "/")
	for _, part := range strings.Split(rel, "/") {
		if part == "internal" || part == "integration" || part == "cmd" || part == "docs" {
			return false
		}
	}
	return true
}

// hasModulePrefix reports whether module is one of prefixes, or under one
// ending in "/" or followed by "/".
func hasModulePrefix(module string, prefixes []string) bool {
	for _, p := range prefixes {
		if module == p || strings.HasPrefix(module, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// TestDependencies keeps imports lean: each public package imports only the
// modules its rule allows, and links none of the forbidden ones (OTel SDK,
// Prometheus, SQL drivers, test tooling), not even through another module.
// So importing the root package pulls in go-redis, x/sync and the OTel API
// only, and importing writebehind links no SQL driver.
func TestDependencies(t *testing.T) {
	t.Parallel()
	pkgs := goList(t)
	rules := depRules()
	checked := make(map[string]bool)
	for _, p := range pkgs {
		if !isPublic(p) {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.path, modulePath), "/")
		allowed, ok := rules[rel]
		if !ok {
			t.Errorf("public package %s has no rule: add the modules it may import to depRules in deps_test.go", p.path)
			continue
		}
		checked[rel] = true

		// What this module's code in the package's build imports directly.
		direct := make(map[string][]string) // module -> importing packages
		linked := make(map[string]bool)
		for _, dep := range append([]string{p.path}, p.deps...) {
			d := pkgs[dep]
			if d == nil {
				t.Fatalf("%s: dependency %s missing from go list's output", p.path, dep)
			}
			if d.standard {
				continue
			}
			if d.module != modulePath {
				linked[d.module] = true
				continue
			}
			for _, imp := range d.imports {
				if i := pkgs[imp]; i != nil && !i.standard && i.module != modulePath {
					direct[i.module] = append(direct[i.module], d.path)
				}
			}
		}
		for mod, by := range direct {
			if !slices.Contains(allowed, mod) {
				t.Errorf("%s imports module %s (from %s); allowed are %v: keep it out of the package, or change depRules in deps_test.go if it earns its place",
					p.path, mod, strings.Join(slices.Compact(slices.Sorted(slices.Values(by))), ", "), allowed)
			}
		}
		mods := slices.Sorted(func(yield func(string) bool) {
			for m := range linked {
				if !yield(m) {
					return
				}
			}
		})
		for _, mod := range mods {
			if hasModulePrefix(mod, forbiddenModules) && !slices.Contains(allowed, mod) {
				t.Errorf("%s links forbidden module %s: find which import brings it with go mod why -m %s", p.path, mod, mod)
			}
		}
		t.Logf("%s links %v", p.path, mods)
	}
	for rel := range rules {
		if !checked[rel] {
			t.Errorf("depRules names %q, which is not a public package of the module any more: remove it", rel)
		}
	}
}
