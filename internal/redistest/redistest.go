// Package redistest gives tests a real Redis server.
//
// A test package that needs Redis calls [Run] from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
//
// and then uses [NewClient] (or [Addr]) in its tests, with [Name] to give
// every test its own keys, so that tests run in parallel against one server
// without flushing it. Run finds a server in this order:
//
//  1. the address in the REDIS_ADDR environment variable (host:port), if set;
//  2. a private redis-server process (from PATH or /usr/bin/redis-server, or
//     the binary named by STREAMQ_REDIS_SERVER, see [EnvServer]) on a free
//     loopback port, without persistence, killed when the tests end;
//  3. the fallbacks given to Run, in order: the project's test binaries pass
//     Start of package internal/rediscontainer, a redis:7 container started
//     with testcontainers-go if Docker runs (a package of its own, so that
//     streamqtest, which builds on this one, does not link Docker);
//
// and otherwise fails with a message saying how to get one. Tests that stop,
// restart or kill Redis start their own server with [StartServer]; tests
// that load it heavily get one of their own with [NewIsolatedClient].
// Conditions that have no signal to wait on are awaited with [WaitFor];
// consumers, workers and schedulers run in the background of a test with
// [Background].
//
// Tests of replication, failover and encryption start whole topologies of
// their own, every process on a free loopback port with its files in
// t.TempDir(), stopped in t.Cleanup and its log shown if the test failed:
//   - [StartReplica]: a replica of a [Server], returned once in sync;
//   - [StartSentinel]: a master, replicas and sentinels, with
//     [Sentinel.Failover];
//   - [StartCluster]: a Redis Cluster, with [Cluster.Kill],
//     [Cluster.WaitHealthy] and slot migration ([Cluster.MigrateSlot], or
//     step by step from [Cluster.BeginMigration]);
//   - [StartTLSServer]: a server that speaks only TLS, with a throwaway CA
//     that [Server.TLSConfig] trusts.
//
// A topology that does not come up fails the test with what was missing;
// none is ever skipped.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/streamq/streamq/internal/faultproxy"

	"github.com/streamq/streamq/internal/proctest"
)

const (
	// envAddr names the environment variable that points the tests at an
	// existing server.
	envAddr = "REDIS_ADDR"
	// EnvServer names the environment variable that picks the server
	// binary the tests start, instead of redis-server: an absolute path or
	// a name on PATH, such as a valkey-server to run the tests against
	// Valkey. Every server of this package uses it: the private one of
	// [Run], [StartServer], [NewIsolatedClient] and the topologies
	// (replicas, sentinels, cluster nodes).
	EnvServer = "STREAMQ_REDIS_SERVER"
	// fallbackBinary is where Debian's redis-server package installs the
	// server, for machines where /usr/bin is not on PATH.
	fallbackBinary = "/usr/bin/redis-server"

	// startTimeout bounds the wait for a fresh redis-server to answer.
	startTimeout = 10 * time.Second
	// startAttempts bounds the retries when the chosen port was taken between
	// picking it and the server binding it.
	startAttempts = 5
	// probeInterval is the pause between two connection attempts while a
	// server starts.
	probeInterval = 5 * time.Millisecond
	// probeTimeout bounds one connection attempt (dial, write and read).
	probeTimeout = time.Second
	// adminTimeout bounds one command of the topology helpers' own clients.
	adminTimeout = 5 * time.Second
	// addrProbeTimeout bounds the check that REDIS_ADDR, or a fallback's
	// server, answers.
	addrProbeTimeout = 5 * time.Second

	// logTail is how many bytes of a server's output are kept for error
	// messages.
	logTail = 8 << 10
	// maxNameBase is the longest part of a [Name] taken from the test name.
	maxNameBase = 60
	// waitInterval is the polling period of [WaitFor].
	waitInterval = 5 * time.Millisecond
	// minParallel is the least number of tests [Run] lets run at once.
	minParallel = 8
)

