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
	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := redistest.Run(m, rediscontainer.Start)
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
	return startServer(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// startServer starts a loopback server that runs serve on each connection,
// closed and joined in t.Cleanup.
func startServer(t *testing.T, serve func(c net.Conn)) string {
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
				serve(c)
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
	return setupRedisWith(t, redis.Options{ClientName: redistest.Name(t), MaxRetries: -1})
}

// setupRedisWith is setupRedis with the proxied client's options (Addr is
// set to the proxy's).
func setupRedisWith(t *testing.T, opt redis.Options) (*faultproxy.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	p := setup(t, redistest.Addr())
	opt.Addr = p.Addr()
	viaProxy := redis.NewClient(&opt)
	t.Cleanup(func() { _ = viaProxy.Close() })
	return p, viaProxy, redistest.NewClient(t)
}

// testKey returns a key prefix for the test whose keys are deleted in
// t.Cleanup.
func testKey(t *testing.T, direct *redis.Client) string {
	t.Helper()
	key := redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, direct, key+"*")
	return key
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

// forEachProtocol runs f in a parallel subtest for RESP2 and for RESP3.
func forEachProtocol(t *testing.T, f func(t *testing.T, proto int)) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprint("RESP", proto), func(t *testing.T) {
			t.Parallel()
			f(t, proto)
		})
	}
}

func TestProxy_OtherProtocols(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		serve  func(c net.Conn)
		client func(c net.Conn) error
	}{
		{
			// A Postgres client opens with a binary SSLRequest; the server
			// answers with one byte, no line end.
			name: "client first, binary",
			serve: func(c net.Conn) {
				buf := make([]byte, 8)
				if _, err := io.ReadFull(c, buf); err == nil {
					_, _ = c.Write([]byte("N"))
				}
			},
			client: func(c net.Conn) error {
				if _, err := c.Write([]byte("\x00\x00\x00\x08\x04\xd2\x16\x2f")); err != nil {
					return err
				}
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err != nil || b[0] != 'N' {
					return fmt.Errorf("answer %q, %v; want \"N\"", b, err)
				}
				return nil
			},
		},
		{
			// A MySQL-like server greets first, in binary.
			name: "server first, binary",
			serve: func(c net.Conn) {
				if _, err := c.Write([]byte("\x4a\x00\x00\x00\x0a8.0")); err == nil {
					_, _ = io.Copy(c, c)
				}
			},
			client: func(c net.Conn) error {
				greeting := make([]byte, 8)
				if _, err := io.ReadFull(c, greeting); err != nil || string(greeting) != "\x4a\x00\x00\x00\x0a8.0" {
					return fmt.Errorf("greeting %q, %v", greeting, err)
				}
				if _, err := c.Write([]byte("\x01\x02")); err != nil {
					return err
				}
				echo := make([]byte, 2)
				if _, err := io.ReadFull(c, echo); err != nil || string(echo) != "\x01\x02" {
					return fmt.Errorf("echo %q, %v", echo, err)
				}
				return nil
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := setup(t, startServer(t, tt.serve))
			p.DropReply(faultproxy.Command("x")) // armed, never fires
			if err := tt.client(dial(t, p.Addr())); err != nil {
				t.Fatalf("through the proxy: %v", err)
			}
			if n := p.Dropped(); n != 0 {
				t.Errorf("Dropped() = %d, want 0", n)
			}
		})
	}
}

// waitDropped waits until the drop armed with done happened.
func waitDropped(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("no reply dropped within %v", testTimeout)
	}
}

func TestProxy_DropReply_RetryRunsTwice(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, func(t *testing.T, proto int) {
		ctx := context.Background()
		// go-redis's defaults: up to 3 retries, on any command.
		p, rdb, direct := setupRedisWith(t, redis.Options{Protocol: proto})
		key := testKey(t, direct)

		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
		done := p.DropReply(faultproxy.Command("incr")) // any case
		n, err := rdb.Incr(ctx, key).Result()
		if err != nil {
			t.Fatalf("INCR with go-redis's retries: %v", err)
		}
		waitDropped(t, done)
		// The first INCR ran, its reply was lost, go-redis sent it again.
		if n != 2 {
			t.Errorf("INCR returned %d, want 2: the lost first run and the retry", n)
		}
		if got, err := direct.Get(ctx, key).Int(); err != nil || got != 2 {
			t.Errorf("GET directly = %d, %v; want 2", got, err)
		}
		if got := p.Dropped(); got != 1 {
			t.Errorf("Dropped() = %d, want 1", got)
		}
		// Disarmed: the next INCR is answered.
		if n, err := rdb.Incr(ctx, key).Result(); err != nil || n != 3 {
			t.Errorf("second INCR = %d, %v; want 3", n, err)
		}
	})
}

