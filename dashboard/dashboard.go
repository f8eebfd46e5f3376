package dashboard

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

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
	// requeue, purge) and refuses them with 403 Forbidden. Defaults to false.
	ReadOnly bool

	// Auth, when set, requires HTTP basic authentication or a bearer token on
	// every request. Defaults to nil: no authentication (serve on loopback
	// only, or put your own authentication in Middleware).
	Auth *Auth

	// Middleware, when set, wraps the dashboard's handler after the security
	// headers and before the built-in authentication: plug your own
	// authentication, logging or rate limiting here. Defaults to nil.
	Middleware func(http.Handler) http.Handler

	// HidePayloads replaces payloads and results with a notice and disables
	// the search by payload substring. Defaults to false.
	HidePayloads bool

	// Refresh is how often pages refresh their live part (counts, charts,
	// job lists) without reloading. Defaults to DefaultRefresh; at least
	// MinRefresh; -1 disables live refresh.
	Refresh time.Duration

	// Logger receives errors the dashboard answers with 500. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Auth is the built-in authentication of the dashboard. Set Username and
// Password for HTTP basic authentication, Token for a bearer token, or both:
// a request passes if it satisfies either. Browsers send basic credentials
// after a prompt; with only a Token, a browser signs in once on a form and
// keeps the token in an HttpOnly cookie.
type Auth struct {
	// Username and Password enable basic authentication; both or neither.
	Username, Password string
	// Token enables "Authorization: Bearer <Token>"; at least MinTokenLen
	// characters.
	Token string
}

// server is the dashboard: the inspector, the templates and the options.
type server struct {
	opts    Options
	in      *inspect.Inspector
	pages   map[string]*template.Template
	csrfKey []byte
	log     *slog.Logger
	mux     *http.ServeMux
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
	s := &server{opts: o, in: in, pages: pages, csrfKey: key, log: o.Logger, mux: http.NewServeMux()}
	s.routes()
	var h http.Handler = http.HandlerFunc(s.serve)
	if o.Auth != nil {
		h = s.authenticate(h)
	}
	if o.Middleware != nil {
		h = o.Middleware(h)
		if h == nil {
			return nil, errors.New("dashboard: Options.Middleware returned a nil handler: return the handler it wraps")
		}
	}
	return securityHeaders(h), nil
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