// howToGetRedis is printed whenever no server can be found or started.
const howToGetRedis = `redistest: no Redis server for the tests. Do one of:
  - install redis-server (Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis),
    so the tests can start a private server on a free loopback port;
  - or set REDIS_ADDR=host:port to a running Redis the tests may write to (they never flush it);
  - or start a Docker engine and use the container fallback, which runs the redis:7 image with
    testcontainers-go: the project's own tests do; in your tests, call containers.Main from TestMain
    (package github.com/streamq/streamq/streamqtest/containers).`

// addr holds the address found or started by Run. It and shared are the
// package-level variables: a test binary has one TestMain, and Addr takes no
// arguments.
var addr atomic.Pointer[string]

// Fallback starts a server when neither REDIS_ADDR nor a redis-server
// binary gives one, and returns its address (host:port) and a function that
// stops it. Its errors name what it tried. Start of package
// internal/rediscontainer is one.
type Fallback func() (addr string, stop func(), err error)

// Run finds or starts a Redis for the test binary, runs m.Run(), tears down
// what it started, and returns the exit code. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Run(m, rediscontainer.Start)) }
//
// The server is the one named by REDIS_ADDR if that is set (it must answer
// PING); otherwise a private redis-server process on a free loopback port,
// started with --save "" --appendonly no and killed when m.Run returns (and by
// the kernel if the test binary dies, on Linux); otherwise the first of
// fallbacks that starts one that answers PING. If none works, Run prints how
// to get one and returns 1 without running the tests. When the tests pass,
// Run also fails the binary if goroutines outlive them (goleak), so every
// package that uses it checks for leaks.
//
// Unless -test.parallel is given, Run lets at least 8 parallel tests run at
// once instead of GOMAXPROCS (2 on a small machine): the project's tests
// mostly wait (for Redis, timers, child processes) rather than compute, so
// the default would leave such a machine idle while they wait in line.
func Run(m *testing.M, fallbacks ...Fallback) int {
	raiseParallel()
	return leakCheck(RunWithoutLeakCheck(m, fallbacks...))
}

// leakCheck returns code, or 1 when the tests passed (code 0) but
// goroutines outlived them.
func leakCheck(code int) int {
	if code == 0 {
		// go-redis redials a dead node in the background after a refused
		// dial (a test killed it), once a second until the client that
		// owns the pool is closed: it ends by itself.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "redistest: goroutines outlived the tests:", err)
			code = 1
		}
	}
	return code
}

// RunAround is [Run] for a package that watches the server while its
// tests run: once the server is found, around is called with its address
// and whether it is private to this test binary (started by it rather than
// named by REDIS_ADDR), before the tests; the check it returns (nil: none)
// is called after them, and its error, printed, fails the binary. The
// server is found as Run finds it, fallbacks included.
func RunAround(m *testing.M, around func(addr string, private bool) (check func() error), fallbacks ...Fallback) int {
	raiseParallel()
	f := defaultFinder(fallbacks...)
	a, stop, err := f.find()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr.Store(&a)
	check := around(a, f.getenv(envAddr) == "")
	code := m.Run()
	if check != nil {
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	stop()
	return leakCheck(code)
}

// RunWithoutLeakCheck is [Run] without the goroutine leak check and without
// raising -test.parallel, for test binaries of users (package streamqtest),
// whose goroutines and parallelism are theirs to choose.
func RunWithoutLeakCheck(m *testing.M, fallbacks ...Fallback) int {
	a, stop, err := defaultFinder(fallbacks...).find()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr.Store(&a)
	code := m.Run()
	stop()
	return code
}

// raiseParallel sets -test.parallel to minParallel if the command line did
// not set it and it is lower. It parses the command line, as m.Run would.
func raiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.parallel")
	if f == nil {
		return
	}
	given := false
	flag.Visit(func(v *flag.Flag) { given = given || v == f })
	if n, err := strconv.Atoi(f.Value.String()); err == nil && !given && n < minParallel {
		_ = f.Value.Set(strconv.Itoa(minParallel))
	}
}