func TestProxy_DropReply_NoRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, rdb, direct := setupRedis(t)
	key := testKey(t, direct)

	done := p.DropReply(faultproxy.Command("INCR"))
	err := rdb.Incr(ctx, key).Err()
	if err == nil || !errors.Is(err, io.EOF) {
		t.Fatalf("INCR whose reply was dropped: err = %v, want io.EOF", err)
	}
	waitDropped(t, done)
	if got, err := direct.Get(ctx, key).Int(); err != nil || got != 1 {
		t.Errorf("GET directly = %d, %v; want 1: the server ran the command", got, err)
	}
	// The client reconnects for the next command.
	if n, err := rdb.Incr(ctx, key).Result(); err != nil || n != 2 {
		t.Errorf("INCR after the drop = %d, %v; want 2", n, err)
	}
}

func TestProxy_DropReply_Pipeline(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, func(t *testing.T, proto int) {
		ctx := context.Background()
		p, rdb, direct := setupRedisWith(t, redis.Options{Protocol: proto, MaxRetries: -1})
		key := testKey(t, direct)
		if err := direct.HSet(ctx, key+":h", "f1", "v1", "f2", "v2").Err(); err != nil {
			t.Fatal(err)
		}

		// Replies of every shape before the dropped one: a map (RESP3)
		// or flat array, a nested array, a double, a null.
		done := p.DropReply(faultproxy.Command("INCR", key+":b"))
		pipe := rdb.Pipeline()
		hgetall := pipe.HGetAll(ctx, key+":h")
		xadd := pipe.XAdd(ctx, &redis.XAddArgs{Stream: key + ":s", Values: []string{"f", "v"}})
		xrange := pipe.XRange(ctx, key+":s", "-", "+")
		incrByFloat := pipe.IncrByFloat(ctx, key+":f", 1.5)
		missing := pipe.Get(ctx, key+":missing")
		a := pipe.Incr(ctx, key+":a")
		b := pipe.Incr(ctx, key+":b")
		c := pipe.Incr(ctx, key+":c")
		_, _ = pipe.Exec(ctx)
		waitDropped(t, done)

		// go-redis fails every command of a pipeline whose connection
		// broke, also those whose replies it read (and whose values it
		// kept; only an error reply, here redis.Nil, stays): a caller
		// cannot tell from the errors which commands ran.
		if !errors.Is(missing.Err(), redis.Nil) {
			t.Errorf("GET missing: err = %v, want redis.Nil", missing.Err())
		}
		for _, cmd := range []redis.Cmder{hgetall, xadd, xrange, incrByFloat, a, b, c} {
			if !errors.Is(cmd.Err(), io.EOF) {
				t.Errorf("%v: err = %v, want io.EOF", cmd.Args(), cmd.Err())
			}
		}
		if got := hgetall.Val(); len(got) != 2 || got["f1"] != "v1" {
			t.Errorf("HGETALL before the dropped reply = %v", got)
		}
		if xadd.Val() == "" || len(xrange.Val()) != 1 || xrange.Val()[0].ID != xadd.Val() {
			t.Errorf("XADD = %q; XRANGE = %v", xadd.Val(), xrange.Val())
		}
		if incrByFloat.Val() != 1.5 {
			t.Errorf("INCRBYFLOAT = %v, want 1.5", incrByFloat.Val())
		}
		if a.Val() != 1 || b.Val() != 0 {
			t.Errorf("INCR a, just before the dropped reply = %d, want 1; INCR b = %d, want no value", a.Val(), b.Val())
		}
		if got, err := direct.Get(ctx, key+":b").Int(); err != nil || got != 1 {
			t.Errorf("GET b directly = %d, %v; want 1: it ran, only its reply was lost", got, err)
		}
	})
}

func TestProxy_DropReply_XReadGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, rdb, direct := setupRedis(t)
	stream := testKey(t, direct)
	if err := direct.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := direct.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"job", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}

	done := p.DropReply(faultproxy.Command("XREADGROUP"))
	err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{stream, ">"}, Count: 1}).Err()
	if err == nil {
		t.Fatal("XREADGROUP whose reply was dropped succeeded")
	}
	waitDropped(t, done)
	// The entry was delivered (it is pending for c1) but the client never saw it.
	pending, err := direct.XPending(ctx, stream, "g").Result()
	if err != nil || pending.Count != 1 || pending.Consumers["c1"] != 1 {
		t.Errorf("XPENDING = %+v, %v; want the entry pending for c1", pending, err)
	}
}

