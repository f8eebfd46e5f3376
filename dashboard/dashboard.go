package dashboard

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
)

// DefaultRefresh is how often pages refresh their live part when
// Options.Refresh is zero.
const DefaultRefresh = 5 * time.Second

// MinRefresh is the shortest Options.Refresh accepted.
const MinRefresh = time.Second

// MinTokenLen is the shortest bearer token Auth.Token accepts.
const MinTokenLen = 16

// Options configures the dashboard. The zero value is valid: no
// authentication, actions allowed, mounted at the root.
type Options struct {
	// Prefix starts every Redis key of the queues shown. Defaults to
	// streamq.DefaultKeyPrefix.
	Prefix string

	// Group is the consumer group of the stream queues shown. Defaults to
	// streamq.DefaultGroup.
	Group string

	// BasePath is the path the handler is mounted at, such as "/admin/jobs":
	// every link the dashboard writes starts with it, and it is removed from
	// request paths that start with it (so the handler works with or without
	// http.StripPrefix). It must start with "/" and not end with it. Defaults
	// to "" (the root).
	BasePath string

	// ReadOnly hides every action (pause, resume, cancel, delete, run now,
	// requeue, purge, the bulk actions per state, deleting a queue) and
	// refuses them with 403 Forbidden. Defaults to false.
	ReadOnly bool

	// Auth, when set, requires HTTP basic authentication or a bearer token on
	// every request. Defaults to nil: no authentication (serve on loopback
	// only, where only loopback host names are answered, or put your own
	// authentication in Middleware and list your host in AllowedHosts).
	Auth *Auth

	// Middleware, when set, wraps the dashboard's handler after the security
	// headers and the Host check (AllowedHosts) and before the built-in
	// authentication: plug your own authentication, logging or rate limiting
	// here, or set r.RemoteAddr from a reverse proxy's header so that failed
	// sign-ins are throttled per real client. Defaults to nil.
	Middleware func(http.Handler) http.Handler

	// HidePayloads replaces payloads, results, headers and error messages
	// (which often quote the payload) with a notice, and refuses the searches
	// by payload, header and error text. Defaults to false.
	HidePayloads bool

	// Refresh is how often pages refresh their live part (counts, charts,
	// job lists) without reloading. Defaults to DefaultRefresh; at least
	// MinRefresh; -1 disables live refresh.
	Refresh time.Duration

	// Logger receives errors the dashboard answers with 500 and failed
	// sign-ins (client address, user name, never the password). Defaults to
	// slog.Default().
	Logger *slog.Logger

	// AuditLogger receives one line per action (pause, resume, cancel,
	// delete, run now, requeue, purge, bulk actions, deleting a queue,
	// sign-in, sign-out): who (the basic
	// user, "token", or "anonymous"), from which client address, what, on
	// which queue and job, and how many jobs it touched. Defaults to Logger.
	AuditLogger *slog.Logger

	// AllowedHosts are the host names (or host:port) the dashboard answers
	// to besides loopback ones (localhost, 127.0.0.0/8, [::1], any port).
	// Without Auth only those hosts are served, which stops DNS rebinding
	// (a page of another site whose name resolves to 127.0.0.1 reading the
	// dashboard through the browser); other Host headers get 421. With Auth,
	// any host is served unless AllowedHosts is set. "*" allows every host:
	// use it only when Middleware authenticates. Defaults to none.
	AllowedHosts []string

	// TrustedOrigins are origins ("https://jobs.example.com") whose pages
	// may post actions although the request's Host differs: a reverse proxy
	// that rewrites Host (nginx's default) makes every action look
	// cross-origin otherwise. Defaults to none: the origin must match Host.
	TrustedOrigins []string

	// SecureCookies marks every cookie Secure even on plain HTTP requests:
	// set it when a proxy in front terminates TLS. Under TLS (r.TLS set)
	// cookies are Secure anyway. Defaults to false.
	SecureCookies bool

	// SessionTTL is how long a browser stays signed in with the bearer
	// token (Auth.Token) after it signed in on the form; "Sign out" ends the
	// session at once. Defaults to DefaultSessionTTL; at least MinSessionTTL.
	SessionTTL time.Duration

	// Outboxes are SQL outbox tables (package outbox) whose backlog the
	// "Outbox" page and a panel of the overview show. The dashboard reads
	// each table once per page load or live refresh, in one query. Defaults
	// to none (no outbox page).
	Outboxes []Outbox
}

// DefaultSessionTTL is Options.SessionTTL when it is zero.
const DefaultSessionTTL = 12 * time.Hour

// MinSessionTTL is the shortest Options.SessionTTL accepted.
const MinSessionTTL = time.Minute