// shared is the server found by SharedAddr when TestMain did not call Run
// (without fallbacks).
var shared = sync.OnceValues(func() (string, error) {
	a, _, err := defaultFinder().find()
	return a, err
})

// SharedAddr returns the address of the test binary's Redis: the one found
// by [Run] if TestMain called it, else one found on the first call, in the
// order documented on Run without fallbacks, and kept for the rest of the
// binary. A private redis-server started that way has no TestMain to stop it: it is killed by
// the kernel when the test binary exits (Linux; elsewhere it outlives the
// tests, so call Run from TestMain). The error says how to get a Redis.
func SharedAddr() (string, error) {
	if a := addr.Load(); a != nil {
		return *a, nil
	}
	return shared()
}

// Addr returns the address (host:port) found or started by [Run]. It panics
// if the test binary's TestMain did not call Run.
func Addr() string {
	a := addr.Load()
	if a == nil {
		panic("redistest: Addr called but no Redis was set up: add " +
			"`func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }` to this package's tests")
	}
	return *a
}

// NewClient returns a go-redis client connected to [Addr]. The client is closed
// in t.Cleanup.
func NewClient(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// NewIsolatedClient starts a redis-server for this test alone (see
// [StartServer]; extraArgs are passed on) and returns a client of it, closed
// in t.Cleanup. Tests that load Redis heavily (a million entries, crash
// storms, large backlogs) use it, so that they never starve the tests that
// share the binary's server, and are not slowed down by them. Without a
// redis-server binary (the binary's server is then REDIS_ADDR or a
// container) it logs that and returns [NewClient], a client of the shared
// server.
func NewIsolatedClient(t testing.TB, extraArgs ...string) *redis.Client {
	t.Helper()
	if _, err := lookBinary(); err != nil {
		t.Logf("redistest: this heavy test shares the binary's server: %v", err)
		return NewClient(t)
	}
	rdb := redis.NewClient(&redis.Options{Addr: StartServer(t, extraArgs...).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// AddrOf returns the address (host:port) of the single server c talks to,
// for the processes a test starts against the same server (which may be
// its own, see [NewIsolatedClient]). It fails the test unless c is a
// *redis.Client.
func AddrOf(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("redistest: AddrOf needs a *redis.Client (one server), got %T", c)
	}
	return rc.Options().Addr
}

// NewProxiedClient starts a [faultproxy.Proxy] to [Addr] and returns it with
// a go-redis client (default options) that reaches Redis through it, for
// tests that break connections or lose replies. Both are closed in
// t.Cleanup.
func NewProxiedClient(t testing.TB) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	proxy, err := faultproxy.New(Addr())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return proxy, rdb
}

// Name returns a unique, valid queue name for the test: t.Name() with every
// character other than [A-Za-z0-9_.-] replaced by '_', cut to 60 characters,
// then '-' and 8 random hex digits. Tests use it to keep their keys apart.
func Name(t testing.TB) string {
	t.Helper()
	base := sanitize(t.Name())
	if base == "" {
		base = "test"
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("redistest: random name suffix: %v", err)
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// sanitize maps s to [A-Za-z0-9_.-]* and cuts it to maxNameBase bytes.
func sanitize(s string) string {
	out := make([]byte, 0, min(len(s), maxNameBase))
	for i := 0; i < len(s) && len(out) < maxNameBase; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '.', c == '-':
			out = append(out, c)
		default:
			out = append(out, '_')
		}
	}
	return string(out)
}

// DeleteKeysAtCleanup deletes every key matching pattern (for example
// q.Key("*")) when the test ends, with a bounded SCAN, never KEYS or FLUSHDB,
// so tests that share a server clean up only their own keys.
func DeleteKeysAtCleanup(t testing.TB, rdb redis.UniversalClient, pattern string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cursor uint64
		for range 10_000 { // bound: 10,000 SCAN calls of 1,000 keys
			keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				t.Logf("redistest: cleaning up %s: %v", pattern, err)
				return
			}
			if len(keys) > 0 {
				if err := rdb.Del(ctx, keys...).Err(); err != nil {
					t.Logf("redistest: cleaning up %s: %v", pattern, err)
					return
				}
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	})
}

// ScanKeys returns the keys matching pattern, found with a bounded SCAN
// (never KEYS).
func ScanKeys(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var all []string
	var cursor uint64
	for range 10_000 { // bound: 10,000 SCAN calls of 1,000 keys
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			t.Fatalf("redistest: SCAN %s: %v", pattern, err)
		}
		all = append(all, keys...)
		if cursor = next; cursor == 0 {
			return all
		}
	}
	t.Fatalf("redistest: SCAN %s did not end within 10,000 calls", pattern)
	return nil
}