func TestProxy_DropReply_RawPipeline(t *testing.T) {
	t.Parallel()
	p, _, direct := setupRedis(t)
	key := testKey(t, direct)
	c := dial(t, p.Addr())
	done := p.DropReply(faultproxy.Command("INCR"))
	// An inline PING and a RESP INCR in one write.
	req := fmt.Sprintf("PING\r\n*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", len(key), key)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read until the end of stream: %v (got %q); want a clean end after the first reply", err, got)
	}
	if string(got) != "+PONG\r\n" {
		t.Errorf("the client got %q, want the PING's reply and nothing of the INCR's", got)
	}
	waitDropped(t, done)
	// The pair lives until the client, which got an end of stream, closes.
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns() = %d before the client closed, want 1", n)
	}
	_ = c.Close()
	redistest.WaitFor(t, testTimeout, "the dropped pair to go", func() bool { return p.Conns() == 0 })
}

func TestProxy_DropReply_Order(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, rdb, direct := setupRedis(t)
	key := testKey(t, direct)

	first := p.DropReply(func(args [][]byte) bool { return len(args) > 1 && strings.HasSuffix(string(args[1]), ":x") })
	second := p.DropReply(faultproxy.Command("SET"))
	if err := rdb.Set(ctx, key+":y", "1", 0).Err(); err == nil {
		t.Fatal("SET y succeeded, want its reply dropped by the second arm")
	}
	waitDropped(t, second)
	if err := rdb.Set(ctx, key+":x", "1", 0).Err(); err == nil {
		t.Fatal("SET x succeeded, want its reply dropped by the first arm")
	}
	waitDropped(t, first)
	if err := rdb.Set(ctx, key+":z", "1", 0).Err(); err != nil {
		t.Fatalf("SET z with no arm left: %v", err)
	}
	if got := p.Dropped(); got != 2 {
		t.Errorf("Dropped() = %d, want 2", got)
	}
}

func TestProxy_PubSubPassesThrough(t *testing.T) {
	t.Parallel()
	forEachProtocol(t, func(t *testing.T, proto int) {
		ctx := context.Background()
		p, rdb, direct := setupRedisWith(t, redis.Options{Protocol: proto})
		ch := redistest.Name(t)

		// A PING on the subscribed connection must not take the arm.
		done := p.DropReply(faultproxy.Command("PING"))
		sub := rdb.Subscribe(ctx, ch)
		t.Cleanup(func() { _ = sub.Close() })
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("SUBSCRIBE: %v", err)
		}
		if err := sub.Ping(ctx); err != nil {
			t.Fatalf("PING on the subscribed connection: %v", err)
		}
		if err := direct.Publish(ctx, ch, "hello").Err(); err != nil {
			t.Fatal(err)
		}
		msgCtx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		for {
			v, err := sub.Receive(msgCtx)
			if err != nil {
				t.Fatalf("receive through the proxy: %v", err)
			}
			if m, ok := v.(*redis.Message); ok {
				if m.Payload != "hello" {
					t.Fatalf("message %q, want \"hello\"", m.Payload)
				}
				break
			}
		}
		select {
		case <-done:
			t.Fatal("a reply on a pub/sub connection was dropped")
		default:
		}
		// The arm is still there for an ordinary connection.
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING (retried after its dropped reply): %v", err)
		}
		waitDropped(t, done)
	})
}

func TestCommand(t *testing.T) {
	t.Parallel()
	args := func(s ...string) [][]byte {
		out := make([][]byte, len(s))
		for i, a := range s {
			out[i] = []byte(a)
		}
		return out
	}
	tests := []struct {
		name  string
		words []string
		args  [][]byte
		want  bool
	}{
		{name: "same case", words: []string{"XREADGROUP"}, args: args("XREADGROUP", "GROUP", "g"), want: true},
		{name: "other case", words: []string{"evalsha"}, args: args("EVALSHA", "abc", "0"), want: true},
		{name: "with argument", words: []string{"EVALSHA", "abc"}, args: args("evalsha", "ABC", "0"), want: true},
		{name: "other argument", words: []string{"EVALSHA", "abc"}, args: args("EVALSHA", "abd", "0")},
		{name: "other command", words: []string{"GET"}, args: args("GETDEL", "k")},
		{name: "too few arguments", words: []string{"CLIENT", "SETNAME"}, args: args("CLIENT")},
		{name: "no words", args: args("GET", "k")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := faultproxy.Command(tt.words...)(tt.args); got != tt.want {
				t.Errorf("Command(%q)(%q) = %v, want %v", tt.words, tt.args, got, tt.want)
			}
		})
	}
}