// MinPasswordLen is the shortest Auth.Password accepted, in characters:
// long enough that guessing it online, a few tries a second at best under
// the dashboard's throttling, takes longer than anyone watches a log (NIST
// SP 800-63B asks at least 15 for a password that is the only factor).
const MinPasswordLen = 15

// Auth is the built-in authentication of the dashboard. Set Username and
// Password for HTTP basic authentication, Token for a bearer token, or both:
// a request passes if it satisfies either. Browsers send basic credentials
// after a prompt; with only a Token, a browser signs in once on a form and
// keeps a session (Options.SessionTTL) in an HttpOnly cookie.
//
// Failed sign-ins are throttled per client address: after 5 failures in a
// row the client is refused (429) for 1 s, then twice as long after each
// further failure, up to 15 minutes; a success resets it. Each failure is
// logged to Options.Logger.
type Auth struct {
	// Username and Password enable basic authentication; both or neither.
	// The password needs at least MinPasswordLen characters, not all the
	// same, and must not contain the user name.
	Username, Password string
	// Token enables "Authorization: Bearer <Token>"; at least MinTokenLen
	// characters.
	Token string
}

// server is the dashboard: the inspector, the templates and the options.
type server struct {
	opts     Options
	in       *inspect.Inspector
	pages    map[string]*template.Template
	csrfKey  []byte
	log      *slog.Logger
	audit    *slog.Logger
	mux      *http.ServeMux
	now      func() time.Time // the clock of sessions and throttling
	sessions *sessions
	throttle *throttle
	hosts    hostPolicy
	trusted  []string // Options.TrustedOrigins, normalised

	rollMu sync.Mutex
	rolled map[string]time.Time // queue -> last roll-up of its history counters

	ovs overviews // overviews shared between requests
}

// New returns the dashboard as an http.Handler reading the queues of client.
// opts may be nil. It copies opts, applies defaults and validates them; an
// invalid option is an error that says how to fix it. Mount the handler at
// Options.BasePath of your own server:
//
//	mux.Handle("/admin/jobs/", h) // with BasePath "/admin/jobs"
func New(client redis.UniversalClient, opts *Options) (http.Handler, error) {
	if client == nil {
		return nil, errors.New("dashboard: nil Redis client: pass the client your consumers use")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	s, err := newServer(client, o)
	if err != nil {
		return nil, err
	}
	return s.handler()
}

// newServer makes the dashboard of o, which withDefaults checked.
func newServer(client redis.UniversalClient, o Options) (*server, error) {
	if err := o.withDefaults(); err != nil {
		return nil, err
	}
	in, err := inspect.New(client, &inspect.Options{Prefix: o.Prefix, Group: o.Group})
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	pages, err := parseTemplates(o.BasePath)
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("dashboard: csrf key: %w", err)
	}
	s := &server{opts: o, in: in, pages: pages, csrfKey: key, log: o.Logger, audit: o.AuditLogger, mux: http.NewServeMux(),
		now: time.Now, ovs: overviews{now: time.Now}, sessions: newSessions(), throttle: newThrottle(), hosts: newHostPolicy(o.AllowedHosts, o.Auth != nil)}
	for _, origin := range o.TrustedOrigins {
		s.trusted = append(s.trusted, normalOrigin(origin))
	}
	s.routes()
	return s, nil
}

// handler returns the dashboard's handler chain: security headers, the Host
// check, the user's middleware, authentication, then the pages.
func (s *server) handler() (http.Handler, error) {
	var h http.Handler = http.HandlerFunc(s.serve)
	if s.opts.Auth != nil {
		h = s.authenticate(h)
	}
	if s.opts.Middleware != nil {
		h = s.opts.Middleware(h)
		if h == nil {
			return nil, errors.New("dashboard: Options.Middleware returned a nil handler: return the handler it wraps")
		}
	}
	return securityHeaders(s.checkHost(h)), nil
}