// WaitFor calls cond every 5 ms until it returns true, or fails the test with
// t.Fatalf and msg once timeout has passed. It is the one sanctioned polling
// helper, for conditions that have no channel or other signal to wait on.
// Like t.Fatalf, it must be called from the test's goroutine.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := poll(ctx, waitInterval, func(context.Context) error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("redistest: timed out after %v waiting for: %s", timeout, msg)
	}
}

// errNotYet is the reason WaitFor's checks give while cond is false.
var errNotYet = errors.New("condition not met")

// stopPolling wraps an error that ends a poll at once, because waiting
// longer cannot help; poll returns the wrapped error.
type stopPolling struct{ err error }

func (e stopPolling) Error() string { return e.err.Error() }

// poll calls check every interval until it returns nil, and then returns
// nil. Once ctx is done it checks a last time and, if that fails too, returns
// ctx's error with the last reason check gave (the final check's own reason
// may only be the expired ctx). A check that returns a stopPolling ends the
// poll with its error. It is the loop behind WaitFor and the topology
// helpers' waits.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	last := check(ctx)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var stop stopPolling
		switch {
		case last == nil:
			return nil
		case errors.As(last, &stop):
			return stop.err
		}
		select {
		case <-tick.C:
			// A check cut short by ctx running out says less than the one
			// before it: keep that one's reason.
			if err := check(ctx); err == nil || ctx.Err() == nil {
				last = err
			}
		case <-ctx.Done():
			if check(ctx) == nil {
				return nil
			}
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), last)
		}
	}
}

// Server is a redis-server process owned by one test, started by
// [StartServer] (or [StartReplica], [StartTLSServer], and as a part of
// [StartSentinel] and [StartCluster]). Its methods are safe for concurrent
// use; Restart fails the test on error, so call it from the test's goroutine.
type Server struct {
	t     testing.TB
	l     launch
	port  int
	admin *redis.Client // for the helpers' own commands; closed in t.Cleanup

	mu   sync.Mutex
	proc *process             // nil while stopped
	log  *proctest.TailBuffer // the log of the last process started
}

// StartServer starts a redis-server process for this test alone, for tests
// that stop, restart or kill Redis. The server listens on a free loopback
// port, keeps its files in t.TempDir(), has persistence off unless extraArgs
// turn it on (they follow the defaults, so "--appendonly", "yes" wins), and is
// stopped in t.Cleanup. StartServer fails the test, saying how to install it,
// if there is no redis-server binary, and shows the server's log if it does
// not start (or, at cleanup, if the test failed).
func StartServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	return startServer(t, launch{extra: extraArgs})
}

