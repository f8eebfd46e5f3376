package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rediscontainer"
)

func TestMain(m *testing.M) { os.Exit(Run(m, rediscontainer.Start)) }

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// validName is what streamq accepts as a queue name, narrowed to what Name
// promises.
var validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,60}-[0-9a-f]{8}$`)

// fakeTB records a fatal failure instead of failing the real test. Fatal and
// Fatalf end the calling goroutine, as testing.T's do, so code under test must
// run in its own goroutine. Everything else goes to the embedded real test.
type fakeTB struct {
	testing.TB

	mu    sync.Mutex
	fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

// runFake runs fn(fake) in its own goroutine, waits for it, and returns the
// fatal message it recorded ("" if none).
func runFake(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	fake := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(fake)
	}()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("function under test did not return within %v", testTimeout)
	}
	return fake.message()
}

// ping reports whether a Redis at a answers PING, trying once.
func ping(t *testing.T, a string) error {
	t.Helper()
	return probeOnce(a, 0, nil)
}

func TestRun_Addr(t *testing.T) {
	t.Parallel()
	a := Addr()
	if _, _, err := net.SplitHostPort(a); err != nil {
		t.Fatalf("Addr() = %q, not host:port: %v", a, err)
	}
	if os.Getenv(envAddr) == "" {
		if host, _, _ := net.SplitHostPort(a); host != "127.0.0.1" {
			t.Errorf("private server listens on %q, want 127.0.0.1", host)
		}
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := NewClient(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	key := Name(t) + ":k"
	t.Cleanup(func() { _ = redis.NewClient(&redis.Options{Addr: Addr()}).Del(context.Background(), key).Err() })
	if err := rdb.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\"", got, err)
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		wantBase string
	}{
		{name: "plain", wantBase: "TestName_plain"},
		{name: "with space/and:colon{brace}", wantBase: "TestName_with_space_and_colon_brace_"},
		{name: "dots.and-dashes_ok", wantBase: "TestName_dots.and-dashes_ok"},
		{name: "unicode_é", wantBase: "TestName_unicode___"},
		{name: strings.Repeat("x", 100), wantBase: "TestName_" + strings.Repeat("x", 51)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Name(t)
			if !validName.MatchString(got) {
				t.Fatalf("Name() = %q, does not match %v", got, validName)
			}
			if base := got[:len(got)-9]; base != tt.wantBase {
				t.Errorf("Name() base = %q, want %q", base, tt.wantBase)
			}
		})
	}
}

func TestName_Unique(t *testing.T) {
	t.Parallel()
	const n = 1000
	seen := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		name := Name(t)
		if seen[name] {
			t.Fatalf("Name() returned %q twice in %d calls", name, i+1)
		}
		seen[name] = true
	}
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	calls := 0
	WaitFor(t, testTimeout, "third call", func() bool {
		calls++
		return calls >= 3
	})
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

func TestWaitFor_Timeout(t *testing.T) {
	t.Parallel()
	var calls int
	start := time.Now()
	msg := runFake(t, func(tb testing.TB) {
		WaitFor(tb, 30*time.Millisecond, "the moon to turn blue", func() bool {
			calls++
			return false
		})
	})
	if elapsed := time.Since(start); elapsed < 30*time.Millisecond {
		t.Errorf("WaitFor gave up after %v, before its 30ms timeout", elapsed)
	}
	if !strings.Contains(msg, "the moon to turn blue") || !strings.Contains(msg, "30ms") {
		t.Errorf("fatal message = %q, want the caller's message and the timeout", msg)
	}
	if calls < 2 {
		t.Errorf("cond called %d times, want it polled repeatedly", calls)
	}
}

func TestStartServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.ConfigGet(ctx, "save").Result(); err != nil || got["save"] != "" {
		t.Errorf("CONFIG GET save = %v, %v; want persistence off", got, err)
	}

	addr := s.Addr()
	s.Stop()
	if err := ping(t, addr); err == nil {
		t.Fatalf("PING after Stop succeeded, want the server gone")
	}
	s.Stop() // stopping twice is fine

	s.Restart()
	if s.Addr() != addr {
		t.Errorf("Addr after Restart = %s, want %s", s.Addr(), addr)
	}
	if err := ping(t, s.Addr()); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS k after Restart = %d, %v; want 0 (no persistence)", n, err)
	}
	s.Restart() // restarting a running server kills it first
	if err := ping(t, s.Addr()); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestStartServer_ExtraArgsPersistence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t, "--appendonly", "yes", "--maxmemory", "64mb")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	if got, err := rdb.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != strconv.Itoa(64<<20) {
		t.Fatalf("CONFIG GET maxmemory = %v, %v; want 64mb", got, err)
	}
	if err := rdb.Set(ctx, "k", "kept", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Restart()
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "kept" {
		t.Fatalf("GET k after Restart with AOF = %q, %v; want \"kept\"", got, err)
	}
}

func TestStartServer_BadArgsShowLog(t *testing.T) {
	t.Parallel()
	msg := runFake(t, func(tb testing.TB) {
		StartServer(tb, "--no-such-directive", "1")
		tb.Errorf("StartServer returned, want a fatal failure")
	})
	for _, want := range []string{"did not start", "server log", "no-such-directive"} {
		if !strings.Contains(msg, want) {
			t.Errorf("fatal message does not contain %q:\n%s", want, msg)
		}
	}
}

func TestStartProcess_PortInUse(t *testing.T) {
	t.Parallel()
	bin, err := lookBinary()
	if err != nil {
		t.Fatalf("lookBinary: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = launch{bin: bin, dir: t.TempDir()}.start(port)
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("startProcess on a taken port: err = %v, want errPortInUse", err)
	}
}

func TestStartPrivate(t *testing.T) {
	t.Parallel()
	bin, err := lookBinary()
	if err != nil {
		t.Fatalf("lookBinary: %v", err)
	}
	a, stop, err := startPrivate(bin)
	if err != nil {
		t.Fatalf("startPrivate: %v", err)
	}
	if err := ping(t, a); err != nil {
		stop()
		t.Fatalf("PING: %v", err)
	}
	stop()
	if err := ping(t, a); err == nil {
		t.Fatalf("PING after stop succeeded, want the server gone")
	}
}

func TestFinder(t *testing.T) {
	t.Parallel()
	live := StartServer(t).Addr()
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := ln.Addr().String()
		_ = ln.Close()
		return a
	}()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == envAddr {
				return v
			}
			return ""
		}
	}
	noBinary := func() (string, error) { return "", errors.New("not installed") }
	binary := func() (string, error) { return "/bin/redis-server", nil }
	private := func(string) (string, func(), error) { return "private:1", func() {}, nil }
	privateFails := func(string) (string, func(), error) { return "", nil, errors.New("crashed at start") }
	container := func() (string, func(), error) { return live, func() {}, nil }
	// silent starts a server that never answers: find must stop it.
	var silentStopped atomic.Bool
	silent := func() (string, func(), error) { return closed, func() { silentStopped.Store(true) }, nil }
	t.Cleanup(func() { // after the parallel subtests
		if !silentStopped.Load() {
			t.Error("find did not stop the fallback's server that does not answer")
		}
	})
	noDocker := func() (string, func(), error) { return "", nil, errors.New("docker is down") }
	mustNotCall := func() (string, func(), error) {
		t.Errorf("fallback started although an earlier option worked")
		return "", nil, errors.New("unexpected")
	}
	fallbacks := func(f ...Fallback) []Fallback { return f }

	tests := []struct {
		name     string
		f        finder
		wantAddr string
		wantErr  []string
	}{
		{name: "REDIS_ADDR", f: finder{env(live), noBinary, private, fallbacks(mustNotCall)}, wantAddr: live},
		{name: "REDIS_ADDR down", f: finder{env(closed), binary, private, fallbacks(mustNotCall)}, wantErr: []string{"REDIS_ADDR", closed, "unset REDIS_ADDR"}},
		{name: "REDIS_ADDR is a URL", f: finder{env("redis://x:1"), binary, private, fallbacks(mustNotCall)}, wantErr: []string{"not host:port", "URL"}},
		{name: "REDIS_ADDR bad port", f: finder{env("localhost:x"), binary, private, fallbacks(mustNotCall)}, wantErr: []string{"not host:port", "bad port"}},
		{name: "REDIS_ADDR no port", f: finder{env("localhost"), binary, private, fallbacks(mustNotCall)}, wantErr: []string{"not host:port"}},
		{name: "private", f: finder{env(""), binary, private, fallbacks(mustNotCall)}, wantAddr: "private:1"},
		{name: "fallback", f: finder{env(""), noBinary, private, fallbacks(container)}, wantAddr: live},
		{name: "private fails then fallback", f: finder{env(""), binary, privateFails, fallbacks(container)}, wantAddr: live},
		{name: "first fallback fails", f: finder{env(""), noBinary, private, fallbacks(noDocker, container)}, wantAddr: live},
		{
			name:    "fallback's server does not answer",
			f:       finder{env(""), noBinary, private, fallbacks(silent)},
			wantErr: []string{"not installed", "fallback's server at " + closed + " does not answer PING"},
		},
		{
			name:    "nothing",
			f:       finder{env(""), noBinary, private, fallbacks(noDocker)},
			wantErr: []string{"apt-get install -y redis-server", "REDIS_ADDR=host:port", "Docker", "streamqtest/containers", "not installed", "docker is down"},
		},
		{
			name:    "binary broken and no fallback",
			f:       finder{env(""), binary, privateFails, nil},
			wantErr: []string{"crashed at start", "no fallback"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, stop, err := tt.f.find()
			if tt.wantErr != nil {
				if err == nil {
					stop()
					t.Fatalf("find() = %q, want an error", a)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not mention %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("find(): %v", err)
			}
			stop()
			if a != tt.wantAddr {
				t.Errorf("find() = %q, want %q", a, tt.wantAddr)
			}
		})
	}
}

// helperEnv makes the test binary run TestHelperCrash as a child process.
const helperEnv = "REDISTEST_HELPER_CRASH"

// TestHelperCrash is not a test: TestServers_DieWithTestBinary runs it in a
// child process, where it starts servers, prints their addresses and
// crashes without running any cleanup.
func TestHelperCrash(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestServers_DieWithTestBinary")
	}
	s := StartServer(t)
	fmt.Printf("ADDRS %s %s\n", Addr(), s.Addr())
	os.Exit(3) // no Cleanup, no deferred calls: only the kernel can help now
}

func TestServers_DieWithTestBinary(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperCrash$", "-test.count=1")
	// The child never cleans up: keep its directories in ours.
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+t.TempDir())
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("helper process: err = %v, want exit status 3; output:\n%s", err, out)
	}
	var addrs []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ADDRS" {
			addrs = f[1:]
		}
	}
	if addrs == nil {
		t.Fatalf("helper process printed no addresses:\n%s", out)
	}
	if os.Getenv(envAddr) != "" {
		addrs = addrs[1:] // the shared server is not the child's to kill
	}
	for _, a := range addrs {
		WaitFor(t, testTimeout, "the crashed test binary's server at "+a+" to die", func() bool {
			return probeOnce(a, 0, nil) != nil
		})
	}
}

// A heavy test's server is its own: not the binary's, and gone after the
// test.
func TestNewIsolatedClient(t *testing.T) {
	t.Parallel()
	var a string
	t.Run("heavy", func(t *testing.T) {
		c := NewIsolatedClient(t)
		a = AddrOf(t, c)
		if a == Addr() {
			t.Fatalf("NewIsolatedClient reaches the shared server %s", a)
		}
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if err := probeOnce(a, 0, nil); err == nil {
		t.Errorf("the heavy test's server at %s still answers after the test", a)
	}
}

func TestLookServerEnv(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, want, wantErr string
	}{
		{name: "absolute", env: bin, want: bin},
		{name: "name on PATH", env: "sh", want: bin},
		{name: "relative", env: "../shared/bin/valkey-server", wantErr: "relative path: give an absolute one"},
		{name: "missing", env: "/nonexistent/valkey-server", wantErr: "name an executable redis-server or valkey-server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := lookServerEnv(tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), EnvServer) {
					t.Fatalf("lookServerEnv(%q) = %q, %v; want an error naming %s and saying %q", tt.env, got, err, EnvServer, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("lookServerEnv(%q) = %q, %v; want %q", tt.env, got, err, tt.want)
			}
		})
	}
}