// withDefaults applies defaults to o and validates it.
func (o *Options) withDefaults() error {
	if o.Prefix == "" {
		o.Prefix = streamq.DefaultKeyPrefix
	}
	if o.Group == "" {
		o.Group = streamq.DefaultGroup
	}
	if o.BasePath != "" {
		switch {
		case !strings.HasPrefix(o.BasePath, "/"):
			return fmt.Errorf("dashboard: BasePath %q must start with \"/\", like \"/admin/jobs\"", o.BasePath)
		case strings.HasSuffix(o.BasePath, "/"):
			return fmt.Errorf("dashboard: BasePath %q must not end with \"/\": use %q (\"\" for the root)", o.BasePath, strings.TrimRight(o.BasePath, "/"))
		case strings.ContainsAny(o.BasePath, "?#%\"'<> \t\r\n\\"):
			return fmt.Errorf("dashboard: BasePath %q holds characters that need escaping: use a plain path like \"/admin/jobs\"", o.BasePath)
		case strings.Contains(o.BasePath, "//") || strings.Contains(o.BasePath, "/./") || strings.Contains(o.BasePath, "/../") || strings.HasSuffix(o.BasePath, "/.") || strings.HasSuffix(o.BasePath, "/.."):
			return fmt.Errorf("dashboard: BasePath %q is not a clean path: use a plain path like \"/admin/jobs\"", o.BasePath)
		}
	}
	if a := o.Auth; a != nil {
		if (a.Username == "") != (a.Password == "") {
			return errors.New("dashboard: Auth needs both Username and Password for basic authentication, or neither")
		}
		if a.Username == "" && a.Token == "" {
			return errors.New("dashboard: Auth is set but empty: set Username and Password, or Token (or leave Auth nil for no authentication)")
		}
		if strings.Contains(a.Username, ":") {
			return errors.New("dashboard: Auth.Username must not contain \":\" (basic authentication splits on it)")
		}
		if a.Password != "" {
			if err := checkPassword(a.Username, a.Password); err != nil {
				return err
			}
		}
		if a.Token != "" && len(a.Token) < MinTokenLen {
			return fmt.Errorf("dashboard: Auth.Token is %d characters: use at least %d random characters", len(a.Token), MinTokenLen)
		}
		if strings.ContainsAny(a.Token, " \t\r\n") {
			return errors.New("dashboard: Auth.Token must not contain white space")
		}
		c := *a // never keep the caller's struct, which they may change
		o.Auth = &c
	}
	switch {
	case o.Refresh == 0:
		o.Refresh = DefaultRefresh
	case o.Refresh == -1:
	case o.Refresh < MinRefresh:
		return fmt.Errorf("dashboard: Refresh %v is below %v: use at least %v, or -1 to disable live refresh", o.Refresh, MinRefresh, MinRefresh)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.AuditLogger == nil {
		o.AuditLogger = o.Logger
	}
	switch {
	case o.SessionTTL == 0:
		o.SessionTTL = DefaultSessionTTL
	case o.SessionTTL < MinSessionTTL:
		return fmt.Errorf("dashboard: SessionTTL %v is below %v: use at least %v (%v is the default)", o.SessionTTL, MinSessionTTL, MinSessionTTL, DefaultSessionTTL)
	}
	o.AllowedHosts = slices.Clone(o.AllowedHosts)
	for _, h := range o.AllowedHosts {
		if err := checkAllowedHost(h); err != nil {
			return err
		}
	}
	o.Outboxes = slices.Clone(o.Outboxes)
	if err := checkOutboxes(o.Outboxes); err != nil {
		return err
	}
	o.TrustedOrigins = slices.Clone(o.TrustedOrigins)
	for _, origin := range o.TrustedOrigins {
		if err := checkOrigin(origin); err != nil {
			return err
		}
	}
	return nil
}

// checkPassword says what a weak basic-auth password lacks.
func checkPassword(user, password string) error {
	n := utf8.RuneCountInString(password)
	distinct := map[rune]bool{}
	for _, r := range password {
		distinct[r] = true
	}
	switch {
	case n < MinPasswordLen:
		return fmt.Errorf("dashboard: Auth.Password is %d characters: use at least %d (a passphrase of four random words, or `openssl rand -base64 18`)", n, MinPasswordLen)
	case len(distinct) < 5:
		return errors.New("dashboard: Auth.Password repeats too few characters: use a passphrase of four random words, or `openssl rand -base64 18`")
	case user != "" && strings.Contains(strings.ToLower(password), strings.ToLower(user)):
		return errors.New("dashboard: Auth.Password contains the user name: choose one that does not")
	}
	return nil
}

// serve removes BasePath from the request path and dispatches to the routes.
func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if s.opts.BasePath != "" {
		if p == s.opts.BasePath {
			http.Redirect(w, r, s.opts.BasePath+"/", http.StatusMovedPermanently)
			return
		}
		if rest, ok := strings.CutPrefix(p, s.opts.BasePath+"/"); ok {
			r2 := new(http.Request)
			*r2 = *r
			u := *r.URL
			u.Path = "/" + rest
			u.RawPath = ""
			if r.URL.RawPath != "" {
				if raw, ok := strings.CutPrefix(r.URL.RawPath, s.opts.BasePath+"/"); ok {
					u.RawPath = "/" + raw
				}
			}
			r2.URL = &u
			r = r2
		}
	}
	s.mux.ServeHTTP(w, r)
}