// startServer starts the server that l describes, filling in its binary and,
// if l has none, a fresh t.TempDir() as its directory.
func startServer(t testing.TB, l launch) *Server {
	t.Helper()
	bin, err := lookBinary()
	if err != nil {
		t.Fatalf("redistest: starting a redis-server needs its binary: %v\n"+
			"install it (Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis) or put it on PATH", err)
	}
	l.bin = bin
	if l.dir == "" {
		l.dir = t.TempDir()
	}
	l.extra = append([]string(nil), l.extra...)
	p, port, err := l.startFree()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{t: t, l: l, port: port, proc: p, log: p.log}
	s.admin = redis.NewClient(&redis.Options{
		Addr:      s.Addr(),
		TLSConfig: s.TLSConfig(),
		// RESP2 keeps the shapes of SENTINEL and CLUSTER replies simple.
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1, // the helpers poll; a retry would only hide state
		DialTimeout:     probeTimeout,
		ReadTimeout:     adminTimeout,
		WriteTimeout:    adminTimeout,
		PoolSize:        2,
	})
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			state := "running"
			if s.proc == nil {
				state = "stopped"
			}
			t.Logf("redistest: log of the %s at %s (%s; last %d bytes):\n%s", l.what(), s.Addr(), state, logTail, s.log.String())
			s.mu.Unlock()
		}
		s.Stop()
		_ = s.admin.Close()
	})
	return s
}

// Addr returns the server's address, 127.0.0.1:port. It stays the same across
// [Server.Restart].
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Running reports whether the server's process runs: it was started and not
// stopped since (or restarted after), and has not exited on its own.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

// Stop kills the server with SIGKILL, as in a crash, and waits for the process
// to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
}

// Restart kills the server if it runs and starts it again on the same port
// with the same arguments and directory, returning once it answers (bounded
// by 10 s). Without persistence the new server starts empty. It fails the test
// if the server does not come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
		s.proc = nil
	}
	var (
		p   *process
		err error
	)
	// A just-killed server's socket is gone once the process has been
	// reaped, but a stranger may have bound the port meanwhile: a few tries.
	for attempt := 0; attempt < startAttempts; attempt++ {
		p, err = s.l.start(s.port)
		if err == nil || !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("redistest: Restart on port %d: %v", s.port, err)
		return
	}
	s.proc, s.log = p, p.log
}

// finder looks for a Redis server; its fields are swapped in tests.
type finder struct {
	getenv       func(string) string
	lookBinary   func() (string, error)
	startPrivate func(bin string) (addr string, stop func(), err error)
	fallbacks    []Fallback
}

// defaultFinder looks in the real environment, then tries fallbacks.
func defaultFinder(fallbacks ...Fallback) finder {
	return finder{
		getenv:       os.Getenv,
		lookBinary:   lookBinary,
		startPrivate: startPrivate,
		fallbacks:    fallbacks,
	}
}

// find returns the address of a server and a function that releases it, in
// the order documented on Run.
func (f finder) find() (string, func(), error) {
	if a := f.getenv(envAddr); a != "" {
		if err := checkHostPort(a); err != nil {
			return "", nil, fmt.Errorf("redistest: %s=%q is not host:port: %v", envAddr, a, err)
		}
		if err := probe(a, addrProbeTimeout, 0, nil, nil); err != nil {
			return "", nil, fmt.Errorf("redistest: %s=%s does not answer PING: %v\n"+
				"start that server, or unset %s to let the tests start their own", envAddr, a, err, envAddr)
		}
		return a, func() {}, nil
	}
	var reasons []string
	if bin, err := f.lookBinary(); err != nil {
		reasons = append(reasons, "redis-server: "+err.Error())
	} else {
		a, stop, err := f.startPrivate(bin)
		if err == nil {
			return a, stop, nil
		}
		// The binary exists but does not start: say why, rather than
		// hiding it behind a fallback's error.
		reasons = append(reasons, "redis-server: "+err.Error())
	}
	for _, fb := range f.fallbacks {
		a, stop, err := fb()
		if err == nil {
			if err = probe(a, addrProbeTimeout, 0, nil, nil); err == nil {
				return a, stop, nil
			}
			stop()
			err = fmt.Errorf("the fallback's server at %s does not answer PING: %w", a, err)
		}
		reasons = append(reasons, err.Error())
	}
	if len(f.fallbacks) == 0 {
		reasons = append(reasons, "no fallback (such as a Docker container) was given")
	}
	return "", nil, fmt.Errorf("%s\nwhat was tried:\n  - %s", howToGetRedis, strings.Join(reasons, "\n  - "))
}

