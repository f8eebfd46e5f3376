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
// To lose one reply after the server ran the command, as a network fault
// between the two does, arm the proxy with [Proxy.DropReply]: it forwards
// the next matching command, waits until Redis starts to answer it, and then
// ends the connection without forwarding that reply:
//
//	dropped := p.DropReply(faultproxy.Command("INCR"))
//	rdb.Incr(ctx, "n") // runs on the server; go-redis sees EOF and sends it again
//	<-dropped
//
// For that the proxy reads the Redis protocol in both directions (requests,
// and RESP2 and RESP3 replies), so it knows which reply answers which
// command even when a client pipelines them. A connection whose traffic it
// cannot follow (pub/sub, MONITOR, CLIENT REPLY, replication, or bytes that
// are not RESP) is copied byte for byte from then on, as every connection
// was before.
//
// The proxy only talks to loopback addresses, so tests never send traffic off
// the machine.
package faultproxy

import (
	"bufio"
	"bytes"
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
	// readBuffer is the size of the buffered reader on each side of a pair.
	readBuffer = 32 << 10
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
	arms     []*arm // armed by DropReply, oldest first
	dropped  int
	closed   bool
	closeErr error
}

// MatchFunc reports whether a client command, given as its arguments (the
// command name first, as sent), is the one [Proxy.DropReply] waits for. The
// arguments are valid only during the call. It runs on the proxy's
// goroutines, under the proxy's lock: it must be quick and must not call the
// proxy's methods.
type MatchFunc func(args [][]byte) bool

// Command returns a MatchFunc for the commands whose first arguments are
// words, compared without regard to case: Command("XREADGROUP"),
// Command("EVALSHA", sha), Command("CLIENT", "SETNAME").
func Command(words ...string) MatchFunc {
	return func(args [][]byte) bool {
		if len(words) == 0 || len(args) < len(words) {
			return false
		}
		for i, w := range words {
			if !bytes.EqualFold(args[i], []byte(w)) {
				return false
			}
		}
		return true
	}
}

// arm is one DropReply waiting for its command.
type arm struct {
	match MatchFunc
	done  chan struct{} // closed once the reply was dropped
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

	go p.requests(pr)
	go p.replies(pr)
}

// DropReply arms the proxy to lose one reply: the next client command, on
// any connection, for which match returns true is forwarded to the server as
// usual, but once the first byte of the server's reply to it arrives (proof
// that the server ran it), the proxy ends that connection pair instead of
// forwarding the reply. The client first gets the replies to the commands
// it sent before (pipelined ones included), then an end of stream; the
// server side is closed. go-redis, by default, then sends the command again
// on a new connection, so the server runs it twice.
//
// Each call arms one drop; several calls wait for their commands in the
// order they were made. The returned channel is closed once the reply was
// dropped. A connection whose traffic the proxy no longer follows (see the
// package documentation) never matches; a matched command whose connection
// is cut first (CutAll, Close, the client leaving) uses up the arm without a
// drop. Commands without a reply (SUBSCRIBE and its kin) cannot be matched.
func (p *Proxy) DropReply(match MatchFunc) <-chan struct{} {
	a := &arm{match: match, done: make(chan struct{})}
	p.mu.Lock()
	p.arms = append(p.arms, a)
	p.mu.Unlock()
	return a.done
}

// Dropped returns the number of replies dropped by [Proxy.DropReply] so far.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// claim returns the first armed drop that matches args, disarming it, or nil.
func (p *Proxy) claim(args [][]byte) *arm {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range p.arms {
		if a.match(args) {
			p.arms = append(p.arms[:i], p.arms[i+1:]...)
			return a
		}
	}
	return nil
}

// endPair forgets the pair and closes it.
func (p *Proxy) endPair(pr *pair) {
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	pr.close()
}

// requests forwards the client's commands to the server, one whole command
// (or several, pipelined) per write, and numbers those that expect a reply:
// it marks the command whose reply to drop, or from which on to stop
// following the connection, before the server can see it. It ends the pair
// when the client goes away; after a drop it reads and discards the client's
// commands until then, so the client sees the end of stream and not a reset.
func (p *Proxy) requests(pr *pair) {
	defer p.wg.Done()
	defer p.endPair(pr)
	r := bufio.NewReaderSize(pr.client, readBuffer)
	var (
		buf  []byte
		args [][]byte
		err  error
	)
	for {
		if buf, args, err = readCommand(r, buf); err != nil {
			break
		}
		if len(args) > 0 && !pr.track(p, args) {
			break // copy the rest byte for byte
		}
		if r.Buffered() > 0 {
			continue // more commands have arrived: send them together
		}
		if err = pr.forward(buf); err != nil {
			break
		}
		buf = buf[:0]
	}
	// What was read goes out as it came (a client's last commands before it
	// left, or the bytes of a command the proxy cannot follow); after a
	// command that ends the following, or bytes that are not RESP, the rest
	// is copied as it comes.
	if ferr := pr.forward(buf); ferr == nil && (err == nil || errors.Is(err, errProtocol)) {
		_, _ = io.Copy(pr.server, r)
	}
	if pr.isDropped() {
		_, _ = io.Copy(io.Discard, r)
	}
}

