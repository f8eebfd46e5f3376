// Package faultproxy is a loopback TCP proxy that breaks connections on
// demand, for tests of how clients survive network faults.
//
// A test points its client at [Proxy.Addr] instead of the server, then calls
// [Proxy.CutAll] to break every open connection, or [Proxy.SetRefuse] to turn
// new connections away for a while, as in an outage:
//
//	p, err := faultproxy.New(redisAddr)
//	...
//	defer p.Close()
//	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
//	p.CutAll() // in-flight commands fail; the client reconnects afterwards
//
// The proxy only talks to loopback addresses, so tests never send traffic off
// the machine.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

const (
	// dialTimeout bounds connecting to the target for one client.
	dialTimeout = 5 * time.Second
	// acceptRetryDelay is the pause after an accept error other than the
	// listener being closed (such as running out of file descriptors).
	acceptRetryDelay = 10 * time.Millisecond
)

// Proxy forwards TCP connections from its loopback listener to a loopback
// target. Each client connection gets its own connection to the target; the
// two form a pair that lives until either side closes or the proxy cuts it.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	cancel context.CancelFunc // cancels dials in flight, on Close
	wg     sync.WaitGroup     // every goroutine the proxy started

	mu       sync.Mutex
	pairs    map[*pair]struct{}
	refuse   bool
	cuts     int
	closed   bool
	closeErr error
}

// New starts a proxy to target, which must be a loopback host:port
// (127.0.0.0/8, ::1 or localhost). The proxy listens on 127.0.0.1 on a port
// the kernel picks; see [Proxy.Addr]. Call [Proxy.Close] when done.
func New(target string) (*Proxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		cancel: cancel,
		pairs:  make(map[*pair]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop(ctx)
	return p, nil
}

// checkLoopback accepts host:port where host is a loopback IP or localhost.
func checkLoopback(target string) error {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("faultproxy: target %q is not host:port: %w", target, err)
	}
	if port == "" {
		return fmt.Errorf("faultproxy: target %q has no port", target)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("faultproxy: target %q is not a loopback address: use 127.0.0.1, ::1 or localhost", target)
}

// Addr returns the address clients connect to, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// CutAll abruptly closes every open connection pair, on both sides: the
// client sees a reset connection, the server a closed one. New connections
// are still accepted (see [Proxy.SetRefuse]).
func (p *Proxy) CutAll() {
	p.mu.Lock()
	cut := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		cut = append(cut, pr)
		delete(p.pairs, pr)
	}
	p.cuts += len(cut)
	p.mu.Unlock()
	for _, pr := range cut {
		pr.close()
	}
}

// SetRefuse makes the proxy, while refuse is true, accept new connections and
// close them at once, as a server that is down behind a load balancer would.
// Connections already open are left alone; call [Proxy.CutAll] too for a full
// outage.
func (p *Proxy) SetRefuse(refuse bool) {
	p.mu.Lock()
	p.refuse = refuse
	p.mu.Unlock()
}

// Conns returns the number of open connection pairs.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Cuts returns the number of connection pairs closed by [Proxy.CutAll] so
// far. Connections turned away by [Proxy.SetRefuse] are not counted.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops listening, closes every connection, and returns once all the
// proxy's goroutines have returned. It returns the error from closing the
// listener; calling it again returns the same error.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return p.closeErr
	}
	p.closed = true
	p.closeErr = p.ln.Close()
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
		delete(p.pairs, pr)
	}
	p.mu.Unlock()
	p.cancel()
	for _, pr := range pairs {
		pr.close()
	}
	p.wg.Wait()
	return p.closeErr
}

// acceptLoop accepts clients until the listener is closed.
func (p *Proxy) acceptLoop(ctx context.Context) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure: pause, unless the proxy is closing.
			t := time.NewTimer(acceptRetryDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		if !refuse && !closed {
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse || closed {
			abort(c)
			continue
		}
		go p.serve(ctx, c)
	}
}

// serve connects client c to the target and copies both ways until either
// side closes or the pair is cut.
func (p *Proxy) serve(ctx context.Context, c net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	s, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		// The client sees its connection closed, as if the server were down.
		abort(c)
		return
	}
	pr := &pair{client: c, server: s}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.close()
		return
	}
	p.pairs[pr] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()

	go p.pipe(pr, s, c)
	go p.pipe(pr, c, s)
}

// pipe copies from src to dst; when either fails the whole pair is closed.
func (p *Proxy) pipe(pr *pair, dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	pr.close()
}

// pair is one client connection and its connection to the target.
type pair struct {
	client, server net.Conn
	once           sync.Once
}

// close resets the client side and closes the server side, once.
func (pr *pair) close() {
	pr.once.Do(func() {
		abort(pr.client)
		_ = pr.server.Close()
	})
}

// abort closes c with a TCP reset rather than an orderly FIN where it can, so
// the peer sees a broken connection rather than a clean end of stream.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