// checkHostPort accepts host:port with a numeric port.
func checkHostPort(a string) error {
	if strings.Contains(a, "://") {
		return errors.New("a URL; give only host:port, such as 127.0.0.1:6379")
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// lookBinary finds the server binary the tests start: the one named by
// EnvServer if that is set, else redis-server on PATH or at its Debian
// location.
func lookBinary() (string, error) {
	if env := os.Getenv(EnvServer); env != "" {
		return lookServerEnv(env)
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(fallbackBinary); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return fallbackBinary, nil
	}
	return "", errors.New("redis-server is neither on PATH nor at " + fallbackBinary)
}

// lookServerEnv checks the binary that EnvServer names: an absolute path,
// or a name looked up on PATH. A relative path is refused: every test
// binary runs in its own package's directory, where it would name another
// file.
func lookServerEnv(env string) (string, error) {
	if strings.ContainsRune(env, os.PathSeparator) && !filepath.IsAbs(env) {
		return "", fmt.Errorf("%s=%q is a relative path: give an absolute one (each test binary runs in its package's directory), such as \"$PWD/%s\"", EnvServer, env, env)
	}
	p, err := exec.LookPath(env)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %v: name an executable redis-server or valkey-server, or unset it to use redis-server", EnvServer, env, err)
	}
	return p, nil
}

// startPrivate starts the test binary's shared private server.
func startPrivate(bin string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return "", nil, fmt.Errorf("temporary directory: %w", err)
	}
	p, port, err := launch{bin: bin, dir: dir}.startFree()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		p.kill()
		_ = os.RemoveAll(dir)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), stop, nil
}

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// launch says how to start one redis-server process. The port is not part of
// it: startFree picks one per attempt, Restart reuses the old one.
type launch struct {
	bin string
	dir string
	// conf, if set, is a configuration file, passed before every other
	// argument as redis-server requires (a sentinel needs one it can rewrite).
	conf string
	// extra follow the default arguments, so they win.
	extra []string
	// tls, if set, makes the port a TLS port (the plain port is turned off:
	// extra must name the certificate files) and is what probes and helper
	// clients use to connect.
	tls *tls.Config
}

// what names the kind of server in messages.
func (l launch) what() string {
	switch {
	case slices.Contains(l.extra, "--sentinel"):
		return "redis sentinel"
	case l.tls != nil:
		return "redis-server (TLS)"
	default:
		return "redis-server"
	}
}

// args returns the command line for a server on port.
func (l launch) args(port int) []string {
	var args []string
	if l.conf != "" {
		args = append(args, l.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		// Redis 7 waits 5 s for more replicas before a diskless full sync;
		// the replicas of a test arrive one by one, so sync each at once.
		"--repl-diskless-sync-delay", "0",
		"--daemonize", "no",
		"--dir", l.dir,
		"--logfile", "",
	)
	if l.tls != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(port))
	}
	return append(args, l.extra...)
}

// startFree starts the server on a free loopback port, picking another port
// when the chosen one was taken before the server could bind it.
func (l launch) startFree() (*process, int, error) {
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var port int
		port, err = freePort()
		if err != nil {
			return nil, 0, err
		}
		var p *process
		p, err = l.start(port)
		if err == nil {
			return p, port, nil
		}
		if !errors.Is(err, errPortInUse) {
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("no free port after %d attempts: %w", startAttempts, err)
}

// freePort asks the kernel for a free loopback port. The port is free when
// freePort returns but may be taken again before it is used.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free loopback port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("pick a free loopback port: %w", err)
	}
	return port, nil
}

// process is a running redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	log  *proctest.TailBuffer
}

