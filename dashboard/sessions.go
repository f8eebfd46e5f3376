package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxSessions bounds the sessions kept in memory; past it, the session
// closest to its expiry is dropped.
const maxSessions = 10_000

// sessions are the browsers signed in with the token: random IDs in their
// cookie, kept here with their expiry so that signing out ends one at once.
// A restart signs every browser out.
type sessions struct {
	mu  sync.Mutex
	ids map[string]time.Time // ID -> expiry
}

func newSessions() *sessions { return &sessions{ids: map[string]time.Time{}} }

// start returns the ID of a new session that ends at until.
func (ss *sessions) start(now, until time.Time) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	id := hex.EncodeToString(b)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.ids) >= maxSessions {
		soonest, at := "", time.Time{}
		for k, exp := range ss.ids {
			if !exp.After(now) {
				delete(ss.ids, k)
			} else if soonest == "" || exp.Before(at) {
				soonest, at = k, exp
			}
		}
		if len(ss.ids) >= maxSessions {
			delete(ss.ids, soonest)
		}
	}
	ss.ids[id] = until
	return id
}

// valid reports whether id is a session that has not ended at now.
func (ss *sessions) valid(id string, now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.ids[id]
	if ok && !exp.After(now) {
		delete(ss.ids, id)
		return false
	}
	return ok
}

// end ends session id.
func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.ids, id)
}

// Throttling of failed sign-ins.
const (
	// freeFailures is how many failed sign-ins in a row a client makes
	// before it is refused for a while.
	freeFailures = 5
	// firstLockout is the first refusal; each further failure doubles it,
	// up to maxLockout.
	firstLockout, maxLockout = time.Second, 15 * time.Minute
	// forgetFailures is how long after its last failure a client's count
	// is forgotten.
	forgetFailures = time.Hour
	// maxClients bounds the clients tracked; past it, the one whose last
	// failure is oldest is forgotten.
	maxClients = 10_000
)

// throttle counts failed sign-ins per client address.
type throttle struct {
	mu      sync.Mutex
	clients map[string]*failures
}

// failures is one client's record.
type failures struct {
	n       int       // failed sign-ins in a row
	pending int       // sign-ins admitted and not yet judged
	last    time.Time // the last failure
	until   time.Time // refused until then
}

func newThrottle() *throttle { return &throttle{clients: map[string]*failures{}} }

// admit returns how long client must wait before its sign-in attempt at now
// may be checked (0: check it now, and report the outcome with fail or
// succeed). Attempts of one client run side by side only while its failures
// and pending attempts together stay within freeFailures: a burst of
// parallel guesses cannot overtake the count.
func (t *throttle) admit(client string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.clients[client]
	switch {
	case f == nil:
		if len(t.clients) >= maxClients {
			t.evict(now)
		}
		f = &failures{}
		t.clients[client] = f
	case f.until.After(now):
		return f.until.Sub(now)
	case f.pending > 0 && f.n+f.pending >= freeFailures:
		return firstLockout
	}
	f.pending++
	return 0
}

// fail records a failed sign-in of client at now and returns the failures
// in a row and how long the client is now refused.
func (t *throttle) fail(client string, now time.Time) (int, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.clients[client]
	if f == nil {
		if len(t.clients) >= maxClients {
			t.evict(now)
		}
		f = &failures{}
		t.clients[client] = f
	}
	if f.pending > 0 {
		f.pending--
	}
	if f.n > 0 && now.Sub(f.last) > forgetFailures {
		f.n = 0
	}
	f.n++
	f.last = now
	if f.n <= freeFailures {
		return f.n, 0
	}
	d := maxLockout
	if shift := f.n - freeFailures - 1; shift < 20 {
		d = min(firstLockout<<shift, maxLockout)
	}
	f.until = now.Add(d)
	return f.n, d
}

// evict forgets the clients whose failures are old, and if none is, the one
// whose last failure is oldest.
func (t *throttle) evict(now time.Time) {
	oldest := ""
	for k, f := range t.clients {
		if now.Sub(f.last) > forgetFailures && !f.until.After(now) && f.pending == 0 {
			delete(t.clients, k)
		} else if oldest == "" || f.last.Before(t.clients[oldest].last) {
			oldest = k
		}
	}
	if len(t.clients) >= maxClients {
		delete(t.clients, oldest)
	}
}

// succeed forgets client's failures.
func (t *throttle) succeed(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.clients, client)
}

// clientAddr is the address a request came from: its IP, and for IPv6 its
// /64 network (one host usually holds all of it). Behind a reverse proxy
// that is the proxy's; Options.Middleware may set r.RemoteAddr from the
// proxy's header.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
