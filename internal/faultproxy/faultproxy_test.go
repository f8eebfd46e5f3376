package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutine leak after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// setup starts a proxy to target that is closed in t.Cleanup.
func setup(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatalf("New(%q): %v", target, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// startEcho starts a loopback server that echoes every line back, closed and
// joined in t.Cleanup.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dial connects to a, with the connection closed in t.Cleanup.
func dial(t *testing.T, a string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", a, testTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", a, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	return c
}

// echo sends line over c and returns what comes back.
func echo(c net.Conn, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

// tryEcho dials a and echoes line once. The proxy may reset a connection
// it turns away before the client's connect returns, so a failure can show at
// either step; tryEcho reports the first.
func tryEcho(t *testing.T, a, line string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", a, testTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		return "", err
	}
	return echo(c, line)
}

func TestNew_Target(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		target  string
		wantErr bool
	}{
		{name: "ipv4 loopback", target: "127.0.0.1:6379"},
		{name: "other 127/8 address", target: "127.0.0.2:6379"},
		{name: "ipv6 loopback", target: "[::1]:6379"},
		{name: "localhost", target: "localhost:6379"},
		{name: "private network", target: "10.0.0.1:6379", wantErr: true},
		{name: "public name", target: "example.com:6379", wantErr: true},
		{name: "unspecified", target: "0.0.0.0:6379", wantErr: true},
		{name: "empty host", target: ":6379", wantErr: true},
		{name: "no port", target: "127.0.0.1", wantErr: true},
		{name: "empty port", target: "127.0.0.1:", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := faultproxy.New(tt.target)
			if tt.wantErr {
				if err == nil {
					_ = p.Close()
					t.Fatalf("New(%q) succeeded, want an error", tt.target)
				}
				if !strings.HasPrefix(err.Error(), "faultproxy: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q): %v", tt.target, err)
			}
			if host, _, _ := net.SplitHostPort(p.Addr()); host != "127.0.0.1" {
				t.Errorf("Addr() = %s, want a 127.0.0.1 listener", p.Addr())
			}
			if p.Target() != tt.target {
				t.Errorf("Target() = %q, want %q", p.Target(), tt.target)
			}
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

func TestProxy_Forwards(t *testing.T) {
	t.Parallel()
	p := setup(t, startEcho(t))
	c := dial(t, p.Addr())
	if got, err := echo(c, "hello"); err != nil || got != "hello" {
		t.Fatalf("echo through proxy = %q, %v; want \"hello\"", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns() = %d with one client, want 1", n)
	}
	_ = c.Close()
	redistest.WaitFor(t, testTimeout, "the pair to go once the client closed", func() bool { return p.Conns() == 0 })
	if n := p.Cuts(); n != 0 {
		t.Errorf("Cuts() = %d without CutAll, want 0", n)
	}
}

func TestProxy_CutAll(t *testing.T) {
	t.Parallel()
	p := setup(t, startEcho(t))
	c1, c2 := dial(t, p.Addr()), dial(t, p.Addr())
	for _, c := range []net.Conn{c1, c2} {
		if _, err := echo(c, "x"); err != nil {
			t.Fatalf("echo before cut: %v", err)
		}
	}
	p.CutAll()
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns() after CutAll = %d, want 0", n)
	}
	if n := p.Cuts(); n != 2 {
		t.Errorf("Cuts() = %d after cutting two connections, want 2", n)
	}
	for _, c := range []net.Conn{c1, c2} {
		if got, err := echo(c, "y"); err == nil {
			t.Errorf("echo after cut = %q, want an error", got)
		}
	}
	c3 := dial(t, p.Addr())
	if got, err := echo(c3, "again"); err != nil || got != "again" {
		t.Fatalf("echo on a new connection after the cut = %q, %v", got, err)
	}
	p.CutAll()
	if n := p.Cuts(); n != 3 {
		t.Errorf("Cuts() = %d, want 3", n)
	}
}

func TestProxy_SetRefuse(t *testing.T) {
	t.Parallel()
	p := setup(t, startEcho(t))
	open := dial(t, p.Addr())
	if _, err := echo(open, "before"); err != nil {
		t.Fatalf("echo: %v", err)
	}

	p.SetRefuse(true)
	if got, err := tryEcho(t, p.Addr(), "x"); err == nil {
		t.Fatalf("echo while refusing = %q, want an error", got)
	}
	if got, err := echo(open, "still"); err != nil || got != "still" {
		t.Errorf("connection opened before SetRefuse: echo = %q, %v; want it untouched", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns() while refusing = %d, want 1", n)
	}

	p.SetRefuse(false)
	c := dial(t, p.Addr())
	if got, err := echo(c, "after"); err != nil || got != "after" {
		t.Fatalf("echo after SetRefuse(false) = %q, %v", got, err)
	}
}

func TestProxy_TargetDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	_ = ln.Close()
	p := setup(t, target)
	if got, err := tryEcho(t, p.Addr(), "x"); err == nil {
		t.Fatalf("echo with the target down = %q, want an error", got)
	}
	redistest.WaitFor(t, testTimeout, "no pair for a failed dial", func() bool { return p.Conns() == 0 })
}

func TestProxy_Close(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.New(startEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if _, err := echo(c, "x"); err != nil {
		t.Fatalf("echo: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if got, err := echo(c, "y"); err == nil {
		t.Errorf("echo after Close = %q, want an error", got)
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns() after Close = %d, want 0", n)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Errorf("dial after Close succeeded, want the listener gone")
	}
}

// setupRedis returns a client that talks to Redis through a new proxy and
// does not retry on its own, so that every fault is seen by the caller, and a
// direct client for checking the server's side.
func setupRedis(t *testing.T) (*faultproxy.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	p := setup(t, redistest.Addr())
	name := redistest.Name(t)
	viaProxy := redis.NewClient(&redis.Options{
		Addr:       p.Addr(),
		ClientName: name,
		MaxRetries: -1,
	})
	t.Cleanup(func() { _ = viaProxy.Close() })
	return p, viaProxy, redistest.NewClient(t)
}

func TestProxy_Redis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, rdb, direct := setupRedis(t)
	key := redistest.Name(t)
	t.Cleanup(func() { _ = direct.Del(context.Background(), key, key+":list").Err() })

	if err := rdb.Set(ctx, key, "v1", time.Minute).Err(); err != nil {
		t.Fatalf("SET through the proxy: %v", err)
	}
	if got, err := direct.Get(ctx, key).Result(); err != nil || got != "v1" {
		t.Fatalf("GET directly = %q, %v; want \"v1\"", got, err)
	}

	// A blocking command in flight when the connections are cut must fail,
	// not hang and not report an empty result.
	blpop := make(chan error, 1)
	go func() {
		blpop <- rdb.BLPop(ctx, testTimeout, key+":list").Err()
	}()
	clientName := rdb.Options().ClientName
	redistest.WaitFor(t, testTimeout, "BLPOP to block on the server", func() bool {
		list, err := direct.ClientList(ctx).Result()
		if err != nil {
			return false
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name="+clientName+" ") && strings.Contains(line, " cmd=blpop") {
				return true
			}
		}
		return false
	})
	p.CutAll()
	select {
	case err := <-blpop:
		if err == nil || errors.Is(err, redis.Nil) {
			t.Fatalf("BLPOP after CutAll = %v, want a connection error", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("BLPOP still blocked %v after CutAll", testTimeout)
	}
	if p.Cuts() < 1 {
		t.Errorf("Cuts() = %d after cutting a blocked client, want at least 1", p.Cuts())
	}

	// The client recovers on its own with a new connection.
	if err := rdb.Set(ctx, key, "v2", time.Minute).Err(); err != nil {
		t.Fatalf("SET after the cut: %v", err)
	}
	if got, err := direct.Get(ctx, key).Result(); err != nil || got != "v2" {
		t.Fatalf("GET directly after the cut = %q, %v; want \"v2\"", got, err)
	}
}

func TestProxy_RedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, rdb, _ := setupRedis(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}

	p.SetRefuse(true)
	p.CutAll()
	for i := 0; i < 3; i++ {
		if err := rdb.Ping(ctx).Err(); err == nil {
			t.Fatalf("PING %d during the outage succeeded, want an error", i)
		}
	}

	p.SetRefuse(false)
	// go-redis may hold on to the last dial error for a moment before it
	// dials again: poll, bounded.
	redistest.WaitFor(t, testTimeout, "the client to reconnect after the outage", func() bool {
		return rdb.Ping(ctx).Err() == nil
	})
	if n := p.Conns(); n < 1 {
		t.Errorf("Conns() = %d with a reconnected client, want at least 1", n)
	}
}