// start starts the server on 127.0.0.1:port and returns once it answers,
// bounded by startTimeout. On failure the process is gone and the error holds
// the end of its log; errPortInUse is wrapped if the port was taken.
func (l launch) start(port int) (*process, error) {
	bin, args := l.bin, l.args(port)
	logs := proctest.NewTailBuffer(logTail)
	cmd := exec.Command(bin, args...)
	cmd.Dir = l.dir
	cmd.Stdout = logs
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setParentDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: logs}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	if err := probe(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), startTimeout, cmd.Process.Pid, l.tls, p.done); err != nil {
		p.kill()
		tail := logs.String()
		switch {
		case strings.Contains(tail, "already in use"):
			err = fmt.Errorf("%w: %v", errPortInUse, err)
		case l.tls != nil && strings.Contains(tail, "TLS support"):
			err = fmt.Errorf("%v: %s was built without TLS: run the TLS tests with a server that has it (unset %s), and -skip TLS with this one", err, bin, EnvServer)
		}
		return nil, fmt.Errorf("%s %s did not start: %w\n--- server log (last %d bytes) ---\n%s--- end of server log ---",
			bin, strings.Join(quoteArgs(args), " "), err, logTail, tail)
	}
	return p, nil
}

// kill sends SIGKILL and waits until the process has been reaped.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// setParentDeathSignal asks Linux to SIGKILL the server when the test binary
// dies (a panic in a test, a -timeout, a SIGKILL), so that no server outlives
// its tests even when Cleanup and deferred calls never run. The field exists
// only on Linux and FreeBSD, so it is set by reflection to keep this package
// one file that builds everywhere; elsewhere Cleanup is the only guard.
//
// The kernel sends the signal when the OS thread that started the child
// exits; the Go runtime keeps its threads alive unless a goroutine that
// locked its thread exits without unlocking it, which tests rarely do.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig")
	sig := reflect.ValueOf(syscall.SIGKILL)
	if f.IsValid() && f.CanSet() && sig.Type().AssignableTo(f.Type()) {
		f.Set(sig)
	}
}

// probe connects to a until the server answers PING, or timeout passes, or
// exited is closed (nil means never). If pid is not 0 it also checks, with
// INFO server, that the answer comes from that process and not from a
// stranger that took the port. A non-nil tlsConf makes it connect with TLS.
func probe(a string, timeout time.Duration, pid int, tlsConf *tls.Config, exited <-chan struct{}) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var last error
	for {
		last = probeOnce(a, pid, tlsConf)
		if last == nil {
			return nil
		}
		// Re-check after a failed attempt: once the process has exited
		// there is no point in waiting.
		select {
		case <-exited:
			return fmt.Errorf("server exited before answering (last attempt: %v)", last)
		case <-deadline.C:
			return fmt.Errorf("no answer within %v: %w", timeout, last)
		case <-time.After(probeInterval):
		}
	}
}

// probeOnce dials a (with TLS if tlsConf is not nil), sends PING and, if pid
// is not 0, INFO server.
func probeOnce(a string, pid int, tlsConf *tls.Config) error {
	var (
		conn net.Conn
		err  error
	)
	d := &net.Dialer{Timeout: probeTimeout}
	if tlsConf != nil {
		conn, err = tls.DialWithDialer(d, "tcp", a, tlsConf)
	} else {
		conn, err = d.Dial("tcp", a)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read PING reply: %w", err)
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	if pid == 0 {
		return nil
	}
	if _, err := io.WriteString(conn, "INFO server\r\n"); err != nil {
		return err
	}
	info, err := readBulk(r)
	if err != nil {
		return fmt.Errorf("read INFO reply: %w", err)
	}
	want := "process_id:" + strconv.Itoa(pid)
	for _, l := range strings.Split(info, "\n") {
		if strings.TrimSpace(l) == want {
			return nil
		}
	}
	return fmt.Errorf("the server on %s is not process %d", a, pid)
}

// readBulk reads one RESP bulk string.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("want a bulk string, got %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("bad bulk length %q", line)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// quoteArgs quotes the arguments that a shell would need quoted, for error
// messages that show the command line.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = a
		}
	}
	return out
}