// replies forwards the server's replies to the client, counting them against
// the commands; at the start of the reply to drop it sends what came before,
// ends the client's side of the stream, closes the server's, and returns
// (requests ends the pair). Push messages (RESP3 >) answer no command.
func (p *Proxy) replies(pr *pair) {
	defer p.wg.Done()
	r := bufio.NewReaderSize(pr.server, readBuffer)
	var (
		buf  []byte
		next int // the index of the command the next reply answers
	)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := pr.client.Write(buf)
		buf = buf[:0]
		return err
	}
	for {
		if len(buf) > 0 && r.Buffered() == 0 {
			if flush() != nil {
				break
			}
		}
		b, err := r.Peek(1)
		if err != nil {
			_ = flush()
			break
		}
		if b[0] != '>' {
			a, follow := pr.replyState(next)
			if !follow {
				if flush() == nil {
					_, _ = io.Copy(pr.client, r)
				}
				break
			}
			if a != nil {
				if flush() == nil {
					p.drop(pr, a)
					return
				}
				break
			}
			next++
		}
		if buf, err = readReply(r, buf); err != nil {
			if flush() == nil && errors.Is(err, errProtocol) {
				_, _ = io.Copy(pr.client, r)
			}
			break
		}
	}
	p.endPair(pr)
}

// drop ends the pair after the client got everything before the dropped
// reply: a FIN to the client (its unread commands would turn a close into a
// reset, which may destroy replies it has not read yet), the server closed.
func (p *Proxy) drop(pr *pair, a *arm) {
	pr.mu.Lock()
	pr.dropped = true
	pr.mu.Unlock()
	if tc, ok := pr.client.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = pr.server.Close()
	p.mu.Lock()
	p.dropped++
	p.mu.Unlock()
	close(a.done)
}

// pair is one client connection and its connection to the target.
type pair struct {
	client, server net.Conn
	once           sync.Once

	mu      sync.Mutex
	sent    int  // commands that expect a reply, forwarded so far
	dropAt  int  // the index of the command whose reply to drop, if dropArm is set
	dropArm *arm // the arm that matched it
	stopAt  int  // from this command on the pair is copied blindly, if stopped
	stopped bool
	dropped bool // the reply was dropped: the pair is ending
}

// track numbers a command that expects a reply, and decides what becomes of
// its reply. It returns false if the proxy stops following the connection
// with this command.
func (pr *pair) track(p *Proxy, args [][]byte) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.stopped { // the replies side gave up
		return false
	}
	i := pr.sent
	pr.sent++
	if untrackable(args) {
		pr.stopAt, pr.stopped = i, true
		return false
	}
	if pr.dropArm == nil {
		if a := p.claim(args); a != nil {
			pr.dropAt, pr.dropArm = i, a
		}
	}
	return true
}

// replyState says whether the reply to command i is still followed, and the
// arm to fire if it is the reply to drop. A reply to a command not sent yet
// (a server that speaks first, as Redis does only to refuse a client) ends
// the following: the proxy cannot know what it answers.
func (pr *pair) replyState(i int) (*arm, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if i >= pr.sent && !pr.stopped {
		pr.stopAt, pr.stopped = i, true
	}
	if pr.stopped && i >= pr.stopAt {
		return nil, false
	}
	if pr.dropArm != nil && pr.dropAt == i {
		return pr.dropArm, true
	}
	return nil, true
}

// isDropped reports whether the pair's reply was dropped.
func (pr *pair) isDropped() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.dropped
}

// forward writes b to the server.
func (pr *pair) forward(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := pr.server.Write(b)
	return err
}

// untrackable reports whether a command makes the connection's replies
// impossible to pair with its commands: pub/sub (replies to SUBSCRIBE come
// one per channel, and messages follow), MONITOR, CLIENT REPLY OFF|SKIP, and
// a replica's SYNC or PSYNC.
func untrackable(args [][]byte) bool {
	for _, name := range []string{"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR", "SYNC", "PSYNC"} {
		if bytes.EqualFold(args[0], []byte(name)) {
			return true
		}
	}
	return Command("CLIENT", "REPLY")(args)
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
