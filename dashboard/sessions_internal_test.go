package dashboard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/redistest"
)

func TestThrottle(t *testing.T) {
	t.Parallel()
	th := newThrottle()
	now := time.Unix(1_800_000_000, 0)
	for i := 1; i <= freeFailures; i++ {
		if w := th.admit("a", now); w != 0 {
			t.Fatalf("attempt %d: wait %v, want none", i, w)
		}
		if n, d := th.fail("a", now); n != i || d != 0 {
			t.Fatalf("failure %d: %d, %v; want %d, no lockout", i, n, d, i)
		}
	}
	// Then 1 s, 2 s, 4 s, ... up to 15 minutes.
	want := time.Second
	for i := 0; i < 15; i++ {
		_, d := th.fail("a", now)
		if d != want {
			t.Fatalf("failure %d: locked %v, want %v", freeFailures+1+i, d, want)
		}
		if got := th.admit("a", now.Add(d-time.Millisecond)); got != time.Millisecond {
			t.Fatalf("wait just before the end = %v, want 1ms", got)
		}
		want = min(2*want, maxLockout)
	}
	if th.admit("b", now) != 0 {
		t.Error("another client is refused")
	}
	// Parallel attempts cannot overtake the count: with 4 failures, one
	// attempt may be pending, not two.
	for range 4 {
		th.fail("c", now)
	}
	if th.admit("c", now) != 0 || th.admit("c", now) == 0 {
		t.Error("a second parallel attempt was admitted past the free failures")
	}
	th.succeed("a")
	if n, d := th.fail("a", now); n != 1 || d != 0 {
		t.Errorf("after a success: %d, %v; want a fresh count", n, d)
	}
	// Old failures are forgotten.
	if n, _ := th.fail("a", now.Add(forgetFailures+time.Second)); n != 1 {
		t.Errorf("a failure an hour later counts %d, want 1", n)
	}
	// Memory is bounded: past maxClients, the oldest is forgotten.
	for i := range maxClients + 100 {
		th.fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now.Add(2*forgetFailures+time.Duration(i)*time.Millisecond))
	}
	if len(th.clients) > maxClients {
		t.Errorf("%d clients tracked, want at most %d", len(th.clients), maxClients)
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:5000":             "127.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:80":  "2001:db8:1:2::/64",
		"@":                          "@",
		"[::ffff:10.1.2.3]:99":       "10.1.2.3",
	} {
		if got := clientAddr(&http.Request{RemoteAddr: in}); got != want {
			t.Errorf("clientAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSession_Expires signs in with the token and moves the dashboard's
// clock past SessionTTL: the session no longer works.
func TestSession_Expires(t *testing.T) {
	t.Parallel()
	token := strings.Repeat("t", 24)
	s, err := newServer(redistest.NewClient(t), Options{Auth: &Auth{Token: token}, SessionTTL: time.Hour, Prefix: redistest.Name(t)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	h, err := s.handler()
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 || cookies[0].MaxAge != 3600 {
		t.Fatalf("sign in: status %d, cookies %v", rec.Code, cookies)
	}
	get := func() int {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/schedules", nil)
		req.AddCookie(cookies[0])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("with the session: status %d", code)
	}
	now = now.Add(time.Hour - time.Second)
	if code := get(); code != http.StatusOK {
		t.Fatalf("just before the end: status %d", code)
	}
	now = now.Add(time.Second)
	if code := get(); code != http.StatusUnauthorized {
		t.Errorf("after SessionTTL: status %d, want 401", code)
	}
}

func TestSessions_Bounded(t *testing.T) {
	t.Parallel()
	ss := newSessions()
	now := time.Unix(1_800_000_000, 0)
	first := ss.start(now, now.Add(time.Minute))
	for i := range maxSessions {
		ss.start(now, now.Add(time.Hour+time.Duration(i)*time.Second))
	}
	if len(ss.ids) > maxSessions {
		t.Errorf("%d sessions kept, want at most %d", len(ss.ids), maxSessions)
	}
	if ss.valid(first, now) {
		t.Error("the session closest to its end was kept past the bound")
	}
}
