package dashboard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

// TestMain gives the package's tests a Redis; redistest.Run also fails the
// run if goroutines outlive the tests.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m, rediscontainer.Start)) }

// waitTimeout bounds every wait for a job to reach a state.
const waitTimeout = 15 * time.Second

// fixture is a key prefix with two queues holding jobs in every state:
//
//   - "work" has a consumer: one job running (blocked until the test ends),
//     one retrying (in an hour), one dead, one cancelled-able, some done;
//   - "idle" has no consumer: waiting jobs with headers, one delayed.
type fixture struct {
	rdb    *redis.Client
	prefix string
	in     *inspect.Inspector
	work   *streamq.Queue
	idle   *streamq.Queue
	// stable job IDs by role
	running, retrying, dead string
	waiting                 []string
	// started receives the ID of each blocking job once its handler runs.
	started chan string
	// producer enqueues into "work".
	producer *streamq.Producer
	// healed makes "dead" jobs succeed from now on (a fixed bug).
	healed atomic.Bool
	// consumer runs the jobs of "work" (nil without consume).
	consumer *streamq.Consumer
}

// payloads of the fixture's jobs; the consumer's handler acts on "kind".
type payload struct {
	Kind string `json:"kind"`
	N    int    `json:"n"`
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newFixture builds the fixture under a prefix of its own. With consume
// false the "work" queue gets its jobs but no consumer runs them (they all
// wait).
func newFixture(t testing.TB, consume bool) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{rdb: redistest.NewClient(t), prefix: redistest.Name(t), started: make(chan string, 16)}
	redistest.DeleteKeysAtCleanup(t, f.rdb, f.prefix+":*")
	var err error
	if f.in, err = inspect.New(f.rdb, &inspect.Options{Prefix: f.prefix}); err != nil {
		t.Fatal(err)
	}
	open := func(name string) (*streamq.Queue, *streamq.Producer) {
		q, err := streamq.NewQueue(f.rdb, name, &streamq.QueueConfig{KeyPrefix: f.prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		// The runtime registers queues too (issue 18); set the registry
		// here so the fixture does not depend on which component does.
		if err := f.rdb.HSet(ctx, f.prefix+":queues", name, "stream").Err(); err != nil {
			t.Fatal(err)
		}
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q, p
	}
	var pw, pi *streamq.Producer
	f.work, pw = open("work")
	f.producer = pw
	f.idle, pi = open("idle")
	enqueue := func(p *streamq.Producer, pl payload, opts ...streamq.EnqueueOption) string {
		t.Helper()
		id, err := p.Enqueue(ctx, mustJSON(t, pl), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := range 5 {
		tenant := "acme"
		if i%2 == 1 {
			tenant = "globex"
		}
		f.waiting = append(f.waiting, enqueue(pi, payload{Kind: "wait", N: i}, streamq.WithHeader("tenant", tenant)))
	}
	enqueue(pi, payload{Kind: "later"}, streamq.ProcessIn(time.Hour))
	for i := range 3 {
		enqueue(pw, payload{Kind: "ok", N: i})
	}
	f.dead = enqueue(pw, payload{Kind: "dead"},
		streamq.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	f.retrying = enqueue(pw, payload{Kind: "retry"})
	f.running = enqueue(pw, payload{Kind: "block"})
	if consume {
		f.consumer = f.consume(t, f.work, "c1")
	}
	return f
}

// consume runs a consumer of q in the background of t with the fixture's
// handler: "block" blocks until the consumer stops, "retry" fails for an
// hour, "dead" fails for good, the rest succeed.
func (f *fixture) consume(t testing.TB, q *streamq.Queue, name string) *streamq.Consumer {
	t.Helper()
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		var pl payload
		_ = json.Unmarshal(msg.Payload, &pl)
		switch pl.Kind {
		case "block":
			select {
			case f.started <- msg.ID:
			default:
			}
			<-ctx.Done()
			return context.Cause(ctx)
		case "retry":
			return streamq.RetryAfter(time.Hour, errors.New("upstream said 503"))
		case "dead":
			if f.healed.Load() {
				if err := streamq.SetProgress(ctx, 100, "customer id fixed"); err != nil {
					return err
				}
				return streamq.SetResult(ctx, []byte(`{"charged":true,"amount":4200}`))
			}
			return streamq.Permanent(errors.New("invalid customer id 42"))
		}
		return nil
	})
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: name, Concurrency: 4, Block: 100 * time.Millisecond,
		ShutdownTimeout: 100 * time.Millisecond, ControlInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "consumer "+name, 10*time.Second, c.Run)
	return c
}

// waitState waits until the job id of queue is in state want.
func (f *fixture) waitState(t testing.TB, queue, id string, want inspect.State) {
	t.Helper()
	q, err := f.in.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	last := "nothing yet"
	defer func() {
		if t.Failed() {
			t.Logf("job %s of %s, last seen: %s", id, queue, last)
		}
	}()
	redistest.WaitFor(t, waitTimeout, "job "+id+" of "+queue+" to be "+string(want), func() bool {
		j, err := q.Job(context.Background(), id)
		if err != nil {
			last = err.Error()
			return false
		}
		last = string(j.State)
		return j.State == want
	})
}

// settle waits for the consumer of "work" to have put every job in place.
func (f *fixture) settle(t testing.TB) {
	t.Helper()
	f.waitState(t, "work", f.running, inspect.StateRunning)
	f.waitState(t, "work", f.retrying, inspect.StateRetrying)
	f.waitState(t, "work", f.dead, inspect.StateDead)
}

// client is a browser-like HTTP client of a dashboard: it keeps cookies,
// does not follow redirects, and posts forms with the token of the last
// page it loaded and the server's origin.
type client struct {
	t      testing.TB
	srv    *httptest.Server
	hc     *http.Client
	csrf   string
	origin string
	header http.Header // added to every request
}

func newClient(t testing.TB, h http.Handler) *client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, srv: srv, origin: srv.URL, header: http.Header{}, hc: &http.Client{
		Jar:     jar,
		Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// response is a read answer.
type response struct {
	Status int
	Header http.Header
	Body   string
}

var csrfRe = regexp.MustCompile(`name="csrf" (?:value|content)="([0-9a-f]+)"`)

func (c *client) do(req *http.Request) *response {
	c.t.Helper()
	for k, v := range c.header {
		req.Header[k] = v
	}
	res, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	r := &response{Status: res.StatusCode, Header: res.Header, Body: string(b)}
	if m := csrfRe.FindStringSubmatch(r.Body); m != nil {
		c.csrf = m[1]
	}
	return r
}

// get loads path.
func (c *client) get(path string) *response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do(req)
}

// post submits form to path with the last token and the server's origin.
func (c *client) post(path string, form url.Values) *response {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok && c.csrf != "" {
		form.Set("csrf", c.csrf)
	}
	req, err := http.NewRequest(http.MethodPost, c.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	return c.do(req)
}

// mustGet loads path and fails unless it answers 200 with every want.
func (c *client) mustGet(path string, want ...string) *response {
	c.t.Helper()
	r := c.get(path)
	if r.Status != http.StatusOK {
		c.t.Fatalf("GET %s: status %d, want 200; body:\n%s", path, r.Status, r.Body)
	}
	for _, w := range want {
		if !strings.Contains(r.Body, w) {
			c.t.Errorf("GET %s: body lacks %q; body:\n%s", path, w, r.Body)
		}
	}
	return r
}

// newDashboard returns the dashboard of f with opts (Prefix filled in).
func newDashboard(t testing.TB, f *fixture, opts dashboard.Options) http.Handler {
	t.Helper()
	opts.Prefix = f.prefix
	h, err := dashboard.New(f.rdb, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// escapeID is how the templates write a job ID in a path.
func escapeID(id string) string { return url.PathEscape(id) }

// regexpFind returns the first group of re in s, failing the test if none.
func regexpFind(t testing.TB, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no match for %s in:\n%s", re, s)
	}
	return m[1]
}

// goodPassword is a basic-auth password strong enough for Auth, and
// goodToken a bearer token.
const (
	goodPassword = "correct horse battery staple"
	goodToken    = "s3cret-token-of-32-characters-xx"
)

// basic is the value of a basic Authorization header.
func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// newJar returns an empty cookie jar.
func newJar() (http.CookieJar, error) { return cookiejar.New(nil) }
